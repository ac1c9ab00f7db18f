//! Owl's knobs and their ranges.

use crate::config::ReportClock;

/// Owl's knobs. Defaults are the paper's where it gives one (k = 5, δ = β = 0.5, the 10 s
/// RTT_min window, the 1 s sampling of network statistics, Cubic's β = 0.7 for ssthresh,
/// §IV-A, §VI, §VII-H); the others are this implementation's choices, explained in the module
/// header. Every knob but the reward's ([`REWARD_KNOBS`]) is part of the dynamics a model was
/// trained under ([`super::Owl`]'s `dynamics()`): the agent refuses a model trained with other
/// values.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OwlConfig {
    /// Intervals of features stacked into one observation: the history k (§IV-A, §VII-H).
    pub history: u32,
    /// Report (decision) interval, in smoothed RTTs: one policy decision per interval in
    /// congestion avoidance.
    pub interval_rtts: f64,
    /// Shortest report interval (ms).
    pub min_interval_ms: f64,
    /// Report interval before the first RTT sample (ms).
    pub initial_interval_ms: f64,
    /// Window after a loss, as a fraction of the window before it (ssthresh = cwnd =
    /// `loss_decrease` × cwnd, at least 2 packets): §VI relies on Cubic for ssthresh, β = 0.7.
    pub loss_decrease: f64,
    /// Smallest window the policy's actions reach (packets).
    pub min_cwnd_pkts: f64,
    /// Window (s) of the running minimum RTT that the RTT-inflation feature and eq. 7 divide
    /// by ("a period of 10 seconds", §IV-A), and of the running best delivery rate that eq. 7's
    /// throughput is measured in.
    pub window_s: f64,
    /// In-network statistics older than this (ms, flow time since the sample arrived) are
    /// masked: the paper samples every second (§VI), so two missed samples and a bit.
    pub stats_stale_ms: f64,
    /// Reward (eq. 7): weight δ of the loss term.
    pub delta: f64,
    /// Reward (eq. 7): weight β of the delay term; 0 is Owl-Loss (§IV-A, §V).
    pub beta: f64,
    /// Reward (eq. 7): the unit of λ in Mbit/s; 0 (default): the flow's best delivery-rate
    /// sample over `window_s`. A trainer that knows the bottleneck sets its capacity per
    /// episode, so that a window below the path's BDP earns less than one that fills it.
    pub reward_rate_unit_mbps: f64,
}

/// Knobs that only shape the reward (a training signal), not what the policy observes or how
/// its action acts: left out of [`super::Owl`]'s dynamics, recorded in the card's training
/// section instead.
pub const REWARD_KNOBS: [&str; 3] = ["delta", "beta", "reward_rate_unit_mbps"];

impl Default for OwlConfig {
    fn default() -> Self {
        Self {
            history: 5,
            interval_rtts: 1.0,
            min_interval_ms: 5.0,
            initial_interval_ms: 10.0,
            loss_decrease: 0.7,
            min_cwnd_pkts: 2.0,
            window_s: 10.0,
            stats_stale_ms: 2_500.0,
            delta: 0.5,
            beta: 0.5,
            reward_rate_unit_mbps: 0.0,
        }
    }
}

impl OwlConfig {
    /// The Owl-Loss variant (§IV-A): the utility without its delay term, `β = 0`.
    pub fn owl_loss() -> Self {
        Self {
            beta: 0.0,
            ..Self::default()
        }
    }

    pub fn validate(&self) -> Result<(), crate::config::KnobError> {
        use crate::config::{Knobs, Range};
        let k = Knobs("owl");
        k.int("history", self.history, 1, 64)?;
        self.clock().validate(k)?;
        k.real("loss_decrease", self.loss_decrease, Range::Open(0.0, 1.0))?;
        k.real("min_cwnd_pkts", self.min_cwnd_pkts, Range::Closed(1.0, 1e6))?;
        k.real("window_s", self.window_s, Range::AboveTo(0.0, 3600.0))?;
        k.real(
            "stats_stale_ms",
            self.stats_stale_ms,
            Range::AboveTo(0.0, 3_600_000.0),
        )?;
        k.real("delta", self.delta, Range::Closed(0.0, 1e3))?;
        k.real("beta", self.beta, Range::Closed(0.0, 1e3))?;
        k.real(
            "reward_rate_unit_mbps",
            self.reward_rate_unit_mbps,
            Range::Closed(0.0, 1e6),
        )?;
        Ok(())
    }
}

impl OwlConfig {
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
