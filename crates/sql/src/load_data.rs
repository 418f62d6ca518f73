//! `LOAD DATA LOCAL INFILE`: rows from a file the client sends, as MySQL reads them.
//!
//! The statement is read here ([`parse`]: the file, `REPLACE`/`IGNORE`, the table,
//! `FIELDS TERMINATED BY`, `[OPTIONALLY] ENCLOSED BY`, `ESCAPED BY`, `LINES STARTING
//! BY`, `LINES TERMINATED BY`, `IGNORE n LINES`, a column list); the server asks the
//! client for the file and hands its bytes, as they come, to a [`RowReader`], whose
//! rows [`Session::load_rows`] inserts a batch at a time. As MySQL does with
//! `LOCAL`, a row whose key is taken is skipped (as with `IGNORE`) unless `REPLACE`
//! says to replace it.
//!
//! Values: `\N` (with the default escape) and, with `ENCLOSED BY`, an unquoted
//! `NULL` are NULL; escapes `\0 \b \n \r \t \Z \\` and an escaped terminator or
//! enclosure are read as MySQL reads them; a doubled enclosure inside an enclosed
//! field is one. Fewer fields than columns leave the rest to their defaults; more
//! are dropped.
//!
//! What it is not for: `LOAD DATA INFILE` without `LOCAL`, which reads the server's
//! own files (refused), and `SET col = expr` (refused).

use crate::error::SqlError;
use crate::result::Output;
use crate::session::Session;

/// A parsed `LOAD DATA LOCAL INFILE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadData {
    pub local: bool,
    pub file: String,
    pub mode: Mode,
    /// The table as the statement names it: `[db.]table`.
    pub table: Vec<String>,
    pub fields_terminated: Vec<u8>,
    pub enclosed: Option<u8>,
    pub escaped: Option<u8>,
    pub lines_starting: Vec<u8>,
    pub lines_terminated: Vec<u8>,
    pub ignore_lines: u64,
    pub columns: Option<Vec<String>>,
}

/// What a row whose key is taken does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ignore,
    Replace,
}

/// One field of a row: its bytes, or NULL.
pub type Field = Option<Vec<u8>>;

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Text(Vec<u8>),
    Name(String),
    Punct(char),
}

fn tokens(sql: &str) -> Result<Vec<Token>, SqlError> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() || c == b';' {
            i += 1;
        } else if c == b'\'' || c == b'"' {
            let mut value = Vec::new();
            i += 1;
            loop {
                let Some(&d) = b.get(i) else {
                    return Err(SqlError::syntax("an unterminated string in LOAD DATA"));
                };
                if d == b'\\' && i + 1 < b.len() {
                    value.push(match b[i + 1] {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        b'0' => 0,
                        b'b' => 8,
                        b'Z' => 26,
                        other => other,
                    });
                    i += 2;
                } else if d == c && b.get(i + 1) == Some(&c) {
                    value.push(c);
                    i += 2;
                } else if d == c {
                    i += 1;
                    break;
                } else {
                    value.push(d);
                    i += 1;
                }
            }
            out.push(Token::Text(value));
        } else if c == b'`' {
            let end = sql[i + 1..]
                .find('`')
                .ok_or_else(|| SqlError::syntax("an unterminated name in LOAD DATA"))?;
            out.push(Token::Name(sql[i + 1..i + 1 + end].to_string()));
            i += end + 2;
        } else if c == b'(' || c == b')' || c == b',' || c == b'.' || c == b'=' {
            out.push(Token::Punct(c as char));
            i += 1;
        } else {
            let end = sql[i..]
                .find(|ch: char| ch.is_whitespace() || "(),.;=`'\"".contains(ch))
                .map_or(b.len(), |e| i + e);
            out.push(Token::Word(sql[i..end].to_string()));
            i = end.max(i + 1);
        }
    }
    Ok(out)
}

/// The statement, if it is a `LOAD DATA`; None for any other.
pub fn parse(sql: &str) -> Option<Result<LoadData, SqlError>> {
    // Every COM_QUERY passes here: only a LOAD DATA is read further.
    let mut head = sql.split_whitespace();
    let is = |w: Option<&str>, want: &str| w.is_some_and(|w| w.eq_ignore_ascii_case(want));
    if !is(head.next(), "LOAD") || !is(head.next(), "DATA") {
        return None;
    }
    Some(tokens(sql).and_then(|t| statement(&t)))
}

fn statement(t: &[Token]) -> Result<LoadData, SqlError> {
    let mut at = 2;
    let word = |i: usize| match t.get(i) {
        Some(Token::Word(w)) => w.to_ascii_uppercase(),
        _ => String::new(),
    };
    let syntax = |what: &str| SqlError::syntax(format!("LOAD DATA: {what}"));
    let text = |i: usize| match t.get(i) {
        Some(Token::Text(v)) => Ok(v.clone()),
        _ => Err(SqlError::syntax("LOAD DATA: a quoted string is wanted")),
    };
    while matches!(word(at).as_str(), "LOW_PRIORITY" | "CONCURRENT") {
        at += 1;
    }
    let local = word(at) == "LOCAL";
    if local {
        at += 1;
    }
    if word(at) != "INFILE" {
        return Err(syntax("INFILE 'file' is wanted"));
    }
    let file = String::from_utf8_lossy(&text(at + 1)?).into_owned();
    at += 2;
    let mut mode = Mode::Ignore;
    match word(at).as_str() {
        "REPLACE" => {
            mode = Mode::Replace;
            at += 1;
        }
        "IGNORE" => at += 1,
        _ => {}
    }
    if word(at) != "INTO" || word(at + 1) != "TABLE" {
        return Err(syntax("INTO TABLE is wanted"));
    }
    at += 2;
    let mut table = Vec::new();
    loop {
        match t.get(at) {
            Some(Token::Word(w)) | Some(Token::Name(w)) => table.push(w.clone()),
            _ => return Err(syntax("a table name is wanted")),
        }
        at += 1;
        if t.get(at) == Some(&Token::Punct('.')) {
            at += 1;
        } else {
            break;
        }
    }
    let mut spec = LoadData {
        local,
        file,
        mode,
        table,
        fields_terminated: b"\t".to_vec(),
        enclosed: None,
        escaped: Some(b'\\'),
        lines_starting: Vec::new(),
        lines_terminated: b"\n".to_vec(),
        ignore_lines: 0,
        columns: None,
    };
    let one_byte = |v: Vec<u8>| -> Result<Option<u8>, SqlError> {
        match v.as_slice() {
            [] => Ok(None),
            [b] => Ok(Some(*b)),
            _ => Err(SqlError::syntax(
                "LOAD DATA: ENCLOSED and ESCAPED BY take one character",
            )),
        }
    };
    while at < t.len() {
        match word(at).as_str() {
            "CHARACTER" if word(at + 1) == "SET" => at += 3,
            "FIELDS" | "COLUMNS" => at += 1,
            "LINES" => {
                at += 1;
                loop {
                    match (word(at).as_str(), word(at + 1).as_str()) {
                        ("STARTING", "BY") => spec.lines_starting = text(at + 2)?,
                        ("TERMINATED", "BY") => spec.lines_terminated = text(at + 2)?,
                        _ => break,
                    }
                    at += 3;
                }
            }
            "TERMINATED" if word(at + 1) == "BY" => {
                spec.fields_terminated = text(at + 2)?;
                at += 3;
            }
            "OPTIONALLY" => at += 1,
            "ENCLOSED" if word(at + 1) == "BY" => {
                spec.enclosed = one_byte(text(at + 2)?)?;
                at += 3;
            }
            "ESCAPED" if word(at + 1) == "BY" => {
                spec.escaped = one_byte(text(at + 2)?)?;
                at += 3;
            }
            "IGNORE" => {
                spec.ignore_lines = word(at + 1).parse().map_err(|_| syntax("IGNORE n LINES"))?;
                if !matches!(word(at + 2).as_str(), "LINES" | "ROWS") {
                    return Err(syntax("IGNORE n LINES"));
                }
                at += 3;
            }
            "SET" => {
                return Err(SqlError::unsupported("LOAD DATA ... SET col = expr"));
            }
            "PARTITION" => return Err(SqlError::unsupported("LOAD DATA ... PARTITION")),
            _ if t.get(at) == Some(&Token::Punct('(')) => {
                let mut columns = Vec::new();
                at += 1;
                loop {
                    match t.get(at) {
                        Some(Token::Word(w)) | Some(Token::Name(w)) => {
                            if w.starts_with('@') {
                                return Err(SqlError::unsupported("LOAD DATA into user variables"));
                            }
                            columns.push(w.clone());
                        }
                        Some(Token::Punct(')')) => {
                            at += 1;
                            break;
                        }
                        Some(Token::Punct(',')) => {}
                        _ => return Err(syntax("a column list")),
                    }
                    at += 1;
                }
                spec.columns = Some(columns);
            }
            _ => return Err(syntax("near what follows the table")),
        }
    }
    if spec.fields_terminated.is_empty() || spec.lines_terminated.is_empty() {
        return Err(SqlError::unsupported(
            "LOAD DATA with an empty field or line terminator (fixed-width rows)",
        ));
    }
    Ok(spec)
}

/// Reads a file's bytes, as they come, into rows.
pub struct RowReader {
    spec: LoadData,
    pending: Vec<u8>,
    /// Lines still to skip (`IGNORE n LINES`).
    skip: u64,
}

impl RowReader {
    pub fn new(spec: &LoadData) -> RowReader {
        RowReader {
            skip: spec.ignore_lines,
            spec: spec.clone(),
            pending: Vec::new(),
        }
    }

    /// Takes more of the file.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The rows whole so far (all that is left, with `end`: the file is done).
    pub fn rows(&mut self, end: bool) -> Vec<Vec<Field>> {
        let mut rows = Vec::new();
        let mut at = 0;
        while let Some((row, next)) = self.row(at, end) {
            at = next;
            if self.skip > 0 {
                self.skip -= 1;
                continue;
            }
            rows.extend(row);
        }
        self.pending.drain(..at);
        rows
    }

    /// The row starting at `from` (None for a line without `LINES STARTING BY`'s
    /// prefix) and where the next begins; None when the row is not whole yet.
    fn row(&self, from: usize, end: bool) -> Option<(Option<Vec<Field>>, usize)> {
        let b = &self.pending;
        if from >= b.len() {
            return None;
        }
        let s = &self.spec;
        let mut at = from;
        if !s.lines_starting.is_empty() {
            let found = find(b, at, &s.lines_starting);
            let line_end = find(b, at, &s.lines_terminated);
            match (found, line_end) {
                (Some(p), Some(e)) if p > e => return Some((None, e + s.lines_terminated.len())),
                (Some(p), _) => at = p + s.lines_starting.len(),
                (None, Some(e)) => return Some((None, e + s.lines_terminated.len())),
                (None, None) if end => return Some((None, b.len())),
                (None, None) => return None,
            }
        }
        let mut fields = Vec::new();
        let mut value = Vec::new();
        let mut enclosed = false;
        let mut was_enclosed = false;
        let mut field_start = true;
        loop {
            if at >= b.len() {
                if !end {
                    return None;
                }
                fields.push(field(&value, was_enclosed, s));
                return Some((Some(fields), b.len()));
            }
            let c = b[at];
            if field_start && Some(c) == s.enclosed {
                enclosed = true;
                was_enclosed = true;
                field_start = false;
                at += 1;
                continue;
            }
            field_start = false;
            if Some(c) == s.escaped && s.escaped.is_some() {
                let Some(&next) = b.get(at + 1) else {
                    if end {
                        value.push(c);
                        at += 1;
                        continue;
                    }
                    return None;
                };
                if next == b'N' && value.is_empty() && !was_enclosed {
                    value = b"\\N".to_vec();
                } else {
                    value.push(match next {
                        b'0' => 0,
                        b'b' => 8,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'Z' => 26,
                        other => other,
                    });
                }
                at += 2;
                continue;
            }
            if enclosed {
                if Some(c) == s.enclosed {
                    if b.get(at + 1) == Some(&c) {
                        value.push(c);
                        at += 2;
                        continue;
                    }
                    if at + 1 >= b.len() && !end {
                        return None;
                    }
                    enclosed = false;
                    at += 1;
                    continue;
                }
                value.push(c);
                at += 1;
                continue;
            }
            if b[at..].starts_with(&s.fields_terminated) {
                fields.push(field(&value, was_enclosed, s));
                value.clear();
                was_enclosed = false;
                field_start = true;
                at += s.fields_terminated.len();
                continue;
            }
            if b[at..].starts_with(&s.lines_terminated) {
                fields.push(field(&value, was_enclosed, s));
                return Some((Some(fields), at + s.lines_terminated.len()));
            }
            // A terminator may be cut between two packets.
            if !end
                && (s.lines_terminated.starts_with(&b[at..])
                    || s.fields_terminated.starts_with(&b[at..]))
            {
                return None;
            }
            value.push(c);
            at += 1;
        }
    }
}

/// A field's value: NULL for `\N`, and for an unquoted `NULL` when fields may be
/// enclosed.
fn field(value: &[u8], was_enclosed: bool, s: &LoadData) -> Field {
    if !was_enclosed && (value == b"\\N" || (s.enclosed.is_some() && value == b"NULL")) {
        None
    } else {
        Some(value.to_vec())
    }
}

fn find(b: &[u8], from: usize, what: &[u8]) -> Option<usize> {
    b.get(from..)?
        .windows(what.len())
        .position(|w| w == what)
        .map(|p| from + p)
}

/// Rows inserted per statement.
pub const BATCH: usize = 500;

impl Session {
    /// Inserts `rows` into `spec`'s table as one statement; the rows written (the
    /// rest had a key another row holds).
    pub fn load_rows(&mut self, spec: &LoadData, rows: &[Vec<Field>]) -> Result<u64, SqlError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let quote = |s: &str| format!("`{}`", s.replace('`', "``"));
        let table: Vec<String> = spec.table.iter().map(|p| quote(p)).collect();
        let columns = match &spec.columns {
            Some(c) => c.clone(),
            None => {
                let catalog = self.sync_catalog()?;
                let name = crate::names::of_statement(
                    &sqlparser::ast::ObjectName::from(
                        spec.table
                            .iter()
                            .map(|p| sqlparser::ast::Ident::new(p.as_str()))
                            .collect::<Vec<_>>(),
                    ),
                    self.database().as_deref(),
                )?;
                let def = &catalog.tables[crate::names::table(&catalog, &name)?];
                def.table.columns.iter().map(|c| c.name.clone()).collect()
            }
        };
        // Each row names the columns it has fields for: rows with fewer take the
        // defaults of the rest, so rows are grouped by how many fields they give.
        let mut written = 0;
        let mut start = 0;
        while start < rows.len() {
            let width = rows[start].len().min(columns.len());
            let mut end = start;
            while end < rows.len() && rows[end].len().min(columns.len()) == width {
                end += 1;
            }
            let names: Vec<String> = columns[..width].iter().map(|c| quote(c)).collect();
            let values: Vec<String> = rows[start..end]
                .iter()
                .map(|row| {
                    let cells: Vec<String> = row[..width]
                        .iter()
                        .map(|f| match f {
                            None => "NULL".to_string(),
                            Some(v) => match std::str::from_utf8(v) {
                                Ok(s) if !s.contains('\0') => {
                                    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
                                }
                                _ => format!(
                                    "X'{}'",
                                    v.iter().map(|b| format!("{b:02x}")).collect::<String>()
                                ),
                            },
                        })
                        .collect();
                    format!("({})", cells.join(", "))
                })
                .collect();
            let verb = match spec.mode {
                Mode::Ignore => "INSERT IGNORE INTO",
                Mode::Replace => "REPLACE INTO",
            };
            let sql = format!(
                "{verb} {} ({}) VALUES {}",
                table.join("."),
                names.join(", "),
                values.join(", ")
            );
            if let Output::Done(done) = self.query(&sql)? {
                written += done.affected;
            }
            start = end;
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(sql: &str) -> LoadData {
        match parse(sql) {
            Some(Ok(s)) => s,
            other => panic!("{sql}: {other:?}"),
        }
    }

    fn read(s: &LoadData, chunks: &[&[u8]]) -> Vec<Vec<Field>> {
        let mut r = RowReader::new(s);
        let mut rows = Vec::new();
        for c in chunks {
            r.feed(c);
            rows.extend(r.rows(false));
        }
        rows.extend(r.rows(true));
        rows
    }

    fn f(s: &str) -> Field {
        Some(s.as_bytes().to_vec())
    }

    #[test]
    fn the_statement_reads_as_mysql_writes_it() {
        let s = spec(
            "LOAD DATA LOCAL INFILE '/tmp/p.csv' REPLACE INTO TABLE d.`t` CHARACTER SET utf8mb4 \
             FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '\\\\' \
             LINES TERMINATED BY '\\r\\n' IGNORE 1 LINES (id, `name`)",
        );
        assert_eq!(s.file, "/tmp/p.csv");
        assert_eq!(s.mode, Mode::Replace);
        assert_eq!(s.table, vec!["d".to_string(), "t".to_string()]);
        assert_eq!(s.fields_terminated, b",");
        assert_eq!(s.enclosed, Some(b'"'));
        assert_eq!(s.escaped, Some(b'\\'));
        assert_eq!(s.lines_terminated, b"\r\n");
        assert_eq!(s.ignore_lines, 1);
        assert_eq!(s.columns, Some(vec!["id".into(), "name".into()]));
        assert!(parse("SELECT 1").is_none());
        assert!(matches!(
            parse("LOAD DATA LOCAL INFILE 'f' INTO TABLE t SET a = 1"),
            Some(Err(_))
        ));
    }

    #[test]
    fn rows_read_as_mysql_reads_them_whatever_the_packets() {
        let s = spec(
            "LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY ',' ENCLOSED BY '\"' \
             LINES TERMINATED BY '\\n' IGNORE 1 LINES",
        );
        let file: &[u8] = b"h1,h2\n1,\"a,b\"\n2,\"say \"\"hi\"\"\"\n3,NULL\n4,\\N\n5,\"NULL\"\n6,x\\,y\n7,\"multi\nline\"";
        let want = vec![
            vec![f("1"), f("a,b")],
            vec![f("2"), f("say \"hi\"")],
            vec![f("3"), None],
            vec![f("4"), None],
            vec![f("5"), f("NULL")],
            vec![f("6"), f("x,y")],
            vec![f("7"), f("multi\nline")],
        ];
        assert_eq!(read(&s, &[file]), want);
        // Cut at every byte: the same rows.
        for cut in 1..file.len() {
            assert_eq!(
                read(&s, &[&file[..cut], &file[cut..]]),
                want,
                "cut at {cut}"
            );
        }
        let tabs = spec("LOAD DATA LOCAL INFILE 'f' INTO TABLE t");
        assert_eq!(
            read(&tabs, &[b"1\ta\\tb\n2\t\\N\n"]),
            vec![vec![f("1"), f("a\tb")], vec![f("2"), None]]
        );
    }
}
