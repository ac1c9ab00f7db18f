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
use crate::netstats::NetStats;
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

    /// The same reward with the flow's rate measured in units of `capacity_bps` (bytes/s),
    /// what the bottleneck offered over that interval. Only a simulator knows this, so only
    /// training asks (a reward, never an observation); a core whose reward has no rate unit
    /// keeps [`LearnedCore::reward`].
    fn reward_in_capacity(&self, _capacity_bps: f64) -> f64 {
        self.reward()
    }

    /// The action before any report.
    fn initial_action(&mut self) -> Action;

    /// The flow's preference changed.
    fn set_preference(&mut self, _w: Preference) {}

    /// Observability counters (reports, rtt, last decision).
    fn metrics(&self) -> &FlowMetrics;

    /// Whether the core reads in-network statistics ([`Controller::wants_network_stats`]).
    fn wants_network_stats(&self) -> bool {
        false
    }

    /// A new in-network sample, or `None` once the source has none
    /// ([`Controller::network_stats`]); the core writes what it means for the observation
    /// (and the mask) at its next `observe`.
    fn network_stats(&mut self, _s: Option<&NetStats>) {}

    /// The fold program's control registers as the core wants them now
    /// ([`Controller::control_registers`]): what a policy's action sets when the datapath,
    /// not the agent, applies it (Nuwa's gain `k`).
    fn control_registers(&self) -> Vec<(&'static str, u32)> {
        Vec::new()
    }
}

/// Every knob that shapes what a learned algorithm's policy observes or how its action is
/// applied (α, bounds, additive increase, governors…), by knob name, as JSON values: the
/// model card's `dynamics` section. Written by the trainer, checked by the agent on load.
pub type Dynamics = std::collections::BTreeMap<String, serde_json::Value>;

/// An algorithm whose flows are driven by a learned policy.
pub trait LearnedAlgorithm: Algorithm {
    /// What its models must look like.
    fn spec(&self) -> PolicySpec;
    /// A new per-flow core (features/actions/reward), without a policy.
    fn new_core(&self, info: &FlowInfo) -> Box<dyn LearnedCore>;
    /// The dynamics this algorithm, as configured, runs its policy under: every knob that
    /// changes what an observation means or what an action does, so a model only runs under
    /// the dynamics it was trained in ([`check_dynamics`]).
    ///
    /// Knobs that only set where a training episode *begins* (a start-up phase on or off, a
    /// first rate) are left out: the trainer varies them per episode to cover the state
    /// space, while the policy's map from observation to action is the same either way.
    fn dynamics(&self) -> Dynamics;
    /// Named `[start, end)` slices of the observation that a trainer builds its networks on
    /// (MOCC: `state`, the MI history, and `w`, the preference its sub-network reads); empty
    /// when a trainer needs none. The bindings hand it to Python (`spec(alg)["layout"]`), so no
    /// trainer copies an index.
    fn obs_layout(&self) -> Vec<(&'static str, std::ops::Range<usize>)> {
        Vec::new()
    }
    /// `Some(n)` for a discrete policy: the model outputs `n` Q-values (card `output_kind`
    /// `"q_values"`, `n_actions` = n), the runtime hands the core the argmax index as the one
    /// action value (the spec's bounds are then `[0, n − 1]`). `None`: continuous actions.
    fn discrete_actions(&self) -> Option<usize> {
        None
    }
}

/// The dynamics of a config struct: every knob (its serde fields) but those in `except`.
pub fn config_dynamics<C: serde::Serialize>(config: &C, except: &[&str]) -> Dynamics {
    let mut d: Dynamics = match serde_json::to_value(config) {
        Ok(serde_json::Value::Object(m)) => m.into_iter().collect(),
        _ => Dynamics::new(),
    };
    for knob in except {
        d.remove(*knob);
    }
    d
}

/// A model card's dynamics differ from the ones the agent serves.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DynamicsError {
    /// Both have the knob, with different values.
    #[error(
        "the {alg} model was trained with algs.{alg}.{knob} = {trained} but the agent runs \
         {served}: set {knob} = {trained} under [algs.{alg}] in --config, or serve a model \
         trained with {served}"
    )]
    Mismatch {
        alg: String,
        knob: String,
        trained: serde_json::Value,
        served: serde_json::Value,
    },
    /// The card lacks a knob the agent runs.
    #[error(
        "the {alg} model's card does not record algs.{alg}.{knob}, which this agent runs: \
         retrain or re-export the model with a trainer that records every dynamics knob, or \
         serve it with the agent version it was trained for"
    )]
    Missing { alg: String, knob: String },
    /// The card has a knob this agent does not know.
    #[error(
        "the {alg} model was trained with algs.{alg}.{knob}, a knob this agent does not \
         have: serve it with the agent version it was trained for, or retrain it with this one"
    )]
    Unknown { alg: String, knob: String },
}

/// Compare a card's dynamics with the served ones: same keys, equal values (numbers equal
/// within 1e-9 relative, so f64 round trips through JSON pass). Reports the first knob
/// (sorted by name) that differs.
pub fn check_dynamics(
    alg: &str,
    trained: &Dynamics,
    served: &Dynamics,
) -> Result<(), DynamicsError> {
    let knobs: std::collections::BTreeSet<&String> = trained.keys().chain(served.keys()).collect();
    for knob in knobs {
        let (alg, name) = (alg.to_string(), knob.clone());
        match (trained.get(knob), served.get(knob)) {
            (Some(t), Some(s)) if !same_value(t, s) => {
                return Err(DynamicsError::Mismatch {
                    alg,
                    knob: name,
                    trained: t.clone(),
                    served: s.clone(),
                })
            }
            (Some(_), Some(_)) => {}
            (None, _) => return Err(DynamicsError::Missing { alg, knob: name }),
            (_, None) => return Err(DynamicsError::Unknown { alg, knob: name }),
        }
    }
    Ok(())
}

/// JSON equality, numbers within 1e-9 relative (recursively through arrays and objects).
fn same_value(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
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

    fn wants_network_stats(&self) -> bool {
        self.core.wants_network_stats()
    }

    fn network_stats(&mut self, s: Option<&NetStats>) {
        self.core.network_stats(s);
    }

    fn control_registers(&self) -> Vec<(&'static str, u32)> {
        self.core.control_registers()
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dyn_of(pairs: &[(&str, serde_json::Value)]) -> Dynamics {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn dynamics_survive_a_json_round_trip() {
        let d = dyn_of(&[
            ("alpha", json!(0.025)),
            ("cap", json!(0.1 + 0.2)),
            ("every", json!(10)),
            ("on", json!(true)),
            ("third", json!(1.0 / 3.0)),
        ]);
        let back: Dynamics = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(check_dynamics("mocc", &back, &d), Ok(()));
    }

    #[test]
    fn a_mismatch_names_the_knob_and_the_fix() {
        let trained = dyn_of(&[("alpha", json!(0.05)), ("beta", json!(1)), ("z", json!(3))]);
        let served = dyn_of(&[("alpha", json!(0.025)), ("beta", json!(1)), ("z", json!(4))]);
        let e = check_dynamics("mocc", &trained, &served).unwrap_err();
        assert!(matches!(&e, DynamicsError::Mismatch { knob, .. } if knob == "alpha"));
        assert_eq!(
            e.to_string(),
            "the mocc model was trained with algs.mocc.alpha = 0.05 but the agent runs 0.025: \
             set alpha = 0.05 under [algs.mocc] in --config, or serve a model trained with 0.025"
        );
    }

    #[test]
    fn missing_and_unknown_knobs_are_refused() {
        let served = dyn_of(&[("alpha", json!(0.025)), ("kappa", json!(0.1))]);
        let trained = dyn_of(&[("alpha", json!(0.025))]);
        let e = check_dynamics("mocc", &trained, &served).unwrap_err();
        assert_eq!(
            e,
            DynamicsError::Missing {
                alg: "mocc".into(),
                knob: "kappa".into()
            }
        );
        assert!(e.to_string().contains("algs.mocc.kappa"), "{e}");
        let trained = dyn_of(&[
            ("alpha", json!(0.025)),
            ("extra", json!(1)),
            ("kappa", json!(0.1)),
        ]);
        let e = check_dynamics("mocc", &trained, &served).unwrap_err();
        assert_eq!(
            e,
            DynamicsError::Unknown {
                alg: "mocc".into(),
                knob: "extra".into()
            }
        );
        assert!(e.to_string().contains("algs.mocc.extra"), "{e}");
        // the first differing knob by name wins
        let trained = dyn_of(&[("a", json!(1)), ("alpha", json!(0.025))]);
        let e = check_dynamics("mocc", &trained, &served).unwrap_err();
        assert!(matches!(e, DynamicsError::Unknown { knob, .. } if knob == "a"));
    }

    #[test]
    fn numbers_compare_within_a_relative_tolerance() {
        let served = dyn_of(&[
            ("x", json!(0.7)),
            ("n", json!(10)),
            ("v", json!([1.0, 2.0])),
        ]);
        let close = dyn_of(&[
            ("x", json!(0.7 * (1.0 + 1e-12))),
            ("n", json!(10.0)),
            ("v", json!([1.0, 2.0 + 1e-13])),
        ]);
        assert_eq!(check_dynamics("mocc", &close, &served), Ok(()));
        let far = dyn_of(&[
            ("x", json!(0.7 * (1.0 + 1e-6))),
            ("n", json!(10)),
            ("v", json!([1.0, 2.0])),
        ]);
        assert!(check_dynamics("mocc", &far, &served).is_err());
        let other_type = dyn_of(&[
            ("x", json!("0.7")),
            ("n", json!(10)),
            ("v", json!([1.0, 2.0])),
        ]);
        assert!(check_dynamics("mocc", &other_type, &served).is_err());
        let zero = dyn_of(&[("z", json!(0.0))]);
        assert_eq!(
            check_dynamics("mocc", &zero, &dyn_of(&[("z", json!(0))])),
            Ok(())
        );
        assert!(check_dynamics("mocc", &zero, &dyn_of(&[("z", json!(1e-300))])).is_err());
    }
}
