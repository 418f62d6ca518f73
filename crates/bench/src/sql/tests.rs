#![allow(clippy::unwrap_used)]

use super::*;

fn row(cells: &[&str]) -> Row {
    cells.iter().map(|c| Some(c.as_bytes().to_vec())).collect()
}

#[test]
fn rows_are_row_size_bytes_and_levels_hold_twenty() {
    let shape = Shape::new(1000, 300);
    assert_eq!(shape.levels, 50);
    for id in [0, 7, 999] {
        let text = shape.values(id);
        // Values, quotes, commas and parentheses: 4 quoted fields, 5 commas, 2 parens.
        assert_eq!(text.len(), 300 + 3 * 2 + 5 + 2, "{text}");
    }
    assert_eq!(shape.data_bytes(), 300_000);
    assert_eq!(Shape::new(25, 300).levels, 1);
    assert_eq!(Shape::new(10, 300).levels, 1);
    // A row too long for row_size counts whole: "9", email, "0", name, "0".
    assert_eq!(Shape::new(10, 5).padding(3), 0);
    assert_eq!(Shape::new(10, 5).data_bytes(), 10 * (1 + 19 + 1 + 7 + 1));
}

#[test]
fn replies_are_checked_whole() {
    let shape = Shape::new(1000, 100);
    let pad = ".".repeat(shape.padding(42));
    let right = row(&["42", "player42@example.com", "42", "player42", "3", &pad]);
    assert!(matches!(
        one_row(std::slice::from_ref(&right), 42, shape),
        Verdict::Right
    ));
    assert!(matches!(
        one_row(std::slice::from_ref(&right), 43, shape),
        Verdict::Wrong(_)
    ));
    assert!(matches!(one_row(&[], 42, shape), Verdict::Wrong(_)));
    let short_pad = row(&["42", "player42@example.com", "42", "player42", "3", "."]);
    assert!(matches!(
        one_row(&[short_pad], 42, shape),
        Verdict::Wrong(_)
    ));
    let ten: Vec<Row> = (0..10)
        .map(|i| {
            let id = 2 + 50 * i;
            let pad = ".".repeat(shape.padding(id));
            let (email, name) = (email(id), name(id));
            row(&[&id.to_string(), &email, "2", &name, "0", &pad])
        })
        .collect();
    assert!(matches!(range_rows(&ten, 2, shape), Verdict::Right));
    assert!(matches!(range_rows(&ten, 3, shape), Verdict::Wrong(_)));
    assert!(matches!(range_rows(&ten[..9], 2, shape), Verdict::Wrong(_)));
    let value = format!("player42@example.com|42|player42|17|{pad}");
    assert!(matches!(
        got_row(value.as_bytes(), 42, shape),
        Verdict::Right
    ));
    assert!(matches!(got_row(b"nope", 42, shape), Verdict::Wrong(_)));
    // What the memcached load stores is what a get must find.
    let stored = shape.memcached_value(42);
    assert_eq!(stored, value.replace("|17|", "|0|").into_bytes());
    assert!(matches!(got_row(&stored, 42, shape), Verdict::Right));
}

#[test]
fn the_limit_setting_sizes_rows_from_the_limit() {
    use clap::Parser;
    let cli = crate::Cli::try_parse_from(["kura-bench", "sql", "--rows", "100"]).unwrap();
    let crate::Workload::Sql(mut args) = cli.workload else {
        panic!("not the sql workload's arguments");
    };
    assert_eq!(args.settings, vec![Setting::Memory, Setting::Limit]);
    assert_eq!(args.mem_limit_mib, 256);
    args.limit_row_size = 1024;
    assert_eq!(args.shape(Setting::Limit).rows, 10 * 256 * 1024);
    assert_eq!(args.shape(Setting::Limit).row_size, 1024);
    assert_eq!(args.shape(Setting::Memory).rows, 100);
    assert_eq!(args.label(Setting::Limit), "10x 256 MiB");
}
