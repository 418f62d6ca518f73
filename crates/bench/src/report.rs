//! Output: aligned text tables for people, CSV files for tools and charts.
//!
//! A table is a header and rows of already-formatted cells; numbers are formatted
//! by the workloads so each can pick its precision. CSV files go under the run's
//! output directory with a timestamp in the name, so runs never overwrite each other.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

/// A table of formatted cells.
#[derive(Debug, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Renders with the first column left-aligned and the others right-aligned.
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            for (i, cell) in cells.iter().enumerate().take(columns) {
                let pad = widths[i] - cell.chars().count();
                if i == 0 {
                    out.push_str(cell);
                    out.push_str(&" ".repeat(pad));
                } else {
                    out.push_str("  ");
                    out.push_str(&" ".repeat(pad));
                    out.push_str(cell);
                }
            }
            out.push('\n');
        };
        line(&self.header, &mut out);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule, &mut out);
        for row in &self.rows {
            line(row, &mut out);
        }
        out
    }
}

/// Rows for a CSV file; cells are quoted only when they need it.
#[derive(Debug, Default)]
pub struct Csv {
    lines: Vec<String>,
}

impl Csv {
    pub fn new(header: &[&str]) -> Csv {
        let mut csv = Csv::default();
        csv.push(header.iter().map(|h| h.to_string()).collect());
        csv
    }

    pub fn push(&mut self, row: Vec<String>) {
        let cells: Vec<String> = row
            .into_iter()
            .map(|c| {
                if c.contains([',', '"', '\n']) {
                    format!("\"{}\"", c.replace('"', "\"\""))
                } else {
                    c
                }
            })
            .collect();
        self.lines.push(cells.join(","));
    }

    /// Writes `<dir>/<name>-<unix seconds>.csv` and returns its path.
    pub fn write(&self, dir: &Path, name: &str) -> Result<PathBuf> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let path = dir.join(format!("{name}-{stamp}.csv"));
        let mut file =
            fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        for line in &self.lines {
            writeln!(file, "{line}")?;
        }
        Ok(path)
    }
}

/// Formats an optional number with `decimals` places, or `-`.
pub fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns() {
        let mut t = Table::new(&["backend", "ops/s"]);
        t.push(vec!["memcached".into(), "100".into()]);
        t.push(vec!["k".into(), "12345".into()]);
        assert_eq!(
            t.render(),
            "backend    ops/s\n---------  -----\nmemcached    100\nk          12345\n"
        );
    }

    #[test]
    fn csv_quotes() {
        let mut c = Csv::new(&["a", "b"]);
        c.push(vec!["x,y".into(), "z\"".into()]);
        assert_eq!(
            c.lines,
            vec!["a,b".to_string(), "\"x,y\",\"z\"\"\"".to_string()]
        );
    }
}
