//! Owl (partially oblivious congestion control, the Owl paper §IV–VII) as a CCP algorithm: a DQN
//! picks one of seven window changes per decision from end-to-end signals and, where the
//! network offers them, in-network ones, with one model for both cases (state masking). The
//! Q-network is an ONNX model trained in Python on this same code ([`crate::learned`]).
//!
//! Per report of the fold program (every `interval_rtts` × srtt, and at once on a loss):
//!
//! ```text
//!   row_t = (cwnd, RTT, RTT/RTT_min, ΔRTT, delivered, loss, in flight | PNC, PNA, known)
//!   s_t   = rows t−k+1..t, feature-major (Table I's N × k matrix), k = 5; mask m_t
//!   slow start   (cwnd < ssthresh):  cwnd += acked                          (RFC 5681)
//!   loss         (new episode):      ssthresh = cwnd = max(0.7·cwnd, 2 MSS); RTO: cwnd = 1
//!   recovery     (episode open):     cwnd holds                    (window::LossClock)
//!   avoidance:   a = argmax_a Q(s_t, m_t, a);  cwnd += A[a]·MSS,  A = {−10,−3,−1,0,1,3,10}
//!   U_t = λ − δ·λ/(1 − p) − β·log10(RTT/RTT_min),   λ = cwnd/RTT / max delivery rate  (eq. 7)
//! ```
//!
//! Reacts to: the window, RTT and its inflation over the 10 s minimum and its change, the
//! packets delivered and lost, the flight, and the path's congestion (PNC) and spare capacity
//! (PNA) when fresh. Ignores: ECN, reordering, pacing (it sets no rate).
//!
//! Choices where the paper is vague, or CCP differs from its kernel module (the reasons, at
//! more length: `docs/algorithms/owl.md`):
//!
//! - **Decision clock**: the paper predicts "every time a packet is acknowledged" but acts from
//!   user space on statistics accumulated "over a fixed period" (§IV-B). Here one decision per
//!   report, every smoothed RTT (`interval_rtts`, ≥ 5 ms): an action's effect is in the next
//!   observation, and ±10 packets per RTT stays a moderate step (§VII-G).
//! - **Features** (Table I): the timestamp and MSS are left out (constant per flow; windows are
//!   counted in packets); **retransmissions are left out**: libccp's primitives carry no
//!   retransmission count (neither the kernel module nor the simulator can fold one), and
//!   every lost packet is retransmitted, so the loss feature carries it. Added: `RTT/RTT_min`,
//!   the delay eq. 7 penalises, which five raw RTTs cannot reveal. Counts are
//!   `log2(1 + n)/24` (ratios become differences), delivered is per RTT (comparable with the
//!   window), loss a fraction, RTTs `log2(1 + ms)/14`, ΔRTT over RTT_min in ±1; all in
//!   [−1, 1]. Features are built from validated reports (RTTs in (0, 100 s), bounded counts
//!   and intervals), so NaN, huge values or a zero RTT never reach the policy.
//! - **State masking** (§IV-A): the mask marks what is absent. PNC and PNA are masked when no
//!   sample arrived or the last is older than `stats_stale_ms` (2.5 s: two missed 1 s
//!   samples); the known share is then 0, present (nothing of the path is known). Intervals
//!   before k exist are zero and masked, and so are the RTT features before a sample and
//!   the flight when the datapath gives none.
//! - **Slow start and loss** (§VI: the RL acts in congestion avoidance only, ssthresh from
//!   Cubic): Reno's slow start and NewReno-like episodes ([`crate::window`]), β = 0.7; the
//!   policy is not asked in slow start, in an episode, or on an interval without ACKs or
//!   RTT. A policy decrease lowers ssthresh with the window, so slow start does not undo it.
//!   Window at least `min_cwnd_pkts` (2) under the policy, 1 GiB at most.
//! - **Reward** (eq. 7): λ = cwnd/RTT as in the authors' code (the sending rate, which is the
//!   λ of §V's stability analysis), measured in units of the flow's best delivery-rate sample
//!   over the last 10 s so one δ/β serves 6–100 Mbit/s and cellular paths; log base 10 (the
//!   authors'; β·log10 = (β/2.3)·ln); p the interval's loss fraction (≤ 0.99); RTT_min over
//!   10 s. With δ = 0.5 and one flow, eq. 9's optimum is λ = C. `beta = 0` is Owl-Loss.
//!   Training may measure λ in the link's capacity instead (`reward_rate_unit_mbps`, or per
//!   report [`LearnedCore::reward_in_capacity`]): the shipped model's (docs, run 5).
//! - **Discrete output**: the model outputs 7 Q-values (card `output_kind: "q_values"`,
//!   `n_actions: 7`, [`Owl::discrete_actions`]); the agent's runtime hands `apply` the argmax
//!   (no finite Q-value: a policy error, the window holds). The spec's clamp turns NaN into
//!   the middle index, 3, "+0"; `apply` holds on any non-finite or out-of-range index.
//! - **Dynamics**: every [`OwlConfig`] knob but the reward's (`delta`, `beta`, the unit).
//! - **A bare [`Owl`]** (no model) answers index 3, "+0 packets": Reno's slow start and loss
//!   response with a frozen window in between. A placeholder; the agent serves Owl only with
//!   a model.
//!
//! Network statistics come from a [`crate::netstats::NetworkStats`] source the agent reads
//! (the simulator's bottleneck; a router exporter); the core ages each sample on its own
//! clock. Not here: the DQN, the masked Q-network and the episodes (the Python trainer).

pub mod config;
pub mod core;
#[cfg(test)]
mod tests;

pub use self::config::{OwlConfig, REWARD_KNOBS};
pub use self::core::{
    action_delta, feature, policy_spec, utility, OwlCore, Phase, ACTIONS, E2E_FEATURES,
    FEATURES_PER_INTERVAL, FEATURE_VERSION, HOLD_ACTION,
};

use crate::controller::{Algorithm, Controller, FlowInfo};
use crate::learned::{config_dynamics, Dynamics, LearnedAlgorithm, LearnedController, LearnedCore};
use crate::policy::{ConstantPolicy, PolicySpec};
use crate::signals::{fields, FoldProgram, ProgramBuilder, Trigger};

/// Report fields Owl reads.
const OWL_FIELDS: [&str; 9] = [
    fields::ACKED_BYTES,
    fields::ACKED_PKTS,
    fields::LOST_PKTS,
    fields::TIMEOUT,
    fields::RTT_MIN_US,
    fields::RTT_SUM_US,
    fields::RTT_CNT,
    fields::INFLIGHT_BYTES,
    fields::DELIVERY_RATE_MAX,
];

/// The Owl algorithm.
#[derive(Debug, Clone, Default)]
pub struct Owl {
    pub config: OwlConfig,
}

impl Owl {
    pub fn new(config: OwlConfig) -> Self {
        Self { config }
    }

    fn obs_dim(&self) -> usize {
        FEATURES_PER_INTERVAL * self.config.history as usize
    }
}

impl crate::controller::FromConfig for Owl {
    type Config = OwlConfig;
    fn from_config(config: &OwlConfig) -> Self {
        Self::new(config.clone())
    }
}

impl Algorithm for Owl {
    fn name(&self) -> &'static str {
        "owl"
    }

    fn program(&self) -> FoldProgram {
        let initial = self.config.clock().initial_us();
        ProgramBuilder::new("owl_iv", initial)
            .fields(&OWL_FIELDS)
            .trigger(Trigger::IntervalOrLoss)
            .build()
    }

    /// Not what the agent runs (it serves Owl only with a model): the core driven by a
    /// built-in policy that always holds the window.
    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(LearnedController::new(
            self.new_core(info),
            Box::new(ConstantPolicy {
                obs_dim: self.obs_dim(),
                act_dim: 1,
                value: HOLD_ACTION as f32,
            }),
        ))
    }
}

impl LearnedAlgorithm for Owl {
    fn spec(&self) -> PolicySpec {
        policy_spec(&self.config)
    }

    fn new_core(&self, info: &FlowInfo) -> Box<dyn LearnedCore> {
        Box::new(OwlCore::new(self.config.clone(), info))
    }

    /// The whole [`OwlConfig`] but the reward's knobs ([`REWARD_KNOBS`]).
    fn dynamics(&self) -> Dynamics {
        config_dynamics(&self.config, &REWARD_KNOBS)
    }

    /// `e2e`: the end-to-end features (`E2E_FEATURES` × history), `network`: PNC, PNA and the
    /// known share (3 × history); feature-major, so each is one slice.
    fn obs_layout(&self) -> Vec<(&'static str, std::ops::Range<usize>)> {
        let k = self.config.history as usize;
        vec![
            ("e2e", 0..E2E_FEATURES * k),
            ("network", E2E_FEATURES * k..FEATURES_PER_INTERVAL * k),
        ]
    }

    fn discrete_actions(&self) -> Option<usize> {
        Some(ACTIONS.len())
    }
}
