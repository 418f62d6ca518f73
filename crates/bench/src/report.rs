//! Output: aligned text tables for people, CSV files for tools and charts, and a
//! Markdown report per run.
//!
//! A table is a header and rows of already-formatted cells; numbers are formatted
//! by the workloads so each can pick its precision. CSV files go under the run's
//! output directory with a timestamp in the name, so runs never overwrite each other.
//!
//! Each workload returns a [`Section`]: its tables, charts, notes, effective
//! parameters and the exact command and version of every server it started. A
//! report (`<workload>-<unix time>.md` beside the CSV, or one `full-….md` for
//! `kura-bench full`) is the machine, then the sections, then the ratio tables of
//! Kura over memcached, MariaDB and MariaDB+memcached from the same run. Charts are
//! embedded by relative path, so the directory can be moved or published whole.

use std::fmt::Write as _;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use crate::backend::Launch;
use crate::chart::{Chart, ChartFiles};
use crate::machine;

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

    /// Renders as a GitHub-flavoured Markdown table, numbers right-aligned.
    pub fn markdown(&self) -> String {
        let cell = |c: &str| c.replace('|', "\\|");
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| {} |",
            self.header
                .iter()
                .map(|h| cell(h))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let rule: Vec<&str> = (0..self.header.len())
            .map(|i| if i == 0 { "---" } else { "---:" })
            .collect();
        let _ = writeln!(out, "|{}|", rule.join("|"));
        for row in &self.rows {
            let mut cells: Vec<String> = row.iter().map(|c| cell(c)).collect();
            cells.resize(self.header.len(), String::new());
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out
    }
}

/// Rows for a CSV file (RFC 4180): cells are quoted only when they hold a comma, a
/// quote or a line break, with quotes doubled inside. Hand-written rather than the
/// `csv` crate: writing is all kura-bench does with CSV, and this is the whole of it.
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
                if c.contains([',', '"', '\n', '\r']) {
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

/// Which way a figure is better, for ratio tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Throughput: Kura's figure over the peer's.
    Higher,
    /// Latency: the peer's figure over Kura's.
    Lower,
}

/// The peers every Kura figure is compared with, when they were measured.
const PEERS: [&str; 5] = [
    "memcached",
    "memcached-binary",
    "memcached-tls",
    "mariadb",
    "mariadb+memcached",
];

/// Whether a Kura backend and a peer are compared: a backend spoken to in the binary
/// protocol is compared with peers in the binary protocol only, one over TLS with
/// peers over TLS only, and the others with the others.
fn comparable(kura: &str, peer: &str) -> bool {
    kura.ends_with("-binary") == peer.ends_with("-binary")
        && kura.ends_with("-tls") == peer.ends_with("-tls")
}

/// Kura over its peers from a chart's series: one row per category, one column per
/// (Kura backend, peer) pair, each ratio oriented so that above 1 means Kura did
/// better (more per second, or less time). `None` when the run had no Kura or no
/// peer. Categories `keep` rejects are left out (a 50-row table reads worse than
/// a few representative rows; the CSV has them all).
pub fn kura_ratios(chart: &Chart, better: Better, keep: impl Fn(&str) -> bool) -> Option<Table> {
    let kuras: Vec<&(String, Vec<Option<f64>>)> = chart
        .series
        .iter()
        .filter(|(name, _)| name.starts_with("kura-"))
        .collect();
    let peers: Vec<&(String, Vec<Option<f64>>)> = PEERS
        .iter()
        .filter_map(|peer| chart.series.iter().find(|(name, _)| name == peer))
        .collect();
    if kuras.is_empty() || peers.is_empty() {
        return None;
    }
    // The axis label without its parenthesis of detail.
    let category = chart.x_label.split(" (").next().unwrap_or_default();
    let mut header = vec![category.to_string()];
    for (kura, _) in &kuras {
        for (peer, _) in peers.iter().filter(|(peer, _)| comparable(kura, peer)) {
            header.push(format!("{kura} / {peer}"));
        }
    }
    let mut table = Table {
        header,
        rows: Vec::new(),
    };
    for (i, category) in chart.categories.iter().enumerate() {
        if !keep(category) {
            continue;
        }
        let mut row = vec![category.clone()];
        for (kura_name, kura) in &kuras {
            let peers = peers.iter().filter(|(peer, _)| comparable(kura_name, peer));
            for (_, peer) in peers {
                let k = kura.get(i).copied().flatten();
                let p = peer.get(i).copied().flatten();
                let ratio = k.zip(p).and_then(|(k, p)| {
                    let (top, bottom) = match better {
                        Better::Higher => (k, p),
                        Better::Lower => (p, k),
                    };
                    (bottom > 0.0).then(|| top / bottom)
                });
                row.push(opt(ratio, 2));
            }
        }
        table.push(row);
    }
    Some(table)
}

/// What one workload's run produced: everything its report shows.
#[derive(Debug)]
pub struct Section {
    pub workload: String,
    /// One paragraph: what was measured, how, with what key space.
    pub summary: String,
    pub csv: PathBuf,
    pub charts: Vec<ChartFiles>,
    /// (caption, table) for the main results.
    pub tables: Vec<(String, Table)>,
    /// (caption, table) of Kura over its peers.
    pub ratios: Vec<(String, Table)>,
    /// Paragraphs after the tables: how to read them, what was configured how.
    pub notes: Vec<String>,
    /// The workload's effective options (after `--tiny`), as Rust's `Debug` prints them.
    pub parameters: String,
    pub servers: Vec<Launch>,
    pub data_root: PathBuf,
    pub started: String,
    pub elapsed_secs: f64,
    /// Why the run must fail (misses, refused stores), after its report is written.
    pub failure: Option<String>,
}

impl Section {
    /// An empty section for `workload`, started now.
    pub fn begin(workload: &str, data_root: &Path) -> (Section, Instant) {
        (
            Section {
                workload: workload.to_string(),
                summary: String::new(),
                csv: PathBuf::new(),
                charts: Vec::new(),
                tables: Vec::new(),
                ratios: Vec::new(),
                notes: Vec::new(),
                parameters: String::new(),
                servers: Vec::new(),
                data_root: data_root.to_path_buf(),
                started: machine::utc_now(),
                elapsed_secs: 0.0,
                failure: None,
            },
            Instant::now(),
        )
    }

    /// Writes this section's own report beside its CSV, then fails if the run did.
    pub fn finish(self) -> Result<()> {
        let path = self.csv.with_extension("md");
        write_report(&path, &self.workload, std::slice::from_ref(&self))?;
        println!("wrote {}", path.display());
        match self.failure {
            Some(why) => bail!("{why}"),
            None => Ok(()),
        }
    }
}

/// Writes a Markdown report of `sections` to `path`; every file it links must be
/// in the same directory.
pub fn write_report(path: &Path, title: &str, sections: &[Section]) -> Result<()> {
    let mut md = String::new();
    let command: Vec<String> = std::env::args().collect();
    let _ = writeln!(md, "# kura-bench {title}\n");
    let _ = writeln!(md, "Command: `{}`\n", command.join(" "));
    if let Some(first) = sections.first() {
        let _ = writeln!(md, "## Machine\n");
        let _ = writeln!(md, "| | |\n|---|---|");
        for (what, value) in machine::describe(&first.data_root) {
            let _ = writeln!(md, "| {what} | {} |", value.replace('|', "\\|"));
        }
        md.push('\n');
    }
    // Several workloads: their ratio tables first, together, as the summary.
    let combined = sections.len() > 1;
    if combined {
        let _ = writeln!(md, "## Kura over its peers\n");
        let _ = writeln!(
            md,
            "Every ratio below compares figures measured in the same run, side by side \
             (details, charts and the servers' command lines follow, workload by workload).\n"
        );
        for section in sections {
            let _ = writeln!(md, "### {}\n", section.workload);
            if let Some(why) = &section.failure {
                let _ = writeln!(md, "**Failed:** {why}\n");
            }
            if section.ratios.is_empty() {
                let _ = writeln!(
                    md,
                    "No Kura-over-peer ratios (no Kura or no peer measured).\n"
                );
            }
            for (caption, table) in &section.ratios {
                let _ = writeln!(md, "{caption}\n\n{}", table.markdown());
            }
        }
    }
    for section in sections {
        let _ = writeln!(md, "## {}\n", section.workload);
        let _ = writeln!(
            md,
            "Started {} UTC, took {:.0} s. {}\n",
            section.started, section.elapsed_secs, section.summary
        );
        if let Some(why) = &section.failure {
            let _ = writeln!(md, "**This run failed:** {why}\n");
        }
        for chart in &section.charts {
            let image = chart.png.as_ref().unwrap_or(&chart.svg);
            let _ = writeln!(md, "![{}]({})\n", chart.title, file_name(image));
        }
        for (caption, table) in &section.tables {
            let _ = writeln!(md, "{caption}\n\n{}", table.markdown());
        }
        if !combined {
            for (caption, table) in &section.ratios {
                let _ = writeln!(md, "{caption}\n\n{}", table.markdown());
            }
        }
        for note in &section.notes {
            let _ = writeln!(md, "{note}\n");
        }
        let mut files = vec![file_name(&section.csv)];
        for chart in &section.charts {
            files.push(file_name(&chart.svg));
            files.extend(chart.png.as_deref().map(file_name));
        }
        let links: Vec<String> = files.iter().map(|f| format!("[{f}]({f})")).collect();
        let _ = writeln!(md, "Files: {}\n", links.join(", "));
        let _ = writeln!(md, "### Servers ({})\n", section.workload);
        for launch in &section.servers {
            let cgroup = launch
                .cgroup
                .as_ref()
                .map(|c| format!(", in cgroup `{}`", c.display()))
                .unwrap_or_default();
            let _ = writeln!(
                md,
                "- **{}** ({}{cgroup}):\n  `{}`",
                launch.role,
                launch.version,
                launch.command_line()
            );
        }
        let _ = writeln!(
            md,
            "\n### Parameters ({})\n\n```text\n{}\n```\n",
            section.workload, section.parameters
        );
    }
    fs::write(path, md).with_context(|| format!("writing {}", path.display()))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Formats an optional number with `decimals` places, or `-`.
pub fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
    fn table_in_markdown() {
        let mut t = Table::new(&["backend", "ops/s"]);
        t.push(vec!["a|b".into(), "100".into()]);
        assert_eq!(
            t.markdown(),
            "| backend | ops/s |\n|---|---:|\n| a\\|b | 100 |\n"
        );
    }

    #[test]
    fn ratios_say_above_one_when_kura_does_better() {
        let chart = Chart {
            title: String::new(),
            x_label: "connections".into(),
            y_label: String::new(),
            kind: crate::chart::Kind::Lines,
            categories: vec!["1".into(), "4".into()],
            series: vec![
                ("memcached".into(), vec![Some(100.0), Some(200.0)]),
                ("kura-fsync".into(), vec![Some(50.0), None]),
                ("redis".into(), vec![Some(1.0), Some(1.0)]),
            ],
        };
        let t = kura_ratios(&chart, Better::Higher, |_| true).unwrap();
        assert_eq!(t.header, vec!["connections", "kura-fsync / memcached"]);
        assert_eq!(t.rows, vec![vec!["1", "0.50"], vec!["4", "-"]]);
        let t = kura_ratios(&chart, Better::Lower, |c| c == "1").unwrap();
        assert_eq!(t.rows, vec![vec!["1", "2.00"]]);
        let alone = Chart {
            series: chart.series[..1].to_vec(),
            ..chart
        };
        assert!(kura_ratios(&alone, Better::Higher, |_| true).is_none());
    }

    #[test]
    fn a_combined_report_leads_with_the_ratios() {
        let dir = tempfile::tempdir().unwrap();
        let mut sections = Vec::new();
        for workload in ["game", "datasize"] {
            let (mut s, _) = Section::begin(workload, dir.path());
            s.csv = dir.path().join(format!("{workload}-1.csv"));
            let mut t = Table::new(&["connections", "kura-fsync / memcached"]);
            t.push(vec!["1".into(), "0.50".into()]);
            s.ratios.push((format!("{workload} ratios"), t));
            s.tables
                .push((format!("{workload} figures"), Table::new(&["x"])));
            sections.push(s);
        }
        sections[1].failure = Some("it broke".into());
        let path = dir.path().join("full-1.md");
        write_report(&path, "full comparison", &sections).unwrap();
        let md = fs::read_to_string(&path).unwrap();
        let at = |needle: &str| md.find(needle).unwrap_or_else(|| panic!("{needle}:\n{md}"));
        assert!(at("## Machine") < at("## Kura over its peers"));
        assert!(at("game ratios") < at("datasize ratios"));
        assert!(at("datasize ratios") < at("game figures"));
        assert_eq!(md.matches("game ratios").count(), 1, "{md}");
        assert!(md.contains("**Failed:** it broke"), "{md}");
        assert!(md.contains("[game-1.csv](game-1.csv)"), "{md}");
    }

    #[test]
    fn csv_quotes() {
        let mut c = Csv::new(&["a", "b"]);
        c.push(vec!["x,y".into(), "z\"".into()]);
        c.push(vec!["carriage\rreturn".into(), "plain".into()]);
        assert_eq!(
            c.lines,
            vec![
                "a,b".to_string(),
                "\"x,y\",\"z\"\"\"".to_string(),
                "\"carriage\rreturn\",plain".to_string()
            ]
        );
    }
}
