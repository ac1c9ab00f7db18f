//! The learned-policy boundary.
//!
//! A [`Policy`] maps an observation vector to an action vector. Implementations: ONNX models
//! in the agent (`ccp-agent`'s policy runtime), and an external caller during training (the
//! Python bindings hand actions in). A policy instance belongs to one flow, so recurrent state
//! (Nuwa's LSTM `h`/`c`) lives inside it; stateless models may share one session between
//! instances. Optional inputs (Owl's in-network PNC/PNA) come with a mask: 1 = present,
//! 0 = absent, the absent values are zero.

/// Why a policy could not produce an action.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("observation has {got} values, the policy expects {expected}")]
    ObsShape { expected: usize, got: usize },
    #[error("policy inference failed: {0}")]
    Inference(String),
}

/// A decision function, per flow.
pub trait Policy: Send {
    /// Length of the observation vector.
    fn obs_dim(&self) -> usize;
    /// Length of the action vector.
    fn act_dim(&self) -> usize;
    /// Write the action for `obs` into `out` (`act_dim` values). `mask` has `obs_dim` entries
    /// when the algorithm has optional inputs.
    fn act(
        &mut self,
        obs: &[f32],
        mask: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), PolicyError>;
    /// Forget recurrent state (a new flow, or a model reload).
    fn reset(&mut self) {}
    /// Outputs this instance had to clamp so far (NaN/inf or outside the action bounds);
    /// controllers copy it into [`crate::FlowMetrics::clamped_outputs`].
    fn clamped(&self) -> u64 {
        0
    }
}

/// What a learned algorithm expects of its model. Each learned algorithm declares one; the
/// agent's model store checks every model card (and the model's real inputs and outputs)
/// against it at start-up and on reload, so a model trained for another feature layout or
/// action space never runs.
///
/// Model I/O convention (the card's `inputs`/`outputs` must follow it):
/// inputs `obs` `[1, obs_dim]` (batch dimension 1 or dynamic), `mask` `[1, obs_dim]` when
/// `masked`, `h_in`/`c_in` `[num_layers, 1, hidden]` when `recurrent_hidden` is set; outputs
/// `action` (continuous actions, or Q-values for a discrete policy whose chosen index the
/// runtime returns as the single action value), `h_out`/`c_out` when recurrent.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySpec {
    /// Registry name of the algorithm (`"mocc"`); the model files are `<algorithm>.onnx` and
    /// `<algorithm>.json`.
    pub algorithm: &'static str,
    /// Version of the observation (feature) layout the algorithm builds; bump it whenever
    /// the features or their order change, so old models are refused.
    pub feature_version: u32,
    /// Length of the observation vector.
    pub obs_dim: usize,
    /// Length of the action vector the controller reads (1 for a discrete policy: the index).
    pub act_dim: usize,
    /// Lower action bounds (`act_dim` values); outputs below are clamped and counted.
    pub act_low: Vec<f32>,
    /// Upper action bounds (`act_dim` values).
    pub act_high: Vec<f32>,
    /// LSTM hidden size when the policy is recurrent (state carried per flow).
    pub recurrent_hidden: Option<usize>,
    /// Whether the model takes a `mask` input next to `obs` (1 = feature present).
    pub masked: bool,
}

impl PolicySpec {
    /// Clamp `out` into the bounds in place ([`crate::clamp_output`]); returns how many
    /// values had to change (NaN, ±inf or out of range).
    pub fn clamp(&self, out: &mut [f32]) -> u64 {
        let mut n = 0;
        for (i, x) in out.iter_mut().enumerate() {
            let (lo, hi) = (
                self.act_low.get(i).copied().unwrap_or(f32::MIN),
                self.act_high.get(i).copied().unwrap_or(f32::MAX),
            );
            let (y, changed) = crate::controller::clamp_output(*x, lo, hi);
            *x = y;
            n += u64::from(changed);
        }
        n
    }
}

/// A policy that answers one value for every action: what a learned algorithm runs without a
/// model (MOCC 0: keep the rate; Jury 0: the narrowest range around 0; Owl its "+0 packets"
/// index), never what the agent serves.
#[derive(Debug, Clone, Copy)]
pub struct ConstantPolicy {
    pub obs_dim: usize,
    pub act_dim: usize,
    pub value: f32,
}

impl Policy for ConstantPolicy {
    fn obs_dim(&self) -> usize {
        self.obs_dim
    }
    fn act_dim(&self) -> usize {
        self.act_dim
    }
    fn act(
        &mut self,
        _obs: &[f32],
        _mask: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), PolicyError> {
        out.fill(self.value);
        Ok(())
    }
}

/// Where a learned algorithm gets one policy per flow: the agent's model store, a fixed
/// policy in tests, the training bindings. `None` = no model for that algorithm.
pub trait PolicySource: Send + Sync {
    /// A fresh per-flow policy instance for `algorithm`.
    fn policy(&self, algorithm: &str) -> Option<Box<dyn Policy>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_clamp_bounds_nan_and_inf_and_counts() {
        let spec = PolicySpec {
            algorithm: "x",
            feature_version: 1,
            obs_dim: 1,
            act_dim: 4,
            act_low: vec![-1.0, -1.0, 0.0, 0.0],
            act_high: vec![1.0, 1.0, 6.0, 6.0],
            recurrent_hidden: None,
            masked: false,
        };
        let mut out = [f32::NAN, f32::NEG_INFINITY, 1e30, 2.5];
        assert_eq!(spec.clamp(&mut out), 3);
        assert_eq!(out, [0.0, -1.0, 6.0, 2.5]);
    }
}
