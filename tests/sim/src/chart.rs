//! Line charts for `docs/experiments.md` (`cargo xtask experiments` writes them as PNG next
//! to the document): a few series of `(x, y)` points, optional horizontal reference lines,
//! axes with round ticks, a legend. Drawn with plotters' bitmap backend and the font8x8
//! glyphs of [`crate::plot`], so the bytes depend on the data alone (no system font): the
//! same tree gives the same files.

use std::path::Path;

use plotters::prelude::*;

use crate::plot::{task_color, text};

const W: u32 = 800;
const H: u32 = 420;
const LEFT: i32 = 70;
const RIGHT: i32 = 20;
const TOP: i32 = 34;
const BOTTOM: i32 = 72;

/// How a series joins its points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// Straight lines.
    Line,
    /// Steps: each value holds until the next point (a frequency, a state).
    Step,
}

/// One series.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points, ascending x.
    pub points: Vec<(f64, f64)>,
    /// How to join them.
    pub join: Join,
}

/// One chart: what `docs/experiments.md` shows as `![title](experiments/<file>)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// File name (`seed-001-ramp.png`).
    pub file: String,
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The series, drawn in order.
    pub series: Vec<Series>,
    /// Horizontal reference lines `(y, label)`.
    pub hlines: Vec<(f64, String)>,
}

impl Chart {
    /// The Markdown that shows it from a document one directory above `experiments/`.
    pub fn markdown(&self) -> String {
        format!("\n![{}](experiments/{})\n", self.title, self.file)
    }

    /// `(min, max)` of x and y over every point and reference line; y always includes 0.
    fn bounds(&self) -> Option<((f64, f64), (f64, f64))> {
        let pts = self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
        let mut y0 = 0.0f64;
        for &(x, y) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        for &(y, _) in &self.hlines {
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        (x0.is_finite() && x1 > x0 && y1 > y0).then_some(((x0, x1), (y0, y1)))
    }

    /// Draws the chart into `path` (PNG).
    pub fn draw(&self, path: &Path) -> Result<(), String> {
        let ((x0, x1), (y0, y1)) = self
            .bounds()
            .ok_or_else(|| format!("{}: nothing to plot", self.file))?;
        let (xt, x0, x1) = ticks(x0, x1);
        let (yt, y0, y1) = ticks(y0, y1);
        let root = BitMapBackend::new(path, (W, H)).into_drawing_area();
        let err = |e: DrawingAreaErrorKind<_>| format!("{}: {e}", path.display());
        root.fill(&WHITE).map_err(err)?;
        let (pw, ph) = (W as i32 - LEFT - RIGHT, H as i32 - TOP - BOTTOM);
        let px = |x: f64| LEFT + ((x - x0) / (x1 - x0) * f64::from(pw)).round() as i32;
        let py = |y: f64| TOP + ph - ((y - y0) / (y1 - y0) * f64::from(ph)).round() as i32;
        let dark = RGBColor(40, 40, 40);
        let grey = RGBColor(215, 215, 215);
        text(&root, LEFT, 6, &self.title, &dark)?;

        // Grid, ticks and their labels.
        for &x in &xt {
            let p = px(x);
            root.draw(&PathElement::new(vec![(p, TOP), (p, TOP + ph)], grey))
                .map_err(err)?;
            let s = num(x);
            text(&root, p - 4 * s.len() as i32, TOP + ph + 6, &s, &dark)?;
        }
        for &y in &yt {
            let p = py(y);
            root.draw(&PathElement::new(vec![(LEFT, p), (LEFT + pw, p)], grey))
                .map_err(err)?;
            let s = num(y);
            text(&root, LEFT - 6 - 8 * s.len() as i32, p - 4, &s, &dark)?;
        }
        root.draw(&Rectangle::new(
            [(LEFT, TOP), (LEFT + pw, TOP + ph)],
            dark.stroke_width(1),
        ))
        .map_err(err)?;
        let xl = &self.x_label;
        text(
            &root,
            LEFT + pw / 2 - 4 * xl.len() as i32,
            TOP + ph + 20,
            xl,
            &dark,
        )?;
        text(&root, 6, TOP - 12, &self.y_label, &dark)?;

        // Reference lines, dashed, labelled at the right end.
        let ref_color = RGBColor(150, 150, 150);
        for (y, label) in &self.hlines {
            let p = py(*y);
            let mut x = LEFT;
            while x < LEFT + pw {
                let e = (x + 6).min(LEFT + pw);
                root.draw(&PathElement::new(vec![(x, p), (e, p)], ref_color))
                    .map_err(err)?;
                x += 10;
            }
            text(
                &root,
                LEFT + pw - 8 * label.len() as i32 - 2,
                p - 10,
                label,
                &ref_color,
            )?;
        }

        // Series and legend.
        let mut lx = LEFT;
        let mut ly = TOP + ph + 36;
        for (i, s) in self.series.iter().enumerate() {
            let c = task_color(i);
            let mut pts: Vec<(i32, i32)> = Vec::with_capacity(s.points.len() * 2);
            for (j, &(x, y)) in s.points.iter().enumerate() {
                if s.join == Join::Step && j > 0 {
                    let prev = s.points[j - 1].1;
                    pts.push((px(x), py(prev)));
                }
                pts.push((px(x), py(y)));
            }
            root.draw(&PathElement::new(pts, c.stroke_width(2)))
                .map_err(err)?;
            if lx > LEFT && lx + 18 + 8 * s.name.len() as i32 > W as i32 {
                lx = LEFT;
                ly += 12;
            }
            root.draw(&Rectangle::new(
                [(lx, ly + 1), (lx + 14, ly + 7)],
                c.filled(),
            ))
            .map_err(err)?;
            text(&root, lx + 18, ly, &s.name, &dark)?;
            lx += 18 + 8 * s.name.len() as i32 + 16;
        }
        root.present().map_err(err)?;
        Ok(())
    }
}

/// Round ticks covering `[lo, hi]`: the ticks, and the range widened to the outer ticks.
fn ticks(lo: f64, hi: f64) -> (Vec<f64>, f64, f64) {
    let raw = (hi - lo) / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let a = (lo / step).floor() * step;
    let b = (hi / step).ceil() * step;
    let n = ((b - a) / step).round() as usize;
    ((0..=n).map(|i| a + i as f64 * step).collect(), a, b)
}

/// A tick label: integers without a fraction, others with one or two digits.
fn num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else if (v * 10.0 - (v * 10.0).round()).abs() < 1e-9 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let (t, a, b) = ticks(0.0, 972.0);
        assert_eq!(a, 0.0);
        assert!(b >= 972.0);
        assert_eq!(t[1] - t[0], 200.0);
        let (t, a, b) = ticks(-50.0, 310.0);
        assert!(a <= -50.0 && b >= 310.0, "{a} {b}");
        assert_eq!(t[1] - t[0], 100.0);
        assert_eq!(num(2.5), "2.5");
        assert_eq!(num(200.0), "200");
    }

    fn chart() -> Chart {
        Chart {
            file: "t.png".into(),
            title: "ramp".into(),
            x_label: "periods".into(),
            y_label: "util".into(),
            series: vec![
                Series {
                    name: "a".into(),
                    points: vec![(0.0, 0.0), (10.0, 500.0), (20.0, 900.0)],
                    join: Join::Line,
                },
                Series {
                    name: "b".into(),
                    points: vec![(0.0, 100.0), (15.0, 300.0)],
                    join: Join::Step,
                },
            ],
            hlines: vec![(486.0, "486".into())],
        }
    }

    #[test]
    fn a_chart_is_a_png_and_the_same_data_gives_the_same_bytes() {
        let dir = std::env::temp_dir().join(format!("asym-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.png"), dir.join("b.png"));
        chart().draw(&a).unwrap();
        chart().draw(&b).unwrap();
        let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert_eq!(&x[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(x, y);
        let mut other = chart();
        other.series[0].points[1].1 = 600.0;
        other.draw(&b).unwrap();
        assert_ne!(x, std::fs::read(&b).unwrap(), "the data must show");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_empty_chart_is_an_error_naming_it() {
        let mut c = chart();
        c.series.clear();
        c.hlines.clear();
        let e = c.draw(Path::new("/nonexistent/x.png")).unwrap_err();
        assert!(e.contains("t.png: nothing to plot"), "{e}");
    }
}
