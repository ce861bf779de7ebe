//! `--plot`: one PNG with per-CPU task placement over time, per-domain frequency and
//! per-task utilisation, in the style of kernelshark/LISA's plots.
//!
//! Drawn with plotters' bitmap backend. Text uses the public-domain `font8x8` glyphs
//! rendered pixel by pixel, so no system font is needed (plotters' own text path
//! would load fonts through fontconfig).

use std::path::Path;

use plotters::prelude::*;

use crate::board::Board;
use crate::engine::SimResult;

const W: u32 = 1600;
const LEFT: i32 = 150;
const RIGHT: i32 = 20;
const LANE: i32 = 26;
const FREQ_H: i32 = 160;
const UTIL_H: i32 = 240;
const GAP: i32 = 40;

/// A distinct colour per task index (golden-angle hues).
pub(crate) fn task_color(i: usize) -> RGBColor {
    let h = (i as f64 * 137.508) % 360.0;
    let (s, l) = (0.65, if i.is_multiple_of(2) { 0.45 } else { 0.6 });
    hsl(h, s, l)
}

fn hsl(h: f64, s: f64, l: f64) -> RGBColor {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let x = c * (1.0 - ((h / 60.0) % 2.0 - 1.0).abs());
    let m = l - c / 2.0;
    let (r, g, b) = match (h / 60.0) as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let f = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    RGBColor(f(r), f(g), f(b))
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

pub(crate) fn text(
    area: &Area<'_>,
    x: i32,
    y: i32,
    s: &str,
    color: &RGBColor,
) -> Result<(), String> {
    use font8x8::UnicodeFonts;
    let mut cx = x;
    for ch in s.chars() {
        if let Some(g) = font8x8::BASIC_FONTS.get(ch) {
            for (row, bits) in g.iter().enumerate() {
                for col in 0..8 {
                    if bits & (1 << col) != 0 {
                        area.draw_pixel((cx + col, y + row as i32), color)
                            .map_err(|e| e.to_string())?;
                    }
                }
            }
        }
        cx += 8;
    }
    Ok(())
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Draw the plot of a run with a timeline into `path`.
pub fn draw(path: &Path, board: &Board, res: &SimResult) -> Result<(), String> {
    let tl = res
        .timeline
        .as_ref()
        .ok_or("the run did not record a timeline")?;
    let nr = board.nr_cpus() as i32;
    let nd = board.domains.len() as i32;
    let ntasks = res.names.len().min(24);
    let legend_rows = (ntasks as i32 + 5) / 6;
    let h = (30 + nr * LANE + GAP + FREQ_H + GAP + UTIL_H + 30 + legend_rows * 14 + 20) as u32;
    let root = BitMapBackend::new(path, (W, h)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let end = res.end_ns.max(1);
    let plot_w = W as i32 - LEFT - RIGHT;
    let xof = |t: u64| LEFT + ((t as u128 * plot_w as u128) / end as u128) as i32;
    let grey = RGBColor(200, 200, 200);
    let dark = RGBColor(40, 40, 40);

    // Placement lanes.
    let top = 30;
    text(
        &root,
        10,
        8,
        &format!("{}: task placement per CPU", board.desc.name),
        &dark,
    )?;
    for c in 0..nr {
        let y = top + c * LANE;
        let d = board.cpus[c as usize].domain;
        text(
            &root,
            10,
            y + 8,
            &format!(
                "cpu{c} {} {}",
                board.domains[d].name, board.cpus[c as usize].capacity_orig
            ),
            &dark,
        )?;
        root.draw(&Rectangle::new(
            [(LEFT, y), (LEFT + plot_w, y + LANE - 4)],
            grey.stroke_width(1),
        ))
        .map_err(err)?;
    }
    for &(cpu, s, e, t) in &tl.runs {
        let y = top + cpu as i32 * LANE;
        let (x0, x1) = (xof(s), xof(e).max(xof(s) + 1));
        root.draw(&Rectangle::new(
            [(x0, y + 1), (x1, y + LANE - 5)],
            task_color(t).filled(),
        ))
        .map_err(err)?;
    }

    // Frequency per domain.
    let ftop = top + nr * LANE + GAP;
    text(
        &root,
        10,
        ftop - 16,
        "frequency per perf domain (MHz, normalised to each domain's fmax)",
        &dark,
    )?;
    root.draw(&Rectangle::new(
        [(LEFT, ftop), (LEFT + plot_w, ftop + FREQ_H)],
        grey.stroke_width(1),
    ))
    .map_err(err)?;
    for d in 0..nd as usize {
        let dm = &board.domains[d];
        let color = hsl(d as f64 * 120.0 + 200.0, 0.7, 0.4);
        // Offset each domain by a few pixels so equal frequencies do not hide each other.
        let yof = |khz: u32| {
            ftop + FREQ_H
                - (khz as i64 * (FREQ_H - 16) as i64 / dm.fmax_khz.max(1) as i64) as i32
                - 3 * d as i32
        };
        let mut pts = Vec::new();
        let mut last: Option<u32> = None;
        for &(dd, t, khz) in tl.freqs.iter().filter(|f| f.0 == d) {
            let _ = dd;
            if let Some(l) = last {
                pts.push((xof(t), yof(l)));
            }
            pts.push((xof(t), yof(khz)));
            last = Some(khz);
        }
        if let Some(l) = last {
            pts.push((xof(end), yof(l)));
        }
        root.draw(&PathElement::new(pts, color.stroke_width(2)))
            .map_err(err)?;
        let label = format!(
            "{} {}-{} MHz",
            dm.name,
            dm.opps.first().map_or(0, |o| o.khz / 1000),
            dm.fmax_khz / 1000
        );
        text(&root, 10, ftop + 10 + d as i32 * 14, &label, &color)?;
    }

    // Utilisation per task.
    let utop = ftop + FREQ_H + GAP;
    text(&root, 10, utop - 16, "task util_avg (0..1024)", &dark)?;
    root.draw(&Rectangle::new(
        [(LEFT, utop), (LEFT + plot_w, utop + UTIL_H)],
        grey.stroke_width(1),
    ))
    .map_err(err)?;
    for frac in [256, 512, 768] {
        let y = utop + UTIL_H - frac * UTIL_H / 1024;
        root.draw(&PathElement::new(
            vec![(LEFT, y), (LEFT + plot_w, y)],
            RGBColor(235, 235, 235).stroke_width(1),
        ))
        .map_err(err)?;
        text(&root, LEFT - 40, y - 4, &frac.to_string(), &dark)?;
    }
    let yu = |u: u32| utop + UTIL_H - (u.min(1024) as i32 * UTIL_H / 1024);
    for t in 0..res.names.len() {
        let pts: Vec<(i32, i32)> = tl
            .utils
            .iter()
            .filter(|s| s.0 == t)
            .map(|&(_, ts, u)| (xof(ts), yu(u)))
            .collect();
        if pts.len() > 1 {
            root.draw(&PathElement::new(pts, task_color(t).stroke_width(1)))
                .map_err(err)?;
        }
    }

    // Time axis and legend.
    let ay = utop + UTIL_H + 6;
    for i in 0..=10u64 {
        let t = end * i / 10;
        let x = xof(t);
        root.draw(&PathElement::new(
            vec![(x, ay - 6), (x, ay - 2)],
            dark.stroke_width(1),
        ))
        .map_err(err)?;
        text(&root, x - 16, ay, &format!("{:.2}s", t as f64 / 1e9), &dark)?;
    }
    let ly = ay + 18;
    for (i, (name, pid)) in res.names.iter().take(ntasks).enumerate() {
        let x = LEFT + (i as i32 % 6) * 240;
        let y = ly + (i as i32 / 6) * 14;
        root.draw(&Rectangle::new(
            [(x, y), (x + 10, y + 8)],
            task_color(i).filled(),
        ))
        .map_err(err)?;
        text(&root, x + 14, y, &format!("{name}-{pid}"), &dark)?;
    }
    if res.names.len() > ntasks {
        text(
            &root,
            10,
            ly,
            &format!("+{} more", res.names.len() - ntasks),
            &dark,
        )?;
    }
    root.present().map_err(err)?;
    Ok(())
}
