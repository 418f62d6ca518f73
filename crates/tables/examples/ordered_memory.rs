//! What an ordered index costs in memory: a million rows of an INT primary key added
//! to an ordered index on an INT (`int`) or a VARCHAR holding 20-odd-byte emails
//! (`text`), the resident set before and after. `docs/tables.md` quotes it:
//!
//!     cargo run --release -p kura-tables --example ordered_memory -- int
//!     cargo run --release -p kura-tables --example ordered_memory -- text
#![allow(clippy::unwrap_used)]

use kura_tables::ordered::Ordered;
use kura_tables::{parse_schema, Catalog, TableDef, Value};
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}
fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let key = if which == "text" {
        "KEY name (name)"
    } else {
        "KEY lvl (lvl)"
    };
    let table = parse_schema(&format!(
        "CREATE TABLE t (id INT PRIMARY KEY, lvl INT, name VARCHAR(32), {key})"
    ))
    .unwrap()
    .remove(0);
    let mut catalog = Catalog::new();
    catalog = catalog.with_schema(vec![table]).unwrap().unwrap();
    let def: &TableDef = &catalog.tables[0];
    let ordered = Ordered::default();
    ordered.add_tables(&catalog);
    let n = 1_000_000i64;
    let before = rss();
    for id in 0..n {
        let v = vec![
            Value::Int(id),
            Value::Int(id % 1000),
            Value::Bytes(format!("player{id}@example.com").into_bytes()),
        ];
        ordered.apply(def, None, Some(&v), 0);
    }
    let after = rss();
    println!(
        "{which}: {} entries, {:.1} bytes an entry",
        ordered.entries(),
        (after - before) as f64 / ordered.entries() as f64
    );
}
