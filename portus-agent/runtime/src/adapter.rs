//! portus adapters: every registered [`Algorithm`] becomes a portus `CongAlg`, every flow a
//! portus `Flow` that runs a [`Controller`].
//!
//! portus dispatches a new flow by comparing the datapath's congAlg name with the static
//! `CongAlg::name()` of each algorithm given to its `RunBuilder`. A static name needs a type
//! per algorithm, so [`Slot<N>`] is one generic adapter whose name is
//! `ccp_algs::registry::ALGORITHMS[N]`, and the agent gives portus one per line of the
//! registry (`with_slots!`, from `ccp_algs::registered_names!`); [`DefaultAlg`] serves every
//! flow that names no
//! available algorithm (the agent's `--alg`). The IPC guard has already rewritten
//! `ccp_<alg>` to `<alg>` and unknown names to the empty name before portus sees them.
//!
//! Every CREATE is answered with exactly one CHANGE_PROG (the program plus the controller's
//! initial cwnd/rate/interval) and every report with exactly one UPDATE_FIELDS, or one
//! CHANGE_PROG when a `ccp_auto` flow switches algorithm ([`FlowDriver::switched`]). The simulator
//! relies on this to run agent and datapath in lockstep, and it costs the kernel datapath
//! nothing it would not do anyway.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ccp_algs::controller::{MAX_REPORT_INTERVAL_US, MIN_REPORT_INTERVAL_US};
use ccp_algs::netstats::{NetStats, NetworkStats, PathKey};
use ccp_algs::registry::ALGORITHMS;
use ccp_algs::signals::INTERVAL_REG;
use ccp_algs::{Action, Algorithm, Controller, FlowInfo, Handover, Interval, Preference};
use portus::ipc::Ipc;
use portus::lang::Scope;
use portus::{CongAlg, Datapath, DatapathInfo, DatapathTrait, Flow, Report};
use tracing::{debug, info, warn};

use crate::flows::flowlog::FlowLog;
use crate::flows::key::FlowKey;
use crate::flows::pathclass::{Classified, PathClass};
use crate::flows::portfolio::AutoSelect;
use crate::flows::prefs::{PrefCell, PrefSource};
use crate::flows::{FlowRecord, FlowRequest, FlowTables, Switch, SWITCHES_KEPT};
use crate::ipc::guard::flow_params;
use crate::log_limit::LogLimit;

/// State shared by all adapters (one agent, one portus thread).
pub struct AgentCore {
    pub registry: ccp_algs::Registry,
    pub default_alg: Arc<dyn Algorithm>,
    /// Requests and records of every flow (bounded, see [`crate::flows`]), the flows'
    /// preferences (`tables.prefs`, with the agent's `--w`) and the decision counters.
    pub tables: Arc<FlowTables>,
    pub flow_log: Option<Arc<Mutex<FlowLog>>>,
    /// The preference portfolio `ccp_auto` flows are chosen from (SIGHUP re-reads it).
    pub auto: Arc<AutoSelect>,
    /// In-network statistics for the flows that read them ([`FlowDriver`] hands each new
    /// sample to its controller before the next report).
    pub network_stats: Option<Arc<dyn NetworkStats>>,
}

static LOG_NO_PROGRAM: LogLimit = LogLimit::new(crate::ipc::guard::LOG_EVERY);

impl AgentCore {
    /// The names of the algorithms this agent runs: what a datapath may request.
    pub fn available(&self) -> Vec<String> {
        self.registry
            .names()
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// Start a flow of `alg` for socket `sid` of the datapath portus is serving now: the
    /// driver and the fields of its first CHANGE_PROG (initial cwnd/rate/interval). `mss`
    /// and `init_cwnd` are clamped to the guard's documented ranges ([`flow_params`]) before
    /// the controller sees them.
    ///
    /// `controller` makes the flow's controller: `alg.new_flow`, or one from outside the
    /// agent (a learner in training); either way the flow runs `alg`'s program and is
    /// recorded and answered like any other.
    pub fn start_flow(
        &self,
        alg: &Arc<dyn Algorithm>,
        sid: u32,
        mss: u32,
        init_cwnd: u32,
        controller: impl FnOnce(&FlowInfo) -> Box<dyn Controller>,
    ) -> (FlowDriver, Vec<(&'static str, u32)>) {
        let key = FlowKey {
            peer: self.tables.current_peer(),
            sid,
        };
        let (gen, request) = match self.tables.request(key) {
            Some((gen, r)) => (gen, r),
            None => {
                let r = FlowRequest {
                    requested: String::new(),
                    alg: String::new(),
                    preference: None,
                    addr: None,
                    resolved: None,
                    choice: None,
                };
                (self.tables.set_request(key, r.clone()), r)
            }
        };
        let requested = request.requested.clone();
        // resolved at CREATE by the guard; a per-socket entry set since then still wins
        let prefs = &self.tables.prefs;
        let resolved = request
            .resolved
            .clone()
            .unwrap_or_else(|| prefs.resolve(request.addr.as_ref(), request.preference));
        let pref = prefs.attach(key, gen, request.addr, request.preference, resolved);
        let pref_seen = pref.version();
        let resolved = pref.get();
        let w = resolved.w;
        self.tables
            .decisions
            .flows_started
            .fetch_add(1, Ordering::Relaxed);
        let (mss, init_cwnd_bytes) = flow_params(mss, init_cwnd);
        let flow_info = FlowInfo {
            sock_id: sid,
            mss,
            init_cwnd_bytes,
            preference: w,
        };
        let program = alg.program();
        let mut ctrl = controller(&flow_info);
        let has_interval = program.source.contains(INTERVAL_REG);
        let initial = sanitize(ctrl.initial_action(), mss);
        let mut fields = action_fields(&initial, has_interval);
        if has_interval && !fields.iter().any(|(n, _)| *n == INTERVAL_REG) {
            fields.push((INTERVAL_REG, program.initial_interval_us));
        }
        fields.extend(ctrl.control_registers());
        let record = FlowRecord {
            sid,
            requested: requested.clone(),
            alg: alg.name(),
            w,
            w_source: resolved.source.clone(),
            addr: request.addr,
            choice: request.choice.clone(),
            class: None,
            switches: Vec::new(),
            closed: false,
            metrics: ctrl.metrics().clone(),
        };
        if let Some(log) = &self.flow_log {
            if let Ok(mut l) = log.lock() {
                l.create(&record, &initial);
            }
        }
        if let Some(old) = self.tables.open(key, gen, record) {
            // a flow replaced without a close (a second CREATE for its socket id)
            if let Some(log) = &self.flow_log {
                if let Ok(mut l) = log.lock() {
                    l.close(&old);
                }
            }
        }
        info!(sid, requested = ?requested, alg = alg.name(), w = %w, w_source = %resolved.source, "new flow");
        let network_stats = ctrl
            .wants_network_stats()
            .then(|| self.network_stats.clone())
            .flatten();
        // a flow the portfolio chose re-chooses once it knows its path, if the table says how
        let auto = request.choice.as_ref().and_then(|_| {
            let table = self.auto.table()?;
            let classifier = table.classifier()?.clone();
            Some(Box::new(AutoFlow {
                select: self.auto.clone(),
                registry: self.registry.clone(),
                path: PathClass::new(classifier, mss),
                network_stats: self.network_stats.clone(),
                info: flow_info,
            }))
        });
        let driver = FlowDriver {
            alg: alg.name(),
            auto,
            switched: false,
            program: program.name,
            fields: program.fields,
            has_interval,
            ctrl,
            key,
            gen,
            closed: false,
            mss,
            w,
            w_source: resolved.source,
            pref,
            pref_seen,
            policy_seen: (0, 0),
            last: initial,
            tables: self.tables.clone(),
            flow_log: self.flow_log.clone(),
            network_stats,
            // IPv6 CREATEs carry no addresses: their flows read the default path
            path: PathKey {
                dst: request
                    .addr
                    .filter(|a| !a.is_v6())
                    .map(|a| std::net::IpAddr::V4(a.dst_ip)),
            },
            stats_seq: None,
        };
        (driver, fields)
    }

    fn new_flow<I: Ipc>(
        &self,
        alg: &Arc<dyn Algorithm>,
        mut control: Datapath<I>,
        info: DatapathInfo,
    ) -> PortusFlow<I> {
        let (driver, fields) = self.start_flow(alg, info.sock_id, info.mss, info.init_cwnd, |i| {
            alg.new_flow(i)
        });
        let scope = match control.set_program(driver.program, Some(&fields)) {
            Ok(sc) => Some(sc),
            Err(e) => {
                if let Some(held) = LOG_NO_PROGRAM.allow() {
                    warn!(sid = info.sock_id, program = driver.program, error = ?e,
                        held_back = held, "could not start the flow's program");
                }
                None
            }
        };
        PortusFlow {
            report_names: driver
                .fields
                .iter()
                .map(|f| format!("Report.{f}"))
                .collect(),
            values: Vec::new(),
            control,
            scope,
            driver,
        }
    }
}

/// Keep an action inside what a datapath can apply.
pub fn sanitize(mut a: Action, mss: u32) -> Action {
    if let Some(c) = a.cwnd_bytes {
        a.cwnd_bytes = Some(c.max(mss));
    }
    if let Some(r) = a.rate_bps {
        // libccp's rate register is u32 bytes/s; 0 would mean "unpaced"
        a.rate_bps = Some(r.clamp(1, u64::from(u32::MAX)));
    }
    if let Some(i) = a.report_interval_us {
        a.report_interval_us = Some(i.clamp(MIN_REPORT_INTERVAL_US, MAX_REPORT_INTERVAL_US));
    }
    a
}

/// The register updates that carry an action (`Control.interval_us` only if the program
/// has it).
pub fn action_fields(a: &Action, has_interval: bool) -> Vec<(&'static str, u32)> {
    let mut v = Vec::with_capacity(3);
    if let Some(c) = a.cwnd_bytes {
        v.push(("Cwnd", c));
    }
    if let Some(r) = a.rate_bps {
        v.push(("Rate", r as u32));
    }
    if has_interval {
        if let Some(i) = a.report_interval_us {
            v.push((INTERVAL_REG, i));
        }
    }
    v
}

/// One flow's decisions, independent of how reports arrive (portus, or the in-process agent
/// of the training bindings): decode a report, run the controller, keep records, and say
/// which registers to update. Exactly one answer per report.
pub struct FlowDriver {
    /// The algorithm running the flow (it changes when a `ccp_auto` flow switches).
    alg: &'static str,
    /// `ccp_auto` flows whose table has a classifier: what re-chooses their algorithm.
    auto: Option<Box<AutoFlow>>,
    /// The last answer switched the flow's algorithm: it goes with `program`, installed.
    switched: bool,
    /// The flow's fold program.
    pub program: &'static str,
    /// Its report fields, in the order `on_report` expects values.
    pub fields: Vec<&'static str>,
    has_interval: bool,
    ctrl: Box<dyn Controller>,
    key: FlowKey,
    /// Generation of the flow's request (see [`crate::flows`]).
    gen: u64,
    closed: bool,
    mss: u32,
    w: Preference,
    w_source: PrefSource,
    /// The flow's current preference, as the control plane sets it.
    pref: Arc<PrefCell>,
    /// The cell's version last read.
    pref_seen: u64,
    /// The controller's (clamped outputs, policy errors) last added to the agent's totals.
    policy_seen: (u64, u64),
    /// The action in force: cwnd, rate and interval last sent.
    last: Action,
    tables: Arc<FlowTables>,
    flow_log: Option<Arc<Mutex<FlowLog>>>,
    /// The statistics source, if the controller reads one.
    network_stats: Option<Arc<dyn NetworkStats>>,
    /// The flow's path as sources key paths: its destination from the CREATE (none for
    /// flows without addresses or IPv6 ones: the default path; the simulator's cell serves
    /// its one bottleneck to every path).
    path: PathKey,
    /// The sample number last handed to the controller (`None`: none, or "none any more").
    stats_seq: Option<u64>,
}

/// What a `ccp_auto` flow needs to choose again mid-transfer.
struct AutoFlow {
    select: Arc<AutoSelect>,
    /// The agent's algorithms (what a switch may choose and start).
    registry: ccp_algs::Registry,
    path: PathClass,
    network_stats: Option<Arc<dyn NetworkStats>>,
    /// The flow as its first controller saw it (socket, MSS).
    info: FlowInfo,
}

impl FlowDriver {
    /// Hand the controller the source's sample if it is new, or say once that there is none
    /// any more.
    fn deliver_network_stats(&mut self) {
        let Some(src) = &self.network_stats else {
            return;
        };
        let s: Option<NetStats> = src.latest(&self.path);
        match s {
            Some(s) if self.stats_seq != Some(s.seq()) => {
                self.stats_seq = Some(s.seq());
                self.ctrl.network_stats(Some(&s));
            }
            None if self.stats_seq.is_some() => {
                self.stats_seq = None;
                self.ctrl.network_stats(None);
            }
            _ => {}
        }
    }

    /// Decide on one report; `values` are in `fields` order, `None` if the report could not
    /// be read (then the answer repeats what is in force). Returns the register updates.
    pub fn on_report(&mut self, values: Option<&[u64]>) -> Vec<(&'static str, u32)> {
        let start = Instant::now();
        let mut pref_changed = false;
        let mut reclassified = None;
        let decided = values.map(|v| {
            // a preference change for this flow takes effect at this decision (one atomic
            // load when there is none)
            if let Some(r) = self.pref.changed(&mut self.pref_seen) {
                if r.w != self.w {
                    self.w = r.w;
                    self.ctrl.set_preference(r.w);
                }
                self.w_source = r.source;
                pref_changed = true;
            }
            self.deliver_network_stats();
            let iv = Interval::from_fields(&self.fields, v);
            let action = sanitize(self.ctrl.on_report(&iv), self.mss);
            if let Some(auto) = &mut self.auto {
                reclassified = auto
                    .path
                    .observe(&ccp_algs::sanity::sanitized(&iv), self.alg);
            }
            action
        });
        self.switched = false;
        let mut fields = self.answer(decided);
        let rechoose = reclassified.is_some() || (pref_changed && self.auto.is_some());
        if rechoose {
            if let Some(f) = self.rechoose(reclassified) {
                fields = f;
            }
        }
        let stats = &self.tables.decisions;
        if decided.is_some() {
            stats.observe(start.elapsed());
        } else {
            stats.unreadable.fetch_add(1, Ordering::Relaxed);
        }
        let metrics = self.ctrl.metrics();
        let policy = (metrics.clamped_outputs, metrics.policy_errors);
        if policy != self.policy_seen {
            stats.clamped_outputs.fetch_add(
                policy.0.saturating_sub(self.policy_seen.0),
                Ordering::Relaxed,
            );
            stats.policy_errors.fetch_add(
                policy.1.saturating_sub(self.policy_seen.1),
                Ordering::Relaxed,
            );
            self.policy_seen = policy;
        }
        let (w, last, flow_log) = (self.w, &self.last, &self.flow_log);
        let w_source = &self.w_source;
        self.tables.update(self.key, self.gen, |rec| {
            rec.metrics = metrics.clone();
            rec.w = w;
            if pref_changed {
                rec.w_source = w_source.clone();
            }
            if let Some(log) = flow_log {
                if let Ok(mut l) = log.lock() {
                    if pref_changed {
                        l.preference(rec);
                    }
                    l.report(rec, last);
                }
            }
        });
        fields
    }

    /// The algorithm running the flow now.
    pub fn alg(&self) -> &'static str {
        self.alg
    }

    /// Whether the answer [`FlowDriver::on_report`] just gave changes the flow's algorithm:
    /// then the transport installs [`FlowDriver::program`] with it (a CHANGE_PROG) instead of
    /// updating the old program's registers, and reads later reports by the new `fields`.
    pub fn switched(&self) -> bool {
        self.switched
    }

    /// A `ccp_auto` flow's class was decided (or changed), or its preference changed: choose
    /// again in its class and, if the choice is another algorithm, switch to it. Returns the
    /// new program's first fields when it switched.
    fn rechoose(&mut self, classified: Option<Classified>) -> Option<Vec<(&'static str, u32)>> {
        let auto = self.auto.as_mut()?;
        let class = classified
            .as_ref()
            .map(|c| c.class.clone())
            .or_else(|| auto.path.class().map(str::to_owned));
        // (a rare event: the names are listed here rather than kept by every flow)
        let available: Vec<String> = auto
            .registry
            .names()
            .iter()
            .map(|n| n.to_string())
            .collect();
        let choice = auto
            .select
            .choose_in(Some(self.w), class.as_deref(), &available)?;
        let next = auto.registry.get(&choice.alg).cloned();
        let mut switch = None;
        let mut fields = None;
        if let Some(alg) = next.filter(|a| a.name() != self.alg) {
            let meter = &mut auto.path.meter;
            let rate = meter.recent_rate_bps();
            let min_rtt = meter.min_rtt_us();
            // the window to continue from is what the flow keeps in flight now: its delivery
            // rate times its RTT over the last second of bins (Little's law, the median of
            // the bins: `PathMeter::recent_in_flight_bytes`), not the window in force. BBR's
            // window is a cap at twice the BDP (a window algorithm handed it would send a BDP
            // at once into the queue: seen in the guest, 300 ms of stall after the drops),
            // and a switch during a momentary cut (BBR's PROBE_RTT holds 4 packets every
            // 10 s; a loss recovery) must not hand over the cut. Not the mean over the whole
            // window either: after a capacity or RTT change inside it (BBR leaving its
            // stale-min-RTT cap, 22 -> 48 Mbit/s, in the guest's auto_switch) the mean is the
            // old path's, a stall or a burst at the switch (tests/auto_switch.rs)
            let in_flight = meter
                .recent_in_flight_bytes()
                .map(|b| b.min(f64::from(u32::MAX)) as u32);
            let h = Handover {
                cwnd_bytes: in_flight
                    .unwrap_or_else(|| self.last.cwnd_bytes.unwrap_or(10 * self.mss))
                    .max(2 * self.mss),
                min_rtt_us: min_rtt,
                delivery_rate_bps: rate,
            };
            let info = FlowInfo {
                init_cwnd_bytes: h.cwnd_bytes,
                preference: self.w,
                ..auto.info
            };
            let mut ctrl = alg.new_flow(&info);
            ctrl.hand_over(&h);
            let mut initial = sanitize(ctrl.initial_action(), self.mss);
            if initial.rate_bps.is_none() && self.last.rate_bps.is_some() {
                // the old algorithm paced and the new one does not: lift the pacing rate it
                // left behind, or it would cap the new algorithm's window
                initial.rate_bps = Some(u64::from(u32::MAX));
            }
            let program = alg.program();
            switch = Some(Switch {
                at_s: meter.elapsed_s(),
                from: self.alg,
                to: alg.name(),
                class: class.clone().unwrap_or_default(),
                score: choice.score,
                cwnd_bytes: h.cwnd_bytes,
                delivery_rate_bps: h.delivery_rate_bps,
            });
            self.network_stats = ctrl
                .wants_network_stats()
                .then(|| auto.network_stats.clone())
                .flatten();
            self.stats_seq = None;
            self.alg = alg.name();
            self.ctrl = ctrl;
            self.program = program.name;
            self.fields = program.fields;
            self.has_interval = program.source.contains(INTERVAL_REG);
            self.policy_seen = (0, 0);
            self.last = Action::default();
            let mut f = self.answer(Some(initial));
            if self.has_interval && !f.iter().any(|(n, _)| *n == INTERVAL_REG) {
                f.push((INTERVAL_REG, program.initial_interval_us));
            }
            self.switched = true;
            if let Some(a) = self.auto.as_mut() {
                a.path.switched();
            }
            fields = Some(f);
        }
        let (alg, flow_log) = (self.alg, &self.flow_log);
        self.tables.update(self.key, self.gen, |rec| {
            rec.alg = alg;
            rec.choice = Some(choice);
            if let Some(c) = classified {
                rec.class = Some(c);
            }
            if let Some(s) = &switch {
                if rec.switches.len() < SWITCHES_KEPT {
                    rec.switches.push(s.clone());
                }
            }
            if let Some(log) = flow_log {
                if let Ok(mut l) = log.lock() {
                    l.class(rec, switch.as_ref());
                }
            }
        });
        if let Some(s) = &switch {
            info!(sid = self.key.sid, from = s.from, to = s.to, class = %s.class, "flow switched");
        }
        fields
    }

    /// Apply an action decided outside the report/answer exchange (a training step's):
    /// sanitized and remembered as [`FlowDriver::on_report`] does. Returns the register
    /// updates to send now.
    pub fn apply(&mut self, action: Action) -> Vec<(&'static str, u32)> {
        self.answer(Some(sanitize(action, self.mss)))
    }

    /// The registers that carry `decided` (`None`: what is in force), never none; `decided`
    /// becomes what is in force. The controller's own control registers
    /// ([`Controller::control_registers`]) go with every answer.
    fn answer(&mut self, decided: Option<Action>) -> Vec<(&'static str, u32)> {
        if let Some(a) = decided {
            if a.cwnd_bytes.is_some() {
                self.last.cwnd_bytes = a.cwnd_bytes;
            }
            if a.rate_bps.is_some() {
                self.last.rate_bps = a.rate_bps;
            }
            if a.report_interval_us.is_some() {
                self.last.report_interval_us = a.report_interval_us;
            }
        }
        let mut fields = action_fields(&decided.unwrap_or(self.last), self.has_interval);
        if fields.is_empty() {
            fields = action_fields(&self.last, self.has_interval);
        }
        fields.extend(self.ctrl.control_registers());
        if fields.is_empty() {
            fields.push(("Cwnd", self.last.cwnd_bytes.unwrap_or(10 * self.mss)));
        }
        fields
    }

    /// The datapath closed the flow (or portus dropped it): its request goes, its record
    /// joins the closed ones. Idempotent.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.tables.prefs.detach(self.key, self.gen);
        self.tables
            .decisions
            .flows_closed
            .fetch_add(1, Ordering::Relaxed);
        let metrics = self.ctrl.metrics().clone();
        let rec = self
            .tables
            .close(self.key, self.gen, |rec| rec.metrics = metrics);
        if let (Some(rec), Some(log)) = (rec, &self.flow_log) {
            if let Ok(mut l) = log.lock() {
                l.close(&rec);
            }
        }
        info!(sid = self.key.sid, "flow closed");
    }
}

impl Drop for FlowDriver {
    /// portus drops a datapath's flows without closing them (a second READY, a CREATE for a
    /// live socket id, the end of the run loop): their records must not stay live.
    fn drop(&mut self) {
        self.close();
    }
}

/// One flow under portus.
pub struct PortusFlow<I: Ipc> {
    control: Datapath<I>,
    scope: Option<Scope>,
    report_names: Vec<String>,
    values: Vec<u64>,
    driver: FlowDriver,
}

impl<I: Ipc> PortusFlow<I> {
    fn read(&mut self, m: &Report) -> bool {
        let Some(scope) = self.scope.as_ref() else {
            return false;
        };
        self.values.clear();
        for name in &self.report_names {
            match m.get_field(name, scope) {
                Ok(v) => self.values.push(v),
                Err(e) => {
                    debug!(sid = self.driver.key.sid, field = %name, error = ?e, "report without the expected field");
                    return false;
                }
            }
        }
        true
    }
}

impl<I: Ipc> Flow for PortusFlow<I> {
    fn on_report(&mut self, _sock_id: u32, m: Report) {
        let ok = self.read(&m);
        let fields = self.driver.on_report(ok.then_some(&self.values[..]));
        if self.driver.switched() {
            // a `ccp_auto` flow changed algorithm: its new program, with the handed-over
            // window and rate as the program's first values
            self.scope = match self.control.set_program(self.driver.program, Some(&fields)) {
                Ok(sc) => Some(sc),
                Err(e) => {
                    if let Some(held) = LOG_NO_PROGRAM.allow() {
                        warn!(sid = self.driver.key.sid, program = self.driver.program, error = ?e,
                            held_back = held, "could not switch the flow's program");
                    }
                    None
                }
            };
            self.report_names = self
                .driver
                .fields
                .iter()
                .map(|f| format!("Report.{f}"))
                .collect();
            return;
        }
        let Some(scope) = self.scope.as_ref() else {
            return;
        };
        if let Err(e) = self.control.update_field(scope, &fields) {
            debug!(sid = self.driver.key.sid, error = ?e, "update to datapath failed");
        }
    }

    fn close(&mut self) {
        self.driver.close();
    }
}

/// `$builder` with one [`Slot`] per name, numbered from 0: `with_slots!(b, core; reno cubic)`
/// is `b.additional_alg(Slot::<0>::new(core)).additional_alg(Slot::<1>::new(core))`. The
/// agent calls it through `ccp_algs::registered_names!(with_slots; builder, core)`, which
/// passes every name of the registry in its order, so `Slot<N>` serves `ALGORITHMS[N]` for
/// every `N`, whatever the registry holds.
macro_rules! with_slots {
    ($builder:expr, $core:expr; $($name:ident)*) => {
        with_slots!(@next $builder, $core, [0] $($name)*)
    };
    (@next $b:expr, $core:expr, [$($n:tt)*]) => { $b };
    (@next $b:expr, $core:expr, [$($n:tt)*] $head:ident $($rest:ident)*) => {
        with_slots!(@next
            $b.additional_alg::<Slot<{ $($n)* }>, _>(Slot::<{ $($n)* }>::new($core)),
            $core, [$($n)* + 1] $($rest)*)
    };
}
pub(crate) use with_slots;

/// The adapter for `ALGORITHMS[N]`.
pub struct Slot<const N: usize> {
    core: Arc<AgentCore>,
    alg: Arc<dyn Algorithm>,
}

impl<const N: usize> Slot<N> {
    /// `Some` if the agent's registry has `ALGORITHMS[N]`.
    pub fn new(core: &Arc<AgentCore>) -> Option<Self> {
        let alg = core.registry.get(ALGORITHMS[N])?.clone();
        Some(Self {
            core: core.clone(),
            alg,
        })
    }
}

impl<I: Ipc, const N: usize> CongAlg<I> for Slot<N> {
    type Flow = PortusFlow<I>;

    fn name() -> &'static str {
        ALGORITHMS[N]
    }

    fn datapath_programs(&self) -> HashMap<&'static str, String> {
        let p = self.alg.program();
        HashMap::from([(p.name, p.source)])
    }

    fn new_flow(&self, control: Datapath<I>, info: DatapathInfo) -> Self::Flow {
        self.core.new_flow(&self.alg, control, info)
    }
}

/// The adapter for flows that name no available algorithm: runs the agent's `--alg`.
pub struct DefaultAlg {
    core: Arc<AgentCore>,
}

impl DefaultAlg {
    pub fn new(core: &Arc<AgentCore>) -> Self {
        Self { core: core.clone() }
    }
}

impl<I: Ipc> CongAlg<I> for DefaultAlg {
    type Flow = PortusFlow<I>;

    fn name() -> &'static str {
        "ccp"
    }

    fn datapath_programs(&self) -> HashMap<&'static str, String> {
        let p = self.core.default_alg.program();
        HashMap::from([(p.name, p.source)])
    }

    fn new_flow(&self, control: Datapath<I>, info: DatapathInfo) -> Self::Flow {
        let alg = self.core.default_alg.clone();
        self.core.new_flow(&alg, control, info)
    }
}

#[cfg(test)]
mod tests {
    use ccp_algs::FlowMetrics;

    use super::*;

    #[test]
    fn sanitize_keeps_actions_applicable() {
        let a = sanitize(
            Action {
                cwnd_bytes: Some(10),
                rate_bps: Some(u64::MAX),
                report_interval_us: Some(1),
            },
            1448,
        );
        assert_eq!(a.cwnd_bytes, Some(1448));
        assert_eq!(a.rate_bps, Some(u64::from(u32::MAX)));
        assert_eq!(a.report_interval_us, Some(MIN_REPORT_INTERVAL_US));
        let a = sanitize(
            Action {
                rate_bps: Some(0),
                ..Default::default()
            },
            1448,
        );
        assert_eq!(a.rate_bps, Some(1));
    }

    /// Records the sample numbers its flow is handed (`None`: "no sample any more").
    struct Recorder {
        wants: bool,
        seen: Arc<Mutex<Vec<Option<u64>>>>,
        metrics: FlowMetrics,
    }

    impl Controller for Recorder {
        fn on_report(&mut self, _iv: &Interval) -> Action {
            Action::default()
        }
        fn metrics(&self) -> &FlowMetrics {
            &self.metrics
        }
        fn wants_network_stats(&self) -> bool {
            self.wants
        }
        fn network_stats(&mut self, s: Option<&NetStats>) {
            self.seen.lock().unwrap().push(s.map(|s| s.seq()));
        }
    }

    #[test]
    fn flows_that_ask_get_each_new_sample_once_and_hear_when_there_is_none() {
        use ccp_algs::netstats::NetStatsCell;
        let cell = Arc::new(NetStatsCell::new());
        let registry = ccp_algs::Registry::builtin();
        let reno = registry.get("reno").cloned().unwrap();
        let core = AgentCore {
            default_alg: reno.clone(),
            registry,
            tables: Arc::new(FlowTables::default()),
            flow_log: None,
            auto: Arc::new(AutoSelect::none(Preference::default())),
            network_stats: Some(cell.clone()),
        };
        let sample = |seq| NetStats::new(1.0, 0.5, 1.0, seq, 0).unwrap();
        let run = |sid: u32, wants: bool| {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let rec = Recorder {
                wants,
                seen: seen.clone(),
                metrics: FlowMetrics::default(),
            };
            let (mut d, _) = core.start_flow(&reno, sid, 1448, 14_480, |_| Box::new(rec));
            let v = vec![0u64; d.fields.len()];
            cell.clear();
            d.on_report(Some(&v)); // nothing published yet
            cell.publish(sample(1));
            d.on_report(Some(&v));
            d.on_report(Some(&v)); // the same sample: not again
            cell.publish(sample(2));
            d.on_report(None); // an unreadable report decides nothing
            d.on_report(Some(&v));
            cell.clear();
            d.on_report(Some(&v));
            d.on_report(Some(&v)); // "none" is said once
            cell.publish(sample(3));
            d.on_report(Some(&v));
            let got = seen.lock().unwrap().clone();
            got
        };
        assert_eq!(run(1, true), [Some(1), Some(2), None, Some(3)]);
        assert!(run(2, false).is_empty());
    }

    /// Counts its reports into a control register.
    struct Registers {
        n: u32,
        metrics: FlowMetrics,
    }

    impl Controller for Registers {
        fn on_report(&mut self, _iv: &Interval) -> Action {
            self.n += 1;
            Action {
                report_interval_us: Some(20_000),
                ..Default::default()
            }
        }
        fn metrics(&self) -> &FlowMetrics {
            &self.metrics
        }
        fn control_registers(&self) -> Vec<(&'static str, u32)> {
            vec![("Control.x_gain", 1000 + self.n), ("Control.x_target", 7)]
        }
    }

    #[test]
    fn control_registers_go_with_the_first_program_and_every_answer() {
        let registry = ccp_algs::Registry::builtin();
        let reno = registry.get("reno").cloned().unwrap();
        let core = AgentCore {
            default_alg: reno.clone(),
            registry,
            tables: Arc::new(FlowTables::default()),
            flow_log: None,
            auto: Arc::new(AutoSelect::none(Preference::default())),
            network_stats: None,
        };
        let ctrl = Registers {
            n: 0,
            metrics: FlowMetrics::default(),
        };
        let (mut d, first) = core.start_flow(&reno, 3, 1448, 14_480, |_| Box::new(ctrl));
        assert!(first.contains(&("Control.x_gain", 1000)), "{first:?}");
        assert!(first.contains(&("Control.x_target", 7)));
        assert!(first.iter().any(|(n, _)| *n == INTERVAL_REG));
        let v = vec![0u64; d.fields.len()];
        let a = d.on_report(Some(&v));
        assert_eq!(
            a,
            [
                (INTERVAL_REG, 20_000),
                ("Control.x_gain", 1001),
                ("Control.x_target", 7)
            ]
        );
        // an unreadable report repeats what is in force, registers included
        let a = d.on_report(None);
        assert!(a.contains(&("Control.x_gain", 1001)), "{a:?}");
        assert!(a.contains(&(INTERVAL_REG, 20_000)));
        // and so does an action applied outside the exchange
        let a = d.apply(Action::default());
        assert!(a.contains(&("Control.x_gain", 1001)), "{a:?}");
    }

    /// Records the preference in force at each decision.
    struct Prefs {
        w: Preference,
        seen: Arc<Mutex<Vec<[f64; 3]>>>,
        metrics: FlowMetrics,
    }

    impl Controller for Prefs {
        fn on_report(&mut self, _iv: &Interval) -> Action {
            self.seen.lock().unwrap().push(self.w.as_array());
            Action::default()
        }
        fn set_preference(&mut self, w: Preference) {
            self.w = w;
        }
        fn metrics(&self) -> &FlowMetrics {
            &self.metrics
        }
    }

    #[test]
    fn a_preference_set_mid_flow_reaches_the_controllers_next_decision() {
        use crate::flows::prefs::{FlowAddr, SocketPair};
        let registry = ccp_algs::Registry::builtin();
        let reno = registry.get("reno").cloned().unwrap();
        let core = AgentCore {
            default_alg: reno.clone(),
            registry,
            tables: Arc::new(FlowTables::default()),
            flow_log: None,
            auto: Arc::new(AutoSelect::none(Preference::default())),
            network_stats: None,
        };
        let addr = FlowAddr {
            src_ip: "10.0.1.1".parse().unwrap(),
            src_port: 40000,
            dst_ip: "10.0.2.2".parse().unwrap(),
            dst_port: 5201,
        };
        let key = FlowKey { peer: 0, sid: 9 };
        core.tables.set_request(
            key,
            FlowRequest {
                requested: "ccp_reno".into(),
                alg: "reno".into(),
                preference: None,
                addr: Some(addr),
                resolved: None,
                choice: None,
            },
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (mut d, _) = core.start_flow(&reno, 9, 1448, 14_480, |info| {
            Box::new(Prefs {
                w: info.preference,
                seen: seen.clone(),
                metrics: FlowMetrics::default(),
            })
        });
        let v = vec![0u64; d.fields.len()];
        d.on_report(Some(&v));
        let lat = Preference::new(0.1, 0.8, 0.1).unwrap();
        let pair = SocketPair {
            local: "10.0.1.1:40000".parse().unwrap(),
            remote: "10.0.2.2:5201".parse().unwrap(),
        };
        core.tables.prefs.set(pair, lat).unwrap();
        d.on_report(None); // an unreadable report decides nothing
        d.on_report(Some(&v));
        d.on_report(Some(&v));
        let dflt = Preference::default().as_array();
        assert_eq!(
            *seen.lock().unwrap(),
            [dflt, lat.as_array(), lat.as_array()]
        );
        let rec = core.tables.records().pop().unwrap();
        assert_eq!((rec.w, rec.w_source), (lat, PrefSource::Socket));
        assert_eq!(core.tables.decisions.decisions.load(Ordering::Relaxed), 3);
        assert_eq!(core.tables.decisions.unreadable.load(Ordering::Relaxed), 1);
        // closing the flow leaves the entry pending (it expires later)
        d.close();
        assert_eq!(core.tables.prefs.entries()[0].flows, 0);
    }

    #[test]
    fn slot_names_follow_the_registry_order() {
        assert_eq!(
            <Slot<0> as CongAlg<portus::ipc::chan::Socket<portus::ipc::Blocking>>>::name(),
            "reno"
        );
        assert_eq!(
            <Slot<2> as CongAlg<portus::ipc::chan::Socket<portus::ipc::Blocking>>>::name(),
            "bbr"
        );
        assert_eq!(
            <Slot<5> as CongAlg<portus::ipc::chan::Socket<portus::ipc::Blocking>>>::name(),
            "mocc"
        );
    }

    /// What `with_slots!` gives the agent: one adapter per registered name, in registry
    /// order, each named as its line of the registry.
    #[test]
    fn the_agent_gets_one_slot_per_registered_name() {
        type Ipc = portus::ipc::chan::Socket<portus::ipc::Blocking>;
        /// the slots' names, from the same expansion as the agent's chain
        macro_rules! slot_names {
            ($($name:ident)*) => {{
                let mut v: Vec<(&'static str, &'static str)> = Vec::new();
                slot_names!(@next v, [0] $($name)*);
                v
            }};
            (@next $v:ident, [$($n:tt)*]) => {};
            (@next $v:ident, [$($n:tt)*] $head:ident $($rest:ident)*) => {
                $v.push((stringify!($head), <Slot<{ $($n)* }> as CongAlg<Ipc>>::name()));
                slot_names!(@next $v, [$($n)* + 1] $($rest)*);
            };
        }
        let got = ccp_algs::registered_names!(slot_names);
        assert_eq!(got.len(), ALGORITHMS.len());
        for ((token, slot), name) in got.into_iter().zip(ALGORITHMS) {
            assert_eq!((token, slot), (name, name));
        }
    }
}
