//! The model card: `<alg>.json` next to `<alg>.onnx`, written by `train/ccp_train/card.py`.
//!
//! Schema version 1 (`card_version: 1`); unknown fields are refused so a card written for a
//! newer schema does not half-load. A full example:
//!
//! ```json
//! {
//!   "card_version": 1,
//!   "algorithm": "mocc",
//!   "feature_version": 1,
//!   "model_file": "mocc.onnx",
//!   "sha256": "3b1f…64 hex digits…",
//!   "created": "2025-01-31T12:00:00Z",
//!   "output_kind": "continuous",
//!   "obs_dim": 30,
//!   "act_dim": 1,
//!   "n_actions": null,
//!   "action_low": [-1.0],
//!   "action_high": [1.0],
//!   "masked": false,
//!   "recurrent": null,
//!   "inputs": [{"name": "obs", "shape": [-1, 30], "dtype": "float32"}],
//!   "outputs": [{"name": "action", "shape": [-1, 1], "dtype": "float32"}],
//!   "normalization": null,
//!   "dynamics": {"alpha": 1.0, "min_rate_pkts": 0.0, "additive_increase_pkts": 0.1},
//!   "training": {
//!     "command": "python -m ccp_train.train mocc --steps 200000 --seed 1",
//!     "library": "stable-baselines3 2.9.2 (PPO)",
//!     "seed": 1,
//!     "steps": 200000,
//!     "scenario_ranges": {"bw_mbps": [1, 5], "rtt_ms": [10, 50]},
//!     "notes": null
//!   },
//!   "evaluation": {"mean_reward": 0.83, "episodes": 20}
//! }
//! ```
//!
//! I/O convention (checked against the model's real inputs and outputs at load time): inputs
//! `obs` `[B, obs_dim]`, `mask` `[B, obs_dim]` iff `masked`, `h_in`/`c_in`
//! `[num_layers, B, hidden_size]` iff `recurrent`; outputs `action` `[B, act_dim]`
//! (`[B, n_actions]` Q-values when `output_kind` is `"q_values"`), `h_out`/`c_out` like
//! `h_in` iff recurrent. `B` is `1` or `-1` (a dynamic batch dimension; needed for batched
//! inference). All tensors are float32.
//!
//! `output_kind`: `"continuous"` — `action` is the deterministic action (the policy mean),
//! clamped by the runtime into `[action_low, action_high]` (the training action space's
//! bounds, as SB3's `predict` clips); `"q_values"` — `action` holds one Q-value per discrete
//! action, the runtime returns the argmax index (`act_dim` 1, bounds `[0, n_actions-1]`).
//!
//! `normalization`: observation normalization (SB3 `VecNormalize`) is baked into the graph at
//! export; the card records the statistics for provenance only (`kind: "baked_into_graph"`),
//! the runtime never applies them.
//!
//! `dynamics`: every knob that shaped what the policy observed or how its actions were
//! applied in training (knob name → JSON value, what `LearnedAlgorithm::dynamics()` returns;
//! the example above is abridged). The agent compares it with the dynamics of the algorithm
//! as it is configured (`--config [algs.<alg>]`) whenever it loads the model
//! ([`ModelCard::check_dynamics`]): a differing, missing or unknown knob refuses the model,
//! naming the knob. A card without the section (a trainer older than this contract) is
//! refused too.

use std::collections::BTreeSet;

use ccp_algs::learned::{check_dynamics, Dynamics, DynamicsError, LearnedAlgorithm};
use ccp_algs::policy::PolicySpec;
use serde::{Deserialize, Serialize};

/// The card schema this runtime reads.
pub const CARD_VERSION: u32 = 1;

/// Input names of the convention.
pub const OBS: &str = "obs";
pub const MASK: &str = "mask";
pub const H_IN: &str = "h_in";
pub const C_IN: &str = "c_in";
/// Output names of the convention.
pub const ACTION: &str = "action";
pub const H_OUT: &str = "h_out";
pub const C_OUT: &str = "c_out";

/// One model card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    /// Schema version ([`CARD_VERSION`]).
    pub card_version: u32,
    /// Registry name of the algorithm the model was trained for.
    pub algorithm: String,
    /// Feature-layout version of the observations the model was trained on.
    pub feature_version: u32,
    /// File name of the model, next to the card (`<algorithm>.onnx`).
    pub model_file: String,
    /// sha256 of the model file (lowercase hex).
    pub sha256: String,
    /// When the model was exported (UTC, RFC 3339).
    pub created: String,
    /// What `action` holds.
    pub output_kind: OutputKind,
    /// Observation length.
    pub obs_dim: usize,
    /// Action length as the controller reads it (1 for `q_values`: the index).
    pub act_dim: usize,
    /// Number of discrete actions (`q_values` only).
    #[serde(default)]
    pub n_actions: Option<usize>,
    /// Lower action bounds (`act_dim` values).
    pub action_low: Vec<f32>,
    /// Upper action bounds (`act_dim` values).
    pub action_high: Vec<f32>,
    /// Whether the model takes a `mask` input.
    pub masked: bool,
    /// LSTM state, when the policy is recurrent.
    #[serde(default)]
    pub recurrent: Option<RecurrentSpec>,
    /// The model's inputs, as the model declares them.
    pub inputs: Vec<TensorSpec>,
    /// The model's outputs, as the model declares them.
    pub outputs: Vec<TensorSpec>,
    /// Observation normalization (baked into the graph; recorded for provenance).
    #[serde(default)]
    pub normalization: Option<Normalization>,
    /// The dynamics the model was trained under (knob → value); `None` when the card has no
    /// `dynamics` section, which the agent refuses ([`ModelCard::check_dynamics`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamics: Option<Dynamics>,
    /// How the model was trained.
    pub training: Training,
    /// Evaluation figures (free-form: name → number/string/array).
    #[serde(default)]
    pub evaluation: serde_json::Map<String, serde_json::Value>,
}

/// What the `action` output holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Deterministic continuous action (clamped into the bounds).
    Continuous,
    /// One Q-value per discrete action; the runtime takes the argmax.
    QValues,
}

/// One input or output tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    pub name: String,
    /// Dimensions; `-1` = dynamic (the batch dimension).
    pub shape: Vec<i64>,
    /// Element type; only `"float32"`.
    #[serde(default = "float32")]
    pub dtype: String,
}

fn float32() -> String {
    "float32".into()
}

/// LSTM state carried per flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecurrentSpec {
    /// Only `"lstm"`.
    pub kind: String,
    pub num_layers: usize,
    pub hidden_size: usize,
}

/// Observation normalization the exporter baked into the graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Normalization {
    /// Only `"baked_into_graph"`: the runtime feeds raw observations.
    pub kind: String,
    pub obs_mean: Vec<f32>,
    pub obs_std: Vec<f32>,
    #[serde(default)]
    pub clip_obs: Option<f32>,
}

/// Training provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Training {
    /// The command that trained the model.
    pub command: String,
    #[serde(default)]
    pub library: Option<String>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub steps: Option<u64>,
    /// Scenario parameter ranges trained on (name → value or `[lo, hi]`).
    #[serde(default)]
    pub scenario_ranges: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub notes: Option<String>,
    /// Training wall time (s).
    #[serde(default)]
    pub wall_s: Option<f64>,
    /// What the bytes of the model depend on besides command and seed (library versions,
    /// threads, CPU, code version): `ccp_train.rl.determinism.record`.
    #[serde(default)]
    pub determinism: serde_json::Map<String, serde_json::Value>,
}

/// A field that differs: (field, expected, found).
pub(crate) type Diff = (String, String, String);

fn diff(field: impl Into<String>, expected: impl ToString, found: impl ToString) -> Diff {
    (field.into(), expected.to_string(), found.to_string())
}

/// What the agent expects of one learned algorithm's model: the layout its features and
/// actions have ([`PolicySpec`]) and the dynamics it runs the policy under
/// (`LearnedAlgorithm::dynamics()` of the algorithm as configured).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelContract {
    pub spec: PolicySpec,
    pub dynamics: Dynamics,
    /// `Some(n)`: the policy is discrete, `n` Q-values (a `"q_values"` card with `n_actions`
    /// = n, `LearnedAlgorithm::discrete_actions`); `None`: continuous actions.
    pub n_actions: Option<usize>,
}

impl ModelContract {
    /// The contract of `alg` as it is configured.
    pub fn of(alg: &dyn LearnedAlgorithm) -> Self {
        Self {
            spec: alg.spec(),
            dynamics: alg.dynamics(),
            n_actions: alg.discrete_actions(),
        }
    }

    /// The algorithm's registry name.
    pub fn algorithm(&self) -> &'static str {
        self.spec.algorithm
    }
}

/// Why a card's dynamics do not fit the served ones.
#[derive(Debug, Clone, PartialEq)]
pub enum DynamicsDiff {
    /// The card has no `dynamics` section.
    Absent,
    /// A knob differs, is missing or is unknown.
    Knob(DynamicsError),
}

impl ModelCard {
    /// The card's dynamics against the ones the agent serves (`served`: the configured
    /// algorithm's `dynamics()`); see [`check_dynamics`].
    pub fn check_dynamics(&self, served: &Dynamics) -> Result<(), DynamicsDiff> {
        let trained = self.dynamics.as_ref().ok_or(DynamicsDiff::Absent)?;
        check_dynamics(&self.algorithm, trained, served).map_err(DynamicsDiff::Knob)
    }

    /// Parse a card (JSON text).
    pub fn from_json(text: &str) -> Result<Self, String> {
        let card: ModelCard = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if card.card_version != CARD_VERSION {
            return Err(format!(
                "field `card_version`: this runtime reads {CARD_VERSION}, the card says {}",
                card.card_version
            ));
        }
        Ok(card)
    }

    /// Width of the `action` output tensor (Q-values: `n_actions`).
    pub fn output_width(&self) -> usize {
        match self.output_kind {
            OutputKind::Continuous => self.act_dim,
            OutputKind::QValues => self.n_actions.unwrap_or(0),
        }
    }

    /// The card against what the algorithm expects.
    pub(crate) fn check_spec(&self, spec: &PolicySpec) -> Result<(), Diff> {
        if self.algorithm != spec.algorithm {
            return Err(diff("algorithm", spec.algorithm, &self.algorithm));
        }
        if self.feature_version != spec.feature_version {
            return Err(diff(
                "feature_version",
                spec.feature_version,
                self.feature_version,
            ));
        }
        if self.obs_dim != spec.obs_dim {
            return Err(diff("obs_dim", spec.obs_dim, self.obs_dim));
        }
        if self.act_dim != spec.act_dim {
            return Err(diff("act_dim", spec.act_dim, self.act_dim));
        }
        if self.action_low != spec.act_low {
            return Err(diff(
                "action_low",
                format!("{:?}", spec.act_low),
                format!("{:?}", self.action_low),
            ));
        }
        if self.action_high != spec.act_high {
            return Err(diff(
                "action_high",
                format!("{:?}", spec.act_high),
                format!("{:?}", self.action_high),
            ));
        }
        if self.masked != spec.masked {
            return Err(diff("masked", spec.masked, self.masked));
        }
        let hidden = self.recurrent.as_ref().map(|r| r.hidden_size);
        if hidden != spec.recurrent_hidden {
            let show = |h: Option<usize>| match h {
                Some(h) => format!("an LSTM with hidden_size {h}"),
                None => "no recurrent state (null)".to_string(),
            };
            return Err(diff(
                "recurrent.hidden_size",
                show(spec.recurrent_hidden),
                show(hidden),
            ));
        }
        Ok(())
    }

    /// The card's output against the algorithm's action space: continuous, or `n`
    /// Q-values. (The bounds alone cannot tell: a continuous model with bounds `[0, 6]` must
    /// not drive Owl, whose action is an index.)
    pub(crate) fn check_output(&self, n_actions: Option<usize>) -> Result<(), Diff> {
        let show = |n: Option<usize>| match n {
            Some(n) => format!("\"q_values\" with n_actions {n}"),
            None => "\"continuous\"".to_string(),
        };
        let found = match self.output_kind {
            OutputKind::Continuous => None,
            OutputKind::QValues => Some(self.n_actions.unwrap_or(0)),
        };
        if found == n_actions {
            Ok(())
        } else {
            Err(diff("output_kind", show(n_actions), show(found)))
        }
    }

    /// The card's own consistency and the I/O naming convention.
    pub(crate) fn check_convention(&self, file_name: &str) -> Result<(), String> {
        if self.model_file != file_name {
            return Err(format!(
                "field `model_file`: expected {file_name:?} (the file next to the card), found {:?}",
                self.model_file
            ));
        }
        if self.sha256.len() != 64 || !self.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "field `sha256`: expected 64 hex digits, found {:?}",
                self.sha256
            ));
        }
        if self.obs_dim == 0 || self.act_dim == 0 {
            return Err("fields `obs_dim`/`act_dim` must be > 0".into());
        }
        if self.action_low.len() != self.act_dim || self.action_high.len() != self.act_dim {
            return Err(format!(
                "fields `action_low`/`action_high`: expected {} values each (act_dim), found {}/{}",
                self.act_dim,
                self.action_low.len(),
                self.action_high.len()
            ));
        }
        for (i, (lo, hi)) in self.action_low.iter().zip(&self.action_high).enumerate() {
            if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
                return Err(format!(
                    "action bounds [{i}]: expected finite low <= high, found [{lo}, {hi}]"
                ));
            }
        }
        match self.output_kind {
            OutputKind::Continuous => {
                if self.n_actions.is_some() {
                    return Err("field `n_actions`: only for output_kind \"q_values\"".into());
                }
            }
            OutputKind::QValues => {
                let n = self.n_actions.unwrap_or(0);
                if n == 0 {
                    return Err(
                        "field `n_actions`: required (> 0) for output_kind \"q_values\"".into(),
                    );
                }
                if self.act_dim != 1
                    || self.action_low != [0.0]
                    || self.action_high != [(n - 1) as f32]
                {
                    return Err(format!(
                        "output_kind \"q_values\": expected act_dim 1 and bounds [0] / [{}] (the action index), found act_dim {} and {:?} / {:?}",
                        n - 1,
                        self.act_dim,
                        self.action_low,
                        self.action_high
                    ));
                }
            }
        }
        if let Some(r) = &self.recurrent {
            if r.kind != "lstm" || r.num_layers == 0 || r.hidden_size == 0 {
                return Err(format!(
                    "field `recurrent`: expected kind \"lstm\" with num_layers, hidden_size > 0, found {r:?}"
                ));
            }
        }
        if let Some(n) = &self.normalization {
            if n.kind != "baked_into_graph" {
                return Err(format!(
                    "field `normalization.kind`: expected \"baked_into_graph\", found {:?}",
                    n.kind
                ));
            }
            if n.obs_mean.len() != self.obs_dim || n.obs_std.len() != self.obs_dim {
                return Err(format!(
                    "field `normalization`: expected obs_mean/obs_std of {} values, found {}/{}",
                    self.obs_dim,
                    n.obs_mean.len(),
                    n.obs_std.len()
                ));
            }
        }
        // Names.
        let want_in = self.expected_inputs();
        let have_in: BTreeSet<&str> = self.inputs.iter().map(|t| t.name.as_str()).collect();
        let want_in_set: BTreeSet<&str> = want_in.iter().map(|(n, _)| *n).collect();
        if have_in != want_in_set || have_in.len() != self.inputs.len() {
            return Err(format!(
                "field `inputs`: expected the names {want_in_set:?} (convention), found {:?}",
                self.inputs.iter().map(|t| &t.name).collect::<Vec<_>>()
            ));
        }
        let want_out = self.expected_outputs();
        let have_out: BTreeSet<&str> = self.outputs.iter().map(|t| t.name.as_str()).collect();
        let want_out_set: BTreeSet<&str> = want_out.iter().map(|(n, _)| *n).collect();
        if have_out != want_out_set || have_out.len() != self.outputs.len() {
            return Err(format!(
                "field `outputs`: expected the names {want_out_set:?} (convention), found {:?}",
                self.outputs.iter().map(|t| &t.name).collect::<Vec<_>>()
            ));
        }
        // Shapes: the batch dimension is 1 or -1 and the same everywhere.
        let mut batch: Option<i64> = None;
        for (kind, list, want) in [
            ("inputs", &self.inputs, &want_in),
            ("outputs", &self.outputs, &want_out),
        ] {
            for t in list.iter() {
                let (_, w) = want
                    .iter()
                    .find(|(n, _)| *n == t.name)
                    .expect("names checked");
                let bad = || {
                    format!(
                        "field `{kind}[{}].shape`: expected {} (convention, B = 1 or -1), found {:?}",
                        t.name,
                        w,
                        t.shape
                    )
                };
                if t.dtype != "float32" {
                    return Err(format!(
                        "field `{kind}[{}].dtype`: expected \"float32\", found {:?}",
                        t.name, t.dtype
                    ));
                }
                let (fixed, bpos) = self.fixed_dims(&t.name);
                if t.shape.len() != fixed.len() {
                    return Err(bad());
                }
                for (i, (&d, f)) in t.shape.iter().zip(&fixed).enumerate() {
                    if i == bpos {
                        if d != 1 && d != -1 {
                            return Err(bad());
                        }
                        match batch {
                            None => batch = Some(d),
                            Some(b) if b != d => {
                                return Err(format!(
                                    "field `{kind}[{}].shape`: batch dimension {d} differs from the other tensors' {b}",
                                    t.name
                                ))
                            }
                            _ => {}
                        }
                    } else if Some(d) != *f {
                        return Err(bad());
                    }
                }
            }
        }
        Ok(())
    }

    /// (name, shape description) of the inputs the convention requires.
    fn expected_inputs(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![(OBS, format!("[B, {}]", self.obs_dim))];
        if self.masked {
            v.push((MASK, format!("[B, {}]", self.obs_dim)));
        }
        if let Some(r) = &self.recurrent {
            let s = format!("[{}, B, {}]", r.num_layers, r.hidden_size);
            v.push((H_IN, s.clone()));
            v.push((C_IN, s));
        }
        v
    }

    fn expected_outputs(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![(ACTION, format!("[B, {}]", self.output_width()))];
        if let Some(r) = &self.recurrent {
            let s = format!("[{}, B, {}]", r.num_layers, r.hidden_size);
            v.push((H_OUT, s.clone()));
            v.push((C_OUT, s));
        }
        v
    }

    /// The fixed dimensions of a convention tensor (`None` at the batch position) and the
    /// batch position.
    fn fixed_dims(&self, name: &str) -> (Vec<Option<i64>>, usize) {
        let (l, h) = self
            .recurrent
            .as_ref()
            .map_or((0, 0), |r| (r.num_layers as i64, r.hidden_size as i64));
        match name {
            OBS | MASK => (vec![None, Some(self.obs_dim as i64)], 0),
            ACTION => (vec![None, Some(self.output_width() as i64)], 0),
            _ => (vec![Some(l), None, Some(h)], 1),
        }
    }

    /// Whether every tensor has a dynamic batch dimension (batched inference possible).
    pub fn batch_dynamic(&self) -> bool {
        self.inputs.iter().all(|t| {
            let (_, b) = self.fixed_dims(&t.name);
            t.shape.get(b) == Some(&-1)
        })
    }
}

/// The card's I/O list against the model's (name, shape, is-float32) list.
pub(crate) fn compare_io(
    kind: &str,
    card: &[TensorSpec],
    model: &[(String, Vec<i64>, bool)],
) -> Result<(), Diff> {
    let card_names: Vec<&str> = card.iter().map(|t| t.name.as_str()).collect();
    let model_names: Vec<&str> = model.iter().map(|(n, _, _)| n.as_str()).collect();
    let (mut a, mut b) = (card_names.clone(), model_names.clone());
    a.sort_unstable();
    b.sort_unstable();
    if a != b {
        return Err(diff(
            format!("{kind} (names)"),
            format!("{model_names:?}"),
            format!("{card_names:?}"),
        ));
    }
    for (name, shape, f32) in model {
        let t = card.iter().find(|t| &t.name == name).expect("same names");
        if &t.shape != shape {
            return Err(diff(
                format!("{kind}[{name}].shape"),
                format!("{shape:?}"),
                format!("{:?}", t.shape),
            ));
        }
        if !f32 {
            return Err(diff(
                format!("{kind}[{name}].dtype"),
                "a non-float32 tensor",
                &t.dtype,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> ModelCard {
        ModelCard {
            card_version: 1,
            algorithm: "mocc".into(),
            feature_version: 1,
            model_file: "mocc.onnx".into(),
            sha256: "a".repeat(64),
            created: "2025-01-01T00:00:00Z".into(),
            output_kind: OutputKind::Continuous,
            obs_dim: 30,
            act_dim: 1,
            n_actions: None,
            action_low: vec![-1.0],
            action_high: vec![1.0],
            masked: false,
            recurrent: None,
            inputs: vec![TensorSpec {
                name: "obs".into(),
                shape: vec![-1, 30],
                dtype: "float32".into(),
            }],
            outputs: vec![TensorSpec {
                name: "action".into(),
                shape: vec![-1, 1],
                dtype: "float32".into(),
            }],
            normalization: None,
            dynamics: Some(dynamics(1.0)),
            training: Training {
                command: "test".into(),
                library: None,
                seed: Some(1),
                steps: None,
                scenario_ranges: Default::default(),
                notes: None,
                wall_s: None,
                determinism: Default::default(),
            },
            evaluation: Default::default(),
        }
    }

    fn dynamics(alpha: f64) -> Dynamics {
        [
            ("alpha".to_string(), serde_json::json!(alpha)),
            ("min_rate_pkts".to_string(), serde_json::json!(0.0)),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn dynamics_are_checked_knob_by_knob() {
        let c = card();
        assert_eq!(c.check_dynamics(&dynamics(1.0)), Ok(()));
        match c.check_dynamics(&dynamics(2.0)) {
            Err(DynamicsDiff::Knob(DynamicsError::Mismatch { knob, .. })) => {
                assert_eq!(knob, "alpha")
            }
            other => panic!("expected an alpha mismatch, got {other:?}"),
        }
        let mut served = dynamics(1.0);
        served.insert("share_probe_every_mis".into(), serde_json::json!(8));
        assert!(matches!(
            c.check_dynamics(&served),
            Err(DynamicsDiff::Knob(DynamicsError::Missing { knob, .. })) if knob == "share_probe_every_mis"
        ));
        // no section: refused, whatever the agent serves
        let mut old = card();
        old.dynamics = None;
        assert_eq!(
            old.check_dynamics(&Dynamics::new()),
            Err(DynamicsDiff::Absent)
        );
        // a card without the section parses (so the error can say what to do)
        let mut v = serde_json::to_value(card()).unwrap();
        v.as_object_mut().unwrap().remove("dynamics");
        assert_eq!(ModelCard::from_json(&v.to_string()).unwrap().dynamics, None);
    }

    #[test]
    fn convention_accepts_a_good_card_and_round_trips() {
        let c = card();
        c.check_convention("mocc.onnx").unwrap();
        assert!(c.batch_dynamic());
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(ModelCard::from_json(&text).unwrap(), c);
    }

    #[test]
    fn convention_refuses_wrong_names_shapes_and_unknown_fields() {
        let mut c = card();
        c.inputs[0].name = "state".into();
        let e = c.check_convention("mocc.onnx").unwrap_err();
        assert!(e.contains("`inputs`") && e.contains("state"), "{e}");

        let mut c = card();
        c.inputs[0].shape = vec![2, 30];
        let e = c.check_convention("mocc.onnx").unwrap_err();
        assert!(e.contains("inputs[obs].shape"), "{e}");

        let mut c = card();
        c.masked = true;
        assert!(c
            .check_convention("mocc.onnx")
            .unwrap_err()
            .contains("mask"));

        let mut c = card();
        c.output_kind = OutputKind::QValues;
        assert!(c
            .check_convention("mocc.onnx")
            .unwrap_err()
            .contains("n_actions"));

        let mut v = serde_json::to_value(card()).unwrap();
        v["surprise"] = serde_json::json!(1);
        let e = ModelCard::from_json(&v.to_string()).unwrap_err();
        assert!(e.contains("surprise"), "{e}");

        let mut v = serde_json::to_value(card()).unwrap();
        v["card_version"] = serde_json::json!(2);
        let e = ModelCard::from_json(&v.to_string()).unwrap_err();
        assert!(e.contains("card_version"), "{e}");
    }

    #[test]
    fn the_output_kind_must_match_the_action_space() {
        let c = card();
        assert_eq!(c.check_output(None), Ok(()));
        let (f, e, g) = c.check_output(Some(7)).unwrap_err();
        assert_eq!(
            (f.as_str(), e.as_str(), g.as_str()),
            (
                "output_kind",
                "\"q_values\" with n_actions 7",
                "\"continuous\""
            )
        );
        let mut q = card();
        q.output_kind = OutputKind::QValues;
        q.n_actions = Some(7);
        assert_eq!(q.check_output(Some(7)), Ok(()));
        assert!(q.check_output(None).is_err());
        let (_, e, g) = q.check_output(Some(5)).unwrap_err();
        assert_eq!(
            (e.as_str(), g.as_str()),
            (
                "\"q_values\" with n_actions 5",
                "\"q_values\" with n_actions 7"
            )
        );
    }

    #[test]
    fn owls_contract_is_seven_q_values_with_a_mask() {
        let cfg = ccp_algs::AlgsConfig::default();
        let owl = ccp_algs::registry::learned_by_name(&cfg, "owl").expect("owl is learned");
        let c = ModelContract::of(owl.as_ref());
        assert_eq!(c.n_actions, Some(7));
        assert!(c.spec.masked);
        assert_eq!(
            (c.spec.act_low.clone(), c.spec.act_high.clone()),
            (vec![0.0], vec![6.0])
        );
        let mocc = ccp_algs::registry::learned_by_name(&cfg, "mocc").unwrap();
        assert_eq!(ModelContract::of(mocc.as_ref()).n_actions, None);
    }

    #[test]
    fn spec_mismatch_names_the_field() {
        let spec = PolicySpec {
            algorithm: "mocc",
            feature_version: 2,
            obs_dim: 30,
            act_dim: 1,
            act_low: vec![-1.0],
            act_high: vec![1.0],
            recurrent_hidden: None,
            masked: false,
        };
        let (f, e, g) = card().check_spec(&spec).unwrap_err();
        assert_eq!(
            (f.as_str(), e.as_str(), g.as_str()),
            ("feature_version", "2", "1")
        );
    }
}
