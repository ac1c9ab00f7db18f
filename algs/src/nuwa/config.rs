//! Nuwa-RL's knobs and their ranges.

use crate::config::ReportClock;

/// Nuwa-RL's knobs. Defaults are the paper's where it gives one (the action set is fixed in
/// [`super::ACTIONS`]; eq. 10's γ = θ = 0.4, φ = 0.2, α = 0.6; `k` = 1 as Nuwa's 4G setting,
/// §III-B); the others are this implementation's choices, explained in the module header.
/// Every knob but the reward's ([`REWARD_KNOBS`]) and those in [`NOT_DYNAMICS`] is part of
/// the dynamics a model was trained under: the agent refuses a model trained with other
/// values.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NuwaConfig {
    /// Target queueing delay `T_d` (ms): the delay the per-ACK law steers `D_c` to.
    pub target_delay_ms: f64,
    /// Sensitivity `ρ` of the law, as a fraction of `T_d`: `θ = tanh((T_d − D_c)/(rho·T_d))`.
    pub rho: f64,
    /// Gain `k` (packets per RTT at `θ` = ±1) a flow starts with, before any decision.
    pub k_init: f64,
    /// Smallest gain the policy's multiplicative actions reach.
    pub k_min: f64,
    /// Largest gain (at most 100: the fold program's products are sized for it).
    pub k_max: f64,
    /// Slow start (in the fold program) ends when `D_c` exceeds this fraction of `T_d`, and
    /// then halves the window (it grew for one RTT past the delay it saw).
    pub slow_start_exit: f64,
    /// Window after a loss episode begins, as a fraction of the window (once per episode,
    /// [`crate::window`]'s loss clock); 1 ignores losses as the paper's receiver-side window does.
    pub loss_decrease: f64,
    /// Decision (report) interval, in smoothed RTTs.
    pub interval_rtts: f64,
    /// Shortest report interval (ms).
    pub min_interval_ms: f64,
    /// Report interval before the first RTT sample (ms).
    pub initial_interval_ms: f64,
    /// Window (s) of the running best delivery rate that eq. 10's throughput is measured in.
    pub window_s: f64,
    /// Hidden size of the policy's LSTM (checked against the model card by the spec).
    pub lstm_hidden: u32,
    /// Reward (eq. 10): weight γ of the throughput utility.
    pub reward_throughput: f64,
    /// Reward (eq. 10): weight θ of the delay utility.
    pub reward_delay: f64,
    /// Reward (eq. 10): weight φ of the loss fraction.
    pub reward_loss: f64,
    /// Reward (eq. 9): the α of the α-fair utility (1: log).
    pub alpha: f64,
    /// Reward (eq. 10): the unit of the throughput `x`, in Mbit/s (the paper's `x` is a rate:
    /// "networks with high bandwidth tend to have higher rewards"); 0 measures `x` against the
    /// flow's own best delivery rate over `window_s` instead, under which every steady rate is
    /// worth the same and a policy learns to leave the path empty (measured: `docs/algorithms/
    /// nuwa.md`, Training).
    pub reward_rate_unit_mbps: f64,
    /// Reward (eq. 10): charge the delay utility only for the queue beyond the target,
    /// `τ = (RTT_min + max(0, D_c − T_d)) / RTT_min` with `D_c = RTT − RTT_min`, instead of the
    /// paper's `τ = RTT/RTT_min`, which also charges the standing queue of `T_d` the law itself
    /// keeps (a deviation from eq. 10; why: the module header and `docs/algorithms/nuwa.md`).
    pub reward_delay_over_target: bool,
}

/// Knobs that only shape the reward (a training signal), not what the policy observes or how
/// its action acts: left out of [`super::Nuwa`]'s dynamics, recorded in the card's training
/// section instead.
pub const REWARD_KNOBS: [&str; 6] = [
    "reward_throughput",
    "reward_delay",
    "reward_loss",
    "alpha",
    "reward_rate_unit_mbps",
    "reward_delay_over_target",
];

/// Other knobs left out of the dynamics: `lstm_hidden` is the model's shape (the spec checks
/// it), `target_delay_ms` a setting the policy sees only relative to itself (every delay
/// feature is in units of `T_d`, and `ρ` is a fraction of it), so one model serves any target.
/// `k_init` is in the dynamics: a policy that holds `k` keeps the gain a flow starts with, so a
/// model is served only at the `k_init` it was trained with.
pub const NOT_DYNAMICS: [&str; 2] = ["lstm_hidden", "target_delay_ms"];

/// Largest `k_max`: the fold program's per-ACK product `θ·k·1000 · acked · mss · 1000` stays
/// below 2^64 for `k` ≤ 100, acked ≤ 2 MiB and mss < 2^16.
pub const K_LIMIT: f64 = 100.0;

impl Default for NuwaConfig {
    fn default() -> Self {
        Self {
            target_delay_ms: 20.0,
            rho: 0.5,
            k_init: 1.0,
            k_min: 1.0 / 64.0,
            k_max: 64.0,
            slow_start_exit: 0.5,
            loss_decrease: 0.7,
            interval_rtts: 1.0,
            min_interval_ms: 10.0,
            initial_interval_ms: 20.0,
            window_s: 10.0,
            lstm_hidden: 64,
            reward_throughput: 0.4,
            reward_delay: 0.4,
            reward_loss: 0.2,
            alpha: 0.6,
            reward_rate_unit_mbps: 1.0,
            reward_delay_over_target: false,
        }
    }
}

impl NuwaConfig {
    pub fn validate(&self) -> Result<(), crate::config::KnobError> {
        use crate::config::{Knobs, Range};
        let k = Knobs("nuwa");
        k.real(
            "target_delay_ms",
            self.target_delay_ms,
            Range::Closed(0.1, 10_000.0),
        )?;
        k.real("rho", self.rho, Range::Closed(0.01, 100.0))?;
        k.real("k_min", self.k_min, Range::Closed(0.001, K_LIMIT))?;
        k.real("k_max", self.k_max, Range::Closed(0.001, K_LIMIT))?;
        k.ordered("k_min", self.k_min, "k_max", self.k_max)?;
        k.real("k_init", self.k_init, Range::Closed(0.001, K_LIMIT))?;
        k.ordered("k_min", self.k_min, "k_init", self.k_init)?;
        k.ordered("k_init", self.k_init, "k_max", self.k_max)?;
        k.real(
            "slow_start_exit",
            self.slow_start_exit,
            Range::Closed(0.0, 10.0),
        )?;
        k.real(
            "loss_decrease",
            self.loss_decrease,
            Range::AboveTo(0.0, 1.0),
        )?;
        self.clock().validate(k)?;
        k.real("window_s", self.window_s, Range::AboveTo(0.0, 3600.0))?;
        k.int("lstm_hidden", self.lstm_hidden, 1, 4096)?;
        k.real(
            "reward_throughput",
            self.reward_throughput,
            Range::Closed(0.0, 1e3),
        )?;
        k.real("reward_delay", self.reward_delay, Range::Closed(0.0, 1e3))?;
        k.real("reward_loss", self.reward_loss, Range::Closed(0.0, 1e3))?;
        k.real("alpha", self.alpha, Range::AboveTo(0.0, 10.0))?;
        k.real(
            "reward_rate_unit_mbps",
            self.reward_rate_unit_mbps,
            Range::Closed(0.0, 1e6),
        )?;
        Ok(())
    }
}

impl NuwaConfig {
    /// The report clock these knobs set (`interval_rtts`, `min_interval_ms`,
    /// `initial_interval_ms`), validated and applied by [`ReportClock`] as for every learned
    /// algorithm with one.
    pub fn clock(&self) -> ReportClock {
        ReportClock {
            interval_rtts: self.interval_rtts,
            min_interval_ms: self.min_interval_ms,
            initial_interval_ms: self.initial_interval_ms,
        }
    }
}
