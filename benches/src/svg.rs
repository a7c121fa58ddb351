//! Minimal SVG plots written by the harness itself (no plotting dependency):
//! line charts (latency per ladder rung, optionally on a log axis) and grouped
//! bar charts (throughput per workload).

use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 180.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

/// Colour of a broker in every plot.
pub fn broker_color(broker: &str) -> &'static str {
    match broker {
        "kafka" => "#1f77b4",
        "keel" => "#d62728",
        _ => "#2ca02c",
    }
}

pub struct Series {
    pub name: String,
    pub color: String,
    /// SVG stroke-dasharray, empty for a solid line.
    pub dash: String,
    pub points: Vec<(f64, f64)>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn header(out: &mut String, title: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>
"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        escape(title)
    );
}

/// Round a span to a "nice" tick step (1, 2 or 5 times a power of ten).
fn nice_step(span: f64, ticks: f64) -> f64 {
    let raw = (span / ticks).max(f64::MIN_POSITIVE);
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

fn format_tick(value: f64) -> String {
    if value >= 1000.0 && value % 1000.0 == 0.0 {
        format!("{}k", value / 1000.0)
    } else if value >= 1.0 || value == 0.0 {
        format!("{value}")
    } else {
        format!("{value:.3}").trim_end_matches('0').to_string()
    }
}

/// A line chart; `log_y` uses a base-10 axis (latencies spanning decades).
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series], log_y: bool) -> String {
    let mut out = String::new();
    header(&mut out, title);
    let points: Vec<(f64, f64)> =
        series.iter().flat_map(|s| s.points.iter().copied()).filter(|(_, y)| !log_y || *y > 0.0).collect();
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    if points.is_empty() {
        let _ =
            write!(out, r#"<text x="{}" y="{}" text-anchor="middle">no data</text></svg>"#, WIDTH / 2.0, HEIGHT / 2.0);
        return out;
    }
    let x_max = points.iter().map(|p| p.0).fold(0.0, f64::max).max(1.0);
    let x_step = nice_step(x_max, 6.0);
    let x_top = (x_max / x_step).ceil() * x_step;
    let (y_low, y_high) = if log_y {
        let min = points.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        let max = points.iter().map(|p| p.1).fold(0.0, f64::max);
        (min.log10().floor(), max.log10().ceil().max(min.log10().floor() + 1.0))
    } else {
        let max = points.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9);
        (0.0, (max / nice_step(max, 5.0)).ceil() * nice_step(max, 5.0))
    };
    let to_x = |x: f64| LEFT + x / x_top * plot_w;
    let to_y = |y: f64| {
        let value = if log_y { y.max(1e-9).log10() } else { y };
        TOP + plot_h - (value - y_low) / (y_high - y_low) * plot_h
    };
    // Grid and ticks.
    let mut x = 0.0;
    while x <= x_top + x_step / 2.0 {
        let _ = write!(
            out,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="#e0e0e0"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"##,
            to_x(x),
            TOP + plot_h,
            TOP + plot_h + 16.0,
            format_tick(x)
        );
        x += x_step;
    }
    let y_ticks: Vec<f64> = if log_y {
        (y_low as i32..=y_high as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        let step = nice_step(y_high, 5.0);
        (0..=((y_high / step).round() as i32)).map(|i| f64::from(i) * step).collect()
    };
    for y in y_ticks {
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#e0e0e0"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            to_y(y),
            LEFT + plot_w,
            LEFT - 6.0,
            to_y(y) + 4.0,
            format_tick(y)
        );
    }
    axes(&mut out, x_label, y_label);
    for (index, s) in series.iter().enumerate() {
        let path: Vec<String> = s
            .points
            .iter()
            .filter(|(_, y)| !log_y || *y > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", to_x(x), to_y(y)))
            .collect();
        if path.is_empty() {
            continue;
        }
        let dash = if s.dash.is_empty() { String::new() } else { format!(r#" stroke-dasharray="{}""#, s.dash) };
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="2"{dash} points="{}"/>"#,
            s.color,
            path.join(" ")
        );
        for point in &path {
            let (px, py) = point.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(out, r#"<circle cx="{px}" cy="{py}" r="2.5" fill="{}"/>"#, s.color);
        }
        legend(&mut out, index, &s.name, &s.color, &s.dash);
    }
    out.push_str("</svg>\n");
    out
}

fn axes(out: &mut String, x_label: &str, y_label: &str) {
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let _ = write!(
        out,
        r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{0}" stroke="black"/><line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="black"/>
<text x="{2}" y="{3}" text-anchor="middle">{4}</text>
<text x="16" y="{5}" text-anchor="middle" transform="rotate(-90 16 {5})">{6}</text>
"#,
        TOP + plot_h,
        LEFT + plot_w,
        LEFT + plot_w / 2.0,
        HEIGHT - 18.0,
        escape(x_label),
        TOP + plot_h / 2.0,
        escape(y_label)
    );
}

fn legend(out: &mut String, index: usize, name: &str, color: &str, dash: &str) {
    let y = TOP + 10.0 + index as f64 * 18.0;
    let x = WIDTH - RIGHT + 14.0;
    let dash = if dash.is_empty() { String::new() } else { format!(r#" stroke-dasharray="{dash}""#) };
    let _ = write!(
        out,
        r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="3"{dash}/><text x="{}" y="{}">{}</text>"#,
        x + 24.0,
        x + 30.0,
        y + 4.0,
        escape(name)
    );
}

/// Grouped horizontal bars: one group per label (labels on the left, so long
/// workload names stay readable), one bar per series (None = no bar).
pub fn bar_chart(
    title: &str,
    x_label: &str,
    groups: &[String],
    series: &[(String, String, Vec<Option<f64>>)],
) -> String {
    const LABELS: f64 = 170.0;
    let bar_h = 14.0;
    let group_h = bar_h * series.len().max(1) as f64 + 10.0;
    let plot_h = group_h * groups.len().max(1) as f64;
    let height = TOP + plot_h + BOTTOM;
    let plot_w = WIDTH - LABELS - RIGHT;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>
"#,
        WIDTH / 2.0,
        escape(title)
    );
    let max = series.iter().flat_map(|(_, _, values)| values.iter().flatten()).fold(0.0f64, |a, &b| a.max(b));
    if groups.is_empty() || max <= 0.0 {
        let _ =
            write!(out, r#"<text x="{}" y="{}" text-anchor="middle">no data</text></svg>"#, WIDTH / 2.0, height / 2.0);
        return out;
    }
    let step = nice_step(max, 5.0);
    let top = (max / step).ceil() * step;
    let to_x = |v: f64| LABELS + v / top * plot_w;
    for i in 0..=((top / step).round() as i32) {
        let v = f64::from(i) * step;
        let _ = write!(
            out,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="#e0e0e0"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"##,
            to_x(v),
            TOP + plot_h,
            TOP + plot_h + 16.0,
            format_tick(v)
        );
    }
    let _ = write!(
        out,
        r#"<line x1="{LABELS}" y1="{TOP}" x2="{LABELS}" y2="{0}" stroke="black"/><line x1="{LABELS}" y1="{0}" x2="{1}" y2="{0}" stroke="black"/><text x="{2}" y="{3}" text-anchor="middle">{4}</text>"#,
        TOP + plot_h,
        LABELS + plot_w,
        LABELS + plot_w / 2.0,
        height - 18.0,
        escape(x_label)
    );
    for (g, label) in groups.iter().enumerate() {
        let gy = TOP + g as f64 * group_h + 5.0;
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LABELS - 6.0,
            gy + group_h / 2.0,
            escape(label)
        );
        for (s, (_, color, values)) in series.iter().enumerate() {
            let y = gy + s as f64 * bar_h;
            let Some(value) = values.get(g).copied().flatten() else {
                let _ = write!(
                    out,
                    r#"<text x="{:.1}" y="{:.1}" font-size="10" fill="{color}">not run</text>"#,
                    LABELS + 4.0,
                    y + bar_h - 3.0
                );
                continue;
            };
            let _ = write!(
                out,
                r#"<rect x="{LABELS}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                to_x(value) - LABELS,
                bar_h - 2.0
            );
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" font-size="10">{}</text>"#,
                to_x(value) + 4.0,
                y + bar_h - 3.0,
                format_tick((value * 10.0).round() / 10.0)
            );
        }
    }
    for (index, (name, color, _)) in series.iter().enumerate() {
        legend(&mut out, index, name, color, "");
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed() {
        let series = vec![Series {
            name: "kafka p99".into(),
            color: "#000".into(),
            dash: "4 2".into(),
            points: vec![(1000.0, 2.5), (2000.0, 40.0)],
        }];
        let svg = line_chart("t", "x", "y", &series, true);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("polyline"));
        let bars = bar_chart(
            "b",
            "MB/s",
            &["a".into(), "b<".into()],
            &[("kafka".into(), "#00f".into(), vec![Some(3.0), None])],
        );
        assert!(bars.contains("<rect x") && bars.contains("b&lt;"));
        assert!(line_chart("t", "x", "y", &[], false).contains("no data"));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(100.0, 5.0), 20.0);
        assert_eq!(nice_step(7.0, 5.0), 2.0);
    }
}
