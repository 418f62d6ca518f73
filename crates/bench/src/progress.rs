//! Progress bars on stderr while loading and measuring.
//!
//! On a terminal, one line redrawn in place (`\r`) at most ten times a second:
//! label, bar, percentage, count, rate and time left. When stderr is not a
//! terminal (a log file, CI, the tiny tests), no control characters: a plain line
//! at every tenth of the way and one at the end. Any number of threads may add to
//! one bar; drawing never blocks them (a thread that finds another drawing skips
//! its turn). Stdout is left alone: it carries the tables.
//!
//! Hand-written rather than `indicatif`: one bar style is all kura-bench needs, and
//! this costs nothing to build.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Columns of the bar itself.
const BAR_WIDTH: usize = 28;
/// Least time between two redraws on a terminal.
const REDRAW: Duration = Duration::from_millis(100);

/// How the bar is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    /// Redrawn in place.
    Terminal,
    /// A line at every tenth, for logs.
    Lines,
}

/// One task's progress towards `total` units.
pub struct Progress {
    label: String,
    unit: &'static str,
    total: u64,
    done: AtomicU64,
    started: Instant,
    style: Style,
    /// When the bar was last drawn, and the last tenth a plain line was printed for.
    drawn: Mutex<(Instant, u64, bool)>,
}

impl Progress {
    /// A bar for `total` units (e.g. "players", "runs") labelled `label`.
    pub fn new(label: impl Into<String>, total: u64, unit: &'static str) -> Progress {
        let style = if std::io::stderr().is_terminal() {
            Style::Terminal
        } else {
            Style::Lines
        };
        let now = Instant::now();
        let progress = Progress {
            label: label.into(),
            unit,
            total: total.max(1),
            done: AtomicU64::new(0),
            started: now,
            style,
            drawn: Mutex::new((now, 0, false)),
        };
        if style == Style::Terminal {
            progress.draw(0);
        }
        progress
    }

    /// Counts `n` more units done.
    pub fn add(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        self.maybe_draw(done);
    }

    /// Units done so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Prints `line` on its own line, above the bar on a terminal.
    pub fn println(&self, line: &str) {
        let mut err = std::io::stderr().lock();
        if self.style == Style::Terminal {
            let _ = write!(err, "\r\x1b[2K");
        }
        let _ = writeln!(err, "{line}");
        drop(err);
        if self.style == Style::Terminal {
            self.draw(self.done());
        }
    }

    /// Ends the bar: the final state stays on screen (or in the log) as one line.
    pub fn finish(&self) {
        let Ok(mut drawn) = self.drawn.lock() else {
            return;
        };
        if drawn.2 {
            return;
        }
        drawn.2 = true;
        let line = self.render(self.done());
        let mut err = std::io::stderr().lock();
        let _ = match self.style {
            Style::Terminal => writeln!(err, "\r\x1b[2K{line}"),
            Style::Lines => writeln!(err, "{line}"),
        };
    }

    fn maybe_draw(&self, done: u64) {
        // Skips rather than waits when another thread is drawing.
        let Ok(mut drawn) = self.drawn.try_lock() else {
            return;
        };
        if drawn.2 {
            return;
        }
        match self.style {
            Style::Terminal => {
                if drawn.0.elapsed() < REDRAW && done < self.total {
                    return;
                }
                drawn.0 = Instant::now();
                drop(drawn);
                self.draw(done);
            }
            Style::Lines => {
                let tenth = done.min(self.total) * 10 / self.total;
                if tenth > drawn.1 && tenth < 10 {
                    drawn.1 = tenth;
                    drop(drawn);
                    let _ = writeln!(std::io::stderr().lock(), "{}", self.render(done));
                }
            }
        }
    }

    fn draw(&self, done: u64) {
        let line = self.render(done);
        let _ = write!(std::io::stderr().lock(), "\r\x1b[2K{line}");
    }

    /// `label [#####-----]  45%  4 500/10 000 players  1.2k/s  ETA 5 s`.
    fn render(&self, done: u64) -> String {
        let fraction = (done as f64 / self.total as f64).clamp(0.0, 1.0);
        let elapsed = self.started.elapsed().as_secs_f64();
        let rate = if elapsed > 0.0 {
            done as f64 / elapsed
        } else {
            0.0
        };
        let left = if rate > 0.0 && done < self.total {
            format!("  ETA {}", seconds((self.total - done) as f64 / rate))
        } else {
            format!("  {}", seconds(elapsed))
        };
        let bar = match self.style {
            Style::Terminal => {
                let filled = (fraction * BAR_WIDTH as f64).round() as usize;
                format!(
                    " [{}{}]",
                    "#".repeat(filled),
                    "-".repeat(BAR_WIDTH - filled.min(BAR_WIDTH))
                )
            }
            Style::Lines => ":".to_string(),
        };
        // A few runs a second read better with a decimal.
        let rate = if rate < 10.0 {
            format!("{rate:.1}")
        } else {
            human(rate)
        };
        format!(
            "{}{bar} {:>3.0}%  {}/{} {}  {rate}/s{left}",
            self.label,
            fraction * 100.0,
            human(done as f64),
            human(self.total as f64),
            self.unit,
        )
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // A bar abandoned by an error still ends its line.
        self.finish();
    }
}

/// 950, 12.3k, 4.56M.
pub fn human(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e4 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

/// 42 s, 3 min 5 s.
fn seconds(secs: f64) -> String {
    let secs = secs.max(0.0).round() as u64;
    if secs >= 60 {
        format!("{} min {} s", secs / 60, secs % 60)
    } else {
        format!("{secs} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(style: Style) -> Progress {
        Progress {
            label: "loading".into(),
            unit: "rows",
            total: 200,
            done: AtomicU64::new(0),
            started: Instant::now(),
            style,
            // Already finished, so dropping it prints nothing.
            drawn: Mutex::new((Instant::now(), 0, true)),
        }
    }

    #[test]
    fn renders_counts_rate_and_time() {
        let line = bar(Style::Lines).render(50);
        assert!(line.starts_with("loading:  25%  50/200 rows"), "{line}");
        let line = bar(Style::Terminal).render(100);
        assert!(line.contains("[##############--------------]"), "{line}");
    }

    #[test]
    fn numbers_read_at_a_glance() {
        assert_eq!(human(950.0), "950");
        assert_eq!(human(12_345.0), "12.3k");
        assert_eq!(human(4_560_000.0), "4.56M");
        assert_eq!(seconds(42.4), "42 s");
        assert_eq!(seconds(185.0), "3 min 5 s");
    }
}
