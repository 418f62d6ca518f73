//! Charts as standalone SVG files, written beside each workload's CSV.
//!
//! Hand-written SVG rather than a plotting crate: two chart kinds are all the
//! workloads need (grouped bars over categories, lines over categories), and SVG
//! text costs nothing to build. The y axis always starts at zero so a ratio can be
//! read off the bars' heights honestly.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// How the series are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One group of bars per category, one bar per series.
    Bars,
    /// One polyline per series across the categories.
    Lines,
}

/// A chart over categorical x values.
#[derive(Debug)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub kind: Kind,
    pub categories: Vec<String>,
    /// (name, one value per category; `None` where there is none).
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];
const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 500.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 70.0;

/// A round step for about `target` ticks up to `max`.
fn tick_step(max: f64, target: f64) -> f64 {
    let raw = (max / target).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn format_tick(value: f64) -> String {
    if value >= 1_000_000.0 {
        format!("{}M", value / 1_000_000.0)
    } else if value >= 10_000.0 {
        format!("{}k", value / 1000.0)
    } else if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

impl Chart {
    /// Renders the chart as an SVG document.
    pub fn to_svg(&self) -> String {
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let max = self
            .series
            .iter()
            .flat_map(|(_, values)| values.iter().flatten())
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let step = tick_step(if max > 0.0 { max } else { 1.0 }, 5.0);
        let top = (max / step).ceil().max(1.0) * step;
        let y = |v: f64| TOP + plot_h - v / top * plot_h;
        let slots = self.categories.len().max(1) as f64;
        let slot_w = plot_w / slots;
        let x_center = |i: usize| LEFT + slot_w * (i as f64 + 0.5);
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = write!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = write!(
            svg,
            r#"<text x="{}" y="28" font-size="16" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            escape(&self.title)
        );
        // Horizontal grid lines and y ticks.
        let mut tick = 0.0;
        while tick <= top + step / 2.0 {
            let ty = y(tick);
            let _ = write!(
                svg,
                r##"<line x1="{LEFT}" y1="{ty}" x2="{}" y2="{ty}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                LEFT + plot_w,
                LEFT - 6.0,
                ty + 4.0,
                format_tick(tick)
            );
            tick += step;
        }
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="#000"/><line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="#000"/>"##,
            TOP + plot_h,
            TOP + plot_h,
            LEFT + plot_w,
            TOP + plot_h
        );
        // Category labels, thinned so they never overlap.
        let every = ((self.categories.len() as f64 * 40.0 / plot_w).ceil() as usize).max(1);
        for (i, category) in self.categories.iter().enumerate() {
            if i % every == 0 || i + 1 == self.categories.len() {
                let _ = write!(
                    svg,
                    r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                    x_center(i),
                    TOP + plot_h + 18.0,
                    escape(category)
                );
            }
        }
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - 20.0,
            escape(&self.x_label)
        );
        let _ = write!(
            svg,
            r#"<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">{}</text>"#,
            TOP + plot_h / 2.0,
            TOP + plot_h / 2.0,
            escape(&self.y_label)
        );
        let count = self.series.len().max(1) as f64;
        for (s, (name, values)) in self.series.iter().enumerate() {
            let color = COLORS[s % COLORS.len()];
            match self.kind {
                Kind::Bars => {
                    let bar_w = slot_w * 0.8 / count;
                    for (i, value) in values.iter().enumerate() {
                        let Some(v) = value.filter(|v| v.is_finite()) else {
                            continue;
                        };
                        let bx = LEFT + slot_w * i as f64 + slot_w * 0.1 + bar_w * s as f64;
                        let _ = write!(
                            svg,
                            r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{}: {v:.1}</title></rect>"#,
                            y(v),
                            bar_w * 0.95,
                            (TOP + plot_h - y(v)).max(0.0),
                            escape(name)
                        );
                    }
                }
                Kind::Lines => {
                    let points: Vec<String> = values
                        .iter()
                        .enumerate()
                        .filter_map(|(i, v)| {
                            v.filter(|v| v.is_finite())
                                .map(|v| format!("{:.1},{:.1}", x_center(i), y(v)))
                        })
                        .collect();
                    let _ = write!(
                        svg,
                        r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                        points.join(" ")
                    );
                    for p in &points {
                        if let Some((px, py)) = p.split_once(',') {
                            let _ = write!(
                                svg,
                                r#"<circle cx="{px}" cy="{py}" r="2.5" fill="{color}"/>"#
                            );
                        }
                    }
                }
            }
            let ly = TOP + 10.0 + 20.0 * s as f64;
            let lx = LEFT + plot_w + 15.0;
            let _ = write!(
                svg,
                r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{color}"/><text x="{}" y="{}">{}</text>"#,
                ly - 10.0,
                lx + 18.0,
                ly,
                escape(name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }

    /// Writes the chart to `<csv path with .svg>` and returns that path.
    pub fn write_beside(&self, csv: &Path) -> Result<PathBuf> {
        self.write_as(&csv.with_extension("svg"))
    }

    /// Writes the chart to `path`.
    pub fn write_as(&self, path: &Path) -> Result<PathBuf> {
        fs::write(path, self.to_svg()).with_context(|| format!("writing {}", path.display()))?;
        Ok(path.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(100.0, 5.0), 20.0);
        assert_eq!(tick_step(160_000.0, 5.0), 50_000.0);
        assert_eq!(tick_step(0.7, 5.0), 0.2);
    }

    #[test]
    fn renders_every_series_and_category() {
        for kind in [Kind::Bars, Kind::Lines] {
            let chart = Chart {
                title: "t <1>".into(),
                x_label: "x".into(),
                y_label: "y".into(),
                kind,
                categories: vec!["get".into(), "set".into()],
                series: vec![
                    ("memcached".into(), vec![Some(100.0), Some(90.0)]),
                    ("kura".into(), vec![Some(110.0), None]),
                ],
            };
            let svg = chart.to_svg();
            assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
            assert!(svg.contains("t &lt;1&gt;"));
            assert!(svg.contains(">memcached<") && svg.contains(">kura<"));
            assert!(svg.contains(">get<") && svg.contains(">set<"));
        }
    }
}
