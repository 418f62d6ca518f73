//! `LOAD DATA LOCAL INFILE` (`kura_sql::load_data`): any statement text is read
//! without a panic; and a file's bytes, with the options the first byte picks, give
//! the same rows whether they come in one packet or cut in two anywhere.
#![no_main]

use kura_sql::load_data::{parse, RowReader};
use libfuzzer_sys::fuzz_target;

const SPECS: [&str; 4] = [
    "LOAD DATA LOCAL INFILE 'f' INTO TABLE t",
    "LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' LINES TERMINATED BY '\\r\\n' IGNORE 1 LINES",
    "LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY '||' ESCAPED BY '' LINES STARTING BY '>' TERMINATED BY ';;'",
    "LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY ',' ENCLOSED BY '\\'' ESCAPED BY '^'",
];

fuzz_target!(|data: &[u8]| {
    let _ = parse(&String::from_utf8_lossy(data));
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Some(Ok(spec)) = parse(SPECS[usize::from(pick) % SPECS.len()]) else {
        panic!("a spec does not parse");
    };
    let whole = {
        let mut r = RowReader::new(&spec);
        r.feed(rest);
        r.rows(true)
    };
    let cut = usize::from(pick) % (rest.len() + 1);
    let mut r = RowReader::new(&spec);
    r.feed(&rest[..cut]);
    let mut rows = r.rows(false);
    r.feed(&rest[cut..]);
    rows.extend(r.rows(true));
    assert_eq!(rows, whole, "cut at {cut}");
});
