//! Kura's SQL against MariaDB's, on the same rows: a differential test.
//!
//! Starts Kura and a private MariaDB (Debian's `mariadbd`, which
//! `scripts/install-peers.sh` installs: its own data directory under Cargo's target
//! directory, its own port and socket, no grant tables), then runs
//! `tests/sql/differential.py` in the virtualenv `scripts/install-test-deps.sh` makes.
//! The script creates the same three tables in both (MariaDB's `utf8mb4_bin`, so text
//! compares byte by byte as Kura's does) and loads the same seeded-random rows (NULLs,
//! negatives, zero, duplicates, shared prefixes, a unique email, ordered `KEY`s, a
//! second and third table referring to the first), then sends both about 1,500
//! generated SELECTs:
//!
//! - WHERE with `=`, `<>`, `<`, `<=`, `>`, `>=`, `<=>`, `BETWEEN`, `IN`, `LIKE`,
//!   `IS [NOT] NULL`, nested `AND`/`OR`/`NOT`, on every column type, on hashed,
//!   ordered and text primary keys, unique and ordered indexes and plain columns, so
//!   each of Kura's plans (lookup, range, ordered read, scan) answers;
//! - `ORDER BY` several columns `ASC`/`DESC` with `LIMIT` and `OFFSET`; a range, an
//!   `IN` list or a `LIKE` pattern on an index read in the index's order;
//! - `COUNT`, `COUNT(DISTINCT)`, `SUM`, `MIN`, `MAX`, `AVG`, with and without
//!   `GROUP BY` and `HAVING`; `DISTINCT`; inner and left joins of two and three
//!   tables; `IN`/`NOT IN`/`EXISTS` subqueries and a scalar one.
//!
//! Results must be equal: in order where the ORDER BY fixes the order (it ends with
//! the primary keys), only the ORDER BY terms' values in order where it fixes just
//! those (a partial ORDER BY, with or without LIMIT), as multisets otherwise; value
//! for value, except where MariaDB's DECIMAL sums and averages legitimately differ
//! in representation from Kura's (see the script's doc). On a difference the test
//! fails with the seed, the query, both results and a reduced query that still
//! differs, after running every query (at once if Kura's connection breaks).
//!
//! The seed is fixed; `KURA_SQL_SEED=n` runs another one.

use std::path::Path;

use kura_testkit::python::run_script;
use kura_testkit::{kura_bin, Durability, KuraServer};

use kura_testkit::mariadb::Mariadb;

#[test]
fn selects_agree_with_mariadb() {
    let mariadb = Mariadb::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")), &[]);
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    let mut args = vec![
        kura.sql_addr().port().to_string(),
        mariadb.port().to_string(),
    ];
    if let Ok(seed) = std::env::var("KURA_SQL_SEED") {
        args.extend(["--seed".to_owned(), seed]);
    }
    match run_script(Path::new("tests/sql/differential.py"), &args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => panic!(
            "differential.py failed: {e}
kura's log:
{}
mariadbd's log:
{}",
            kura.log(),
            mariadb.log()
        ),
    }
}
