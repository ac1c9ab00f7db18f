//! A tiny test-only agent: portus hosting ccp-algs controllers, answering in lockstep.
//!
//! - every flow's CREATE is recorded (congAlg string) by a recording IPC wrapper; the flow
//!   runs the registry algorithm it names (`cubic`, `ccp_reno`, ...), else the default;
//! - `new_flow` sends exactly one CHANGE_PROG (`set_program` with Cwnd and the report
//!   interval);
//! - `on_report` decodes the report into an `Interval`, asks the controller, and sends
//!   exactly one UPDATE_FIELDS (at least one field).
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ccp_algs::signals::{fields, ProgramBuilder, Trigger};
use ccp_algs::{
    Action, Algorithm, Controller, FlowInfo, FlowMetrics, FoldProgram, Interval, Preference,
    Registry,
};
use ccp_sim::{ChanIpc, Scenario, SimOptions, SimResults, Simulator};
use portus::ipc::{BackendBuilder, Blocking, Ipc};
use portus::lang::Scope;
use portus::{CCPHandle, CongAlg, Datapath, DatapathInfo, DatapathTrait, Flow, Report};

/// What the agent saw.
#[derive(Debug, Default, Clone)]
pub struct AgentLog {
    /// (sid, congAlg) of every CREATE, in order.
    pub creates: Vec<(u32, String)>,
    /// reports handled
    pub reports: u64,
    /// reports whose interval carried a timeout
    pub timeout_reports: u64,
    /// reports whose interval carried losses
    pub loss_reports: u64,
    /// close messages (MEASURE with no fields)
    pub closes: u64,
    /// (sid, algorithm chosen, preference)
    pub flows: Vec<(u32, &'static str, Preference)>,
}

type Log = Arc<Mutex<AgentLog>>;

/// Records CREATE names and closes before portus parses the message.
pub struct Recording<I> {
    inner: I,
    log: Log,
}

impl<I: Ipc> Ipc for Recording<I> {
    type Addr = I::Addr;

    fn name() -> String {
        I::name()
    }

    fn send(&self, msg: &[u8], to: &Self::Addr) -> portus::Result<()> {
        self.inner.send(msg, to)
    }

    fn recv(&self, msg: &mut [u8]) -> portus::Result<(usize, Self::Addr)> {
        let (n, addr) = self.inner.recv(msg)?;
        let m = &msg[..n];
        if n >= 8 {
            let typ = u16::from_le_bytes([m[0], m[1]]);
            let sid = u32::from_le_bytes([m[4], m[5], m[6], m[7]]);
            if typ == 0 && n >= 8 + 24 + 64 {
                let name = &m[32..96];
                let end = name.iter().position(|&b| b == 0).unwrap_or(64);
                let s = String::from_utf8_lossy(&name[..end]).into_owned();
                self.log.lock().unwrap().creates.push((sid, s));
            }
            if typ == 1 && n >= 16 && u32::from_le_bytes([m[12], m[13], m[14], m[15]]) == 0 {
                self.log.lock().unwrap().closes += 1;
            }
        }
        Ok((n, addr))
    }

    fn close(&mut self) -> portus::Result<()> {
        self.inner.close()
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

impl Controller for FixedFlow {
    fn on_report(&mut self, iv: &Interval) -> Action {
        self.metrics.observe(iv);
        Action {
            cwnd_bytes: Some(self.cfg.cwnd_bytes),
            rate_bps: self.cfg.rate_bps,
            report_interval_us: None,
        }
    }

    fn initial_action(&mut self) -> Action {
        Action {
            cwnd_bytes: Some(self.cfg.cwnd_bytes),
            rate_bps: self.cfg.rate_bps,
            report_interval_us: None,
        }
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }
}

/// The portus algorithm: hosts every algorithm of a registry.
pub struct TestAlg {
    registry: Registry,
    default: String,
    log: Log,
}

impl<I: Ipc> CongAlg<I> for TestAlg {
    type Flow = TestFlow<I>;

    fn name() -> &'static str {
        "ccp-sim-test-agent"
    }

    fn datapath_programs(&self) -> HashMap<&'static str, String> {
        self.registry
            .iter()
            .map(|a| {
                let p = a.program();
                (p.name, p.source)
            })
            .collect()
    }

    fn new_flow(&self, mut dp: Datapath<I>, info: DatapathInfo) -> TestFlow<I> {
        let requested = {
            let log = self.log.lock().unwrap();
            log.creates
                .iter()
                .rev()
                .find(|(sid, _)| *sid == info.sock_id)
                .map(|(_, s)| s.clone())
                .unwrap_or_default()
        };
        let (name, w) = match requested.split_once(";w=") {
            Some((n, w)) => (n.to_string(), w.parse().unwrap_or_default()),
            None => (requested.clone(), Preference::default()),
        };
        let alg = self
            .registry
            .get(&name)
            .or_else(|| self.registry.get(&self.default))
            .expect("default algorithm registered")
            .clone();
        let finfo = FlowInfo {
            sock_id: info.sock_id,
            mss: info.mss,
            init_cwnd_bytes: info.init_cwnd,
            preference: w,
        };
        let mut ctl = alg.new_flow(&finfo);
        let prog = alg.program();
        let init = ctl.initial_action();
        let cwnd = init.cwnd_bytes.unwrap_or(info.init_cwnd);
        let mut upd: Vec<(&str, u32)> = vec![
            ("Cwnd", cwnd),
            (ccp_algs::signals::INTERVAL_REG, prog.initial_interval_us),
        ];
        if let Some(r) = init.rate_bps {
            upd.push(("Rate", r.min(u64::from(u32::MAX)) as u32));
        }
        let scope = dp
            .set_program(prog.name, Some(&upd))
            .expect("set_program on an installed program");
        self.log
            .lock()
            .unwrap()
            .flows
            .push((info.sock_id, alg.name(), w));
        TestFlow {
            dp,
            scope,
            names: prog.fields.iter().map(|f| format!("Report.{f}")).collect(),
            fields: prog.fields,
            ctl,
            last_cwnd: cwnd,
            log: self.log.clone(),
        }
    }
}

pub struct TestFlow<I: Ipc> {
    dp: Datapath<I>,
    scope: Scope,
    fields: Vec<&'static str>,
    names: Vec<String>,
    ctl: Box<dyn Controller>,
    last_cwnd: u32,
    log: Log,
}

impl<I: Ipc> Flow for TestFlow<I> {
    fn on_report(&mut self, _sock_id: u32, m: Report) {
        let vals: Vec<u64> = self
            .names
            .iter()
            .map(|n| m.get_field(n, &self.scope).unwrap_or(0))
            .collect();
        let iv = Interval::from_fields(&self.fields, &vals);
        let a = self.ctl.on_report(&iv);
        let mut upd: Vec<(&str, u32)> = Vec::new();
        if let Some(c) = a.cwnd_bytes {
            upd.push(("Cwnd", c));
            self.last_cwnd = c;
        }
        if let Some(r) = a.rate_bps {
            upd.push(("Rate", r.min(u64::from(u32::MAX)) as u32));
        }
        if let Some(i) = a.report_interval_us {
            upd.push((ccp_algs::signals::INTERVAL_REG, i));
        }
        if upd.is_empty() {
            upd.push(("Cwnd", self.last_cwnd));
        }
        self.dp
            .update_field(&self.scope, &upd)
            .expect("update_field");
        let mut log = self.log.lock().unwrap();
        log.reports += 1;
        if iv.timeout {
            log.timeout_reports += 1;
        }
        if iv.lost_pkts > 0 {
            log.loss_reports += 1;
        }
    }
}

/// A running test agent.
pub struct TestAgent {
    handle: Option<CCPHandle>,
    pub log: Log,
}

fn registry_with(extra: Option<Fixed>) -> Registry {
    let mut r = Registry::builtin();
    if let Some(f) = extra {
        r.register(Arc::new(f));
    }
    r
}

impl TestAgent {
    fn spawn<I: Ipc>(sock: I, default: &str, extra: Option<Fixed>) -> Self {
        let log: Log = Arc::default();
        let alg = TestAlg {
            registry: registry_with(extra),
            default: default.to_string(),
            log: log.clone(),
        };
        let handle = portus::RunBuilder::new(BackendBuilder {
            sock: Recording {
                inner: sock,
                log: log.clone(),
            },
        })
        .default_alg(alg)
        .spawn_thread()
        .run()
        .expect("spawn agent");
        TestAgent {
            handle: Some(handle),
            log,
        }
    }

    /// An agent on in-process channels; returns the datapath's end.
    pub fn chan(default: &str) -> (Self, ChanIpc) {
        Self::chan_with(default, None)
    }

    /// Like [`TestAgent::chan`], also hosting a [`Fixed`] algorithm named `fixed`.
    pub fn chan_with(default: &str, extra: Option<Fixed>) -> (Self, ChanIpc) {
        let (to_agent, agent_rx) = crossbeam_channel::unbounded();
        let (agent_tx, from_agent) = crossbeam_channel::unbounded();
        let sock = portus::ipc::chan::Socket::<Blocking>::new(agent_tx, agent_rx);
        (
            Self::spawn(sock, default, extra),
            ChanIpc::new(to_agent, from_agent),
        )
    }

    /// An agent on a unix socket at /tmp/ccp/<name>.
    pub fn unix(default: &str, name: &str) -> Self {
        let sock = portus::ipc::unix::Socket::<Blocking>::new(name).expect("bind agent socket");
        Self::spawn(sock, default, None)
    }

    pub fn snapshot(&self) -> AgentLog {
        self.log.lock().unwrap().clone()
    }

    /// Stop the agent thread and return its log. Drop the datapath's IPC end first for a
    /// prompt exit on channels.
    pub fn stop(mut self) -> AgentLog {
        if let Some(h) = self.handle.take() {
            h.kill();
            let _ = h.wait();
        }
        self.snapshot()
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.kill();
            let _ = h.wait();
        }
    }
}

/// Run `sc` against a fresh channel agent whose default algorithm is `default`.
pub fn run_with(sc: &Scenario, default: &str, extra: Option<Fixed>) -> (SimResults, AgentLog) {
    let (agent, mut ipc) = TestAgent::chan_with(default, extra);
    let mut sim = Simulator::new(sc, SimOptions::default()).expect("valid scenario");
    let r = sim.run(&mut ipc).expect("simulation runs");
    drop(ipc);
    let log = agent.stop();
    (r, log)
}

/// Parse scenario TOML relative to the crate's scenarios folder.
pub fn scenario(text: &str) -> Scenario {
    Scenario::from_toml_str(text, scenarios_dir()).expect("valid scenario")
}

pub fn scenarios_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}
