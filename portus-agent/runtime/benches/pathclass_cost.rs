//! The path classifier's cost per report (issue 43): `PathClass::observe` as a `ccp_auto`
//! flow's every report runs it, with the shipped table's classifier (200 ms bins, a 6 s
//! window of 30 bins: a bin closes every 20 reports at 10 ms each, and from 10 s on every
//! closed bin computes the six features and the score).
//!
//! `cargo bench -p ccp-runtime --bench pathclass_cost`. Prints the mean, p50, p99 and max per
//! report (ns), and the same for reports that close a bin (the expensive ones: quartiles of
//! 30 values, twice).

use std::time::Instant;

use ccp_algs::Interval;
use ccp_runtime::flows::pathclass::{Classifier, PathClass, FEATURES};

fn classifier() -> Classifier {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/portfolio.json");
    let shipped = std::fs::read_to_string(&root)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| serde_json::from_value::<Classifier>(v["classifier"].clone()).ok());
    shipped.unwrap_or(Classifier {
        bin_ms: 200.0,
        window_s: 6.0,
        min_s: 10.0,
        hold_s: 3.0,
        features: FEATURES.iter().map(|s| s.to_string()).collect(),
        weights: vec![1.0; FEATURES.len()],
        bias: -3.0,
        by_alg: Default::default(),
        above: "cellular".into(),
        below: "links".into(),
    })
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p) as usize]
}

fn main() {
    let c = classifier();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut all = Vec::with_capacity(200_000);
    let mut closing = Vec::new();
    let mut decided = 0;
    for _flow in 0..20 {
        let mut p = PathClass::new(c.clone(), 1448);
        // 40 s of 10 ms reports on a path whose rate and RTT wander
        for _ in 0..4_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let iv = Interval {
                acked_bytes: 40_000 + x % 30_000,
                rtt_min_us: Some(40_000 + x % 5_000),
                rtt_mean_us: Some(45_000.0 + (x % 20_000) as f64),
                rtt_samples: 20,
                lost_pkts: u64::from(x.is_multiple_of(97)),
                interval_us: 10_000,
                ..Default::default()
            };
            let before = p.meter.elapsed_s();
            let t = Instant::now();
            let r = std::hint::black_box(p.observe(std::hint::black_box(&iv), "bbr"));
            let ns = t.elapsed().as_nanos() as u64;
            decided += usize::from(r.is_some());
            all.push(ns);
            if (p.meter.elapsed_s() * 5.0).floor() > (before * 5.0).floor() && before >= c.min_s {
                closing.push(ns);
            }
        }
    }
    let mean = all.iter().sum::<u64>() as f64 / all.len() as f64;
    let n = all.len();
    println!(
        "pathclass observe, {n} reports: mean {mean:.0} ns, p50 {} ns, p99 {} ns, max {} ns",
        pct(&mut all, 0.5),
        pct(&mut all, 0.99),
        pct(&mut all, 1.0)
    );
    let m = closing.len();
    println!(
        "  reports that close a bin after min_s ({m}): p50 {} ns, p99 {} ns; classes decided {decided}",
        pct(&mut closing, 0.5),
        pct(&mut closing, 0.99)
    );
}
