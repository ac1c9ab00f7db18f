//! Jury (fairness-generalizable DRL congestion control, the Jury paper §3–4) as a CCP algorithm: a
//! policy that sees only bottleneck-wide signals proposes an action *range*, and a
//! post-processing step places each flow in that range by its own bandwidth occupancy, so
//! flows with a larger share take smaller actions and converge to a fair share on networks the
//! policy never saw. The policy is an ONNX model trained in Python (TD3) on this same code
//! ([`crate::learned`]); everything below runs identically in training and in the agent.
//!
//! Per control interval `t` (30 ms, Table 2), over the interval's ACKs:
//!
//! ```text
//!   d_t = (RTT_t − RTT_{t−1}) / Δt              RTT change (eq. 1: (Σx − c)/c under a queue)
//!   l_t = (1 − L_t)/(1 − L_{t−1}) − 1           delivery-ratio change (L: loss fraction)
//!   q_t = (RTT_t − RTT_min) / Δt                standing queue, in intervals
//!   s_t = (d, l, q) over the last 10 intervals  → policy π(s_t) = (μ_t, δ_t)
//!   ratio_bw = (a − g) / (g·(a − 1))  ∈ [0, 1]  (eq. 5) a = x_{t}/x_{t−1}, g = thr_t/thr_{t−1}
//!     here (probe = "trial", a deviation): a and g of the two halves of the flow's own
//!     paired ±ε trials (random schedule), fitted over 8 trials, see "Probe" below
//!   a_t = μ_t + (1 − 2·ratio_bw)·δ_t            (eq. 6) |μ| ≤ 0.5 ≤ δ ≤ 1
//!   a_t ← ±1 (p = 0.9 each way half)   if |a_t| < 0.1            exploration (§3.4)
//!   cwnd ← cwnd·(1 + α·a)  if a ≥ 0,  cwnd/(1 − α·a)  if a < 0,  α = 0.025      (eq. 7)
//!   x = cwnd / RTT_t                                                            (eq. 8)
//!   a_t = 1 without asking π   while an interval acks < 8 packets  (significance, §3.4)
//!   r_t = ratio^ζ − ratio·(β1·(RTT_t − RTT_min) + β2·(1 − (1 − L_t)/(1 − L_min)))  (eq. 9′)
//! ```
//!
//! Reacts to: the bottleneck's queue (its change and its standing size), the delivery ratio,
//! and through eq. 5 how the flow's own throughput answers its own rate changes. Ignores: the
//! absolute rate, throughput and RTT (the policy's inputs are the same for every flow sharing
//! a bottleneck, whatever its share or base RTT), ECN, reordering, timeouts (no special
//! response: the policy sees the loss).
//!
//! Choices where the paper is vague, or CCP differs from the paper's kernel module
//! (measurements and what was tried: `docs/algorithms/jury.md`):
//!
//! - **Which ACKs**: the paper measures "packets sent in interval t" on their ACKs. A fold
//!   program reports the ACKs that *arrived* in an interval; they acknowledge packets sent one
//!   RTT earlier, so eq. 5 pairs the throughput ratio of two consecutive reports with the
//!   ratio of the pacing rates in effect one mean RTT before them (a per-flow record of
//!   decisions), not with the last action.
//! - **Policy inputs**: the paper's RTT and loss changes, plus `q_t`, the standing queue in
//!   control intervals: the reward penalises `RTT − RTT_min`, which the changes alone cannot
//!   reveal (a steady full queue and an empty one both read `d = 0`); like `d`, it is the same
//!   for every flow on the bottleneck, whatever its base RTT, so eq. 6 alone still decides who
//!   gets more. History 10 intervals; `d` bounded to ±1, `l` to ±0.5, `q` to [0, 4], each
//!   scaled to [−1, 1]; zero-padded before ten intervals exist.
//! - **Filters** (§3.4 "moving average ... bounds"): `d` and `l` are 3-interval moving
//!   averages; `ratio_bw` is fitted over the last 8 trials (`trial`; the other probes: 8
//!   intervals, taken only when `|ln a| ≥ 0.01`, as eq. 5 divides noise by `a − 1`); until
//!   the first estimate, `ratio_bw = 0`.
//! - **Action box** (the paper gives none): `μ ∈ [−0.5, 0.5]`, `δ ∈ [0.5, 1]`, so every
//!   range contains `a = 0`: a flow above the share the policy's `μ/δ` picks slows down while
//!   those below speed up. Eq. 5 assumes the other flows hold their rates; when every flow
//!   steps the same way (a policy at `μ = ±1`, or `δ → 0`, which TD3 learnt in a `[−1, 1] ×
//!   [0, 1]` box) it reads the common change as each flow's own and gives all flows the same
//!   estimate, and shares never converge (fluid test: Jain 0.57 vs 0.89 for the same policy).
//!   `a` is not clipped (`|a| ≤ 1.5`, ±3.75 % per interval); exploration's ±1 is a full step.
//! - **Probe: a deviation from §3.1** (`probe`, default `trial`; §3.1's is `rate`). §3.1 fits
//!   eq. 5 on the flow's whole rate change and assumes the other flows hold their rates while
//!   it changes its own. Jury flows share one policy and see the same inputs, so they step
//!   together, and each one's fit reads the aggregate's change as its own: every flow gets the
//!   same estimate and eq. 6 cannot move shares. In the fluid table (docs/algorithms/jury.md,
//!   "The estimator") a policy that switches with the queue stays at Jain 0.59–0.61 at 120 and
//!   210 ms under `rate`, and the box's corner, where TD3 went, stays at 0.55 under
//!   `explore` (§3.4's exploration near `a = 0`, which a flow at the corner never reaches).
//!   So each flow perturbs its own rate on a schedule of its own, in the manner of PCC
//!   Vivace's randomised paired trials: after a gap of `U{trial_gap_min..=trial_gap_max}`
//!   intervals (2–10) it paces at `1 + ε` then `1 − ε` times what eq. 7–8 set, or the
//!   reverse (random order), `trial_intervals` (2) each, ε = `trial_eps` (0.05), with the
//!   window at `1 + 2ε` times eq. 7's for the whole trial so that the pacing, not the window,
//!   sets what each half sends (a window cut silences a flow until ACKs drain, and a short
//!   half then sends far less than its pacing says). The stream is its own (SplitMix64
//!   seeded by the socket id, apart from exploration's) and never reads the policy. A half's
//!   throughput is measured on the ACKs of packets sent wholly within it (an interval's ACKs
//!   left the sender one RTT earlier), its rate as its mean pacing rate. Eq. 4 at a shared
//!   FIFO is `a_i/g_i − 1 = Σ_j s_j·(a_j − 1)`: each trial gives one point, `a` the halves' rate
//!   ratio, `g` their throughput ratio, and the fit is the instrumental-variable one with the
//!   trial's own ratio `u = (1 + ε)/(1 − ε) − 1` as the instrument,
//!   `s = Σ u·(a/g − 1) / Σ u·(a − 1)` over the last `occupancy_window` (8) trials.
//!   Everything else that moved `a_j` (the policy's steps, eq. 6's, the other flows' trials)
//!   is independent of the trial's sign and drops out. On the packet simulator it reads a
//!   lone flow's share as 0.00–0.03 below capacity and 1.00 above it, and two flows' within
//!   0.09 of their true shares at 30–210 ms (`datapath/sim/tests/jury.rs`); the corner and
//!   `(±1, 0)` converge there to Jain ≥ 0.98 at 60, 120 and 210 ms. The other
//!   choices stay for the record: `rate`, `own` (the step against the policy's centre),
//!   `explore` (exploration's sign alone). Eq. 6, the range `(μ, δ)` and the inputs are the
//!   paper's.
//! - **Exploration** band `|a| < 0.1`, probability 0.9 (the paper: "a high likelihood"),
//!   from a per-flow SplitMix64 stream seeded by the socket id: runs repeat exactly.
//! - **Significance** threshold 8 ACKed packets per interval; intervals without any RTT
//!   sample count as insignificant too. This is Jury's start-up (from the initial window).
//! - **Reward** ζ = 0.9 (the paper only says 0 < ζ < 1; Vivace's exponent), β1 = 1e-5 with
//!   RTT in µs, β2 = 5 (Table 2), `ratio_bw` the smoothed estimate, `L_min` the smallest loss
//!   fraction seen. Eq. 9 as printed subtracts `−β2·(1 − L_t)/(1 − L_min)`, a *bonus* of
//!   5·ratio for delivering: with it occupancy pays five times over and the queue's penalty
//!   (0.1 per 10 ms) hardly counts; a policy trained on it raised its rate whenever a queue
//!   stood (docs/algorithms/jury.md). The text says the reward decreases with loss, so the
//!   loss term here is a penalty on the delivery ratio's shortfall (`printed_loss_term`
//!   restores the printed form). Reward knobs are not dynamics (they do not act on a served
//!   flow).
//! - **Window bounds** (the paper has none): at least 4 packets, at most 4 × the flow's largest
//!   delivery-rate sample (the datapath's per-packet `tcp_rate`, not an interval's throughput,
//!   which hole-filling ACKs inflate on lossy paths) × its smallest RTT (+ 4 packets), and
//!   1 GiB; pacing at most 100 Gbit/s. The upper bound keeps a policy that increases into loss
//!   from pacing at many times what the path ever delivered (in training, a run stalled
//!   simulating a flow paced far above a 20 Mbit/s link). Before the first RTT sample the pacing rate is the initial window
//!   over 100 ms.
//! - **Dynamics** ([`crate::learned::LearnedAlgorithm::dynamics`]): every [`JuryConfig`] knob
//!   but `zeta`, `beta1`, `beta2` and `initial_cwnd_pkts`, with which the trainer starts
//!   episodes near each flow's share (below capacity eq. 9 pays `ratio_bw = 0` for any action,
//!   so a climb from the initial window alone teaches nothing within γ's horizon).
//! - **A bare [`Jury`]** (no model) answers `μ = δ = 0`, so it explores `±1` around its
//!   window: a placeholder, not Jury; the agent registers Jury only with a model.
//!
//! Not here: TD3, the networks and the multi-flow episodes live in the Python trainer
//! (`train/ccp_train/jury.py`); this module is what it trains on.

pub mod config;
pub mod core;
#[cfg(test)]
mod tests;

pub use self::config::{JuryConfig, Probe, EPISODE_START_KNOBS, REWARD_KNOBS};
pub use self::core::{
    occupancy, policy_spec, post_process, window_update, JuryCore, OccupancyFit,
    FEATURES_PER_INTERVAL, FEATURE_VERSION,
};

use crate::controller::{Algorithm, Controller, FlowInfo};
use crate::learned::{config_dynamics, Dynamics, LearnedAlgorithm, LearnedController, LearnedCore};
use crate::policy::{ConstantPolicy, PolicySpec};
use crate::signals::{fields, FoldProgram, ProgramBuilder};

/// Report fields Jury reads.
const JURY_FIELDS: [&str; 9] = [
    fields::ACKED_BYTES,
    fields::ACKED_PKTS,
    fields::LOST_PKTS,
    fields::TIMEOUT,
    fields::RTT_MIN_US,
    fields::RTT_SUM_US,
    fields::RTT_CNT,
    fields::INTERVAL_US,
    fields::DELIVERY_RATE_MAX,
];

/// The Jury algorithm.
#[derive(Debug, Clone, Default)]
pub struct Jury {
    pub config: JuryConfig,
}

impl Jury {
    pub fn new(config: JuryConfig) -> Self {
        Self { config }
    }
}

impl crate::controller::FromConfig for Jury {
    type Config = JuryConfig;
    fn from_config(config: &JuryConfig) -> Self {
        Self::new(config.clone())
    }
}

impl Algorithm for Jury {
    fn name(&self) -> &'static str {
        "jury"
    }

    fn program(&self) -> FoldProgram {
        ProgramBuilder::new("jury_iv", self.config.interval_us())
            .fields(&JURY_FIELDS)
            .build()
    }

    /// Not what the agent runs (it serves Jury only with a model): the core driven by a
    /// built-in policy answering `μ = δ = 0`.
    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(LearnedController::new(
            self.new_core(info),
            Box::new(ConstantPolicy {
                obs_dim: FEATURES_PER_INTERVAL * self.config.history as usize,
                act_dim: 2,
                value: 0.0,
            }),
        ))
    }
}

impl LearnedAlgorithm for Jury {
    fn spec(&self) -> PolicySpec {
        policy_spec(&self.config)
    }

    fn new_core(&self, info: &FlowInfo) -> Box<dyn LearnedCore> {
        Box::new(JuryCore::new(self.config.clone(), info))
    }

    /// The whole [`JuryConfig`] but the reward's knobs ([`REWARD_KNOBS`]) and the episode
    /// start's ([`EPISODE_START_KNOBS`]).
    fn dynamics(&self) -> Dynamics {
        let except: Vec<&str> = REWARD_KNOBS
            .iter()
            .chain(&EPISODE_START_KNOBS)
            .copied()
            .collect();
        config_dynamics(&self.config, &except)
    }

    fn obs_layout(&self) -> Vec<(&'static str, std::ops::Range<usize>)> {
        vec![(
            "signals",
            0..FEATURES_PER_INTERVAL * self.config.history as usize,
        )]
    }
}
