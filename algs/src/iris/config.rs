//! Iris's knobs and their ranges.

/// How the target delay `T` is taken from the RTT window (§IV-A2, §VI-B4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IrisTarget {
    /// Iris-min: the minimum RTT in the window (the paper's default).
    #[default]
    Min,
    /// Iris-mid: the median of the epochs' mean RTTs in the window.
    Median,
}

/// Iris's knobs (paper names in brackets). Defaults are the paper's (§V-D) where it gives
/// one; the others are this implementation's choices, documented in the module header.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct IrisConfig {
    /// Epoch length [τ] (ms).
    pub epoch_ms: u32,
    /// Queue-load target [B] (packets).
    pub queue_target_pkts: f64,
    /// tanh expansion coefficient [M].
    pub expansion: f64,
    /// Largest expected RTT change per epoch [δ] (ms).
    pub delta_ms: f64,
    /// Iris-min or Iris-mid.
    pub target: IrisTarget,
    /// Window of the minimum RTT for Iris-min (s).
    pub min_window_s: f64,
    /// Window of the median RTT for Iris-mid (s).
    pub median_window_s: f64,
    /// Period of the refit of `k` (s).
    pub refit_interval_s: f64,
    /// Sliding history the fit uses (s).
    pub history_s: f64,
    /// Fewest samples a fit needs.
    pub min_fit_samples: usize,
    /// Largest accepted condition number of the normalised least-squares normal matrix.
    pub max_condition: f64,
    /// Smallest accepted correlation of `x − r` and `Δrtt`.
    pub min_fit_correlation: f64,
    /// Cold-start rate (kbit/s).
    pub initial_rate_kbps: f64,
    /// Lowest rate ever set (kbit/s).
    pub min_rate_kbps: f64,
    /// Highest rate ever set (Mbit/s).
    pub max_rate_mbps: f64,
    /// Largest step of eq. 7 away from the receiving rate, as a fraction of it.
    pub max_step: f64,
    /// Pacing gain while draining the cold-start overshoot.
    pub drain_gain: f64,
    /// Re-enter cold start after the queue stayed empty (see the module header).
    pub reprobe: bool,
    /// Growth per RTT while re-probing.
    pub reprobe_gain: f64,
    /// Highest loss rate counted as random in the receiving rate (fraction).
    pub max_random_loss: f64,
}

impl Default for IrisConfig {
    fn default() -> Self {
        Self {
            epoch_ms: 50,
            queue_target_pkts: 10.0,
            expansion: 100.0,
            delta_ms: 3.0,
            target: IrisTarget::Min,
            min_window_s: 600.0,
            median_window_s: 10.0,
            refit_interval_s: 5.0,
            history_s: 10.0,
            min_fit_samples: 10,
            max_condition: 1e3,
            min_fit_correlation: 0.3,
            initial_rate_kbps: 100.0,
            min_rate_kbps: 100.0,
            max_rate_mbps: 10_000.0,
            max_step: 0.5,
            drain_gain: 0.5,
            reprobe: true,
            reprobe_gain: 1.25,
            max_random_loss: 0.2,
        }
    }
}

impl IrisConfig {
    /// Check every knob against its range (see `config`).
    pub fn validate(&self) -> Result<(), crate::config::KnobError> {
        use crate::config::{Knobs, Range};
        let k = Knobs("iris");
        const DAY_S: f64 = 86_400.0;
        k.int("epoch_ms", self.epoch_ms, 1, 10_000)?;
        k.real(
            "queue_target_pkts",
            self.queue_target_pkts,
            Range::AboveTo(0.0, 1e6),
        )?;
        k.real("expansion", self.expansion, Range::AboveTo(0.0, 1e6))?;
        k.real("delta_ms", self.delta_ms, Range::AboveTo(0.0, 1e4))?;
        k.real(
            "min_window_s",
            self.min_window_s,
            Range::AboveTo(0.0, DAY_S),
        )?;
        k.real(
            "median_window_s",
            self.median_window_s,
            Range::AboveTo(0.0, DAY_S),
        )?;
        k.real(
            "refit_interval_s",
            self.refit_interval_s,
            Range::AboveTo(0.0, DAY_S),
        )?;
        k.real("history_s", self.history_s, Range::AboveTo(0.0, DAY_S))?;
        k.int("min_fit_samples", self.min_fit_samples as u64, 2, 1_000_000)?;
        k.real(
            "max_condition",
            self.max_condition,
            Range::Closed(1.0, 1e15),
        )?;
        k.real(
            "min_fit_correlation",
            self.min_fit_correlation,
            Range::Closed(-1.0, 1.0),
        )?;
        k.real(
            "initial_rate_kbps",
            self.initial_rate_kbps,
            Range::AboveTo(0.0, 1e9),
        )?;
        k.real(
            "min_rate_kbps",
            self.min_rate_kbps,
            Range::AboveTo(0.0, 1e9),
        )?;
        k.real(
            "max_rate_mbps",
            self.max_rate_mbps,
            Range::AboveTo(0.0, 1e6),
        )?;
        k.ordered(
            "min_rate_kbps",
            self.min_rate_kbps,
            "max_rate_mbps (in kbit/s)",
            self.max_rate_mbps * 1e3,
        )?;
        k.real("max_step", self.max_step, Range::AboveTo(0.0, 10.0))?;
        k.real("drain_gain", self.drain_gain, Range::AboveTo(0.0, 1.0))?;
        k.real("reprobe_gain", self.reprobe_gain, Range::AboveTo(1.0, 10.0))?;
        k.real(
            "max_random_loss",
            self.max_random_loss,
            Range::Closed(0.0, 0.99),
        )
    }
}
