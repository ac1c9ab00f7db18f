//! Learned algorithms: the part that turns reports into observations and actions into
//! datapath decisions ([`LearnedCore`]), kept apart from the policy that maps one to the other.
//!
//! The split lets one implementation serve both sides:
//!
//! ```text
//!   agent (inference):  report ─▶ core.observe ─▶ obs ─▶ Policy::act (ONNX) ─▶ clamp ─▶ core.apply ─▶ Action
//!   training (Python):  report ─▶ core.observe ─▶ obs ─▶ (env returns obs, core.reward) … step(action) ─▶ core.apply
//! ```
//!
//! so the features a model is trained on are, by construction, the features it sees when
//! deployed. [`LearnedController`] is the agent-side composition.

use crate::controller::{Action, Algorithm, Controller, FlowInfo, FlowMetrics};
use crate::policy::{Policy, PolicySpec};
use crate::pref::Preference;
use crate::signals::Interval;

/// Features, actions and reward of one learned flow.
pub trait LearnedCore: Send {
    /// The observation/action layout this core produces and consumes.
    fn spec(&self) -> &PolicySpec;

    /// Fold one report into the core's state. Returns `true` when a decision is due, with the
    /// observation written into `obs` (`spec().obs_dim` values) and, for masked policies,
    /// the mask into `mask`.
    fn observe(&mut self, iv: &Interval, obs: &mut [f32], mask: &mut [f32]) -> bool;

    /// Apply an action (already clamped into the spec's bounds) and say what the datapath
    /// should do.
    fn apply(&mut self, action: &[f32]) -> Action;

    /// The decision when none is due (e.g. during start-up) or the policy failed: typically
    /// keep the current rate/window.
    fn hold(&mut self) -> Action;

    /// The paper's reward for the most recently observed interval.
    fn reward(&self) -> f64;

    /// The action before any report.
    fn initial_action(&mut self) -> Action;

    /// The flow's preference changed.
    fn set_preference(&mut self, _w: Preference) {}

    /// Observability counters (reports, rtt, last decision).
    fn metrics(&self) -> &FlowMetrics;
}

/// An algorithm whose flows are driven by a learned policy.
pub trait LearnedAlgorithm: Algorithm {
    /// What its models must look like.
    fn spec(&self) -> PolicySpec;
    /// A new per-flow core (features/actions/reward), without a policy.
    fn new_core(&self, info: &FlowInfo) -> Box<dyn LearnedCore>;
}

/// A learned core driven by a policy: the agent-side controller of every learned algorithm.
pub struct LearnedController {
    core: Box<dyn LearnedCore>,
    policy: Box<dyn Policy>,
    obs: Vec<f32>,
    mask: Vec<f32>,
    act: Vec<f32>,
    /// Outputs clamped here (those the policy clamped itself are in `policy.clamped()`).
    own_clamped: u64,
    metrics: FlowMetrics,
}

impl LearnedController {
    pub fn new(core: Box<dyn LearnedCore>, policy: Box<dyn Policy>) -> Self {
        let spec = core.spec();
        let (obs_dim, act_dim, masked) = (spec.obs_dim, spec.act_dim, spec.masked);
        Self {
            core,
            policy,
            obs: vec![0.0; obs_dim],
            mask: vec![if masked { 0.0 } else { 1.0 }; obs_dim],
            act: vec![0.0; act_dim],
            own_clamped: 0,
            metrics: FlowMetrics::default(),
        }
    }

    fn sync_metrics(&mut self) {
        let errors = self.metrics.policy_errors;
        self.metrics = self.core.metrics().clone();
        self.metrics.clamped_outputs = self.own_clamped + self.policy.clamped();
        self.metrics.policy_errors = errors;
    }
}

impl Controller for LearnedController {
    fn on_report(&mut self, iv: &Interval) -> Action {
        let action = if self.core.observe(iv, &mut self.obs, &mut self.mask) {
            let mask = self.core.spec().masked.then_some(&self.mask[..]);
            match self.policy.act(&self.obs, mask, &mut self.act) {
                Ok(()) => {
                    // the policy may clamp itself (ONNX policies do); count both
                    self.own_clamped += self.core.spec().clamp(&mut self.act);
                    self.core.apply(&self.act)
                }
                Err(e) => {
                    self.metrics.policy_errors += 1;
                    tracing::debug!(error = %e, "policy failed; holding the last decision");
                    self.core.hold()
                }
            }
        } else {
            self.core.hold()
        };
        self.sync_metrics();
        action
    }

    fn set_preference(&mut self, w: Preference) {
        self.core.set_preference(w);
    }

    fn initial_action(&mut self) -> Action {
        self.core.initial_action()
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }
}

/// A policy that never answers: the controller then holds its last decision and counts a
/// policy error. Used only if a model vanished between registration and a flow's start.
struct NoPolicy;

impl Policy for NoPolicy {
    fn obs_dim(&self) -> usize {
        0
    }
    fn act_dim(&self) -> usize {
        0
    }
    fn act(
        &mut self,
        _obs: &[f32],
        _mask: Option<&[f32]>,
        _out: &mut [f32],
    ) -> Result<(), crate::policy::PolicyError> {
        Err(crate::policy::PolicyError::Inference(
            "no model loaded for this algorithm".into(),
        ))
    }
}

/// A learned algorithm plus where its per-flow policies come from: what the agent registers.
pub struct WithPolicy {
    alg: std::sync::Arc<dyn LearnedAlgorithm>,
    source: std::sync::Arc<dyn crate::policy::PolicySource>,
}

impl WithPolicy {
    pub fn new(
        alg: std::sync::Arc<dyn LearnedAlgorithm>,
        source: std::sync::Arc<dyn crate::policy::PolicySource>,
    ) -> Self {
        Self { alg, source }
    }
}

impl Algorithm for WithPolicy {
    fn name(&self) -> &'static str {
        self.alg.name()
    }

    fn program(&self) -> crate::signals::FoldProgram {
        self.alg.program()
    }

    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        let policy = self
            .source
            .policy(self.alg.name())
            .unwrap_or_else(|| Box::new(NoPolicy));
        Box::new(LearnedController::new(self.alg.new_core(info), policy))
    }
}
