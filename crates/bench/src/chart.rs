//! Charts written beside each workload's CSV, as SVG and as PNG.
//!
//! Hand-laid-out rather than a plotting crate: two chart kinds are all the
//! workloads need (grouped bars over categories, lines over categories). A chart is
//! laid out once into a list of [`Shape`]s in a 900×500 coordinate space; the SVG
//! writer prints those shapes as text, and the PNG writer draws the same shapes
//! with tiny-skia and rasterizes the text with ab_glyph from a system TrueType
//! font, so the two files always show the same picture. The y axis always starts
//! at zero so a ratio can be read off the heights honestly.
//!
//! A PNG needs a font. Without one (no DejaVu or other TrueType font installed;
//! `scripts/install-peers.sh` installs `fonts-dejavu-core`), the PNG is skipped
//! with a note and reports link the SVG instead: a chart without its labels would
//! be worse than none.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ab_glyph::{Font, FontVec, PxScale, ScaleFont};
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
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub kind: Kind,
    pub categories: Vec<String>,
    /// (name, one value per category; `None` where there is none).
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

/// The files one chart was written to.
#[derive(Debug, Clone)]
pub struct ChartFiles {
    pub title: String,
    pub svg: PathBuf,
    /// `None` when no font was found to draw the PNG's text.
    pub png: Option<PathBuf>,
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
/// PNG pixels per layout unit: 2 keeps 12-px labels crisp on any screen.
const PNG_SCALE: f32 = 2.0;

/// Where a text's anchor point lies along the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Anchor {
    Start,
    Middle,
    End,
}

/// One drawing primitive, in layout units (origin top left, y down).
#[derive(Clone, Debug, PartialEq)]
enum Shape {
    /// A filled rectangle; `title` is the SVG tooltip.
    Rect {
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        fill: &'static str,
        title: Option<String>,
    },
    Line {
        x1: f64,
        y1: f64,
        x2: f64,
        y2: f64,
        stroke: &'static str,
    },
    Polyline {
        points: Vec<(f64, f64)>,
        stroke: &'static str,
        width: f64,
    },
    Circle {
        cx: f64,
        cy: f64,
        r: f64,
        fill: &'static str,
    },
    /// Text whose baseline passes through (x, y); `upright` turns it 90° counter-
    /// clockwise about that point (the y axis label).
    Text {
        x: f64,
        y: f64,
        size: f64,
        anchor: Anchor,
        upright: bool,
        text: String,
    },
}

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
        // Sums of float steps (0.1 + 0.2) print with noise otherwise.
        let text = format!("{value:.6}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

impl Chart {
    /// Lays the chart out as shapes: the one description both writers draw.
    fn layout(&self) -> Vec<Shape> {
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
        let text = |x: f64, y: f64, size: f64, anchor: Anchor, text: &str| Shape::Text {
            x,
            y,
            size,
            anchor,
            upright: false,
            text: text.to_string(),
        };
        let mut shapes = vec![
            Shape::Rect {
                x: 0.0,
                y: 0.0,
                w: WIDTH,
                h: HEIGHT,
                fill: "#ffffff",
                title: None,
            },
            text(LEFT + plot_w / 2.0, 28.0, 16.0, Anchor::Middle, &self.title),
        ];
        // Horizontal grid lines and y ticks.
        let mut tick = 0.0;
        let mut index = 0.0;
        while tick <= top + step / 2.0 {
            let ty = y(tick);
            shapes.push(Shape::Line {
                x1: LEFT,
                y1: ty,
                x2: LEFT + plot_w,
                y2: ty,
                stroke: "#dddddd",
            });
            shapes.push(text(
                LEFT - 6.0,
                ty + 4.0,
                12.0,
                Anchor::End,
                &format_tick(tick),
            ));
            index += 1.0;
            tick = step * index;
        }
        shapes.push(Shape::Line {
            x1: LEFT,
            y1: TOP,
            x2: LEFT,
            y2: TOP + plot_h,
            stroke: "#000000",
        });
        shapes.push(Shape::Line {
            x1: LEFT,
            y1: TOP + plot_h,
            x2: LEFT + plot_w,
            y2: TOP + plot_h,
            stroke: "#000000",
        });
        // Category labels, thinned so they never overlap.
        let every = ((self.categories.len() as f64 * 40.0 / plot_w).ceil() as usize).max(1);
        for (i, category) in self.categories.iter().enumerate() {
            if i % every == 0 || i + 1 == self.categories.len() {
                shapes.push(text(
                    x_center(i),
                    TOP + plot_h + 18.0,
                    12.0,
                    Anchor::Middle,
                    category,
                ));
            }
        }
        shapes.push(text(
            LEFT + plot_w / 2.0,
            HEIGHT - 20.0,
            12.0,
            Anchor::Middle,
            &self.x_label,
        ));
        shapes.push(Shape::Text {
            x: 20.0,
            y: TOP + plot_h / 2.0,
            size: 12.0,
            anchor: Anchor::Middle,
            upright: true,
            text: self.y_label.clone(),
        });
        let count = self.series.len().max(1) as f64;
        let mut legend_y = TOP + 10.0;
        for (s, (name, values)) in self.series.iter().enumerate() {
            let color = COLORS[s % COLORS.len()];
            match self.kind {
                Kind::Bars => {
                    let bar_w = slot_w * 0.8 / count;
                    for (i, value) in values.iter().enumerate() {
                        let Some(v) = value.filter(|v| v.is_finite()) else {
                            continue;
                        };
                        shapes.push(Shape::Rect {
                            x: LEFT + slot_w * i as f64 + slot_w * 0.1 + bar_w * s as f64,
                            y: y(v),
                            w: bar_w * 0.95,
                            h: (TOP + plot_h - y(v)).max(0.0),
                            fill: color,
                            title: Some(format!("{name}: {v:.1}")),
                        });
                    }
                }
                Kind::Lines => {
                    let points: Vec<(f64, f64)> = values
                        .iter()
                        .enumerate()
                        .filter_map(|(i, v)| {
                            v.filter(|v| v.is_finite()).map(|v| (x_center(i), y(v)))
                        })
                        .collect();
                    for &(cx, cy) in &points {
                        shapes.push(Shape::Circle {
                            cx,
                            cy,
                            r: 2.5,
                            fill: color,
                        });
                    }
                    shapes.push(Shape::Polyline {
                        points,
                        stroke: color,
                        width: 2.0,
                    });
                }
            }
            let ly = legend_y;
            let lx = LEFT + plot_w + 15.0;
            shapes.push(Shape::Rect {
                x: lx,
                y: ly - 10.0,
                w: 12.0,
                h: 12.0,
                fill: color,
                title: None,
            });
            // A parenthesis after the name ("(OOM-killed at 2x)") gets a line of
            // its own, smaller: the legend column is narrow.
            match name.split_once(" (") {
                Some((first, rest)) => {
                    shapes.push(text(lx + 18.0, ly, 12.0, Anchor::Start, first));
                    shapes.push(text(
                        lx + 18.0,
                        ly + 14.0,
                        11.0,
                        Anchor::Start,
                        &format!("({rest}"),
                    ));
                    legend_y += 34.0;
                }
                None => {
                    shapes.push(text(lx + 18.0, ly, 12.0, Anchor::Start, name));
                    legend_y += 20.0;
                }
            }
        }
        shapes
    }

    /// Renders the chart as an SVG document.
    pub fn to_svg(&self) -> String {
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        for shape in self.layout() {
            match shape {
                Shape::Rect {
                    x,
                    y,
                    w,
                    h,
                    fill,
                    title,
                } => match title {
                    Some(title) => {
                        let _ = write!(
                            svg,
                            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"><title>{}</title></rect>"#,
                            escape(&title)
                        );
                    }
                    None => {
                        let _ = write!(
                            svg,
                            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"/>"#
                        );
                    }
                },
                Shape::Line {
                    x1,
                    y1,
                    x2,
                    y2,
                    stroke,
                } => {
                    let _ = write!(
                        svg,
                        r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}"/>"#
                    );
                }
                Shape::Polyline {
                    points,
                    stroke,
                    width,
                } => {
                    let points: Vec<String> = points
                        .iter()
                        .map(|(x, y)| format!("{x:.1},{y:.1}"))
                        .collect();
                    let _ = write!(
                        svg,
                        r#"<polyline fill="none" stroke="{stroke}" stroke-width="{width}" points="{}"/>"#,
                        points.join(" ")
                    );
                }
                Shape::Circle { cx, cy, r, fill } => {
                    let _ = write!(
                        svg,
                        r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="{r}" fill="{fill}"/>"#
                    );
                }
                Shape::Text {
                    x,
                    y,
                    size,
                    anchor,
                    upright,
                    text,
                } => {
                    let anchor = match anchor {
                        Anchor::Start => "start",
                        Anchor::Middle => "middle",
                        Anchor::End => "end",
                    };
                    let rotate = if upright {
                        format!(r#" transform="rotate(-90 {x:.1} {y:.1})""#)
                    } else {
                        String::new()
                    };
                    let _ = write!(
                        svg,
                        r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}"{rotate}>{}</text>"#,
                        escape(&text)
                    );
                }
            }
        }
        svg.push_str("</svg>\n");
        svg
    }

    /// Renders the chart as a PNG image with `font` for its text.
    fn to_png(&self, font: &FontVec) -> Result<Vec<u8>> {
        use tiny_skia::{FillRule, Paint, PathBuilder, Pixmap, Rect, Stroke, Transform};
        let width = (WIDTH as f32 * PNG_SCALE) as u32;
        let height = (HEIGHT as f32 * PNG_SCALE) as u32;
        let mut pixmap = Pixmap::new(width, height).context("allocating the PNG canvas")?;
        let scale = Transform::from_scale(PNG_SCALE, PNG_SCALE);
        let paint = |color: &str| {
            let mut paint = Paint::default();
            let (r, g, b) = rgb(color);
            paint.set_color_rgba8(r, g, b, 255);
            paint.anti_alias = true;
            paint
        };
        for shape in self.layout() {
            match shape {
                Shape::Rect {
                    x, y, w, h, fill, ..
                } => {
                    if let Some(rect) = Rect::from_xywh(x as f32, y as f32, w as f32, h as f32) {
                        pixmap.fill_rect(rect, &paint(fill), scale, None);
                    }
                }
                Shape::Line {
                    x1,
                    y1,
                    x2,
                    y2,
                    stroke,
                } => {
                    let mut path = PathBuilder::new();
                    path.move_to(x1 as f32, y1 as f32);
                    path.line_to(x2 as f32, y2 as f32);
                    if let Some(path) = path.finish() {
                        let line = Stroke {
                            width: 1.0,
                            ..Stroke::default()
                        };
                        pixmap.stroke_path(&path, &paint(stroke), &line, scale, None);
                    }
                }
                Shape::Polyline {
                    points,
                    stroke,
                    width,
                } => {
                    let mut path = PathBuilder::new();
                    for (i, &(x, y)) in points.iter().enumerate() {
                        if i == 0 {
                            path.move_to(x as f32, y as f32);
                        } else {
                            path.line_to(x as f32, y as f32);
                        }
                    }
                    if let Some(path) = path.finish() {
                        let line = Stroke {
                            width: width as f32,
                            ..Stroke::default()
                        };
                        pixmap.stroke_path(&path, &paint(stroke), &line, scale, None);
                    }
                }
                Shape::Circle { cx, cy, r, fill } => {
                    if let Some(path) = PathBuilder::from_circle(cx as f32, cy as f32, r as f32) {
                        pixmap.fill_path(&path, &paint(fill), FillRule::Winding, scale, None);
                    }
                }
                Shape::Text {
                    x,
                    y,
                    size,
                    anchor,
                    upright,
                    text,
                } => draw_text(
                    &mut pixmap,
                    font,
                    TextSpec {
                        x: x as f32 * PNG_SCALE,
                        y: y as f32 * PNG_SCALE,
                        size: size as f32 * PNG_SCALE,
                        anchor,
                        upright,
                    },
                    &text,
                ),
            }
        }
        pixmap.encode_png().context("encoding the PNG")
    }

    /// Writes the chart to `<csv path>.svg` and `.png` beside it.
    pub fn write_beside(&self, csv: &Path) -> Result<ChartFiles> {
        self.write_as(&csv.with_extension("svg"))
    }

    /// Writes the chart to `path` (an `.svg`) and to the same path with `.png`,
    /// unless no font can be found for the PNG (a note says so).
    pub fn write_as(&self, svg: &Path) -> Result<ChartFiles> {
        fs::write(svg, self.to_svg()).with_context(|| format!("writing {}", svg.display()))?;
        let png = match system_font() {
            Some(font) => {
                let path = svg.with_extension("png");
                fs::write(&path, self.to_png(font)?)
                    .with_context(|| format!("writing {}", path.display()))?;
                Some(path)
            }
            None => {
                eprintln!(
                    "note: no TrueType font found (looked for DejaVu Sans and under \
                     /usr/share/fonts; install fonts-dejavu-core or set KURA_BENCH_FONT): \
                     {} has no PNG beside it",
                    svg.display()
                );
                None
            }
        };
        Ok(ChartFiles {
            title: self.title.clone(),
            svg: svg.to_path_buf(),
            png,
        })
    }
}

impl std::fmt::Display for ChartFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.png {
            Some(png) => write!(f, "{} and {}", self.svg.display(), png.display()),
            None => write!(f, "{}", self.svg.display()),
        }
    }
}

/// `#rrggbb` as bytes (black if malformed: colours are this module's constants).
fn rgb(color: &str) -> (u8, u8, u8) {
    let channel = |i: usize| {
        color
            .get(i..i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0)
    };
    (channel(1), channel(3), channel(5))
}

/// Where and how big a text is drawn, in pixels.
struct TextSpec {
    x: f32,
    y: f32,
    size: f32,
    anchor: Anchor,
    upright: bool,
}

/// Draws `text` in black, antialiased, onto an opaque canvas.
fn draw_text(pixmap: &mut tiny_skia::Pixmap, font: &FontVec, spec: TextSpec, text: &str) {
    // An SVG font-size is pixels per em; ab_glyph's scale is pixels per line height.
    let Some(units_per_em) = font.units_per_em() else {
        return;
    };
    let scale = PxScale::from(spec.size * font.height_unscaled() / units_per_em);
    let scaled = font.as_scaled(scale);
    let mut glyphs = Vec::new();
    let mut caret = 0.0f32;
    let mut previous = None;
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(previous) = previous {
            caret += scaled.kern(previous, id);
        }
        glyphs.push(id.with_scale_and_position(scale, ab_glyph::point(caret, 0.0)));
        caret += scaled.h_advance(id);
        previous = Some(id);
    }
    let shift = match spec.anchor {
        Anchor::Start => 0.0,
        Anchor::Middle => caret / 2.0,
        Anchor::End => caret,
    };
    let (width, height) = (pixmap.width() as i64, pixmap.height() as i64);
    let pixels = pixmap.pixels_mut();
    for glyph in glyphs {
        let Some(outlined) = font.outline_glyph(glyph) else {
            continue;
        };
        let bounds = outlined.px_bounds();
        outlined.draw(|gx, gy, coverage| {
            // (u, v): the pixel along and across the text, relative to its anchor.
            let u = bounds.min.x + gx as f32 - shift;
            let v = bounds.min.y + gy as f32;
            let (px, py) = if spec.upright {
                (spec.x + v, spec.y - u)
            } else {
                (spec.x + u, spec.y + v)
            };
            let (px, py) = (px.round() as i64, py.round() as i64);
            if px < 0 || py < 0 || px >= width || py >= height {
                return;
            }
            let index = (py * width + px) as usize;
            let Some(pixel) = pixels.get_mut(index) else {
                return;
            };
            // The canvas is opaque, so premultiplied channels are plain ones.
            let keep = 1.0 - coverage.clamp(0.0, 1.0);
            let fade = |c: u8| (f32::from(c) * keep).round() as u8;
            if let Some(blended) = tiny_skia::PremultipliedColorU8::from_rgba(
                fade(pixel.red()),
                fade(pixel.green()),
                fade(pixel.blue()),
                255,
            ) {
                *pixel = blended;
            }
        });
    }
}

/// A sans-serif TrueType font for PNG text, loaded once: `KURA_BENCH_FONT`, else
/// DejaVu Sans or Liberation Sans where Debian, Fedora and Arch put them, else the
/// first regular sans `.ttf` under the usual font directories.
fn system_font() -> Option<&'static FontVec> {
    static FONT: OnceLock<Option<FontVec>> = OnceLock::new();
    FONT.get_or_init(|| {
        let mut candidates: Vec<PathBuf> = std::env::var_os("KURA_BENCH_FONT")
            .map(PathBuf::from)
            .into_iter()
            .collect();
        candidates.extend(
            [
                "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
                "/usr/share/fonts/TTF/DejaVuSans.ttf",
                "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
                "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
            ]
            .map(PathBuf::from),
        );
        let mut found = Vec::new();
        for dir in ["/usr/share/fonts", "/usr/local/share/fonts"] {
            find_ttf(Path::new(dir), 4, &mut found);
        }
        // Regular sans faces first; any face beats none.
        found.sort_by_key(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().to_lowercase())
                .unwrap_or_default();
            let styled = ["bold", "italic", "oblique", "mono", "light", "condensed"]
                .iter()
                .any(|s| name.contains(s));
            (styled, !name.contains("sans"), name)
        });
        candidates.extend(found);
        candidates
            .iter()
            .filter_map(|path| fs::read(path).ok())
            .find_map(|bytes| FontVec::try_from_vec(bytes).ok())
    })
    .as_ref()
}

/// Collects `.ttf` files under `dir`, `depth` levels down at most.
fn find_ttf(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && depth > 0 {
            find_ttf(&path, depth - 1, found);
        } else if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("ttf"))
        {
            found.push(path);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn sample(kind: Kind) -> Chart {
        Chart {
            title: "t <1>".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            kind,
            categories: vec!["get".into(), "set".into()],
            series: vec![
                ("memcached".into(), vec![Some(100.0), Some(90.0)]),
                ("kura".into(), vec![Some(110.0), None]),
            ],
        }
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(100.0, 5.0), 20.0);
        assert_eq!(tick_step(160_000.0, 5.0), 50_000.0);
        assert_eq!(tick_step(0.7, 5.0), 0.2);
        assert_eq!(format_tick(0.2 * 3.0), "0.6");
        assert_eq!(format_tick(50_000.0), "50k");
    }

    #[test]
    fn renders_every_series_and_category() {
        for kind in [Kind::Bars, Kind::Lines] {
            let svg = sample(kind).to_svg();
            assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
            assert!(svg.contains("t &lt;1&gt;"));
            assert!(svg.contains(">memcached<") && svg.contains(">kura<"));
            assert!(svg.contains(">get<") && svg.contains(">set<"));
        }
    }

    #[test]
    fn colours_parse() {
        assert_eq!(rgb("#1f77b4"), (0x1f, 0x77, 0xb4));
        assert_eq!(rgb("#ffffff"), (255, 255, 255));
    }

    #[test]
    fn png_draws_bars_and_text() {
        let font = system_font().expect(
            "no TrueType font for PNG charts: run scripts/install-peers.sh \
             (installs fonts-dejavu-core) or set KURA_BENCH_FONT",
        );
        let png = sample(Kind::Bars).to_png(font).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let pixmap = tiny_skia::Pixmap::decode_png(&png).unwrap();
        assert_eq!(pixmap.width(), 1800);
        let pixels = pixmap.pixels();
        let count = |want: (u8, u8, u8)| {
            pixels
                .iter()
                .filter(|p| (p.red(), p.green(), p.blue()) == want)
                .count()
        };
        // Both series' bars, and text (black-ish antialiased pixels) somewhere.
        assert!(count(rgb(COLORS[0])) > 1000, "no memcached bars");
        assert!(count(rgb(COLORS[1])) > 1000, "no kura bars");
        let dark = pixels
            .iter()
            .filter(|p| p.red() < 80 && p.green() < 80 && p.blue() < 80)
            .count();
        assert!(dark > 500, "no text drawn");
    }
}
