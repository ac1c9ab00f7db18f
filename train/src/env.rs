//! A training environment over the simulator: one or more learning flows of one learned
//! algorithm share a bottleneck (possibly with other algorithms' flows), and an outside
//! learner chooses their actions.
//!
//! The agent side is the synchronous [`InlineAgent`] of the agent's runtime: every flow that
//! requests the learning algorithm is claimed by a [`Hub`], which gives the agent a
//! controller running that algorithm's [`LearnedCore`] — the same feature, action and reward
//! code the agent runs with an ONNX policy — and the agent drives the flow as any other
//! (report decoding, sanitized answers, records: `ccp_runtime::adapter::FlowDriver`). A
//! learning flow's report makes its core compute an observation; the flow then holds its
//! last decision and the simulator pauses once every active learner has a fresh observation.
//! `step(actions)` hands each learner's action to the agent (applied through the flow's
//! driver while the simulator stands still, at the flow's next ACK exactly as an answer to
//! the report would be) and runs on to the next such point.
//!
//! When the simulator pauses is the environment's [`Pause`]: once *every* active learner has a
//! fresh observation (`All`, MOCC's trainer: one decision per learner per step; a learner that
//! decides twice before the others decide once, with a shorter RTT or while another is in its
//! start-up, holds its action in between, and only its latest observation and reward are
//! returned), or as soon as *any* has one (`Any`, Jury's trainer: every learner decides at each
//! of its own reports, exactly as under the agent; a step returns the learners that have a
//! decision due).
//!
//! In-network statistics: a scenario with `[netstats]` gets a [`NetStatsCell`] that the
//! simulator's bottleneck publishes to and the agent reads, as `ccp-agent --sim` does
//! (`ccp_runtime::simrun`); the agent's flow driver hands each new sample to the learner's
//! core before the next report, exactly as it would to a served flow's controller.
//!
//! Besides the observation, each step returns the core's state mask (masked specs: Owl) and,
//! per learner, the rewards of every report since its last action ([`StepOut::span_reward`]),
//! for trainers whose decisions are not taken at every report.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Context;
use ccp_algs::learned::{LearnedAlgorithm, LearnedCore};
use ccp_algs::netstats::{NetStats, NetStatsCell, NetworkStats};
use ccp_algs::policy::PolicySpec;
use ccp_algs::Registry;
use ccp_algs::{Action, Algorithm, Controller, FlowInfo, FlowMetrics, Interval, Preference};
use ccp_runtime::agent::inline::{ExternalControl, InlineAgent};
use ccp_runtime::flows::FlowRequest;
use ccp_runtime::{Agent, AgentOptions};
use ccp_sim::{CapacityMeter, Scenario, Session, SimOptions, SimResults, Simulator};

/// One learning flow: its core and what the learner has yet to see or do.
struct Learner {
    sid: u32,
    core: Box<dyn LearnedCore>,
    obs: Vec<f32>,
    mask: Vec<f32>,
    reward: f64,
    /// Sum and count of the core's rewards over the reports since the learner's last action
    /// (every report, decisions or not).
    span_sum: f64,
    span_reports: u32,
    /// A fresh observation awaits an action.
    pending: bool,
    closed: bool,
    decisions: u64,
}

type Shared = Arc<Mutex<Learner>>;

fn lock(l: &Shared) -> MutexGuard<'_, Learner> {
    // a panic elsewhere leaves a consistent learner: keep going
    l.lock().unwrap_or_else(|e| e.into_inner())
}

/// The controller the agent drives a learning flow with: its reports go to the core (an
/// observation, the reward), the flow holds its last decision until the learner acts
/// ([`TrainEnv::step`]). Decoding reports, sanitizing and answering decisions, and the
/// flow's record stay the agent's ([`ccp_runtime::adapter::FlowDriver`]).
struct LearnerControl {
    learner: Shared,
    metrics: FlowMetrics,
    /// The bottleneck's capacity, when rewards measure the flow against what the link offered
    /// over each report's interval ([`TrainEnv::set_reward_in_capacity`]).
    capacity: Option<Arc<CapacityMeter>>,
}

impl Controller for LearnerControl {
    fn on_report(&mut self, iv: &Interval) -> Action {
        let mut l = lock(&self.learner);
        let Learner {
            core, obs, mask, ..
        } = &mut *l;
        let due = core.observe(iv, obs, mask);
        let r = match (&self.capacity, iv.interval_us) {
            (Some(c), dt_us) if dt_us > 0 => {
                // the report's interval ends now (the agent answers in lockstep)
                let t1 = ccp_sim::sim_clock_ns();
                let t0 = t1.saturating_sub(dt_us.saturating_mul(1000));
                let bps = c.bytes_between(t0, t1) / ((t1 - t0).max(1) as f64 / 1e9);
                l.core.reward_in_capacity(bps)
            }
            _ => l.core.reward(),
        };
        l.span_sum += r;
        l.span_reports += 1;
        if due {
            l.pending = true;
            l.reward = r;
        }
        let a = l.core.hold();
        self.metrics = l.core.metrics().clone();
        a
    }

    fn set_preference(&mut self, w: Preference) {
        lock(&self.learner).core.set_preference(w);
    }

    fn initial_action(&mut self) -> Action {
        lock(&self.learner).core.initial_action()
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }

    // the agent's flow driver asks once, at the flow's start, and then hands each new sample
    // to the controller before the report that follows it: forwarded to the core as
    // `LearnedController` does for a served flow
    fn wants_network_stats(&self) -> bool {
        lock(&self.learner).core.wants_network_stats()
    }

    fn network_stats(&mut self, s: Option<&NetStats>) {
        lock(&self.learner).core.network_stats(s);
    }

    // the program registers a learner's action sets (Nuwa's gain): the agent's flow driver
    // sends them with every answer, a step's action included, as for a served flow
    fn control_registers(&self) -> Vec<(&'static str, u32)> {
        lock(&self.learner).core.control_registers()
    }
}

/// The learning flows, shared between the inline agent (which claims them and feeds them
/// reports) and the environment (which applies actions).
pub struct Hub {
    alg: Arc<dyn LearnedAlgorithm>,
    max_learners: usize,
    learners: Vec<Shared>,
    by_sid: HashMap<u32, usize>,
    /// Actions applied by `step`, waiting for the datapath to read them.
    actions: Vec<(u32, Action)>,
    /// Handed to each learner's control when rewards are in the link's capacity.
    capacity: Option<Arc<CapacityMeter>>,
}

/// When [`TrainEnv::step`] hands control back to the learner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pause {
    /// Once every active learner has a fresh observation.
    #[default]
    All,
    /// As soon as any learner has one.
    Any,
}

impl Hub {
    fn any_pending(&self) -> bool {
        self.learners.iter().any(|l| {
            let l = lock(l);
            !l.closed && l.pending
        })
    }

    fn all_active_pending(&self) -> bool {
        let mut any = false;
        for l in &self.learners {
            let l = lock(l);
            if !l.closed {
                any = true;
                if !l.pending {
                    return false;
                }
            }
        }
        any
    }
}

struct HubRef(Rc<RefCell<Hub>>);

impl ExternalControl for HubRef {
    fn claim(
        &mut self,
        info: &FlowInfo,
        _req: &FlowRequest,
        alg: &Arc<dyn Algorithm>,
    ) -> Option<Box<dyn Controller>> {
        let mut h = self.0.borrow_mut();
        if alg.name() != h.alg.name() || h.learners.len() >= h.max_learners {
            return None;
        }
        let core = h.alg.new_core(info);
        let (obs_dim, masked) = (core.spec().obs_dim, core.spec().masked);
        let metrics = core.metrics().clone();
        let learner = Arc::new(Mutex::new(Learner {
            sid: info.sock_id,
            core,
            obs: vec![0.0; obs_dim],
            // before its first observation a masked core's features are all absent (as
            // `LearnedController` starts); an unmasked core's mask is all ones
            mask: vec![if masked { 0.0 } else { 1.0 }; obs_dim],
            reward: 0.0,
            span_sum: 0.0,
            span_reports: 0,
            pending: false,
            closed: false,
            decisions: 0,
        }));
        let idx = h.learners.len();
        h.learners.push(learner.clone());
        h.by_sid.insert(info.sock_id, idx);
        let capacity = h.capacity.clone();
        Some(Box::new(LearnerControl {
            learner,
            metrics,
            capacity,
        }))
    }

    fn take_actions(&mut self) -> Vec<(u32, Action)> {
        std::mem::take(&mut self.0.borrow_mut().actions)
    }

    fn close(&mut self, sid: u32) {
        let h = self.0.borrow();
        if let Some(&i) = h.by_sid.get(&sid) {
            let mut l = lock(&h.learners[i]);
            l.closed = true;
            l.pending = false;
        }
    }
}

/// What one step returns.
pub struct StepOut {
    /// `num_learners × obs_dim`, row-major; zeros for learners not started yet.
    pub obs: Vec<f32>,
    /// The state mask of each observation, same layout (1 present, 0 absent): the core's for
    /// a masked spec, all ones otherwise; zeros for masked learners not started yet.
    pub mask: Vec<f32>,
    pub rewards: Vec<f64>,
    /// Per learner, the sum and the number of the core's rewards over every report since its
    /// last action (the reports its action led to, this observation's included); zero before
    /// the learner's flow starts.
    pub span_reward: Vec<(f64, u32)>,
    /// Learners whose flow has a decision this step (started, not closed).
    pub active: Vec<bool>,
    /// The scenario's time is up.
    pub done: bool,
    pub sim_time_s: f64,
}

/// The environment.
pub struct TrainEnv {
    scenario: Scenario,
    alg: Arc<dyn LearnedAlgorithm>,
    spec: PolicySpec,
    agent: Agent,
    num_learners: usize,
    pause: Pause,
    /// Where the bottleneck publishes its in-network statistics (`[netstats]`), read by the
    /// agent.
    network_stats: Option<Arc<NetStatsCell>>,
    reward_in_capacity: bool,
    state: Option<Running>,
}

struct Running {
    session: Session,
    hub: Rc<RefCell<Hub>>,
    done: bool,
}

impl TrainEnv {
    /// `alg` is the learned algorithm being trained; every scenario flow that requests it is
    /// a learner (at least one must). Other flows run under the agent as usual. A scenario
    /// with `[netstats]` publishes its bottleneck's statistics to the agent (replacing any
    /// source in `opts`, as `ccp-agent --sim` does).
    pub fn new(
        scenario: Scenario,
        alg: Arc<dyn LearnedAlgorithm>,
        mut opts: AgentOptions,
    ) -> anyhow::Result<Self> {
        let name = alg.name();
        let num_learners: usize = scenario
            .flows
            .iter()
            .filter(|f| {
                f.alg
                    .as_deref()
                    .map(ccp_algs::registry::strip_prefix)
                    .is_some_and(|a| a == name)
            })
            .count();
        anyhow::ensure!(
            num_learners > 0,
            "the scenario has no flow with alg = \"{name}\": nothing to train"
        );
        let network_stats = scenario.netstats.map(|_| Arc::new(NetStatsCell::new()));
        if let Some(c) = &network_stats {
            opts.network_stats = Some(c.clone() as Arc<dyn NetworkStats>);
        }
        let mut registry = Registry::from_config(&opts.algs);
        registry.register(alg.clone() as Arc<dyn Algorithm>);
        let agent = Agent::with_registry(&opts, registry)?;
        let spec = alg.spec();
        Ok(Self {
            scenario,
            alg,
            spec,
            agent,
            num_learners,
            pause: Pause::default(),
            network_stats,
            reward_in_capacity: false,
            state: None,
        })
    }

    /// Rewards with the flow's rate in units of the bottleneck's capacity over each report's
    /// interval ([`LearnedCore::reward_in_capacity`]; default off: the core's own unit). From
    /// the next `reset`.
    pub fn set_reward_in_capacity(&mut self, on: bool) {
        self.reward_in_capacity = on;
    }

    /// When steps pause ([`Pause`]; default `All`).
    pub fn set_pause(&mut self, pause: Pause) {
        self.pause = pause;
    }

    pub fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    /// `Some(n)` when the policy is discrete (`LearnedAlgorithm::discrete_actions`).
    pub fn discrete_actions(&self) -> Option<usize> {
        self.alg.discrete_actions()
    }

    pub fn num_learners(&self) -> usize {
        self.num_learners
    }

    /// Start a new episode (`seed` overrides the scenario's) and run to the first decision.
    pub fn reset(&mut self, seed: Option<u64>) -> anyhow::Result<StepOut> {
        let mut scenario = self.scenario.clone();
        if let Some(s) = seed {
            scenario.seed = s;
        }
        let hub = Rc::new(RefCell::new(Hub {
            alg: self.alg.clone(),
            max_learners: self.num_learners,
            learners: Vec::new(),
            by_sid: HashMap::new(),
            actions: Vec::new(),
            capacity: self
                .reward_in_capacity
                .then(|| Arc::new(CapacityMeter::new(&scenario.link.capacity))),
        }));
        let mut inline: InlineAgent = self.agent.inline()?;
        inline.set_external(Box::new(HubRef(hub.clone())));
        // the simulator clears the cell when the run starts
        let sim_opts = SimOptions {
            network_stats: self.network_stats.clone(),
            ..SimOptions::default()
        };
        let sim = Simulator::new(&scenario, sim_opts)?;
        let session = sim
            .session(Box::new(inline))
            .context("starting the simulation")?;
        self.state = Some(Running {
            session,
            hub,
            done: false,
        });
        self.advance()
    }

    /// Apply one action per learner (`num_learners × act_dim`, row-major) and run to the next
    /// decision point.
    pub fn step(&mut self, actions: &[f32]) -> anyhow::Result<StepOut> {
        let act_dim = self.spec.act_dim;
        anyhow::ensure!(
            actions.len() == self.num_learners * act_dim,
            "expected {} action values ({} learners × {act_dim}), got {}",
            self.num_learners * act_dim,
            self.num_learners,
            actions.len()
        );
        let st = self
            .state
            .as_mut()
            .context("step() before reset(): call reset() first")?;
        {
            let mut h = st.hub.borrow_mut();
            let mut decided = Vec::new();
            for (i, l) in h.learners.iter().enumerate() {
                let mut l = lock(l);
                if !l.pending || l.closed {
                    continue;
                }
                let mut a = actions[i * act_dim..(i + 1) * act_dim].to_vec();
                self.spec.clamp(&mut a);
                decided.push((l.sid, l.core.apply(&a)));
                l.pending = false;
                (l.span_sum, l.span_reports) = (0.0, 0);
                l.decisions += 1;
            }
            // the agent sanitizes and sends them as the flows' drivers would an answer
            h.actions.extend(decided);
        }
        self.advance()
    }

    fn advance(&mut self) -> anyhow::Result<StepOut> {
        let st = self.state.as_mut().context("no episode running")?;
        if !st.done {
            let hub = st.hub.clone();
            let any = self.pause == Pause::Any;
            let mut pause = |_: &mut dyn ccp_sim::DatapathIpc| {
                let h = hub.borrow();
                if any {
                    h.any_pending()
                } else {
                    h.all_active_pending()
                }
            };
            st.done = st.session.advance(&mut pause)?;
        }
        let h = st.hub.borrow();
        let d = self.spec.obs_dim;
        let unstarted_mask = if self.spec.masked { 0.0 } else { 1.0 };
        let mut out = StepOut {
            obs: vec![0.0; self.num_learners * d],
            mask: vec![unstarted_mask; self.num_learners * d],
            rewards: vec![0.0; self.num_learners],
            span_reward: vec![(0.0, 0); self.num_learners],
            active: vec![false; self.num_learners],
            done: st.done,
            sim_time_s: st.session.now_s(),
        };
        for (i, l) in h.learners.iter().enumerate() {
            let l = lock(l);
            out.obs[i * d..(i + 1) * d].copy_from_slice(&l.obs);
            out.mask[i * d..(i + 1) * d].copy_from_slice(&l.mask);
            out.rewards[i] = l.reward;
            out.span_reward[i] = (l.span_sum, l.span_reports);
            out.active[i] = !l.closed && l.pending;
        }
        Ok(out)
    }

    /// The simulator's results for the episode (once; the episode then needs a reset).
    pub fn results(&mut self) -> anyhow::Result<SimResults> {
        let st = self.state.as_mut().context("no episode running")?;
        st.session
            .finish()
            .context("results() was already called for this episode")
    }

    /// The agent's records of this environment's flows, learners included (by socket id;
    /// the episodes' flows closed so far and the live ones, bounded as the agent's tables).
    pub fn records(&self) -> Vec<ccp_runtime::flows::FlowRecord> {
        self.agent.records()
    }

    /// Decisions taken per learner in this episode.
    pub fn decisions(&self) -> Vec<u64> {
        self.state
            .as_ref()
            .map(|s| {
                s.hub
                    .borrow()
                    .learners
                    .iter()
                    .map(|l| lock(l).decisions)
                    .collect()
            })
            .unwrap_or_default()
    }
}
