//! BBR v1 end to end on the simulated datapath, through the agent (portus, libccp datapaths
//! in the simulator, in-process channel IPC). Each scenario also runs with Cubic in BBR's
//! place; both are printed (`cargo test --release -p ccp-agent --test bbr -- --nocapture`).
//!
//! What BBR is expected to do, and so what is asserted: in PROBE_BW it paces at the
//! bottleneck rate and only the 1.25 phase (one min_rtt in eight) queues 0.25 BDP, which the
//! 0.75 phase drains, so the queue stays near a quarter BDP (10 ms at 40 ms) whatever the
//! buffer, where Cubic fills the buffer; its bandwidth filter forgets a higher rate after
//! 10 rounds (about a second at these RTTs) and finds a higher one at ×1.25 per gain cycle
//! (25 → 50 Mbit/s in about three cycles, one second).

use ccp_runtime::simrun::{run_sim, RunOptions, SimRun};
use ccp_sim::{Scenario, SimResults};

fn run(toml: &str) -> SimRun {
    let sc = Scenario::from_toml_str(toml, std::env::temp_dir())
        .unwrap_or_else(|e| panic!("bad scenario: {e}\n{toml}"));
    run_sim(&sc, &RunOptions::default()).expect("simulation runs")
}

/// Run the scenario template with `{alg}` replaced by BBR and by Cubic.
fn both(template: &str) -> (SimResults, SimResults) {
    let bbr = run(&template.replace("{alg}", "bbr"));
    let cubic = run(&template.replace("{alg}", "cubic"));
    for (name, r) in [("bbr", &bbr), ("cubic", &cubic)] {
        assert!(
            r.flow_algs.iter().all(|a| *a == name),
            "flows ran {:?}, expected {name}",
            r.flow_algs
        );
        assert!(
            r.results.flows.iter().all(|f| f.invoke_errors == 0),
            "{name}: fold program errors"
        );
    }
    (bbr.results, cubic.results)
}

/// `q`-quantile of the link's per-100 ms queueing-delay samples in `(t0, t1]` (ms).
fn queue_quantile(r: &SimResults, t0: f64, t1: f64, q: f64) -> f64 {
    // one point per flow per interval; the queue is the link's: take each interval once
    let mut seen = std::collections::BTreeSet::new();
    let mut v: Vec<f64> = r
        .series
        .iter()
        .filter(|p| p.t > t0 && p.t <= t1 && p.queue_delay_ms.is_finite())
        .filter(|p| seen.insert((p.t * 1e3).round() as i64))
        .map(|p| p.queue_delay_ms)
        .collect();
    quantile(&mut v, q)
}

/// Median pacing rate of flow 0 in `(t0, t1]` (Mbit/s), from the per-100 ms series.
fn median_rate(r: &SimResults, t0: f64, t1: f64) -> f64 {
    let mut v: Vec<f64> = r
        .series
        .iter()
        .filter(|p| p.flow == 0 && p.t > t0 && p.t <= t1)
        .map(|p| p.rate_mbps)
        .collect();
    quantile(&mut v, 0.5)
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1]
}

fn throughput(r: &SimResults, t0: f64, t1: f64) -> f64 {
    r.throughput_window(t0, t1).iter().map(|(_, v)| v).sum()
}

fn line(label: &str, r: &SimResults) -> String {
    let f = &r.flows[0];
    format!(
        "{label:<24} util {:.3}  queue p50 {:5.1} ms  p95 {:5.1} ms (per packet {:5.1} ms)  \
         loss {:.4}  retx {}  timeouts {}",
        r.utilization,
        queue_quantile(r, 5.0, r.duration_s, 0.5),
        queue_quantile(r, 5.0, r.duration_s, 0.95),
        r.queue_delay_p95_ms,
        f.loss_rate,
        f.retransmits,
        f.timeouts,
    )
}

/// One flow on 50 Mbit/s, 40 ms, a 1 BDP buffer, 30 s: BBR fills the link (≥ 0.9) with a
/// p95 queueing delay (over every delivered packet, start-up included) at most half of
/// Cubic's and at most half a BDP (20 ms: twice the 1.25 phase's quarter BDP). Its pacing
/// rate, the delivery-rate samples folded by the datapath, sits at the link rate.
#[test]
fn one_flow_fills_the_link_with_a_small_queue() {
    let t = "duration_s = 30\nseed = 1\n[link]\nrate_mbps = 50\nbuffer_bdp = 1.0\n\
             [[flow]]\nalg = \"{alg}\"\nrtt_ms = 40\n";
    let (bbr, cubic) = both(t);
    eprintln!("{}", line("1 BDP  bbr", &bbr));
    eprintln!("{}", line("1 BDP  cubic", &cubic));
    let rate = median_rate(&bbr, 5.0, 30.0);
    eprintln!("    bbr median pacing rate over [5, 30] s: {rate:.2} Mbit/s");
    assert!(bbr.utilization >= 0.9, "utilization {:.3}", bbr.utilization);
    let (pb, pc) = (bbr.queue_delay_p95_ms, cubic.queue_delay_p95_ms);
    assert!(
        pb <= 20.0 && pb <= 0.5 * pc,
        "queueing p95: bbr {pb:.1} ms, cubic {pc:.1} ms"
    );
    assert!(
        (45.0..=52.0).contains(&rate),
        "median pacing rate {rate:.2} Mbit/s on a 50 Mbit/s link"
    );
}

/// The same link with a 2 BDP buffer: BBR does not fill it. The median of the 100 ms
/// queueing-delay samples after start-up stays below 5 ms (an eighth of a BDP; most of the
/// cycle paces at the bottleneck rate over an empty queue), while Cubic's sits above 1 BDP.
#[test]
fn deep_buffer_keeps_the_median_queue_small() {
    let t = "duration_s = 30\nseed = 2\n[link]\nrate_mbps = 50\nbuffer_bdp = 2.0\n\
             [[flow]]\nalg = \"{alg}\"\nrtt_ms = 40\n";
    let (bbr, cubic) = both(t);
    eprintln!("{}", line("2 BDP  bbr", &bbr));
    eprintln!("{}", line("2 BDP  cubic", &cubic));
    let (mb, mc) = (
        queue_quantile(&bbr, 5.0, 30.0, 0.5),
        queue_quantile(&cubic, 5.0, 30.0, 0.5),
    );
    assert!(bbr.utilization >= 0.9, "utilization {:.3}", bbr.utilization);
    assert!(
        mb <= 5.0 && mb <= 0.25 * mc,
        "median queueing over [5, 30] s: bbr {mb:.1} ms, cubic {mc:.1} ms"
    );
}

/// Capacity 50 → 25 Mbit/s at 10 s and back to 50 at 20 s (40 ms, buffer 1 BDP at 50):
/// from 2 s after each step BBR's throughput is at least 0.9 of the new capacity until the
/// next step, and its pacing rate has followed the drop (median within ±20 % of 25 Mbit/s
/// over [13, 20] s). The queue is then held by the window, 2 BDP of the new rate, to one BDP
/// (40 ms; p95 of the 100 ms samples over [13, 20] s), where a BBR still at 50 Mbit/s, or
/// Cubic, keeps the buffer (80 ms) full. (BBR v1 drains a standing queue left by the drop
/// only through its 1 % pacing margin and PROBE_RTT, so not to its own 0.25 BDP at once.)
/// The flow's first PROBE_RTT falls at 10 s too (10 s after its first RTT sample).
#[test]
fn capacity_steps_are_followed_within_seconds() {
    let t = "duration_s = 30\nseed = 3\n[link]\nrate_mbps = 50\nbuffer_bdp = 1.0\n\
             rate_schedule = [{at_s = 10, rate_mbps = 25}, {at_s = 20, rate_mbps = 50}]\n\
             [[flow]]\nalg = \"{alg}\"\nrtt_ms = 40\n";
    let (bbr, cubic) = both(t);
    let mut failures = vec![];
    for (name, r) in [("bbr", &bbr), ("cubic", &cubic)] {
        eprintln!("{}", line(&format!("steps  {name}"), r));
        let down = throughput(r, 12.0, 20.0);
        let up = throughput(r, 22.0, 30.0);
        let rate = median_rate(r, 13.0, 20.0);
        let q95 = queue_quantile(r, 13.0, 20.0, 0.95);
        let (first_down, first_up) = (throughput(r, 10.0, 12.0), throughput(r, 20.0, 22.0));
        eprintln!(
            "    {name}: [10,12] {first_down:.2} Mbit/s, [12,20] {down:.2} Mbit/s (capacity 25), \
             pacing median [13,20] {rate:.2} Mbit/s, queue p95 [13,20] {q95:.1} ms; \
             [20,22] {first_up:.2} Mbit/s, [22,30] {up:.2} Mbit/s (capacity 50)"
        );
        if name == "bbr" {
            if down < 0.9 * 25.0 {
                failures.push(format!("{down:.2} Mbit/s over [12, 20] s (capacity 25)"));
            }
            if up < 0.9 * 50.0 {
                failures.push(format!("{up:.2} Mbit/s over [22, 30] s (capacity 50)"));
            }
            if !(20.0..=30.0).contains(&rate) {
                failures.push(format!(
                    "median pacing rate {rate:.2} Mbit/s over [13, 20] s"
                ));
            }
            if q95 > 40.0 {
                failures.push(format!("queue p95 {q95:.1} ms over [13, 20] s"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}
