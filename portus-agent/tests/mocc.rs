//! MOCC with the shipped model (`models/mocc.onnx`) on the simulated datapath: issue 5's
//! acceptance. Scenarios lie outside the training ranges (training: 1–8 Mbit/s, 10–200 ms
//! constant links, ATT LTE and T-Mobile UMTS traces; the LTE trace here is held out).
//!
//! The shipped model meets the latency criterion and the headline command; the tests it does
//! not meet yet stay ignored, each saying by how much (figures from the model in `models/`,
//! `cargo test --release -p ccp-agent --test mocc -- --include-ignored --nocapture`).
//!
//! To check a candidate without touching the checkout, point `CCP_MOCC_MODELS` at a directory
//! holding its `mocc.onnx` and `mocc.json` (a training run's `--out`), and `CCP_MOCC_CONFIG` at
//! a TOML file of `[algs.<name>]` knobs (as `ccp-agent --config`) to run the agent under other
//! knobs than its defaults; every test here, the headline command included, then uses them.

use std::path::{Path, PathBuf};
use std::process::Command;

use ccp_agent::agent::load_config;
use ccp_agent::simrun::{run_sim, IpcKind, RunOptions, SimRun};
use ccp_agent::AgentOptions;
use ccp_algs::{AlgsConfig, Preference};
use ccp_sim::Scenario;

/// The model directory: `CCP_MOCC_MODELS`, else the checkout's `models/`.
fn models() -> PathBuf {
    match std::env::var_os("CCP_MOCC_MODELS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models"),
    }
}

/// The knobs file named by `CCP_MOCC_CONFIG`, if any.
fn config_file() -> Option<PathBuf> {
    std::env::var_os("CCP_MOCC_CONFIG").map(PathBuf::from)
}

/// The algorithms' knobs the agent runs under: the defaults, or `CCP_MOCC_CONFIG`'s.
fn algs_config() -> AlgsConfig {
    match config_file() {
        Some(path) => load_config(&path).unwrap_or_else(|e| panic!("CCP_MOCC_CONFIG: {e}")),
        None => AlgsConfig::default(),
    }
}

fn run(text: &str, default_alg: &str) -> SimRun {
    run_with(text, default_alg, algs_config())
}

fn run_with(text: &str, default_alg: &str, algs: AlgsConfig) -> SimRun {
    let scenario = Scenario::from_toml_str(text, Path::new(".")).expect("scenario");
    let opts = RunOptions {
        agent: AgentOptions {
            default_alg: default_alg.into(),
            models: Some(models()),
            algs,
            ..Default::default()
        },
        ipc: IpcKind::Inline,
        ..Default::default()
    };
    run_sim(&scenario, &opts).expect("run")
}

fn one_flow(alg: &str, w: [f64; 3], rate: f64, rtt: f64, loss: f64, buffer_bdp: f64) -> String {
    format!(
        "duration_s = 30\nseed = 5\n[link]\nrate_mbps = {rate}\nbuffer_bdp = {buffer_bdp}\nloss = {loss}\n\
         [[flow]]\nalg = \"{alg}\"\nrtt_ms = {rtt}\nw = [{}, {}, {}]\n",
        w[0], w[1], w[2]
    )
}

/// (rate Mbit/s, RTT ms, loss, buffer in BDP): outside the training ranges.
const TEST_LINKS: [(f64, f64, f64, f64); 4] = [
    (10.0, 10.0, 0.0, 2.0),
    (20.0, 60.0, 0.0, 1.5),
    (35.0, 120.0, 0.0, 1.0),
    (50.0, 200.0, 0.0, 2.0),
];

#[test]
fn throughput_preference_fills_the_link() {
    for (rate, rtt, loss, buf) in TEST_LINKS {
        let r = run(
            &one_flow("mocc", [0.8, 0.1, 0.1], rate, rtt, loss, buf),
            "cubic",
        );
        let u = r.results.utilization;
        println!("w=<0.8,0.1,0.1> {rate} Mbps {rtt} ms: utilization {u:.3}");
        assert!(u >= 0.9, "{rate} Mbps / {rtt} ms: utilization {u}");
    }
}

#[test]
fn latency_preference_keeps_queues_at_a_third_of_cubics() {
    for (rate, rtt, loss, buf) in TEST_LINKS {
        let m = run(
            &one_flow("mocc", [0.1, 0.8, 0.1], rate, rtt, loss, buf),
            "cubic",
        );
        let c = run(
            &one_flow("cubic", [0.1, 0.8, 0.1], rate, rtt, loss, buf),
            "cubic",
        );
        let (qm, qc) = (m.results.queue_delay_p95_ms, c.results.queue_delay_p95_ms);
        println!(
            "w=<0.1,0.8,0.1> {rate} Mbps {rtt} ms: p95 queueing MOCC {qm:.1} ms (util {:.3}), Cubic {qc:.1} ms",
            m.results.utilization
        );
        assert!(
            qm <= qc / 3.0,
            "{rate} Mbps / {rtt} ms: MOCC {qm} ms vs Cubic {qc} ms"
        );
        // short queues by using the link, not by leaving it (the per-packet p95 of a flow
        // that starves itself is its start-up's)
        let u = m.results.utilization;
        assert!(u >= 0.5, "{rate} Mbps / {rtt} ms: utilization {u}");
    }
}

/// Spearman's rank correlation.
fn spearman(x: &[f64], y: &[f64]) -> f64 {
    fn ranks(v: &[f64]) -> Vec<f64> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
        let mut r = vec![0.0; v.len()];
        let mut i = 0;
        while i < idx.len() {
            let mut j = i;
            while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
                j += 1;
            }
            let avg = (i + j) as f64 / 2.0;
            for k in i..=j {
                r[idx[k]] = avg;
            }
            i = j + 1;
        }
        r
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    cov / (vx * vy).sqrt()
}

/// The held-out cellular trace (T-Mobile LTE, 16.7 Mbit/s mean; training used ATT LTE and
/// T-Mobile UMTS), 40 ms, a 1 BDP buffer.
fn held_out_trace(w: [f64; 3]) -> String {
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../datapath/sim/scenarios/traces/TMobile-LTE-short.down");
    format!(
        "duration_s = 30\nseed = 5\n[link]\ntrace = {:?}\nbuffer_bdp = 1.0\n\
         [[flow]]\nalg = \"mocc\"\nrtt_ms = 40\nw = [{}, {}, {}]\n",
        trace.display().to_string(),
        w[0],
        w[1],
        w[2]
    )
}

/// The 36 landmark preferences (step 1/10, no zero weight).
fn landmarks() -> Vec<[f64; 3]> {
    let mut v = vec![];
    for a in 1..=8 {
        for b in 1..=8 {
            let c = 10 - a - b;
            if (1..=8).contains(&c) {
                v.push([a as f64 / 10.0, b as f64 / 10.0, c as f64 / 10.0]);
            }
        }
    }
    v
}

/// Spearman(w_thr, throughput) and Spearman(w_lat, p95 queueing delay) over the 36
/// landmarks, one single-flow run each of the scenario `scenario(w)` builds.
fn landmark_spearman(scenario: impl Fn([f64; 3]) -> String) -> (f64, f64) {
    let (mut w_thr, mut w_lat, mut thr, mut qd) = (vec![], vec![], vec![], vec![]);
    for w in landmarks() {
        assert!(Preference::from_slice(&w).is_ok());
        let r = run(&scenario(w), "cubic");
        w_thr.push(w[0]);
        w_lat.push(w[1]);
        thr.push(r.results.flows[0].throughput_mbps);
        qd.push(r.results.flows[0].queue_delay_p95_ms);
    }
    assert_eq!(thr.len(), 36);
    (spearman(&w_thr, &thr), spearman(&w_lat, &qd))
}

/// Over the 36 landmarks, on each acceptance link: throughput rises with `w_thr` and p95
/// queueing delay falls with `w_lat` (Spearman ≥ 0.8 each). A latency-leaning preference
/// leaves headroom (20 Mbit/s, 60 ms: 15.0 Mbit/s at <0.1,0.8,0.1>, 19.2 at <0.8,0.1,0.1>)
/// and keeps a shorter standing queue (1.8 vs 68 ms p95).
#[test]
fn behaviour_follows_the_preference_over_the_36_landmarks() {
    for (rate, rtt, loss, buf) in TEST_LINKS {
        let (s_thr, s_lat) = landmark_spearman(|w| one_flow("mocc", w, rate, rtt, loss, buf));
        println!(
            "{rate} Mbps {rtt} ms: Spearman(w_thr, throughput) = {s_thr:.3}; \
             Spearman(w_lat, queueing delay) = {s_lat:.3}"
        );
        assert!(
            s_thr >= 0.8,
            "{rate} Mbps / {rtt} ms: throughput vs w_thr {s_thr}"
        );
        assert!(
            s_lat <= -0.8,
            "{rate} Mbps / {rtt} ms: queueing vs w_lat {s_lat}"
        );
    }
}

/// The same on the held-out cellular trace, where a varying capacity makes throughput cost
/// queueing. The p95 saturates near the buffer for every `w_lat` ≤ 0.5 (67–80 ms): the
/// capacity drops fill it whatever the standing queue was.
#[test]
#[ignore = "shipped model: on the cellular trace Spearman 0.905 for throughput but -0.435 for \
            queueing (needs -0.8; -0.640 without the agent's share guard)"]
fn behaviour_follows_the_preference_on_the_cellular_trace() {
    let (s_thr, s_lat) = landmark_spearman(held_out_trace);
    println!(
        "Spearman(w_thr, throughput) = {s_thr:.3}; Spearman(w_lat, queueing delay) = {s_lat:.3}"
    );
    assert!(s_thr >= 0.8, "throughput does not rise with w_thr: {s_thr}");
    assert!(
        s_lat <= -0.8,
        "queueing delay does not fall with w_lat: {s_lat}"
    );
}

/// Three flows with the same preference, started 5 s apart, share a 20 Mbit/s, 40 ms link
/// (1.5 BDP buffer): Jain's index over 20–45 s (all three running, past start-up).
/// Relies on the default additive increase (algs/src/mocc.rs, "Fairness"): 0.80 without it.
#[test]
fn same_preference_flows_share_fairly() {
    let text = "duration_s = 45\nseed = 9\n[link]\nrate_mbps = 20\nbuffer_bdp = 1.5\n\
        [[flow]]\nalg = \"mocc\"\nrtt_ms = 40\nw = [0.6, 0.3, 0.1]\n\
        [[flow]]\nalg = \"mocc\"\nrtt_ms = 40\nstart_s = 5\nw = [0.6, 0.3, 0.1]\n\
        [[flow]]\nalg = \"mocc\"\nrtt_ms = 40\nstart_s = 10\nw = [0.6, 0.3, 0.1]\n";
    let r = run(text, "cubic");
    let jain = r.results.jain_window(20.0, 45.0).expect("jain");
    println!("three MOCC flows, same w: Jain {jain:.3} over 20-45 s");
    assert!(jain >= 0.9, "jain {jain}");
}

/// Three flows with different preferences (throughput-, latency- and loss-leaning) on the
/// same link: none gets less than 0.2 of a fair share over 15–40 s, whether they start
/// together or in any of three orders within 0.7 s. The policy alone starves the latency
/// flow (0.017 of a fair share); the agent's rate floor and share probe lift it
/// (algs/src/mocc.rs, "Fairness"). A latecomer's start-up ends early with a small `Ĉ`: before
/// the probe distrusted that estimate the staggered orders gave 0.12–0.13.
#[test]
fn different_preference_flows_all_get_a_share() {
    for starts in [
        [0.0, 0.0, 0.0],
        [0.0, 0.3, 0.6],
        [0.5, 0.2, 0.0],
        [0.1, 0.7, 0.35],
    ] {
        let mut text =
            "duration_s = 40\nseed = 9\n[link]\nrate_mbps = 20\nbuffer_bdp = 1.5\n".to_string();
        for (w, s) in ["[0.8, 0.1, 0.1]", "[0.1, 0.8, 0.1]", "[0.3, 0.3, 0.4]"]
            .iter()
            .zip(starts)
        {
            text += &format!("[[flow]]\nalg = \"mocc\"\nrtt_ms = 40\nstart_s = {s}\nw = {w}\n");
        }
        let r = run(&text, "cubic");
        let shares = r.results.throughput_window(15.0, 40.0);
        let total: f64 = shares.iter().map(|(_, v)| v).sum();
        let fair = total / shares.len() as f64;
        println!(
            "three MOCC flows, different w, starts {starts:?} s: {shares:?} Mbit/s (fair share {fair:.2})"
        );
        for (i, v) in shares {
            assert!(
                v >= 0.2 * fair,
                "starts {starts:?}: flow {i} gets {v} of a fair share {fair}"
            );
        }
    }
}

/// p95 of the queueing delay the flows' packets met over `t0`–`t1` s (ms).
fn queue_p95_window(r: &SimRun, t0: f64, t1: f64) -> f64 {
    let mut q: Vec<f64> = r
        .results
        .series
        .iter()
        .filter(|p| p.t > t0 && p.t <= t1 && p.queue_delay_ms.is_finite())
        .map(|p| p.queue_delay_ms)
        .collect();
    assert!(!q.is_empty(), "no queue samples in {t0}-{t1} s");
    q.sort_by(f64::total_cmp);
    q[(0.95 * (q.len() - 1) as f64) as usize]
}

/// Crowds of one preference that keeps a standing queue, started 0.5 s apart on 40 ms
/// (1.5 BDP): once they have converged (15–40 s) the share probe must not hold a queue the
/// policy alone would not (p95 at most 1.5× the probe-off run's plus 5 ms). Each flow sends
/// below half the `Ĉ` it measured alone and sees a standing queue, so all of them run
/// trials, and the neighbours make room for a trial's push, so the readings come out as low
/// as a starved flow's; before the local peers' veto the guard locked on and the buffer
/// stayed full (60 ms against 16, 36 and 19 ms without the probe). The veto (the agent's
/// MOCC flows fill the link and this one has half their mean throughput or more) keeps the
/// guard off (algs/src/mocc.rs, "Fairness", "Crowds").
#[test]
fn same_preference_crowds_keep_the_policys_queue() {
    for (n, rate, w) in [
        (6, 50, "[0.4, 0.5, 0.1]"),
        (8, 40, "[0.6, 0.3, 0.1]"),
        (10, 30, "[0.3, 0.3, 0.4]"),
    ] {
        let mut text =
            format!("duration_s = 40\nseed = 4\n[link]\nrate_mbps = {rate}\nbuffer_bdp = 1.5\n");
        for i in 0..n {
            let start = 0.5 * f64::from(i);
            text += &format!("[[flow]]\nalg = \"mocc\"\nrtt_ms = 40\nstart_s = {start}\nw = {w}\n");
        }
        let on = queue_p95_window(&run(&text, "cubic"), 15.0, 40.0);
        let mut off = algs_config();
        off.mocc.share_probe_every_mis = 0;
        let off = queue_p95_window(&run_with(&text, "cubic", off), 15.0, 40.0);
        println!(
            "{n} MOCC flows {w} on {rate} Mbit/s: p95 queue over 15-40 s {on:.1} ms, {off:.1} ms without the share probe"
        );
        assert!(
            on <= 1.5 * off + 5.0,
            "{n} x {w}: p95 {on} ms vs {off} ms without the probe"
        );
    }
}

/// The shipped model was trained under the dynamics the agent runs by default: the additive
/// increase in its card's `mocc_knobs` equals `MoccConfig::default()`'s (a card without the
/// knobs predates them: eq. 1 alone, κ = 0; one without the gate added the term to every
/// decision, −5); the cap and the gate matter only when κ > 0. (Under `CCP_MOCC_CONFIG`,
/// the knobs the tests run under.)
#[test]
fn shipped_model_was_trained_under_the_default_knobs() {
    let text = std::fs::read_to_string(models().join("mocc.json")).expect("models/mocc.json");
    let card: serde_json::Value = serde_json::from_str(&text).expect("card JSON");
    let knobs = &card["training"]["scenario_ranges"]["mocc_knobs"];
    let d = algs_config().mocc;
    let kappa = knobs["additive_increase_pkts"].as_f64().unwrap_or(0.0);
    assert_eq!(kappa, d.additive_increase_pkts, "card {knobs}");
    if kappa > 0.0 {
        assert_eq!(
            knobs["additive_increase_cap"].as_f64(),
            Some(d.additive_increase_cap),
            "card {knobs}"
        );
        let every_decision = -f64::from(ccp_algs::mocc::ACTION_BOUND);
        let gate = knobs["additive_increase_min_action"]
            .as_f64()
            .unwrap_or(every_decision);
        assert_eq!(gate, d.additive_increase_min_action, "card {knobs}");
    }
}

/// The headline command from a checkout, as a user types it: the default `models/` directory,
/// a shipped scenario whose flow runs the agent's default algorithm (the ATT LTE trace).
/// Checked against Cubic on the same scenario: the shipped model must use the link (at least
/// half of Cubic's throughput) at a lower p95 queueing delay than Cubic's.
#[test]
fn headline_command_runs_the_shipped_model() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    // as typed: no --models / --config unless a candidate is being checked
    let mut common: Vec<std::ffi::OsString> = vec![];
    if let Some(dir) = std::env::var_os("CCP_MOCC_MODELS") {
        common.extend(["--models".into(), dir]);
    }
    if let Some(path) = config_file() {
        common.extend(["--config".into(), path.into_os_string()]);
    }
    let run = |args: &[&str]| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
            .current_dir(&root)
            .args(args)
            .args(&common)
            .args(["--sim", "datapath/sim/scenarios/cellular.toml", "--json"])
            .output()
            .expect("run ccp-agent");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        serde_json::from_slice(&out.stdout).expect("--json output")
    };
    let m = run(&["--alg", "mocc", "--w", "0.4,0.5,0.1"]);
    let c = run(&["--alg", "cubic"]);
    let flow = &m["flows"][0];
    assert_eq!(flow["alg"], "mocc", "{m}");
    assert_eq!(
        flow["w"],
        serde_json::json!([0.4, 0.5, 0.1]),
        "--w reaches the flow: {m}"
    );
    assert_eq!(m["agent"]["messages_rejected"], 0, "{m}");
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let (tm, tc) = (
        f(flow, "throughput_mbps"),
        f(&c["flows"][0], "throughput_mbps"),
    );
    let (qm, qc) = (f(&m, "queue_delay_p95_ms"), f(&c, "queue_delay_p95_ms"));
    println!("cellular.toml: MOCC <0.4,0.5,0.1> {tm:.2} Mbit/s, p95 queue {qm:.1} ms; Cubic {tc:.2} Mbit/s, {qc:.1} ms");
    assert!(tm >= 0.5 * tc, "MOCC {tm} Mbit/s vs Cubic {tc}");
    assert!(qm < qc, "MOCC p95 queueing {qm} ms vs Cubic {qc}");
}
