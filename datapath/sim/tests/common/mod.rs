//! The simulator's tests run their flows through the agent's runtime library (`ccp-runtime`,
//! a dev-dependency): the portus run loop behind the IPC guard, exactly as `ccp-agent --sim`
//! runs it (`ccp_runtime::simrun`). There is no test agent of our own; what the agent saw comes
//! from its own flow records (requested name, algorithm, preference, reports, closes) and
//! guard counters, plus one [`Observed`] wrapper that counts the intervals carrying a timeout.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccp_algs::signals::{fields, ProgramBuilder, Trigger};
use ccp_algs::{
    Action, Algorithm, Controller, FlowInfo, FlowMetrics, FoldProgram, Interval, Preference,
    Registry,
};
use ccp_runtime::flows::FlowRecord;
use ccp_runtime::simrun::{run_sim_with_registry, IpcKind, RunOptions};
use ccp_runtime::{Agent, AgentOptions, RunningAgent};
use ccp_sim::{Scenario, SimResults};

/// What the agent saw, from its records (by socket id) and counters.
#[derive(Debug, Default, Clone)]
pub struct AgentLog {
    /// The agent's flow records, by socket id.
    pub records: Vec<FlowRecord>,
    /// Reports whose interval carried a timeout (counted by [`Observed`]).
    pub timeout_reports: u64,
    /// Datapath messages the agent's guard accepted and rejected.
    pub accepted: u64,
    pub rejected: u64,
}

impl AgentLog {
    /// (sid, congestion-control name as the datapath sent it) of every flow, by socket id.
    pub fn creates(&self) -> Vec<(u32, &str)> {
        self.records
            .iter()
            .map(|r| (r.sid, r.requested.as_str()))
            .collect()
    }

    /// The algorithm that ran each flow, by socket id.
    pub fn algs(&self) -> Vec<&'static str> {
        self.records.iter().map(|r| r.alg).collect()
    }

    /// Reports the flows' controllers decided on.
    pub fn reports(&self) -> u64 {
        self.records.iter().map(|r| r.metrics.reports).sum()
    }

    /// Flows the datapath closed.
    pub fn closes(&self) -> usize {
        self.records.iter().filter(|r| r.closed).count()
    }
}

/// Passes everything to the algorithm it wraps and counts the intervals that carry a
/// timeout.
pub struct Observed {
    inner: Arc<dyn Algorithm>,
    timeouts: Arc<AtomicU64>,
}

struct ObservedFlow {
    inner: Box<dyn Controller>,
    timeouts: Arc<AtomicU64>,
}

impl Algorithm for Observed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn program(&self) -> FoldProgram {
        self.inner.program()
    }

    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(ObservedFlow {
            inner: self.inner.new_flow(info),
            timeouts: self.timeouts.clone(),
        })
    }
}

impl Controller for ObservedFlow {
    fn on_report(&mut self, iv: &Interval) -> Action {
        if iv.timeout {
            self.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.on_report(iv)
    }

    fn set_preference(&mut self, w: Preference) {
        self.inner.set_preference(w)
    }

    fn initial_action(&mut self) -> Action {
        self.inner.initial_action()
    }

    fn metrics(&self) -> &FlowMetrics {
        self.inner.metrics()
    }

    fn control_registers(&self) -> Vec<(&'static str, u32)> {
        self.inner.control_registers()
    }
}

/// A fixed window and/or pacing rate: for tests of the network model.
#[derive(Debug, Clone, Copy)]
pub struct Fixed {
    pub cwnd_bytes: u32,
    pub rate_bps: Option<u64>,
}

impl Algorithm for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }

    fn program(&self) -> FoldProgram {
        ProgramBuilder::new("fixed_prog", 20_000)
            .fields(&[fields::ACKED_BYTES, fields::RTT_MIN_US, fields::CWND_BYTES])
            .trigger(Trigger::IntervalOrLoss)
            .build()
    }

    fn new_flow(&self, _info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(FixedFlow {
            cfg: *self,
            metrics: FlowMetrics::default(),
        })
    }
}

struct FixedFlow {
    cfg: Fixed,
    metrics: FlowMetrics,
}

impl FixedFlow {
    fn action(&self) -> Action {
        Action {
            cwnd_bytes: Some(self.cfg.cwnd_bytes),
            rate_bps: self.cfg.rate_bps,
            report_interval_us: None,
        }
    }
}

impl Controller for FixedFlow {
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
}

/// The built-in algorithms (and `extra`), each [`Observed`] into `timeouts`.
fn registry(extra: Option<Fixed>, timeouts: &Arc<AtomicU64>) -> Registry {
    let mut algs: Vec<Arc<dyn Algorithm>> = Registry::builtin().iter().cloned().collect();
    if let Some(f) = extra {
        algs.push(Arc::new(f));
    }
    let mut r = Registry::new();
    for inner in algs {
        r.register(Arc::new(Observed {
            inner,
            timeouts: timeouts.clone(),
        }));
    }
    r
}

fn options(default: &str) -> AgentOptions {
    AgentOptions {
        default_alg: default.into(),
        ..Default::default()
    }
}

/// Run `sc` against the agent over portus's in-process channel, default algorithm `default`
/// (with `extra`, a [`Fixed`] algorithm named `fixed`, hosted too).
pub fn run_with(sc: &Scenario, default: &str, extra: Option<Fixed>) -> (SimResults, AgentLog) {
    run_over(sc, default, extra, IpcKind::Chan)
}

/// [`run_with`] over another transport.
pub fn run_over(
    sc: &Scenario,
    default: &str,
    extra: Option<Fixed>,
    ipc: IpcKind,
) -> (SimResults, AgentLog) {
    let timeouts = Arc::new(AtomicU64::new(0));
    let opts = RunOptions {
        agent: options(default),
        ipc,
        ..Default::default()
    };
    let run =
        run_sim_with_registry(sc, &opts, registry(extra, &timeouts)).expect("simulation runs");
    let log = AgentLog {
        records: run.records,
        timeout_reports: timeouts.load(Ordering::Relaxed),
        accepted: run.accepted,
        rejected: run.rejected,
    };
    (run.results, log)
}

/// The agent serving a unix socket `/tmp/ccp/<name>` for a separate `ccp-sim` process.
pub struct UnixAgent {
    agent: Agent,
    running: RunningAgent,
    timeouts: Arc<AtomicU64>,
}

impl UnixAgent {
    pub fn serve(default: &str, name: &str) -> Self {
        let timeouts = Arc::new(AtomicU64::new(0));
        let agent = Agent::with_registry(&options(default), registry(None, &timeouts))
            .expect("a valid agent");
        let sock = ccp_runtime::ipc::unix::UnixSocket::bind(name).expect("bind the agent's socket");
        let running = agent.spawn(sock).expect("start the agent");
        UnixAgent {
            agent,
            running,
            timeouts,
        }
    }

    /// Stop once the agent has read the `sent` datagrams the datapath sent; what it saw.
    pub fn stop(self, sent: u64) -> AgentLog {
        let stats = &self.agent.stats;
        assert!(
            stats.wait_datagrams(sent, Duration::from_secs(5)),
            "the agent read {} of the datapath's {sent} messages",
            stats.datagrams.load(Ordering::Relaxed)
        );
        let records = self.agent.records();
        // the unix socket's reads time out: the loop sees the stop flag on its own
        self.running
            .stop(|| ())
            .expect("the agent loop ends cleanly");
        AgentLog {
            records,
            timeout_reports: self.timeouts.load(Ordering::Relaxed),
            accepted: stats.accepted.load(Ordering::Relaxed),
            rejected: stats.rejected(),
        }
    }
}

/// Parse scenario TOML relative to the crate's scenarios folder.
pub fn scenario(text: &str) -> Scenario {
    Scenario::from_toml_str(text, scenarios_dir()).expect("valid scenario")
}

pub fn scenarios_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}
