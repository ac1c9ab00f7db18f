//! The agent without a run loop: [`InlineAgent`] answers datapath messages synchronously, on
//! the caller's thread, with the same guard checks, the same [`FlowDriver`] decisions and
//! portus's own compiler and serializers as the portus path.
//!
//! The simulator talks to it through `ccp_sim::DatapathIpc`: `send` handles a message at once
//! and queues the answers, `recv` hands them back. No threads, no channels: this is what the
//! Python training bindings run (tens of thousands of decisions per second), and a test holds
//! it to the portus path, which must give identical results for a seeded scenario.
//!
//! Learning flows can be taken over by an [`ExternalControl`]: it hands the agent the
//! controller that decides such a flow's reports (the flow is otherwise driven, answered and
//! recorded like any other, by the same [`FlowDriver`]), and it may also hand it actions to
//! apply between reports (a training step applies its action while the simulator is paused).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ccp_algs::{Action, Algorithm, Controller, FlowInfo};
use portus::lang::{Reg, Scope};
use portus::serialize;
use tracing::debug;

use crate::adapter::{AgentCore, FlowDriver};
use crate::flows::key::FlowKey;
use crate::flows::{FlowRequest, MAX_FLOWS_PER_DATAPATH};
use crate::ipc::guard::{
    check_message, normalize_create, u16_at, u32_at, GuardStats, CREATE, HDR_LEN, MEASURE, READY,
};

/// A program compiled once: its uid, scope and INSTALL message.
struct Compiled {
    uid: u32,
    scope: Scope,
    install: Vec<u8>,
}

/// Takes over the flows it claims (training). `claim` is asked at CREATE: a claimed flow
/// runs `alg`'s program with the controller `claim` returns instead of `alg`'s own; the
/// agent decodes its reports, sanitizes and answers its decisions, and records it, as for
/// every flow.
pub trait ExternalControl {
    /// Claim flow `info.sock_id` (requested as `request`, resolved to `alg`) by returning
    /// the controller that decides it, or leave it to the agent with `None`.
    fn claim(
        &mut self,
        info: &FlowInfo,
        request: &FlowRequest,
        alg: &Arc<dyn Algorithm>,
    ) -> Option<Box<dyn Controller>>;
    /// A claimed flow closed (or was dropped).
    fn close(&mut self, _sid: u32) {}
    /// Actions to apply now, outside the report/answer exchange (e.g. a training step's), as
    /// (socket id, action). Polled whenever the datapath reads and nothing else is queued.
    fn take_actions(&mut self) -> Vec<(u32, Action)> {
        Vec::new()
    }
}

struct InlineFlow {
    program: &'static str,
    /// Report index of each program field, in the program's field order.
    index: Vec<usize>,
    values: Vec<u64>,
    driver: FlowDriver,
    /// Claimed by the [`ExternalControl`].
    claimed: bool,
}

/// A synchronous agent for in-process datapaths.
pub struct InlineAgent {
    core: Arc<AgentCore>,
    available: Vec<String>,
    stats: Arc<GuardStats>,
    programs: HashMap<&'static str, Compiled>,
    installed: bool,
    flows: HashMap<u32, InlineFlow>,
    outbox: VecDeque<Vec<u8>>,
    external: Option<Box<dyn ExternalControl>>,
}

impl InlineAgent {
    pub(crate) fn new(core: Arc<AgentCore>, stats: Arc<GuardStats>) -> anyhow::Result<Self> {
        let mut programs = HashMap::new();
        for alg in core.registry.iter() {
            let p = alg.program();
            let (bin, scope) = portus::lang::compile(p.source.as_bytes(), &[])
                .map_err(|e| anyhow::anyhow!("program {}: {e:?}", p.name))?;
            let msg = serialize::install::Msg {
                sid: 0,
                program_uid: scope.program_uid,
                num_events: bin.events.len() as u32,
                num_instrs: bin.instrs.len() as u32,
                instrs: bin,
            };
            let install = serialize::serialize(&msg)
                .map_err(|e| anyhow::anyhow!("program {}: {e:?}", p.name))?;
            programs.insert(
                p.name,
                Compiled {
                    uid: scope.program_uid,
                    scope,
                    install,
                },
            );
        }
        let available = core.available();
        Ok(Self {
            core,
            available,
            stats,
            programs,
            installed: false,
            flows: HashMap::new(),
            outbox: VecDeque::new(),
            external: None,
        })
    }

    /// Hand flows to an external controller (see [`ExternalControl`]).
    pub fn set_external(&mut self, ext: Box<dyn ExternalControl>) {
        self.external = Some(ext);
    }

    /// The external controller, to read or drive it between simulator steps.
    pub fn external_mut(&mut self) -> Option<&mut (dyn ExternalControl + 'static)> {
        self.external.as_deref_mut()
    }

    /// Apply `action` to flow `sid` outside the report/answer exchange (e.g. a training
    /// step's), through the flow's driver; the datapath applies it at the flow's next ACK.
    pub fn apply(&mut self, sid: u32, action: Action) {
        if let Some(flow) = self.flows.get_mut(&sid) {
            let fields = flow.driver.apply(action);
            if let Some(c) = self.programs.get(flow.program) {
                if let Some(m) = update_msg(sid, &c.scope, &fields) {
                    self.outbox.push_back(m);
                }
            }
        }
    }

    /// A flow ends (closed by its datapath, replaced, or the agent reset).
    fn end(&mut self, sid: u32, mut flow: InlineFlow) {
        flow.driver.close();
        if flow.claimed {
            if let Some(e) = self.external.as_mut() {
                e.close(sid);
            }
        }
    }

    /// Messages queued for the datapath.
    pub fn pending(&self) -> usize {
        self.outbox.len()
    }

    fn install_all(&mut self) {
        let mut names: Vec<&&'static str> = self.programs.keys().collect();
        names.sort();
        for n in names {
            self.outbox.push_back(self.programs[*n].install.clone());
        }
        self.installed = true;
    }

    /// Drop every flow (closing its record) and every queued answer; the next CREATE or
    /// READY installs the programs again. (Fuzzing runs one agent over many inputs.)
    pub fn reset(&mut self) {
        let flows: Vec<(u32, InlineFlow)> = self.flows.drain().collect();
        for (sid, flow) in flows {
            self.end(sid, flow);
        }
        self.outbox.clear();
        self.installed = false;
    }

    /// Flows this agent drives now.
    pub fn live_flows(&self) -> usize {
        self.flows.len()
    }

    fn on_create(&mut self, msg: &mut [u8]) {
        if !self.installed {
            self.install_all();
        }
        let sid = u32_at(msg, 4);
        if !self.flows.contains_key(&sid) && self.flows.len() >= MAX_FLOWS_PER_DATAPATH {
            self.stats
                .too_many_flows
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            debug!(sid, "live-flow cap reached: CREATE refused");
            return;
        }
        if let Some(old) = self.flows.remove(&sid) {
            // a second CREATE for a live socket id replaces its flow
            self.end(sid, old);
        }
        let req = normalize_create(
            msg,
            &self.available,
            &self.core.auto,
            &self.stats,
            &self.core.tables.prefs,
        );
        // normalized: mss in range, init_cwnd in bytes and clamped
        let init_cwnd = u32_at(msg, HDR_LEN);
        let mss = u32_at(msg, HDR_LEN + 4);
        self.core.tables.set_current_peer(0);
        let gen = self
            .core
            .tables
            .set_request(FlowKey { peer: 0, sid }, req.clone());
        let alg = self
            .core
            .registry
            .get(&req.alg)
            .cloned()
            .unwrap_or_else(|| self.core.default_alg.clone());
        let program = alg.program();
        let Some(compiled) = self.programs.get(program.name) else {
            debug!(sid, program = program.name, "no compiled program");
            self.core.tables.drop_request(FlowKey { peer: 0, sid }, gen);
            return;
        };
        let index = report_index(&compiled.scope, &program.fields);
        let mut claimed = false;
        let external = &mut self.external;
        let (driver, fields) =
            self.core
                .start_flow(&alg, sid, mss, init_cwnd, |info: &FlowInfo| match external
                    .as_mut()
                    .and_then(|e| e.claim(info, &req, &alg))
                {
                    Some(ctrl) => {
                        claimed = true;
                        ctrl
                    }
                    None => alg.new_flow(info),
                });
        if let Some(m) = change_prog_msg(sid, compiled, &fields) {
            self.outbox.push_back(m);
        }
        let flow = InlineFlow {
            program: program.name,
            values: Vec::with_capacity(index.len()),
            index,
            driver,
            claimed,
        };
        self.flows.insert(sid, flow);
    }

    fn on_measure(&mut self, msg: &[u8]) {
        let sid = u32_at(msg, 4);
        let uid = u32_at(msg, HDR_LEN);
        let n = u32_at(msg, HDR_LEN + 4) as usize;
        let Some(flow) = self.flows.get_mut(&sid) else {
            debug!(sid, "report for an unknown flow");
            return;
        };
        if n == 0 {
            if let Some(flow) = self.flows.remove(&sid) {
                self.end(sid, flow);
            }
            return;
        }
        let Some(compiled) = self.programs.get(flow.program) else {
            return;
        };
        let field = |i: usize| {
            let at = HDR_LEN + 8 + 8 * i;
            msg.get(at..at + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        };
        flow.values.clear();
        let mut ok = uid == compiled.uid;
        if ok {
            for &i in &flow.index {
                match (i < n).then(|| field(i)).flatten() {
                    Some(v) => flow.values.push(v),
                    None => {
                        ok = false;
                        break;
                    }
                }
            }
        }
        let fields = flow.driver.on_report(ok.then_some(&flow.values[..]));
        if flow.driver.switched() {
            // a `ccp_auto` flow changed algorithm: install its new program (every program
            // of the registry is compiled and installed at READY) with the handed-over values
            let Some(next) = self.programs.get(flow.driver.program) else {
                debug!(
                    sid,
                    program = flow.driver.program,
                    "no compiled program to switch to"
                );
                return;
            };
            flow.program = flow.driver.program;
            flow.index = report_index(&next.scope, &flow.driver.fields);
            if let Some(m) = change_prog_msg(sid, next, &fields) {
                self.outbox.push_back(m);
            }
            return;
        }
        if let Some(m) = update_msg(sid, &compiled.scope, &fields) {
            self.outbox.push_back(m);
        }
    }

    /// Handle one datapath message (any number of answers are queued).
    pub fn handle(&mut self, msg: &[u8]) {
        self.stats
            .datagrams
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut at = 0;
        while at < msg.len() {
            let len = match check_message(&msg[at..]) {
                Ok(len) => len,
                Err(r) => {
                    self.stats.count(r);
                    debug!(reason = ?r, "dropped malformed datapath message");
                    break;
                }
            };
            self.stats
                .accepted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut m = msg[at..at + len].to_vec();
            match u16_at(&m, 0) {
                READY => self.install_all(),
                CREATE => self.on_create(&mut m),
                MEASURE => self.on_measure(&m),
                _ => {}
            }
            at += len;
        }
    }
}

#[cfg(feature = "sim")]
impl ccp_sim::DatapathIpc for InlineAgent {
    fn send(&mut self, msg: &[u8]) -> std::io::Result<()> {
        self.handle(msg);
        Ok(())
    }

    fn recv(&mut self, _timeout: std::time::Duration) -> std::io::Result<Option<Vec<u8>>> {
        if self.outbox.is_empty() {
            let actions = self
                .external
                .as_mut()
                .map(|e| e.take_actions())
                .unwrap_or_default();
            for (sid, action) in actions {
                self.apply(sid, action);
            }
        }
        Ok(self.outbox.pop_front())
    }
}

/// Report index of each named field in a program's scope.
fn report_index(scope: &Scope, fields: &[&'static str]) -> Vec<usize> {
    fields
        .iter()
        .map(|f| match scope.get(&format!("Report.{f}")) {
            Some(Reg::Report(idx, _, _)) => *idx as usize,
            _ => usize::MAX,
        })
        .collect()
}

/// Registers an agent may write: control registers, and the implicit Cwnd and Rate.
fn writable(scope: &Scope, fields: &[(&'static str, u32)]) -> Vec<(Reg, u64)> {
    fields
        .iter()
        .filter_map(|&(name, v)| match scope.get(name)? {
            Reg::Control(idx, t, vol) => Some((Reg::Control(*idx, t.clone(), *vol), u64::from(v))),
            Reg::Implicit(idx, t) if *idx == 4 || *idx == 5 => {
                Some((Reg::Implicit(*idx, t.clone()), u64::from(v)))
            }
            _ => None,
        })
        .collect()
}

fn change_prog_msg(sid: u32, c: &Compiled, fields: &[(&'static str, u32)]) -> Option<Vec<u8>> {
    let regs = writable(&c.scope, fields);
    serialize::serialize(&serialize::changeprog::Msg {
        sid,
        program_uid: c.uid,
        num_fields: regs.len() as u32,
        fields: regs,
    })
    .ok()
}

fn update_msg(sid: u32, scope: &Scope, fields: &[(&'static str, u32)]) -> Option<Vec<u8>> {
    let regs = writable(scope, fields);
    serialize::serialize(&serialize::update_field::Msg {
        sid,
        num_fields: regs.len() as u8,
        fields: regs,
    })
    .ok()
}

// driven through the simulator's `DatapathIpc`
#[cfg(all(test, feature = "sim"))]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    use ccp_algs::{FlowMetrics, Interval, Registry};
    use ccp_sim::DatapathIpc;

    use super::*;
    use crate::ipc::guard::{CHANGE_PROG, UPDATE_FIELDS};
    use crate::ipc::wire;
    use crate::{Agent, AgentOptions};
    use std::time::Duration;

    /// Claims every Cubic flow with a controller that holds 20 packets and counts reports;
    /// logs claims and closes.
    #[derive(Default, Clone)]
    struct Outside {
        log: Arc<Mutex<Vec<String>>>,
        reports: Arc<AtomicU64>,
        actions: Arc<Mutex<Vec<(u32, Action)>>>,
    }

    struct Held {
        reports: Arc<AtomicU64>,
        metrics: FlowMetrics,
    }

    impl Controller for Held {
        fn on_report(&mut self, iv: &Interval) -> Action {
            self.reports.fetch_add(1, Ordering::Relaxed);
            self.metrics.observe(iv);
            Action {
                cwnd_bytes: Some(20 * 1448),
                ..Default::default()
            }
        }
        fn metrics(&self) -> &FlowMetrics {
            &self.metrics
        }
    }

    impl ExternalControl for Outside {
        fn claim(
            &mut self,
            info: &FlowInfo,
            _request: &FlowRequest,
            alg: &Arc<dyn Algorithm>,
        ) -> Option<Box<dyn Controller>> {
            if alg.name() != "cubic" {
                return None;
            }
            self.log
                .lock()
                .unwrap()
                .push(format!("claim {}", info.sock_id));
            Some(Box::new(Held {
                reports: self.reports.clone(),
                metrics: FlowMetrics::default(),
            }))
        }
        fn close(&mut self, sid: u32) {
            self.log.lock().unwrap().push(format!("close {sid}"));
        }
        fn take_actions(&mut self) -> Vec<(u32, Action)> {
            std::mem::take(&mut *self.actions.lock().unwrap())
        }
    }

    fn drain(a: &mut InlineAgent) -> Vec<(u16, u32)> {
        let mut out = Vec::new();
        while let Ok(Some(m)) = a.recv(Duration::ZERO) {
            out.extend(wire::type_and_sid(&m));
        }
        out
    }

    #[test]
    fn claimed_flows_are_driven_answered_and_recorded_like_the_agents_own() {
        let agent = Agent::with_registry(&AgentOptions::default(), Registry::builtin()).unwrap();
        let mut a = agent.inline().unwrap();
        let outside = Outside::default();
        a.set_external(Box::new(outside.clone()));
        let cubic = Registry::builtin().get("cubic").unwrap().program();
        let report = wire::one_rtt_report(&cubic);

        a.send(&wire::create(1, "ccp_cubic", 14_480, 1448)).unwrap();
        a.send(&wire::create(2, "ccp_reno", 14_480, 1448)).unwrap();
        let sent = drain(&mut a);
        assert_eq!(
            sent.iter().filter(|(t, _)| *t == CHANGE_PROG).count(),
            2,
            "{sent:?}"
        );
        let uid = a.programs[cubic.name].uid;
        for _ in 0..3 {
            a.send(&wire::measure(1, uid, &report)).unwrap();
        }
        // one answer per report, from the outside controller
        assert_eq!(drain(&mut a), vec![(UPDATE_FIELDS, 1); 3]);
        assert_eq!(outside.reports.load(Ordering::Relaxed), 3);
        // an action between reports goes out at the next read
        outside.actions.lock().unwrap().push((
            1,
            Action {
                cwnd_bytes: Some(1),
                ..Default::default()
            },
        ));
        assert_eq!(drain(&mut a), vec![(UPDATE_FIELDS, 1)]);
        // recorded as the agent's own flows
        let recs = agent.records();
        assert_eq!(recs.len(), 2);
        assert_eq!((recs[0].alg, recs[0].metrics.reports), ("cubic", 3));
        assert_eq!(recs[1].alg, "reno");

        // a second CREATE for socket 1 ends the first claim before the second one
        a.send(&wire::create(1, "ccp_cubic", 14_480, 1448)).unwrap();
        a.send(&wire::measure(1, 0, &[])).unwrap();
        assert_eq!(
            *outside.log.lock().unwrap(),
            ["claim 1", "close 1", "claim 1", "close 1"]
        );
        assert_eq!(a.live_flows(), 1);
        let closed = agent.records().iter().filter(|r| r.closed).count();
        assert_eq!(closed, 2, "{:?}", agent.records());
    }
}
