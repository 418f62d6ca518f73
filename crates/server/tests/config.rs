//! `--config FILE`: every flag has a key, flags override the file, a mistake names
//! its line, and `kura config check` prints what results and where it came from.
#![allow(clippy::expect_used)]

use std::process::Command;

use kura_testkit::{kura_bin, Client, Durability, KuraServer};

fn kura() -> Command {
    Command::new(kura_bin(env!("CARGO_BIN_EXE_kura")))
}

#[test]
fn check_shows_file_flags_and_defaults_with_their_sources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("kura.toml");
    std::fs::write(
        &file,
        "# a config\nmemory-limit = 64\ndurability = \"interval\"\nverbose = 2\nenable_sasl = false\nmax-item-size = \"2m\"\n",
    )
    .expect("write");
    let output = kura()
        .args(["config", "check", "--config"])
        .arg(&file)
        .args(["-m", "128", "--sql-port", "off"])
        .output()
        .expect("run kura config check");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown = file.display();
    assert!(
        text.contains("memory-limit = 128  # the command line\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!("durability = \"interval\"  # {shown}:3\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("verbose = 2  # {shown}:4\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("max-item-size = \"2m\"  # {shown}:6\n")),
        "{text}"
    );
    assert!(
        text.contains("sql-port = \"off\"  # the command line\n"),
        "{text}"
    );
    assert!(text.contains("port = 11211  # default\n"), "{text}");
    assert!(
        text.contains(&format!("enable-sasl = false  # {shown}:5\n")),
        "{text}"
    );
    assert!(text.contains("threads = 4  # default\n"), "{text}");
}

#[test]
fn mistakes_in_the_file_name_the_line_and_stop_kura() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (text, line, what) in [
        (
            "port = 0\n\nmemroy-limit = 64\n",
            3,
            "unknown key `memroy-limit`",
        ),
        ("port = 0\nenable-sasl = 1\n", 2, "true or false"),
        ("[server]\nport = 0\n", 1, "unknown key `server`"),
        ("port = 0\nport = 1\n", 2, "duplicate"),
    ] {
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, text).expect("write");
        let output = kura()
            .arg("--config")
            .arg(&file)
            .args(["--data-dir"])
            .arg(dir.path().join("data"))
            .output()
            .expect("run kura");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{text:?} was accepted");
        assert!(
            stderr.contains(&format!("line {line}")),
            "{text:?}: {stderr}"
        );
        assert!(stderr.contains(what), "{text:?}: {stderr}");
    }
}

#[test]
fn a_server_runs_from_a_file_and_its_flags_win() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("kura.toml");
    // The file asks for a 2 MiB item limit; the command line keeps the port at 0.
    std::fs::write(&file, "max-item-size = \"2m\"\nport = 11211\n").expect("write");
    let config = file.to_string_lossy().into_owned();
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = KuraServer::start(&bin, Durability::Fsync, &["--config", &config]).expect("kura");
    let mut client = Client::connect(kura.addr()).expect("connect");
    let value = vec![b'x'; 1536 * 1024];
    let mut request = format!("set big 0 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(&value);
    request.extend_from_slice(b"\r\n");
    let reply = client.request(&request, b"\r\n").expect("set");
    assert_eq!(reply, b"STORED\r\n", "the file's -I applies");
    assert_ne!(
        kura.addr().port(),
        11211,
        "the command line's -p 0 wins over the file"
    );
}

/// `kura config check` runs the server's own validation: every setting the server
/// refuses at start, check refuses too, with a non-zero exit and the same reason.
#[test]
fn check_refuses_what_start_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path.to_string_lossy().into_owned()
    };
    let users = write("users", "ann:secret\n");
    let empty = write("empty-password", "ann:secret\nalice:\n");
    let admins_with_ann = write("admins", "ann:other\n");
    let token = write("token", "short\n");
    let off = ["--sql-port", "off"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["-S"], "-Y FILE"),
        (vec!["-l", "0.0.0.0", "--sql-port", "off"], "--insecure"),
        (
            vec!["-l", "0.0.0.0", "-Y", &users, "--sql-port", "0"],
            "--sql-users",
        ),
        (vec!["-Y", &empty], "line 2"),
        (vec!["--admin-auth-file", &empty], "line 2"),
        (
            vec!["-Y", &users, "--admin-auth-file", &admins_with_ann],
            "both",
        ),
        (
            vec!["--metrics-port", "0", "--metrics-listen", "0.0.0.0"],
            "--metrics-token-file",
        ),
        (vec!["--metrics-token-file", &token], "16"),
        (vec!["--ssl-key", &users], "-Z"),
        (vec!["-Z"], "ssl_chain_cert"),
        (
            vec!["--etcd", "http://127.0.0.1:1"],
            "--cluster NAME and --shard NAME",
        ),
        (vec!["--cluster", "c", "--shard", "s"], "give --etcd"),
        (
            vec![
                "--etcd",
                "http://127.0.0.1:1",
                "--cluster",
                "c",
                "--shard",
                "s",
                "--replica-of",
                "127.0.0.1:2",
            ],
            "etcd says whom",
        ),
        (
            vec!["--etcd", "127.0.0.1:1", "--cluster", "c", "--shard", "s"],
            "http://",
        ),
    ];
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    for (args, reason) in &cases {
        let with_off: Vec<&str> = if args.contains(&"--sql-port") {
            args.clone()
        } else {
            args.iter().copied().chain(off).collect()
        };
        let started = KuraServer::start(&bin, Durability::Fsync, &with_off);
        let refused = match started {
            Ok(_) => panic!("kura started with {with_off:?}"),
            Err(e) => e.to_string(),
        };
        assert!(refused.contains(reason), "start {with_off:?}: {refused}");
        let output = kura()
            .args(["config", "check"])
            .args(&with_off)
            .output()
            .expect("run kura config check");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success(),
            "config check {with_off:?} exited 0:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
        assert!(
            stderr.contains(reason),
            "config check {with_off:?}: {stderr}"
        );
    }
    // What start takes, check takes.
    let output = kura()
        .args(["config", "check", "-Y", &users])
        .args(off)
        .output()
        .expect("run kura config check");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
