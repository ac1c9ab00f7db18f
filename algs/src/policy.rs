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
}
