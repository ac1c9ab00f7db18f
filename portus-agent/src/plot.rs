//! `--plot FILE`: a simulated run's per-flow time series as one SVG picture, written by hand
//! (no plotting crate, no Python): four panels over simulated time sharing the x axis —
//! throughput, queueing delay, congestion window and pacing rate — one colour per flow.

use std::fmt::Write as _;

use ccp_sim::TimePoint;

/// What one panel draws from a time point; `None`: no sample (the line breaks).
struct Panel {
    title: &'static str,
    value: fn(&TimePoint) -> Option<f64>,
}

const PANELS: [Panel; 4] = [
    Panel {
        title: "throughput (Mbit/s)",
        value: |p| finite(p.throughput_mbps),
    },
    Panel {
        title: "queueing delay (ms)",
        value: |p| finite(p.queue_delay_ms),
    },
    Panel {
        title: "congestion window (kB)",
        value: |p| Some(p.cwnd_bytes as f64 / 1e3),
    },
    Panel {
        title: "pacing rate (Mbit/s; unpaced flows absent)",
        value: |p| finite(p.rate_mbps).filter(|r| *r > 0.0),
    },
];

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Colours that stay apart from each other (Tableau 10).
const COLOURS: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

const WIDTH: f64 = 960.0;
const PANEL_H: f64 = 170.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const GAP: f64 = 40.0;
/// Most points drawn per flow and panel (longer series are thinned evenly).
const MAX_POINTS: usize = 2000;

/// The SVG document for `series` (points every `interval_s`); `labels[i]` names flow `i`
/// in the legend, `title` heads the picture.
pub fn svg(series: &[TimePoint], interval_s: f64, labels: &[String], title: &str) -> String {
    let n_flows = series
        .iter()
        .map(|p| p.flow + 1)
        .max()
        .unwrap_or(0)
        .max(labels.len());
    let t_max = series.iter().map(|p| p.t).fold(0.0, f64::max).max(1e-9);
    let legend_rows = n_flows.div_ceil(4).max(1);
    let height = TOP + PANELS.len() as f64 * (PANEL_H + GAP) + 20.0 * legend_rows as f64 + 20.0;
    let plot_w = WIDTH - LEFT - RIGHT;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="24" font-size="15">{}</text>"#,
        escape(title)
    );
    // each flow's points in time order
    let mut by_flow: Vec<Vec<&TimePoint>> = vec![Vec::new(); n_flows];
    for p in series {
        by_flow[p.flow].push(p);
    }
    for v in &mut by_flow {
        v.sort_by(|a, b| a.t.total_cmp(&b.t));
    }
    for (k, panel) in PANELS.iter().enumerate() {
        let y0 = TOP + k as f64 * (PANEL_H + GAP);
        let y_max = nice_ceiling(series.iter().filter_map(panel.value).fold(0.0, f64::max));
        let x = |t: f64| LEFT + t / t_max * plot_w;
        let y = |v: f64| y0 + PANEL_H - (v / y_max).clamp(0.0, 1.0) * PANEL_H;
        let _ = writeln!(
            s,
            r##"<text x="{LEFT}" y="{:.1}" font-weight="bold">{}</text><rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#888"/>"##,
            y0 - 6.0,
            escape(panel.title)
        );
        for i in 0..=4 {
            let v = y_max * f64::from(i) / 4.0;
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + plot_w,
                LEFT - 6.0,
                y(v) + 4.0,
                tick(v),
                yy = y(v),
            );
        }
        let t_step = nice_ceiling(t_max / 8.0);
        let mut t = 0.0;
        while t <= t_max + 1e-9 {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x(t),
                y0 + PANEL_H + 14.0,
                tick(t)
            );
            t += t_step;
        }
        for (flow, points) in by_flow.iter().enumerate() {
            let stride = points.len().div_ceil(MAX_POINTS).max(1);
            let mut d = String::new();
            let mut last_t: Option<f64> = None;
            for p in points.iter().step_by(stride) {
                let Some(v) = (panel.value)(p) else {
                    last_t = None;
                    continue;
                };
                // a gap in the series (the flow stopped, or thinned points) breaks the line
                let joined =
                    last_t.is_some_and(|lt| p.t - lt <= interval_s * (stride as f64 + 0.5));
                let _ = write!(
                    d,
                    "{}{:.1},{:.1}",
                    if joined { " L" } else { " M" },
                    x(p.t),
                    y(v)
                );
                last_t = Some(p.t);
            }
            if !d.is_empty() {
                let _ = writeln!(
                    s,
                    r#"<path d="{}" fill="none" stroke="{}" stroke-width="1.3"/>"#,
                    d.trim_start(),
                    COLOURS[flow % COLOURS.len()]
                );
            }
        }
    }
    let ly = TOP + PANELS.len() as f64 * (PANEL_H + GAP) - 10.0;
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time (s)</text>"#,
        LEFT + plot_w / 2.0,
        ly - 6.0
    );
    for flow in 0..n_flows {
        let (col, row) = (flow % 4, flow / 4);
        let lx = LEFT + col as f64 * (plot_w / 4.0);
        let yy = ly + 14.0 + row as f64 * 20.0;
        let label = labels
            .get(flow)
            .cloned()
            .unwrap_or_else(|| format!("flow {flow}"));
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{}" stroke-width="3"/><text x="{:.1}" y="{yy:.1}">{}</text>"#,
            lx + 18.0,
            yy - 4.0,
            yy - 4.0,
            COLOURS[flow % COLOURS.len()],
            lx + 24.0,
            escape(&label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at or above `v` (an axis's top); 1 for nothing.
fn nice_ceiling(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= v * (1.0 - 1e-12) {
            return m * mag;
        }
    }
    10.0 * mag
}

fn tick(v: f64) -> String {
    if v == v.round() {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').to_string()
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t: f64, flow: usize, thr: f64, qd: f64) -> TimePoint {
        TimePoint {
            t,
            flow,
            throughput_mbps: thr,
            rtt_ms: 40.0 + qd,
            cwnd_bytes: 15_000,
            rate_mbps: if flow == 1 { 12.0 } else { 0.0 },
            queue_delay_ms: qd,
            delivered_bytes: 0,
        }
    }

    #[test]
    fn one_line_per_flow_and_panel_with_the_labels() {
        let series: Vec<TimePoint> = (1..=20)
            .flat_map(|i| {
                let t = f64::from(i) * 0.1;
                [point(t, 0, 10.0, 5.0), point(t, 1, 20.0, 8.0)]
            })
            .collect();
        let labels = ["0 cubic".to_string(), "1 bbr & co".to_string()];
        let s = svg(&series, 0.1, &labels, "a <test>");
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"), "{s}");
        // flow 0 is unpaced: no pacing-rate line; flow 1 has all four
        assert_eq!(
            s.matches("stroke=\"#4e79a7\" stroke-width=\"1.3\"").count(),
            3
        );
        assert_eq!(
            s.matches("stroke=\"#f28e2b\" stroke-width=\"1.3\"").count(),
            4
        );
        assert!(
            s.contains("1 bbr &amp; co") && s.contains("a &lt;test&gt;"),
            "{s}"
        );
        // throughput axis tops at 20 (the largest value), so flow 1's 20 Mbit/s is the panel top
        let top = TOP + 0.0;
        assert!(s.contains(&format!("L{:.1},{top:.1}", LEFT + (WIDTH - LEFT - RIGHT))));
    }

    #[test]
    fn missing_samples_and_gaps_break_the_line() {
        let mut series = vec![
            point(0.1, 0, 1.0, 1.0),
            point(0.2, 0, 1.0, f64::NAN),
            point(0.3, 0, 1.0, 1.0),
            point(0.4, 0, 1.0, 1.0),
        ];
        // the flow is back after a pause
        series.push(point(2.0, 0, 1.0, 1.0));
        let s = svg(&series, 0.1, &[], "t");
        let paths: Vec<&str> = s.lines().filter(|l| l.starts_with("<path")).collect();
        // throughput: one break (the pause); queueing delay: two (NaN, pause)
        assert_eq!(paths[0].matches('M').count(), 2, "{}", paths[0]);
        assert_eq!(paths[1].matches('M').count(), 3, "{}", paths[1]);
        assert!(s.contains(">flow 0<"), "{s}");
    }

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
        assert_eq!(nice_ceiling(7.3), 10.0);
        assert_eq!(nice_ceiling(16.0), 20.0);
        assert_eq!(nice_ceiling(20.0), 20.0);
        assert_eq!(nice_ceiling(0.23), 0.25);
        assert_eq!(nice_ceiling(310.0), 500.0);
    }
}
