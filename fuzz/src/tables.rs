//! Checks for the tables layer's parsers: the schema DDL, the value splitter, the row
//! decoder, the catalog decoder and DECIMAL's text.

use kura_tables::catalog::Catalog;
use kura_tables::{parse_schema, row, text, Decimal};

/// DDL text: parsed or refused, never a panic; what parses round-trips.
pub fn check_ddl(data: &[u8]) {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(tables) = parse_schema(sql) else {
        return;
    };
    for table in &tables {
        let again = match parse_schema(&table.to_sql()) {
            Ok(mut t) if t.len() == 1 => t.remove(0),
            other => panic!("{} did not read back: {other:?}", table.to_sql()),
        };
        assert_eq!(&again, table, "{}", table.to_sql());
    }
    if let Ok(Some(catalog)) = Catalog::new().with_schema(tables) {
        assert_eq!(Catalog::decode(&catalog.encode()).as_ref(), Ok(&catalog));
    }
}

/// The first byte picks the separator and the field count; the rest is a value, a
/// row's bytes and a catalog's bytes at once.
pub fn check_values(data: &[u8]) {
    let Some((&pick, value)) = data.split_first() else {
        return;
    };
    let separator = [b'|', b',', b' ', b'\t'][usize::from(pick & 3)];
    let fields = usize::from(pick >> 2) % 6;
    if let Ok(split) = text::split(value, separator, fields) {
        assert_eq!(split.len(), fields);
        let joined = text::join(
            split.iter().map(|f| match f {
                text::Field::Null => None,
                text::Field::Bytes(b) => Some(b.as_slice()),
            }),
            separator,
        );
        assert_eq!(text::split(&joined, separator, fields).as_ref(), Ok(&split));
    }
    let tables = parse_schema(
        "CREATE TABLE t (id INT PRIMARY KEY, u BIGINT UNSIGNED, d DOUBLE, s VARCHAR(5), b BLOB NOT NULL DEFAULT '', m DECIMAL(15,4))",
    );
    if let Ok(mut tables) = tables {
        // Rows of the table as declared, and with a column dropped (its place kept).
        if pick & 0x80 != 0 {
            tables[0].dropped = vec![usize::from(pick & 3) + 1];
        }
        if let Ok(values) = row::decode(value, &tables[0]) {
            let again = row::encode(&values, &tables[0].dropped);
            assert_eq!(row::decode(&again, &tables[0]), Ok(values));
        }
    }
    let _ = Catalog::decode(value);
    // A DECIMAL read from text writes back as text that reads as the same number.
    let (precision, scale) = (1 + pick % 38, (pick >> 3) % 31);
    if let Ok(text) = std::str::from_utf8(value) {
        if let Ok(d) = Decimal::parse(text, precision, scale.min(precision)) {
            assert!(d.fits(precision, scale.min(precision)));
            let again = Decimal::parse(&d.to_string(), precision, scale.min(precision));
            assert_eq!(again, Ok(d));
        }
    }
}
