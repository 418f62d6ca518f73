//! sysbench's OLTP workloads against Kura as a new user runs them, at tiny sizes:
//! `prepare`, `run` and `cleanup` of `oltp_read_write`, `oltp_read_only`,
//! `oltp_point_select`, `oltp_insert` and `oltp_update_index` with sysbench's own
//! defaults: database `sbtest` (made first, as sysbench's users make it),
//! AUTO_INCREMENT ids, a secondary index made after the rows. Each command must
//! succeed; after `prepare` every table holds ids 1 to the table's size, as
//! AUTO_INCREMENT gave them; after `cleanup` no table is left.
//! (`scripts/install-peers.sh` installs sysbench.)

use std::process::Command;

use kura_testkit::{kura_bin, Durability, KuraServer};

const TABLE_SIZE: u32 = 300;

fn sysbench(kura: &KuraServer, workload: &str, command: &[&str]) {
    let output = Command::new("sysbench")
        .arg(workload)
        .args([
            "--db-driver=mysql",
            "--mysql-host=127.0.0.1",
            "--mysql-user=root",
            "--tables=2",
        ])
        .arg(format!("--table-size={TABLE_SIZE}"))
        .arg(format!("--mysql-port={}", kura.sql_addr().port()))
        .args(command)
        .output()
        .unwrap_or_else(|e| panic!("run sysbench (scripts/install-peers.sh installs it): {e}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && !text.contains("FATAL"),
        "sysbench {workload} {command:?}:\n{text}\nkura's log:\n{}",
        kura.log()
    );
}

#[test]
fn sysbench_prepares_runs_and_cleans_up_with_its_defaults() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    kura.sql_ok("CREATE DATABASE sbtest");
    for workload in [
        "oltp_read_write",
        "oltp_read_only",
        "oltp_point_select",
        "oltp_insert",
        "oltp_update_index",
    ] {
        sysbench(&kura, workload, &["prepare"]);
        for table in ["sbtest1", "sbtest2"] {
            assert_eq!(
                kura.sql_ok(&format!(
                    "SELECT count(*), min(id), max(id) FROM sbtest.{table}"
                ))
                .trim(),
                format!("{TABLE_SIZE}\t1\t{TABLE_SIZE}"),
                "{workload}: {table} after prepare"
            );
        }
        sysbench(
            &kura,
            workload,
            &["--threads=4", "--events=300", "--time=0", "run"],
        );
        sysbench(&kura, workload, &["cleanup"]);
        assert_eq!(
            kura.sql_ok("SHOW TABLES FROM sbtest").trim(),
            "",
            "{workload}: tables left after cleanup"
        );
    }
}
