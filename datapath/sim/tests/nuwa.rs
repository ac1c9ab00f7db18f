//! Nuwa-RL's fold-program law on simulated links, with a fixed gain (a bare Nuwa: its policy
//! answers ×1 at every decision, so `k` stays `k_init`): the law alone has to hold the
//! target queueing delay, which is issue 22's acceptance shape for the delay target.

use std::sync::Arc;

use ccp_algs::nuwa::{Nuwa, NuwaConfig};
use ccp_algs::{Algorithm, Controller, FlowInfo, FoldProgram, Registry};
use ccp_runtime::simrun::{run_sim_with_registry, RunOptions, SimRun};
use ccp_sim::Scenario;

fn run(scenario: &str, config: NuwaConfig) -> SimRun {
    run_alg(scenario, Arc::new(Nuwa::new(config)))
}

fn run_alg(scenario: &str, alg: Arc<dyn Algorithm>) -> SimRun {
    let sc = Scenario::from_toml_str(scenario, ".").expect("a valid scenario");
    let mut r = Registry::new();
    r.register(alg);
    let opts = RunOptions {
        agent: ccp_runtime::AgentOptions {
            default_alg: "nuwa".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    run_sim_with_registry(&sc, &opts, r).expect("the simulation runs")
}

/// A constant 24 Mbit/s link, 40 ms, a buffer of 4 BDPs (no loss at these targets).
const CONSTANT: &str = "duration_s = 30\nseed = 1\n[link]\nrate_mbps = 24\nbuffer_pkts = 320\n\
                        [[flow]]\nalg = \"nuwa\"\nrtt_ms = 40\n";

/// The median queueing delay of the flow's packets after `from_s` (the series' per-interval
/// means, so slow start is left out), ms.
fn median_qdelay_after(run: &SimRun, from_s: f64) -> f64 {
    let mut q: Vec<f64> = run
        .results
        .series
        .iter()
        .filter(|p| p.t >= from_s && p.queue_delay_ms.is_finite())
        .map(|p| p.queue_delay_ms)
        .collect();
    assert!(q.len() > 100, "{} samples", q.len());
    q.sort_by(f64::total_cmp);
    q[q.len() / 2]
}

#[test]
fn the_law_holds_the_target_queueing_delay_for_two_targets() {
    for (target_ms, k) in [(10.0, 1.0), (30.0, 1.0)] {
        let cfg = NuwaConfig {
            target_delay_ms: target_ms,
            k_init: k,
            ..Default::default()
        };
        let run = run(CONSTANT, cfg);
        let f = &run.results.flows[0];
        let whole = f.queue_delay_p50_ms;
        let late = median_qdelay_after(&run, 5.0);
        eprintln!(
            "T_d {target_ms} ms, k {k}: median qdelay {whole:.2} ms (after 5 s {late:.2} ms), \
             p95 {:.2} ms, utilization {:.3}, lost {}, invoke errors {}",
            f.queue_delay_p95_ms, f.utilization, f.declared_lost, f.invoke_errors
        );
        assert_eq!(f.invoke_errors, 0, "an ACK aborted the program");
        assert_eq!(run.records[0].alg, "nuwa");
        assert!(
            (whole - target_ms).abs() <= 0.3 * target_ms,
            "T_d {target_ms} ms: median queueing delay {whole} ms"
        );
        assert!(
            (late - target_ms).abs() <= 0.3 * target_ms,
            "T_d {target_ms} ms: median queueing delay after 5 s {late} ms"
        );
        // a standing queue of T_d keeps the link busy
        assert!(f.utilization > 0.9, "{f:?}");
        assert_eq!(f.declared_lost, 0, "{f:?}");
    }
}

/// Nuwa whose program starts with one target (its registers' initial values) while its flows'
/// controllers ask for another through their control registers.
struct Split {
    program: Nuwa,
    flows: Nuwa,
}

impl Algorithm for Split {
    fn name(&self) -> &'static str {
        "nuwa"
    }
    fn program(&self) -> FoldProgram {
        self.program.program()
    }
    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        self.flows.new_flow(info)
    }
}

/// The agent's register updates reach the program through portus: the target the
/// controller sends wins over the program's initial one.
#[test]
fn the_target_the_agent_sends_is_the_one_the_datapath_holds() {
    let with = |ms: f64| {
        Nuwa::new(NuwaConfig {
            target_delay_ms: ms,
            ..Default::default()
        })
    };
    let run = run_alg(
        CONSTANT,
        Arc::new(Split {
            program: with(30.0),
            flows: with(10.0),
        }),
    );
    let f = &run.results.flows[0];
    assert_eq!(f.invoke_errors, 0);
    assert!(
        (f.queue_delay_p50_ms - 10.0).abs() <= 3.0,
        "median queueing delay {} ms",
        f.queue_delay_p50_ms
    );
}

// ---- the receiver-side form (`receiver = "nuwa"`) ------------------------------------------

fn at_the_receiver(scenario: &str) -> String {
    format!("{scenario}receiver = \"nuwa\"\n")
}

/// The paper's deployment: the law at the receiver sets the advertised window from the
/// one-way delay; the target comes from the registers the agent writes (the receiver starts
/// with the default 20 ms, so neither target below is held unless the agent's value arrives).
#[test]
fn at_the_receiver_the_law_holds_the_target_for_two_targets() {
    for target_ms in [10.0, 30.0] {
        let cfg = NuwaConfig {
            target_delay_ms: target_ms,
            ..Default::default()
        };
        let run = run(&at_the_receiver(CONSTANT), cfg);
        let f = &run.results.flows[0];
        let (whole, late) = (f.queue_delay_p50_ms, median_qdelay_after(&run, 5.0));
        eprintln!(
            "receiver side, T_d {target_ms} ms: median qdelay {whole:.2} ms (after 5 s \
             {late:.2} ms), p95 {:.2} ms, utilization {:.3}, lost {}",
            f.queue_delay_p95_ms, f.utilization, f.declared_lost
        );
        assert_eq!(f.invoke_errors, 0);
        for m in [whole, late] {
            assert!(
                (m - target_ms).abs() <= 0.3 * target_ms,
                "T_d {target_ms} ms: median queueing delay {m} ms"
            );
        }
        assert!(f.utilization > 0.9, "{f:?}");
        assert_eq!(f.declared_lost, 0, "{f:?}");
        assert!(f.receiver_limited.is_some(), "{f:?}");
    }
}

/// A program that keeps a fixed window of 200 packets and declares Nuwa's control registers
/// (so a Nuwa controller's writes are valid for it) but never reads them.
fn fixed_window_program() -> FoldProgram {
    use ccp_algs::nuwa::core::reg;
    use ccp_algs::signals::{fields, ProgramBuilder};
    let mut b = ProgramBuilder::new("fixed_window", 10_000).fields(&[fields::ACKED_BYTES]);
    for name in reg::ALL {
        b = b.control(reg::short(name), 1);
    }
    b.after("  (:= Cwnd 300000)\n").build()
}

struct FixedWindow;

impl Algorithm for FixedWindow {
    fn name(&self) -> &'static str {
        "nuwa"
    }
    fn program(&self) -> FoldProgram {
        fixed_window_program()
    }
    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Nuwa::new(NuwaConfig {
            target_delay_ms: 10.0,
            ..Default::default()
        })
        .new_flow(info)
    }
}

/// What limits the sender is the receiver's window: a sender whose own window would keep
/// 120 packets (60 ms) queued is held at the 10 ms target once its receiver runs the law.
#[test]
fn the_receivers_window_limits_a_sender_that_would_fill_the_queue() {
    let alone = run_alg(CONSTANT, Arc::new(FixedWindow));
    let held = run_alg(&at_the_receiver(CONSTANT), Arc::new(FixedWindow));
    let (a, h) = (&alone.results.flows[0], &held.results.flows[0]);
    eprintln!(
        "fixed 200-packet window: median qdelay {:.2} ms alone, {:.2} ms with the receiver \
         (utilization {:.3}, {:.3})",
        a.queue_delay_p50_ms, h.queue_delay_p50_ms, a.utilization, h.utilization
    );
    assert!(a.queue_delay_p50_ms > 50.0, "{a:?}");
    assert!((h.queue_delay_p50_ms - 10.0).abs() <= 3.0, "{h:?}");
    assert!(h.utilization > 0.9, "{h:?}");
    // the results say who limited whom
    assert_eq!(a.receiver_limited, None);
    assert!(h.receiver_limited.is_some_and(|s| s > 0.95), "{h:?}");
}
