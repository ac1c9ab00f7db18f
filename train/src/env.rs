//! A training environment over the simulator: one or more learning flows of one learned
//! algorithm share a bottleneck (possibly with other algorithms' flows), and an outside
//! learner chooses their actions.
//!
//! The agent side is the synchronous [`InlineAgent`]: every flow that requests the learning
//! algorithm is claimed by a [`Hub`], which runs that algorithm's [`LearnedCore`] — the same
//! feature, action and reward code the agent runs with an ONNX policy. A learning flow's
//! report makes its core compute an observation; the flow then holds its last decision and
//! the simulator pauses once every active learner has a fresh observation. `step(actions)`
//! applies each learner's action (a register update queued while the simulator stands
//! still, applied at the flow's next ACK exactly as an answer to the report would be) and
//! runs on to the next such point.
//!
//! A learner that decides twice before the others decide once (a shorter RTT) holds its
//! action in between; only its latest observation and reward are returned.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use anyhow::Context;
use ccp_algs::learned::{LearnedAlgorithm, LearnedCore};
use ccp_algs::policy::PolicySpec;
use ccp_algs::signals::INTERVAL_REG;
use ccp_algs::{Algorithm, FlowInfo, Interval, Registry};
use ccp_runtime::adapter::{action_fields, sanitize};
use ccp_runtime::guard::FlowRequest;
use ccp_runtime::inline::{ExternalControl, InlineAgent};
use ccp_runtime::{Agent, AgentOptions};
use ccp_sim::{Scenario, Session, SimOptions, SimResults, Simulator};

/// One learning flow.
struct Learner {
    sid: u32,
    mss: u32,
    core: Box<dyn LearnedCore>,
    obs: Vec<f32>,
    mask: Vec<f32>,
    reward: f64,
    /// A fresh observation awaits an action.
    pending: bool,
    closed: bool,
    decisions: u64,
    has_interval: bool,
}

/// The learning flows, shared between the inline agent (which feeds them reports) and the
/// environment (which applies actions).
pub struct Hub {
    alg: Arc<dyn LearnedAlgorithm>,
    fields: Vec<&'static str>,
    has_interval: bool,
    max_learners: usize,
    learners: Vec<Learner>,
    by_sid: HashMap<u32, usize>,
    /// Actions applied by `step`, waiting for the datapath to read them.
    updates: Vec<(u32, Vec<(&'static str, u32)>)>,
}

impl Hub {
    fn all_active_pending(&self) -> bool {
        let mut any = false;
        for l in &self.learners {
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
    fn claim(&mut self, info: &FlowInfo, _req: &FlowRequest, alg: &Arc<dyn Algorithm>) -> bool {
        let mut h = self.0.borrow_mut();
        if alg.name() != h.alg.name() || h.learners.len() >= h.max_learners {
            return false;
        }
        let core = h.alg.new_core(info);
        let spec = core.spec().clone();
        let idx = h.learners.len();
        let has_interval = h.has_interval;
        h.learners.push(Learner {
            sid: info.sock_id,
            mss: info.mss,
            core,
            obs: vec![0.0; spec.obs_dim],
            mask: vec![1.0; spec.obs_dim],
            reward: 0.0,
            pending: false,
            closed: false,
            decisions: 0,
            has_interval,
        });
        h.by_sid.insert(info.sock_id, idx);
        true
    }

    fn initial(&mut self, sid: u32) -> Vec<(&'static str, u32)> {
        let mut h = self.0.borrow_mut();
        let Some(&i) = h.by_sid.get(&sid) else {
            return Vec::new();
        };
        let l = &mut h.learners[i];
        let a = sanitize(l.core.initial_action(), l.mss);
        action_fields(&a, l.has_interval)
    }

    fn on_report(&mut self, sid: u32, values: &[u64]) -> Vec<(&'static str, u32)> {
        let mut h = self.0.borrow_mut();
        let Some(&i) = h.by_sid.get(&sid) else {
            return Vec::new();
        };
        let iv = Interval::from_fields(&h.fields, values);
        let l = &mut h.learners[i];
        let Learner {
            core, obs, mask, ..
        } = l;
        if core.observe(&iv, obs, mask) {
            l.pending = true;
            l.reward = l.core.reward();
        }
        let a = sanitize(l.core.hold(), l.mss);
        let mut f = action_fields(&a, l.has_interval);
        if f.is_empty() {
            f.push((INTERVAL_REG, 10_000));
        }
        f
    }

    fn take_updates(&mut self) -> Vec<(u32, Vec<(&'static str, u32)>)> {
        std::mem::take(&mut self.0.borrow_mut().updates)
    }

    fn close(&mut self, sid: u32) {
        let mut h = self.0.borrow_mut();
        if let Some(&i) = h.by_sid.get(&sid) {
            h.learners[i].closed = true;
            h.learners[i].pending = false;
        }
    }
}

/// What one step returns.
pub struct StepOut {
    /// `num_learners × obs_dim`, row-major; zeros for learners not started yet.
    pub obs: Vec<f32>,
    pub rewards: Vec<f64>,
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
    state: Option<Running>,
}

struct Running {
    session: Session,
    hub: Rc<RefCell<Hub>>,
    done: bool,
}

impl TrainEnv {
    /// `alg` is the learned algorithm being trained; every scenario flow that requests it is
    /// a learner (at least one must). Other flows run under the agent as usual.
    pub fn new(
        scenario: Scenario,
        alg: Arc<dyn LearnedAlgorithm>,
        opts: AgentOptions,
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
            state: None,
        })
    }

    pub fn spec(&self) -> &PolicySpec {
        &self.spec
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
        let program = self.alg.program();
        let hub = Rc::new(RefCell::new(Hub {
            alg: self.alg.clone(),
            has_interval: program.source.contains(INTERVAL_REG),
            fields: program.fields,
            max_learners: self.num_learners,
            learners: Vec::new(),
            by_sid: HashMap::new(),
            updates: Vec::new(),
        }));
        let mut inline: InlineAgent = self.agent.inline()?;
        inline.set_external(Box::new(HubRef(hub.clone())));
        let sim = Simulator::new(&scenario, SimOptions::default())?;
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
            let mut updates = Vec::new();
            for (i, l) in h.learners.iter_mut().enumerate() {
                if !l.pending || l.closed {
                    continue;
                }
                let mut a = actions[i * act_dim..(i + 1) * act_dim].to_vec();
                self.spec.clamp(&mut a);
                let decided = sanitize(l.core.apply(&a), l.mss);
                l.pending = false;
                l.decisions += 1;
                updates.push((l.sid, action_fields(&decided, l.has_interval)));
            }
            h.updates.extend(updates);
        }
        self.advance()
    }

    fn advance(&mut self) -> anyhow::Result<StepOut> {
        let st = self.state.as_mut().context("no episode running")?;
        if !st.done {
            let hub = st.hub.clone();
            let mut pause = |_: &mut dyn ccp_sim::DatapathIpc| hub.borrow().all_active_pending();
            st.done = st.session.advance(&mut pause)?;
        }
        let h = st.hub.borrow();
        let d = self.spec.obs_dim;
        let mut out = StepOut {
            obs: vec![0.0; self.num_learners * d],
            rewards: vec![0.0; self.num_learners],
            active: vec![false; self.num_learners],
            done: st.done,
            sim_time_s: st.session.now_s(),
        };
        for (i, l) in h.learners.iter().enumerate() {
            out.obs[i * d..(i + 1) * d].copy_from_slice(&l.obs);
            out.rewards[i] = l.reward;
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

    /// Decisions taken per learner in this episode.
    pub fn decisions(&self) -> Vec<u64> {
        self.state
            .as_ref()
            .map(|s| {
                s.hub
                    .borrow()
                    .learners
                    .iter()
                    .map(|l| l.decisions)
                    .collect()
            })
            .unwrap_or_default()
    }
}
