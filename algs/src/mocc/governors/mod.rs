//! Governors: what acts on MOCC's decisions besides eq. 1. Each sees every policy-phase MI
//! and the flow's estimates ([`FlowState`]), and may adjust the action, add to the rate, cut
//! it on a loss, bound it from below or scale the next MI's sending rate. They are part of
//! the dynamics a model is trained under: the trainer runs this same stack.
//!
//! The stack, in the order every decision runs through it ([`stack`]):
//!
//! | governor | file | knobs |
//! |---|---|---|
//! | share probe and guard (with the local [`Peers`]) | `share.rs`, `peers.rs` | `share_*` |
//! | additive increase | `additive.rs` | `additive_increase_*` |
//! | rate floor | `floor.rs` | `min_rate_pkts` |

pub mod additive;
pub mod floor;
pub mod peers;
pub mod share;

use std::any::Any;
use std::fmt;
use std::sync::Arc;

pub use additive::AdditiveIncrease;
pub use floor::RateFloor;
pub use peers::Peers;
pub use share::{ShareProbe, ShareProbeMetrics};

use super::core::{FlowState, MiSample};
use crate::controller::FlowInfo;
use crate::signals::Interval;

/// One decision on its way from the policy to the rate:
/// `x_{t+1} = eq1(x_t, action) + add`, or `x_t·cut` when a governor cuts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// The action eq. 1 applies: the policy's, within the action bounds, as governors left it.
    pub action: f64,
    /// Bytes/s added after eq. 1.
    pub add: f64,
    /// A governor overrides the policy: gates keyed to the policy's action let their terms
    /// through.
    pub guarded: bool,
    /// A loss response: the rate is multiplied by this instead (eq. 1 and `add` skipped).
    pub cut: Option<f64>,
}

impl Decision {
    /// The policy's (clamped) action, nothing added.
    pub fn new(action: f64) -> Self {
        Self {
            action,
            add: 0.0,
            guarded: false,
            cut: None,
        }
    }
}

/// A mechanism on MOCC's decisions. Every method has a neutral default.
pub trait Governor: CloneGovernor + fmt::Debug + Send {
    /// An MI of the policy phase was measured (`s`); `flow` holds the estimates after it
    /// and the rate in force.
    fn observe(&mut self, _flow: &FlowState, _iv: &Interval, _s: &MiSample) {}

    /// Adjust a decision before it is applied.
    fn decide(&mut self, _flow: &FlowState, _d: &mut Decision) {}

    /// The lowest rate (bytes/s) this governor allows now, if any (within the rate bounds).
    fn min_rate(&self, _flow: &FlowState) -> Option<f64> {
        None
    }

    /// The next MI's sending rate over the decided rate (1: as decided).
    fn rate_factor(&self) -> f64 {
        1.0
    }
}

/// Cloning and inspecting boxed governors (implemented for every `Governor + Clone`).
pub trait CloneGovernor {
    fn clone_box(&self) -> Box<dyn Governor>;
    fn as_any(&self) -> &dyn Any;
}

impl<T: Governor + Clone + 'static> CloneGovernor for T {
    fn clone_box(&self) -> Box<dyn Governor> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Clone for Box<dyn Governor> {
    fn clone(&self) -> Self {
        (**self).clone_box()
    }
}

/// A flow's governors, in decision order: the share guard may raise the action and open
/// the additive increase's gate, so it runs first; the floor bounds whatever results.
pub fn stack(info: &FlowInfo, peers: Arc<Peers>) -> Vec<Box<dyn Governor>> {
    vec![
        Box::new(ShareProbe::new(info, peers)),
        Box::new(AdditiveIncrease),
        Box::new(RateFloor),
    ]
}
