//! The bottleneck's in-network statistics (`[netstats]`, Owl's PNC and PNA) as the flows that
//! ask for them receive them through the agent: paced senders of known rates on a constant
//! link, where eq. 4 and eq. 5 have one right answer.

use std::sync::{Arc, Mutex};

use ccp_algs::netstats::NetStats;
use ccp_algs::signals::{fields, ProgramBuilder};
use ccp_algs::Registry;
use ccp_algs::{Action, Algorithm, Controller, FlowInfo, FlowMetrics, FoldProgram, Interval};
use ccp_runtime::simrun::{run_sim_with_registry, RunOptions};
use ccp_sim::Scenario;

type Seen = Arc<Mutex<Vec<Option<NetStats>>>>;

/// A paced sender that records every statistics call it gets.
#[derive(Debug, Clone)]
struct Probe {
    rate_bps: u64,
    wants: bool,
    seen: Seen,
}

struct ProbeFlow {
    p: Probe,
    metrics: FlowMetrics,
}

impl Algorithm for Probe {
    fn name(&self) -> &'static str {
        "probe"
    }

    fn program(&self) -> FoldProgram {
        ProgramBuilder::new("probe_prog", 10_000)
            .fields(&[fields::ACKED_BYTES, fields::RTT_MIN_US])
            .build()
    }

    fn new_flow(&self, _info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(ProbeFlow {
            p: self.clone(),
            metrics: FlowMetrics::default(),
        })
    }
}

impl ProbeFlow {
    fn action(&self) -> Action {
        Action {
            cwnd_bytes: Some(1_000_000),
            rate_bps: Some(self.p.rate_bps),
            report_interval_us: None,
        }
    }
}

impl Controller for ProbeFlow {
    fn on_report(&mut self, iv: &Interval) -> Action {
        self.metrics.observe(iv);
        self.action()
    }

    fn initial_action(&mut self) -> Action {
        self.action()
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }

    fn wants_network_stats(&self) -> bool {
        self.p.wants
    }

    fn network_stats(&mut self, s: Option<&NetStats>) {
        self.p.seen.lock().unwrap().push(s.copied());
    }
}

/// 12 Mbit/s (1000 packets/s), a 100-packet buffer, one probe flow, `netstats` appended.
fn scenario(netstats: &str) -> Scenario {
    let text = format!(
        "duration_s = 5\n[link]\nrate_mbps = 12\nbuffer_pkts = 100\n\
         [[flow]]\nrtt_ms = 20\n{netstats}"
    );
    let mut sc = Scenario::from_toml_str(&text, ".").unwrap();
    // files name the portfolio's algorithms only; a scenario built in code may name ours
    sc.flows[0].alg = Some("probe".into());
    sc.validate().unwrap();
    sc
}

/// Run one probe flow at `rate_bps`; what it was handed.
fn run(sc: &Scenario, rate_bps: u64, wants: bool) -> Vec<Option<NetStats>> {
    let seen = Seen::default();
    let mut r = Registry::new();
    r.register(Arc::new(Probe {
        rate_bps,
        wants,
        seen: seen.clone(),
    }));
    let opts = RunOptions {
        agent: ccp_runtime::AgentOptions {
            default_alg: "probe".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let run = run_sim_with_registry(sc, &opts, r).unwrap();
    assert_eq!(run.flow_algs, ["probe"]);
    let v = seen.lock().unwrap().clone();
    v
}

#[test]
fn half_load_reads_half_the_capacity_spare_and_no_congestion() {
    // 6 Mbit/s paced into 12 Mbit/s: every packet leaves before the next arrives
    let seen = run(&scenario("[netstats]\nknown_share = 0.5\n"), 750_000, true);
    // one sample per simulated second, each handed over once, in order (the 5 s sample
    // comes after the last report)
    let seqs: Vec<u64> = seen.iter().flatten().map(|s| s.seq()).collect();
    assert_eq!(seqs, [1, 2, 3, 4], "{seen:?}");
    for s in seen.iter().flatten() {
        assert!(s.pnc_pkts() <= 2.0, "{s:?}");
        assert!((s.pna() - 0.5).abs() < 0.01, "{s:?}");
        assert_eq!(s.known_share(), 0.5);
        assert_eq!(s.age_us(), 0);
    }
}

#[test]
fn overload_reads_the_excess_as_congestion_and_nothing_spare() {
    // 24 Mbit/s (2000 packets/s) into 1000 packets/s: 1000 a second more in than out
    let seen = run(&scenario("[netstats]\n"), 3_000_000, true);
    let s: Vec<NetStats> = seen.iter().flatten().copied().collect();
    assert_eq!(s.len(), 4, "{seen:?}");
    // the first second includes the start (the link idles until the first packets arrive)
    assert!(s[0].pnc_pkts() > 950.0 && s[0].pna() < 0.02, "{:?}", s[0]);
    for x in &s[1..] {
        assert!((x.pnc_pkts() - 1000.0).abs() <= 5.0, "{x:?}");
        assert!(x.pna() <= 0.01, "{x:?}");
        assert_eq!(x.known_share(), 1.0);
    }
}

#[test]
fn no_statistics_without_netstats_or_for_flows_that_do_not_ask() {
    assert!(run(&scenario(""), 750_000, true).is_empty());
    assert!(run(&scenario("[netstats]\n"), 750_000, false).is_empty());
}

#[test]
fn a_shorter_period_samples_more_often() {
    let seen = run(&scenario("[netstats]\nperiod_s = 0.25\n"), 750_000, true);
    let n = seen.iter().flatten().count();
    assert!((18..=19).contains(&n), "{n}: {seen:?}");
    for s in seen.iter().flatten() {
        assert!((s.pna() - 0.5).abs() < 0.02, "{s:?}");
    }
}

/// A bare Owl (no model: every decision is "+0 packets") on a real bottleneck with
/// statistics: slow start to the first loss, Cubic's 0.7 cut, then a window that no longer
/// moves once it fits the path.
#[test]
fn a_bare_owl_slow_starts_cuts_and_then_holds_its_window() {
    let sc = Scenario::from_toml_str(
        "duration_s = 10\n[link]\nrate_mbps = 12\nbuffer_pkts = 40\n\
         [[flow]]\nalg = \"owl\"\nrtt_ms = 40\n[netstats]\n",
        ".",
    )
    .unwrap();
    let mut r = Registry::new();
    r.register(Arc::new(ccp_algs::owl::Owl::default()));
    let opts = RunOptions {
        agent: ccp_runtime::AgentOptions {
            default_alg: "owl".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let run = run_sim_with_registry(&sc, &opts, r).unwrap();
    let f = &run.results.flows[0];
    assert!(f.declared_lost > 0, "slow start ends in a loss: {f:?}");
    let late: Vec<u64> = run
        .results
        .series
        .iter()
        .filter(|p| p.t >= 7.0)
        .map(|p| p.cwnd_bytes)
        .collect();
    assert!(!late.is_empty());
    assert!(
        late.iter().all(|&c| c == late[0] && c >= 2 * 1500),
        "{late:?}"
    );
    // the held window fits the path (BDP 40 packets + 40 buffered): no more losses late on
    assert!(late[0] <= 80 * 1500, "{}", late[0]);
    assert!(f.utilization > 0.3, "{f:?}");
    assert_eq!(run.records[0].alg, "owl");
}
