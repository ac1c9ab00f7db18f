//! Nuwa-RL (the Nuwa-RL paper §III–IV) as a CCP algorithm: a per-ACK window law steers the
//! queueing delay to a target `T_d`, and a recurrent policy (PPO-LSTM) chooses the law's gain
//! `k` once per period. The law runs in the fold program, so the datapath applies it on every
//! ACK without waiting for the agent; the agent only sets registers ([`core::reg`]).
//!
//! ```text
//!   D_c = RTT − RTT_min                       queueing delay (sender side; §III-A eq. 6)
//!   θ   = tanh((T_d − D_c) / ρ)               ρ = rho · T_d
//!   w  ← w + θ·k / w                          per acknowledged packet, w in packets (eq. 7)
//!   k  ← clamp(k · a, k_min, k_max),  a ∈ {0.25, 1, 1.05, 1.25, 2.85}      once per period
//!   r   = γ·U_α(x) − θ_r·U_α(τ) − φ·loss,  U_α(x) = x^(1−α)/(1−α)           (eqs. 9, 10)
//! ```
//!
//! Reacts to: every RTT sample (through the law), losses (one cut per episode) and timeouts
//! (slow start again). Ignores: ECN, reordering, pacing (it sets no rate), the throughput
//! itself (only the policy sees it).
//!
//! Choices where the paper is vague, or where CCP differs from its receiver-side kernel module
//! (the reasons, at more length: `docs/algorithms/nuwa.md`):
//!
//! - **Where it runs**: the paper deploys the law at the receiver (the advertised window,
//!   one-way delay against the minimum-delay sample). CCP's datapaths are senders: `D_c` is
//!   the RTT sample less the flow's minimum RTT (the paper's `Delay_min` is never forgotten,
//!   Algorithm 1; the agent tracks it and sets `Control.nuwa_base_us`, the program folds in the
//!   interval's own minimum). The simulator also runs the paper's form ([`receiver`]: the
//!   same law on the advertised window from the one-way delay).
//! - **tanh**: libccp has `+ − × ÷ min max` on u64 and no tanh. The program evaluates the [5/4]
//!   Padé approximant `x(945 + 105x² + x⁴)/(945 + 420x² + 15x⁴)` in fixed point (θ·4096, x
//!   capped at 4, the result at 1) with the sign handled by two branches (no negative
//!   numbers, and an underflow would abort the ACK). Error against `tanh`: ≤ 1.4e-3 for the
//!   rational, ≤ 2e-3 as the program computes it ([`core::theta_fixed`], tested). The window
//!   is kept in milli-bytes in a state register (`nuwa_w`) because the kernel holds whole
//!   packets and would round each ACK's fraction away; `Cwnd` gets whole packets.
//! - **Units**: `w` in packets, so `k` is packets per RTT at `θ = ±1` (the paper's k = 1 for
//!   4G, 7 for 5G, §III-B); in bytes, per ACK, `Δcwnd = θ·k·mss·acked/cwnd`.
//! - **ρ**: a fraction of `T_d` (default ½: θ = tanh 2 = 0.96 with an empty queue and −0.96
//!   at twice the target), so the law has one shape for every target and one model serves
//!   any `T_d` (the issue asks for two).
//! - **Actions** (eq. 8): multipliers on `k`, not `k`'s values: "action = 1 keeps the
//!   behaviour stable" and Nuwa's k = 7 for 5G is reachable only as a product; 2.85, 1.25 are
//!   BBR's gains (§IV-B). `k` stays in `[k_min, k_max]` = [1/64, 64].
//! - **State** (§IV-B), one row (the LSTM holds the history): `rcv_data` = bytes acknowledged
//!   in the period and `new_win` = the datapath's window, both `log2(1 + packets)/24`; the
//!   receive buffer space has no sender-side counterpart (libccp has no rwnd primitive), and
//!   what stands in is the free share of the delay budget `(T_d − D_c)/T_d` in [−1, 1]; the
//!   last RTT `log2(1 + ms)/14`. Added: `k` itself (`ln(k/k_min)/ln(k_max/k_min)`): with
//!   multiplicative actions the policy cannot know the gain otherwise. Features come from
//!   validated reports (RTTs in (0, 100 s), bounded counts), never NaN.
//! - **Period**: one decision per report, every `interval_rtts` (1) smoothed RTT, ≥ 10 ms;
//!   none in slow start, nor on an interval without ACKs or RTT.
//! - **Slow start and loss** (the paper leaves both to the sender's stack): the program slow
//!   starts (cwnd += acked) until `D_c` exceeds `slow_start_exit · T_d`, then halves the
//!   window (it grew a whole RTT past the delay it saw); a loss ends slow start, a timeout
//!   restarts it. Once per loss episode ([`crate::window`]'s loss clock) the agent bumps a cut
//!   epoch and the program multiplies its window by `loss_decrease` (0.7): without it a
//!   buffer shallower than `T_d` keeps the law growing into drops. Window ≥ 2 packets.
//! - **Reward** (eq. 10): `x` = the interval's delivery rate in Mbit/s
//!   (`reward_rate_unit_mbps`; the paper's rewards grow with the bandwidth), `τ` = mean RTT over
//!   the minimum RTT, loss = the lost fraction; γ = θ = 0.4, φ = 0.2, α = 0.6. `x` against the
//!   flow's own best rate (`reward_rate_unit_mbps = 0`, part 1's choice) makes every steady
//!   rate worth the same: a policy trained on it drove `k` to `k_min` and left the path empty.
//! - **Reward, deviation from eq. 10** (`reward_delay_over_target`, off by default = the
//!   paper): `τ = (RTT_min + max(0, D_c − T_d)) / RTT_min` ([`delay_ratio`], `D_c` = mean RTT
//!   − the flow's minimum, the estimate the law steers) instead of `RTT/RTT_min`. The paper's
//!   `τ` charges the standing queue `T_d` the law is told to keep: at `RTT_min` = 10 ms and
//!   `T_d` = 40 ms holding the target costs θ·(U(5) − U(1)) = 0.90 per decision, more than
//!   doubling a 10 Mbit/s rate earns (0.80), so the reward's best is a path left half empty
//!   (a trained run fell into it: `k` to `k_min`). With the knob the target queue is free and
//!   every millisecond beyond it costs what it costs under eq. 10 (τ's slope is `1/RTT_min`
//!   either way). A reward knob: what the policy observes and how it acts are unchanged.
//! - **Reward, deviation from eq. 10** (training only, `python -m ccp_train.nuwa train
//!   --reward-unit capacity`, decided in issue 39): `x` = the interval's delivery rate over
//!   what the bottleneck offered in that interval ([`utility_in_capacity`], the simulator's
//!   capacity; an outage charges nothing). Eq. 10's `x` in Mbit/s makes a 100 Mbit/s episode
//!   worth more than a 2 Mbit/s one whatever the gain, and against the flow's own best rate
//!   every steady rate is worth the same; in the capacity's unit a filled link pays `γ·U(1)`
//!   at any rate. Only the simulator knows the capacity, so this is a reward, never a feature.
//! - **Discrete, recurrent output**: the model outputs 5 values whose argmax is the action
//!   (card `output_kind: "q_values"`, `n_actions: 5`; for PPO they are the logits), and takes
//!   `h_in`/`c_in` (`recurrent.hidden_size` = `lstm_hidden`), carried per flow by the agent's
//!   runtime. A bad index holds `k` (×1), counted.
//! - **Dynamics**: every [`NuwaConfig`] knob but the reward's and `lstm_hidden`,
//!   `target_delay_ms` ([`config::NOT_DYNAMICS`]).
//! - **A bare [`Nuwa`]** (no model) answers ×1: the law with `k = k_init`.
//!
//! Not here: the RecurrentPPO trainer (`train/ccp_train/nuwa.py`).

pub mod config;
pub mod core;
pub mod receiver;
#[cfg(test)]
mod tests;

pub use self::config::{NuwaConfig, NOT_DYNAMICS, REWARD_KNOBS};
pub use self::core::{
    action_gain, alpha_fair, delay_ratio, feature, law_step, policy_spec, program, tanh_approx,
    theta_fixed, utility, utility_in_capacity, Measured, NuwaCore, ACTIONS, FEATURE_VERSION,
    HOLD_ACTION, OBS_DIM,
};
pub use self::receiver::ReceiverLaw;

use crate::controller::{Algorithm, Controller, FlowInfo};
use crate::learned::{config_dynamics, Dynamics, LearnedAlgorithm, LearnedController, LearnedCore};
use crate::policy::{ConstantPolicy, PolicySpec};
use crate::signals::FoldProgram;

/// The Nuwa-RL algorithm.
#[derive(Debug, Clone, Default)]
pub struct Nuwa {
    pub config: NuwaConfig,
}

impl Nuwa {
    pub fn new(config: NuwaConfig) -> Self {
        Self { config }
    }
}

impl crate::controller::FromConfig for Nuwa {
    type Config = NuwaConfig;
    fn from_config(config: &NuwaConfig) -> Self {
        Self::new(config.clone())
    }
}

impl Algorithm for Nuwa {
    fn name(&self) -> &'static str {
        "nuwa"
    }

    fn program(&self) -> FoldProgram {
        let initial = self.config.clock().initial_us();
        program(&self.config, initial)
    }

    /// Not what the agent runs (it serves Nuwa only with a model): the core driven by a
    /// built-in policy that always answers ×1, so the law runs with `k = k_init`.
    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(LearnedController::new(
            self.new_core(info),
            Box::new(ConstantPolicy {
                obs_dim: OBS_DIM,
                act_dim: 1,
                value: HOLD_ACTION as f32,
            }),
        ))
    }
}

impl LearnedAlgorithm for Nuwa {
    fn spec(&self) -> PolicySpec {
        policy_spec(&self.config)
    }

    fn new_core(&self, info: &FlowInfo) -> Box<dyn LearnedCore> {
        Box::new(NuwaCore::new(self.config.clone(), info))
    }

    /// The whole [`NuwaConfig`] but the reward's knobs and [`NOT_DYNAMICS`].
    fn dynamics(&self) -> Dynamics {
        let except: Vec<&str> = REWARD_KNOBS.iter().chain(&NOT_DYNAMICS).copied().collect();
        config_dynamics(&self.config, &except)
    }

    /// One slice per feature ([`feature`]), so a trainer reads the gain in force or the delay
    /// budget's free share without copying an index.
    fn obs_layout(&self) -> Vec<(&'static str, std::ops::Range<usize>)> {
        [
            ("rcv_data", feature::RCV_DATA),
            ("window", feature::WINDOW),
            ("space", feature::SPACE),
            ("rtt", feature::RTT),
            ("gain", feature::GAIN),
        ]
        .into_iter()
        .map(|(name, i)| (name, i..i + 1))
        .collect()
    }

    fn discrete_actions(&self) -> Option<usize> {
        Some(ACTIONS.len())
    }
}
