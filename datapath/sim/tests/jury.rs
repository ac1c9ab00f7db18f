//! Jury's share estimate (eq. 5 from the flow's own trials) on the packet simulator, where a
//! window change reaches the throughput an RTT later, through a queue and ACK clocking, not
//! within the interval as in the fluid model of `algs/src/jury/tests.rs`.
//!
//! Each flow's window is held where the test puts it (the policy's range is `(0, 0)` and
//! exploration is off), so its true share is known: 0 on a link it does not fill, and
//! `w_i / Σ w` at a standing queue (window-limited flows see one RTT). The thresholds were
//! written before any figure of the estimator was seen (docs/algorithms/jury.md, "The
//! estimator on packets").

use std::sync::{Arc, Mutex};

use ccp_algs::jury::{JuryConfig, JuryCore, Probe};
use ccp_algs::{Action, Algorithm, Controller, FlowInfo, FlowMetrics, FoldProgram, Interval};
use ccp_algs::{LearnedCore, Registry};
use ccp_runtime::simrun::{run_sim_with_registry, RunOptions};
use ccp_sim::Scenario;

/// One flow held at a fixed window, logging its share estimate after every report.
struct Held {
    core: JuryCore,
    obs: Vec<f32>,
    log: Arc<Mutex<Vec<Vec<f64>>>>,
    index: usize,
}

impl Controller for Held {
    fn on_report(&mut self, iv: &Interval) -> Action {
        let mut mask = [0.0f32; 0];
        let a = if self.core.observe(iv, &mut self.obs, &mut mask) {
            self.core.apply(&[0.0, 0.0])
        } else {
            self.core.hold()
        };
        if let Ok(mut log) = self.log.lock() {
            log[self.index].push(self.core.ratio_bw());
        }
        a
    }
    fn initial_action(&mut self) -> Action {
        self.core.initial_action()
    }
    fn metrics(&self) -> &FlowMetrics {
        self.core.metrics()
    }
}

/// Jury flows whose windows (packets) are `windows[i]` for the `i`-th flow to start.
struct HeldJury {
    config: JuryConfig,
    windows: Vec<f64>,
    started: Mutex<usize>,
    log: Arc<Mutex<Vec<Vec<f64>>>>,
}

impl Algorithm for HeldJury {
    fn name(&self) -> &'static str {
        "jury"
    }
    fn program(&self) -> FoldProgram {
        ccp_algs::jury::Jury::new(self.config.clone()).program()
    }
    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        let index = {
            let mut n = self.started.lock().expect("not poisoned");
            *n += 1;
            *n - 1
        };
        let config = JuryConfig {
            initial_cwnd_pkts: Some(self.windows[index]),
            ..self.config.clone()
        };
        let core = JuryCore::new(config, info);
        let obs = vec![0.0; core.spec().obs_dim];
        Box::new(Held {
            core,
            obs,
            log: Arc::clone(&self.log),
            index,
        })
    }
}

/// The mean share estimate of each flow over the second half of its reports, with windows
/// `bdps` (in BDPs of a 100 Mbit/s link at `rtt_ms`), all flows starting together.
fn estimates(config: &JuryConfig, rtt_ms: f64, bdps: &[f64]) -> Vec<f64> {
    let bdp_pkts = 100e6 / 8.0 * rtt_ms / 1e3 / 1500.0;
    let flows: String = bdps
        .iter()
        .map(|_| format!("[[flow]]\nalg = \"jury\"\nrtt_ms = {rtt_ms}\n"))
        .collect();
    let toml = format!(
        "duration_s = 24\nseed = 1\n[link]\nrate_mbps = 100\nbuffer_bdp = 2.0\n{flows}"
    );
    let sc = Scenario::from_toml_str(&toml, ".").expect("a valid scenario");
    let log = Arc::new(Mutex::new(vec![Vec::new(); bdps.len()]));
    let mut r = Registry::new();
    r.register(Arc::new(HeldJury {
        config: config.clone(),
        windows: bdps.iter().map(|b| b * bdp_pkts).collect(),
        started: Mutex::new(0),
        log: Arc::clone(&log),
    }));
    let opts = RunOptions {
        agent: ccp_runtime::AgentOptions {
            default_alg: "jury".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let run = run_sim_with_registry(&sc, &opts, r).expect("the simulation runs");
    assert_eq!(run.results.flows.len(), bdps.len());
    let log = log.lock().expect("not poisoned").clone();
    log.iter()
        .map(|v| {
            assert!(v.len() > 200, "{} reports", v.len());
            let tail = &v[v.len() / 2..];
            tail.iter().sum::<f64>() / tail.len() as f64
        })
        .collect()
}

fn held(probe: Probe) -> JuryConfig {
    JuryConfig {
        probe,
        explore_band: 0.0,
        min_delta: 0.0,
        min_pkts: 0,
        ..Default::default()
    }
}

/// The cases and their true shares: alone below capacity (0), alone above it (1), two equal
/// flows (½ each), two at 2:1 (⅔, ⅓).
const CASES: [(&[f64], &[f64]); 4] = [
    (&[0.6], &[0.0]),
    (&[1.5], &[1.0]),
    (&[0.75, 0.75], &[0.5, 0.5]),
    (&[1.0, 0.5], &[2.0 / 3.0, 1.0 / 3.0]),
];

/// Within 0.1 of the true share, in every case, at 30, 60, 120 and 210 ms.
#[test]
fn trials_read_the_true_share_on_packets() {
    let config = held(Probe::Trial);
    let mut bad = Vec::new();
    for rtt in [30.0, 60.0, 120.0, 210.0] {
        for (bdps, truth) in CASES {
            let got = estimates(&config, rtt, bdps);
            for (g, t) in got.iter().zip(truth) {
                if (g - t).abs() > 0.1 {
                    bad.push(format!("{rtt} ms, windows {bdps:?} BDP: {g:.3} for {t:.3}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The figures of every probe (`cargo test -p ccp-sim --release --test jury -- --ignored
/// --nocapture`).
#[test]
#[ignore]
fn jury_packet_estimate_table() {
    for probe in [Probe::Trial, Probe::Rate] {
        for rtt in [30.0, 60.0, 120.0, 210.0] {
            for (bdps, truth) in CASES {
                let got = estimates(&held(probe), rtt, bdps);
                println!("{probe:?} {rtt} ms {bdps:?}: {got:.3?} (true {truth:.3?})");
            }
        }
    }
}
