//! MOCC (multi-objective RL congestion control, the MOCC paper §4.1, §5) as a CCP algorithm: the
//! learned core ([`core`]: features, action, reward, start-up) and the governors that act on
//! its decisions ([`governors`]). The policy is an ONNX model trained in Python on this same
//! code ([`crate::learned`]); the agent wraps [`Mocc`] in [`crate::learned::WithPolicy`].
//!
//! Per monitor interval (MI) `t`, one smoothed RTT (§4.1, eq. 1–2, Table 2):
//!
//! ```text
//!   l_t = sent_t / acked_t                    sending ratio          (bytes / bytes)
//!   p_t = rtt̄_t / min_{s≤t} rtt̄_s             latency ratio          (µs / µs)
//!   q_t = (rtt̄_t − rtt̄_{t−1}) / len_t         latency gradient       (µs / µs)
//!   s_t = (g_{t−9}, …, g_t, w),  g = (l, p, q),  w = <w_thr, w_lat, w_loss>
//!   a_t = π(s_t) ∈ [−5, 5]
//!   x_{t+1} = x_t·(1 + α·a_t)  if a_t ≥ 0,  x_t / (1 − α·a_t)  if a_t < 0,  α = 0.025  (eq. 1)
//!   r_t = w_thr·O_thr + w_lat·O_lat + w_loss·O_loss                                 (eq. 2)
//!     O_thr = min(1, thr_t/Ĉ)   thr_t = acked_t/len_t,  Ĉ = largest delivery-rate sample
//!     O_lat = min(1, D̂/rtt̄_t)   D̂ = smallest RTT sample
//!     O_loss = 1 − lost_t/(acked_t + lost_t)   (packets)
//!   governors, in order, on every decision (governors/):
//!     share guard   once trials read thr/C < 0.1: a_t ← max(a_t, 2), +1 packet/RTT
//!                   (within the 5 % cap), a loss: x ← 0.7·x once; not while the agent's
//!                   MOCC flows fill the link and this one has half their mean  (share.rs)
//!     additive      x_{t+1} += min(0.1·MSS/srtt, 0.05·x_t)   if a_t ≥ 0     (additive.rs)
//!     rate floor    x ≥ max(100 kbit/s, 4·MSS/srtt)                         (floor.rs)
//!     share probe   below Ĉ/2 over a standing queue, every 10 MIs a trial:
//!                   2 MIs at x·(1 ± 0.5), 2 at x·(1 ∓ 0.5)                  (share.rs)
//! ```
//!
//! Observation (`feature_version` 1, 33 `f32`, MIs oldest first, i = 0..9): `3i` =
//! `clamp(l, 0, 4) − 1`, `3i + 1` = `clamp(p, 1, 5) − 1`, `3i + 2` = `clamp(q, −1, 1)`;
//! 30–32 = `w`. A path that delivers what is sent without queueing encodes as 0, so the
//! history is zero-padded before ten MIs exist; non-finite values encode as 0.
//!
//! Reacts to: acknowledged bytes, bytes in flight, losses and timeouts, the MI's mean RTT
//! against the smallest mean, its change per MI, and `w` (which may change mid-flow).
//! Ignores: ECN, reordering, the absolute rate or RTT (the features are ratios, so a model
//! trained on 1–5 Mbit/s transfers to other links), `Ĉ` and `D̂` outside the reward and the
//! governors.
//!
//! Choices where the paper is vague, or CCP differs from its UDT/Aurora setting
//! (measurements and what was tried: `docs/algorithms/mocc.md`):
//!
//! - **MI** = srtt within `[min_mi_ms, max_mi_ms]` = [5, 500] ms, 100 ms before a sample;
//!   an MI's ACKs are those that *arrived* in it (Aurora: those of packets sent in it).
//! - **Sent bytes** (no fold primitive): `acked + lost·MSS + Δinflight` between the last
//!   ACKs of two MIs, inflight trusted only in MIs with feedback; else `x·len`. `acked = 0`
//!   gives `l = 4`. An MI without an RTT sample keeps the previous mean (`q = 0`).
//! - **Bounds**: actions `[−5, 5]` (×/÷1.125 per MI at most; NaN is 0), rates
//!   [100 kbit/s, 10 Gbit/s]. Trainers clip the Gaussian sample and keep its log-probability.
//! - **Window**: rate-based; the cwnd is a cap `2·x·rtt + 10·MSS` (≥ 4 MSS) that never
//!   binds a paced flow, restored by every decision (a timeout collapses it), and a
//!   **delivery bound** `g(w)·d̂·D̂ + 10·MSS` (`d̂` the largest delivery rate of the last 3
//!   MIs, `D̂` the smallest RTT). Issue 23 measured its trade: it halves cellular loss and
//!   tail queueing, and starves the flow beside a buffer-filling one. Issue 40's decided
//!   deviation gives that trade to the preference: `g(w) = g₀ / (w_lat + w_loss)^k` with
//!   `g₀ = cwnd_cap_delivery_gain = 1` and `k = cwnd_cap_delivery_w_power = 1`, i.e.
//!   `1/(1 − w_thr)`: one BDP for a flow that weighs no throughput, 5 at `<0.8,0.1,0.1>`,
//!   none at `<1,0,0>`. The shipped model trained with it (`docs/algorithms/mocc.md`).
//! - **Start-up** (the paper has none): from `init_cwnd/initial_rtt`, double after every MI
//!   with feedback; end at a loss or timeout, `p > 1.5` or the maximum rate; hand over at
//!   `min(Ĉ, x)` (`x/2` if nothing was delivered), not the exit MI's throughput, which SACK
//!   holes depress. The policy's history includes start-up MIs.
//! - **`Ĉ` samples** are `min(SEND_RATE, RECV_RATE)` (tcp_rate's delivery rate), else
//!   `acked/len`, never the MI's throughput (a hole-filling ACK inflates it); the max is
//!   over the whole flow (a windowed one would pay a policy for sending slowly).
//! - **Rewards**: `O_lat = 0` before any sample and in a stall, `O_loss = 0` on a timeout,
//!   `w` is the one the MI was observed under; [`MoccCore::objectives`] lets a trainer
//!   re-score an MI under another `w` (requirement replay, eq. 6).
//! - **Fairness** (the governors): flows on one FIFO see the same `l`, `p`, `q`, so eq. 1
//!   keeps their rate ratios; the additive term converges them (Chiu–Jain). A latency-
//!   leaning flow beside a throughput-leaning one decays to the minimum rate; from its ACKs
//!   a neighbour's queue and a capacity fade look alike, so the share probe asks how the
//!   queue answers its own rate. Governors are part of the trained dynamics: the trainer
//!   runs exactly this stack.
//! - **Dynamics** ([`crate::learned::LearnedAlgorithm::dynamics`], the card's `dynamics`):
//!   every [`MoccConfig`] knob but `startup` and `initial_rate_mbps`, which set where a
//!   training episode begins, not how an action acts.
//! - **A bare [`Mocc`]** (no model) answers `a = 0`: start-up, then the governors. A safe
//!   fallback, not MOCC; the agent registers MOCC only with a model.
//!
//! Not here: the networks, PPO, landmark training (Algorithm 1) and online adaptation
//! (eq. 6) live in the Python trainer; this module is what it trains on.

pub mod config;
pub mod core;
pub mod governors;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use self::config::MoccConfig;
pub use self::core::{
    encode_mi, policy_spec, rate_update, FlowState, MiSample, MoccCore, MoccPhase, ACTION_BOUND,
    FEATURES_PER_MI, FEATURE_VERSION, HISTORY, L_MAX, OBS_DIM, P_MAX, Q_MAX, W_OFFSET,
};
pub use self::governors::{Decision, Governor, Peers, ShareProbeMetrics};

use crate::controller::{Algorithm, Controller, FlowInfo};
use crate::learned::{config_dynamics, Dynamics, LearnedAlgorithm, LearnedController, LearnedCore};
use crate::policy::{ConstantPolicy, PolicySpec};
use crate::signals::{fields, FoldProgram, ProgramBuilder};

/// [`MoccConfig`] knobs that set where a training episode begins, not how the policy's
/// actions act: left out of [`Mocc`]'s dynamics.
pub const EPISODE_START_KNOBS: [&str; 2] = ["startup", "initial_rate_mbps"];

/// Report fields MOCC reads (11 of libccp's 16).
const MOCC_FIELDS: [&str; 11] = [
    fields::ACKED_BYTES,
    fields::ACKED_PKTS,
    fields::LOST_PKTS,
    fields::TIMEOUT,
    fields::RTT_MIN_US,
    fields::RTT_SUM_US,
    fields::RTT_CNT,
    fields::INFLIGHT_BYTES,
    fields::SEND_RATE,
    fields::RECV_RATE,
    fields::INTERVAL_US,
];

/// The MOCC algorithm. Its flows share one [`Peers`] table (the agent's MOCC flows).
#[derive(Debug, Clone, Default)]
pub struct Mocc {
    pub config: MoccConfig,
    peers: Arc<Peers>,
}

impl Mocc {
    /// The algorithm with `config`; its flows see each other as local peers.
    pub fn new(config: MoccConfig) -> Self {
        Self {
            config,
            peers: Arc::default(),
        }
    }

    fn initial_mi_us(&self) -> u32 {
        self.config
            .mi_within_bounds_us(self.config.initial_rtt_ms * 1000.0)
    }
}

impl crate::controller::FromConfig for Mocc {
    type Config = MoccConfig;
    fn from_config(config: &MoccConfig) -> Self {
        Self::new(config.clone())
    }
}

impl Algorithm for Mocc {
    fn name(&self) -> &'static str {
        "mocc"
    }

    fn program(&self) -> FoldProgram {
        ProgramBuilder::new("mocc_mi", self.initial_mi_us())
            .fields(&MOCC_FIELDS)
            .build()
    }

    /// Not what the agent runs (it wraps MOCC in `WithPolicy` with a model): the core driven
    /// by a built-in policy that always answers `a = 0`, i.e. start-up, then the hand-over
    /// rate under the governors.
    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(LearnedController::new(
            self.new_core(info),
            Box::new(ConstantPolicy {
                obs_dim: OBS_DIM,
                act_dim: 1,
                value: 0.0,
            }),
        ))
    }
}

impl LearnedAlgorithm for Mocc {
    fn spec(&self) -> PolicySpec {
        policy_spec()
    }

    fn new_core(&self, info: &FlowInfo) -> Box<dyn LearnedCore> {
        Box::new(MoccCore::with_peers(
            self.config.clone(),
            info,
            Arc::clone(&self.peers),
        ))
    }

    /// The whole [`MoccConfig`] but the episode-start knobs ([`EPISODE_START_KNOBS`]).
    fn dynamics(&self) -> Dynamics {
        config_dynamics(&self.config, &EPISODE_START_KNOBS)
    }

    fn obs_layout(&self) -> Vec<(&'static str, std::ops::Range<usize>)> {
        vec![("state", 0..W_OFFSET), ("w", W_OFFSET..OBS_DIM)]
    }
}
