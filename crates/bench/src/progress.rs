//! Progress bars on stderr while loading and measuring.
//!
//! On a terminal, `indicatif` bars: a line per running task redrawn in place (at most
//! 20 times a second), with label, bar, percentage, count, rate and time left. All
//! bars belong to one `MultiProgress`, so a task inside another (throughput preloads
//! a restarted server while its "measuring" bar runs) gets a line of its own below,
//! and lines printed meanwhile go above them. A finished bar leaves one plain line.
//! indicatif draws nothing when stderr is not a terminal (a log file, CI, the tiny
//! tests), so there the bar only counts and this module prints, with no control
//! characters, a plain line at every tenth of the way and one at the end. Both show
//! the same figures. Any number of threads may add to one bar; none waits for another
//! to draw. Stdout is left alone: it carries the tables.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// Every bar drawn on the terminal: one area of stderr, redrawn as a whole.
static BARS: LazyLock<MultiProgress> =
    LazyLock::new(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));

/// The terminal's line: what [`figures`] writes follows the bar.
const TEMPLATE: &str = "{prefix} [{bar:28}] {percent:>3}%  {figures}";

/// Where progress goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Output {
    /// stderr is a terminal: an indicatif bar.
    Bar,
    /// stderr is a file or a pipe: plain lines.
    Plain,
}

/// One task's progress towards `total` units.
pub struct Progress {
    /// Drawn on a terminal; hidden (counting only) otherwise.
    bar: ProgressBar,
    label: String,
    unit: &'static str,
    total: u64,
    /// Plain lines rather than the bar: stderr is not a terminal.
    plain: bool,
    /// The last tenth a plain line was printed for.
    tenth: AtomicU64,
    finished: AtomicBool,
}

impl Progress {
    /// A bar for `total` units (e.g. "players", "runs") labelled `label`.
    pub fn new(label: impl Into<String>, total: u64, unit: &'static str) -> Progress {
        let output = if std::io::stderr().is_terminal() {
            Output::Bar
        } else {
            Output::Plain
        };
        Progress::on(output, label.into(), total, unit)
    }

    fn on(output: Output, label: String, total: u64, unit: &'static str) -> Progress {
        let total = total.max(1);
        let plain = output == Output::Plain;
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        let bar = if plain { bar } else { BARS.add(bar) };
        let style = ProgressStyle::with_template(TEMPLATE)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("#-")
            .with_key(
                "figures",
                move |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                    let _ = out.write_str(&figures(state.pos(), total, state.elapsed(), unit));
                },
            );
        bar.set_style(style);
        bar.set_prefix(label.clone());
        // Shown at once, not at the first unit done.
        bar.tick();
        Progress {
            bar,
            label,
            unit,
            total,
            plain,
            tenth: AtomicU64::new(0),
            finished: AtomicBool::new(false),
        }
    }

    /// Counts `n` more units done.
    pub fn add(&self, n: u64) {
        self.bar.inc(n);
        if self.plain && self.reached_a_tenth() {
            print_line(self.plain, &self.plain_line());
        }
    }

    /// Whether the count has just passed a tenth of the way that no plain line was
    /// printed for: true for the first thread to get there. The end has a line of its
    /// own, printed by [`Progress::finish`].
    fn reached_a_tenth(&self) -> bool {
        let tenth = self.bar.position().min(self.total) * 10 / self.total;
        tenth < 10 && self.tenth.fetch_max(tenth, Ordering::Relaxed) < tenth
    }

    /// Prints `line` on its own line, above the bars on a terminal.
    pub fn println(&self, line: &str) {
        print_line(self.plain, line);
    }

    /// Ends the bar: its final state (units done, not the total, if it ended early)
    /// stays on screen, or in the log, as one plain line.
    pub fn finish(&self) {
        if self.finished.swap(true, Ordering::Relaxed) {
            return;
        }
        if !self.plain {
            self.bar.finish_and_clear();
        }
        print_line(self.plain, &self.plain_line());
    }

    /// `label:  45%  4500/10.0k players  1.2k/s  ETA 5 s`.
    fn plain_line(&self) -> String {
        let done = self.bar.position();
        let percent = (done as f64 / self.total as f64).clamp(0.0, 1.0) * 100.0;
        format!(
            "{}: {percent:>3.0}%  {}",
            self.label,
            figures(done, self.total, self.bar.elapsed(), self.unit)
        )
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // A bar abandoned by an error still ends its line.
        self.finish();
    }
}

/// Prints `line` to stderr: above the bars on a terminal, where a plain write would
/// land inside them.
fn print_line(plain: bool, line: &str) {
    if plain {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    } else {
        let _ = BARS.println(line);
    }
}

/// `4500/10.0k players  1.2k/s  ETA 5 s`: the count, the mean rate so far, and the
/// time left at that rate (or the time taken, once done).
fn figures(done: u64, total: u64, elapsed: Duration, unit: &str) -> String {
    let elapsed = elapsed.as_secs_f64();
    let rate = if elapsed > 0.0 {
        done as f64 / elapsed
    } else {
        0.0
    };
    let mut out = format!("{}/{} {unit}  ", human(done as f64), human(total as f64));
    // A few runs a second read better with a decimal.
    let _ = if rate < 10.0 {
        write!(out, "{rate:.1}/s")
    } else {
        write!(out, "{}/s", human(rate))
    };
    let _ = if rate > 0.0 && done < total {
        write!(out, "  ETA {}", seconds((total - done) as f64 / rate))
    } else {
        write!(out, "  {}", seconds(elapsed))
    };
    out
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

    #[test]
    fn figures_give_count_rate_and_time() {
        let check = |done, elapsed_secs, expected: &str| {
            let elapsed = Duration::from_secs_f64(elapsed_secs);
            assert_eq!(figures(done, 200, elapsed, "rows"), expected);
        };
        check(50, 10.0, "50/200 rows  5.0/s  ETA 30 s");
        check(100, 0.004, "100/200 rows  25.0k/s  ETA 0 s");
        check(200, 125.0, "200/200 rows  1.6/s  2 min 5 s");
        check(0, 0.0, "0/200 rows  0.0/s  0 s");
    }

    #[test]
    fn plain_lines_come_at_every_tenth_once() {
        let progress = Progress::on(Output::Plain, "loading".into(), 200, "rows");
        let mut tenths = Vec::new();
        for done in 1..=200u64 {
            progress.bar.inc(1);
            if progress.reached_a_tenth() {
                tenths.push(done);
            }
        }
        assert_eq!(tenths, [20, 40, 60, 80, 100, 120, 140, 160, 180]);
        assert!(progress
            .plain_line()
            .starts_with("loading: 100%  200/200 rows  "));
        // Already finished: dropping it prints nothing.
        progress.finished.store(true, Ordering::Relaxed);
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
