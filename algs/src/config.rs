//! Every algorithm's knobs in one place: [`AlgsConfig`] (generated from the registry table,
//! [`crate::registry`]) is what the agent's `--config` TOML
//! file holds under `[algs.<name>]`, and what tests and the simulator runner pass in code.
//! Missing tables and keys take each paper's defaults; unknown keys are errors.
//!
//! Every knob has a documented range: [`AlgsConfig::validate`] (each config struct's
//! `validate()`) refuses a value outside it, NaN and infinities with a [`KnobError`] that
//! names the knob, its value and the range.

use std::fmt;

pub use crate::registry::AlgsConfig;

/// A knob outside its range: `algs.<alg>.<knob> = <value>: expected <range>`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("algs.{alg}.{knob} = {value}: expected {expected}")]
pub struct KnobError {
    /// The algorithm's table (`cubic`).
    pub alg: &'static str,
    /// The knob (`beta`).
    pub knob: &'static str,
    /// The refused value as written back.
    pub value: String,
    /// The range, e.g. `a finite number in (0, 1)`.
    pub expected: String,
}

/// A range of a real-valued knob; every range also requires a finite value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Range {
    /// `[lo, hi]`
    Closed(f64, f64),
    /// `(lo, hi]`
    AboveTo(f64, f64),
    /// `(lo, hi)`
    Open(f64, f64),
}

impl Range {
    fn contains(self, v: f64) -> bool {
        v.is_finite()
            && match self {
                Range::Closed(lo, hi) => lo <= v && v <= hi,
                Range::AboveTo(lo, hi) => lo < v && v <= hi,
                Range::Open(lo, hi) => lo < v && v < hi,
            }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Range::Closed(lo, hi) => write!(f, "a finite number in [{lo}, {hi}]"),
            Range::AboveTo(lo, hi) => write!(f, "a finite number in ({lo}, {hi}]"),
            Range::Open(lo, hi) => write!(f, "a finite number in ({lo}, {hi})"),
        }
    }
}

/// Checks of one algorithm's knobs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Knobs(pub &'static str);

impl Knobs {
    /// A real knob within `r` (and finite).
    pub fn real(self, knob: &'static str, v: f64, r: Range) -> Result<(), KnobError> {
        if r.contains(v) {
            Ok(())
        } else {
            Err(self.err(knob, v, r.to_string()))
        }
    }

    /// An integer knob within `[lo, hi]`.
    pub fn int(
        self,
        knob: &'static str,
        v: impl Into<u64> + fmt::Display + Copy,
        lo: u64,
        hi: u64,
    ) -> Result<(), KnobError> {
        let x: u64 = v.into();
        if lo <= x && x <= hi {
            Ok(())
        } else {
            Err(self.err(knob, v, format!("an integer in [{lo}, {hi}]")))
        }
    }

    /// `lo_knob <= hi_knob` (both already checked one by one).
    pub fn ordered(
        self,
        lo_knob: &'static str,
        lo: f64,
        hi_knob: &'static str,
        hi: f64,
    ) -> Result<(), KnobError> {
        if lo <= hi {
            Ok(())
        } else {
            Err(self.err(
                lo_knob,
                lo,
                format!("at most algs.{}.{hi_knob} = {hi}", self.0),
            ))
        }
    }

    /// A report-interval knob (µs) within [`INTERVAL_US`].
    pub fn interval_us(self, knob: &'static str, v: u32) -> Result<(), KnobError> {
        self.int(knob, v, INTERVAL_US.0, INTERVAL_US.1)
    }

    fn err(self, knob: &'static str, v: impl fmt::Display, expected: String) -> KnobError {
        KnobError {
            alg: self.0,
            knob,
            value: v.to_string(),
            expected,
        }
    }
}

/// Report intervals (µs) an algorithm may ask for: what the agent clamps to (1 ms to 10 s).
pub(crate) const INTERVAL_US: (u64, u64) = (1_000, 10_000_000);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        AlgsConfig::default().validate().unwrap();
    }

    #[test]
    fn ranges_refuse_out_of_range_nan_and_infinity() {
        let k = Knobs("cubic");
        assert!(k.real("beta", 0.7, Range::Open(0.0, 1.0)).is_ok());
        for v in [1.5, 0.0, 1.0, f64::NAN, f64::INFINITY, -0.1] {
            let e = k.real("beta", v, Range::Open(0.0, 1.0)).unwrap_err();
            assert_eq!(e.knob, "beta");
            assert!(e.to_string().starts_with("algs.cubic.beta = "), "{e}");
            assert!(e.to_string().contains("(0, 1)"), "{e}");
        }
        assert!(k.int("min_interval_us", 0u32, 1_000, 10).is_err());
        assert!(k.ordered("a", 2.0, "b", 1.0).is_err());
    }

    /// Every knob of every algorithm is checked: each struct refuses one bad value per knob.
    #[test]
    fn every_knob_is_checked() {
        fn refused(knob: &str, c: AlgsConfig) {
            let e = c.validate().expect_err(knob);
            assert_eq!(e.knob, knob, "{e}");
        }
        macro_rules! bad {
            ($alg:ident . $knob:ident = $($v:expr),+) => {$(
                let mut c = AlgsConfig::default();
                c.$alg.$knob = $v;
                refused(stringify!($knob), c);
            )+};
        }
        let (nan, inf) = (f64::NAN, f64::INFINITY);
        bad!(reno.min_interval_us = 0, 99_999_999);
        bad!(reno.initial_interval_us = 0, 99_999_999);
        bad!(cubic.c = inf, 0.0, nan, -1.0);
        bad!(cubic.beta = 1.5, 1.0, 0.0, nan);
        bad!(cubic.min_interval_us = 0);
        bad!(cubic.initial_interval_us = 0);
        bad!(bbr.high_gain = nan, 0.5);
        bad!(bbr.cwnd_gain = 0.0, inf);
        bad!(bbr.probe_up_gain = 0.5);
        bad!(bbr.probe_down_gain = 1.5, 0.0);
        bad!(bbr.pacing_margin_percent = -1.0, 50.0);
        bad!(bbr.full_bw_thresh = 1.0);
        bad!(bbr.full_bw_rounds = 0);
        bad!(bbr.bw_window_rounds = 0, 1025);
        bad!(bbr.min_rtt_window_us = 0);
        bad!(bbr.probe_rtt_duration_us = 0);
        bad!(bbr.min_cwnd_pkts = 0);
        bad!(bbr.quantization_pkts = 100_000);
        bad!(bbr.reports_per_rtt = 0);
        bad!(bbr.min_interval_us = 0);
        bad!(bbr.initial_interval_us = 0);
        bad!(iris.epoch_ms = 0);
        bad!(iris.queue_target_pkts = -1.0, 0.0);
        bad!(iris.expansion = inf);
        bad!(iris.delta_ms = 0.0);
        bad!(iris.min_window_s = 0.0);
        bad!(iris.median_window_s = -inf);
        bad!(iris.refit_interval_s = 0.0);
        bad!(iris.history_s = nan);
        bad!(iris.min_fit_samples = 0);
        bad!(iris.max_condition = 0.5);
        bad!(iris.min_fit_correlation = 2.0);
        bad!(iris.initial_rate_kbps = -5.0);
        bad!(iris.min_rate_kbps = 0.0);
        bad!(iris.max_rate_mbps = 0.0);
        bad!(iris.max_step = 0.0);
        bad!(iris.drain_gain = 0.0);
        bad!(iris.reprobe_gain = 0.5);
        bad!(iris.max_random_loss = 1.0);
        bad!(mocc.alpha = 0.0, nan);
        bad!(mocc.initial_rtt_ms = 0.0);
        bad!(mocc.min_mi_ms = -1.0);
        bad!(mocc.max_mi_ms = nan);
        bad!(mocc.min_rate_kbps = -1.0);
        bad!(mocc.max_rate_mbps = 0.0);
        bad!(mocc.startup_exit_latency_ratio = 0.5);
        bad!(mocc.cwnd_headroom_pkts = -1.0);
        bad!(mocc.initial_rate_mbps = Some(0.0), Some(nan));
        bad!(mocc.additive_increase_pkts = -1.0);
        bad!(mocc.additive_increase_cap = 2.0);
        bad!(mocc.additive_increase_min_action = inf);
        bad!(mocc.min_rate_pkts = -1.0);
        bad!(mocc.share_probe_every_mis = 10_000_000);
        bad!(mocc.share_probe_delta = 1.0);
        bad!(mocc.share_probe_half_mis = 0, 5);
        bad!(mocc.share_probe_below_capacity = -1.0);
        bad!(mocc.share_probe_min_latency_ratio = -1.0);
        bad!(mocc.share_probe_early_doublings = 100);
        bad!(mocc.share_gain = 0.0);
        bad!(mocc.share_guard_below = 2.0);
        bad!(mocc.share_guard_min_trials = 10_000_000);
        bad!(mocc.share_guard_min_action = nan);
        bad!(mocc.share_guard_pkts = -1.0);
        bad!(mocc.share_guard_loss_factor = 0.0);
        bad!(mocc.share_peers_fair = -1.0);
        bad!(mocc.share_peers_busy = -1.0);
        bad!(jury.interval_ms = 0.0, nan, 20_000.0);
        bad!(jury.alpha = 0.0, 1.0, nan);
        bad!(jury.history = 0, 65);
        bad!(jury.signal_window = 0);
        bad!(jury.occupancy_window = 0, 257);
        bad!(jury.min_probe = 0.0, 2.0);
        bad!(jury.mu_bound = 0.0, 1.5, nan);
        bad!(jury.min_delta = -0.1, 1.5, nan);
        bad!(jury.explore_band = -0.1, 1.5);
        bad!(jury.explore_prob = 2.0, nan);
        bad!(jury.min_pkts = 2_000_000);
        bad!(jury.initial_rtt_ms = 0.0, inf);
        bad!(jury.min_cwnd_pkts = 0.5);
        bad!(jury.max_cwnd_bdp = 0.5, 2000.0);
        bad!(jury.initial_cwnd_pkts = Some(0.0), Some(nan));
        bad!(jury.zeta = 0.0, 1.0);
        bad!(jury.beta1 = -1.0, nan);
        bad!(jury.beta2 = -1.0, 1e4);
        bad!(nuwa.target_delay_ms = 0.0, nan);
        bad!(nuwa.rho = 0.0, inf);
        bad!(nuwa.k_min = 0.0, 1e9);
        bad!(nuwa.k_max = 0.0, nan);
        bad!(nuwa.k_init = 0.0, 1e9);
        bad!(nuwa.slow_start_exit = -1.0, 20.0);
        bad!(nuwa.loss_decrease = 0.0, 2.0);
        bad!(nuwa.interval_rtts = 0.0, nan);
        bad!(nuwa.min_interval_ms = 0.0);
        bad!(nuwa.initial_interval_ms = -1.0);
        bad!(nuwa.window_s = 0.0, inf);
        bad!(nuwa.lstm_hidden = 0, 5000);
        bad!(nuwa.reward_throughput = -1.0);
        bad!(nuwa.reward_delay = nan);
        bad!(nuwa.reward_loss = 1e4);
        bad!(nuwa.alpha = 0.0, 11.0);
        bad!(owl.history = 0, 65);
        bad!(owl.interval_rtts = 0.0, nan, 20.0);
        bad!(owl.min_interval_ms = 0.0, inf);
        bad!(owl.initial_interval_ms = -1.0);
        bad!(owl.loss_decrease = 0.0, 1.0, nan);
        bad!(owl.min_cwnd_pkts = 0.5);
        bad!(owl.window_s = 0.0, inf);
        bad!(owl.stats_stale_ms = 0.0, -1.0);
        bad!(owl.delta = -0.1, nan);
        bad!(owl.beta = -1.0, inf);
        // relations between knobs
        let mut c = AlgsConfig::default();
        c.mocc.min_mi_ms = 600.0;
        refused("min_mi_ms", c);
        let mut c = AlgsConfig::default();
        c.iris.min_rate_kbps = 2e6;
        c.iris.max_rate_mbps = 1.0;
        refused("min_rate_kbps", c);
        let mut c = AlgsConfig::default();
        c.bbr.probe_rtt_duration_us = 2_000_000;
        c.bbr.min_rtt_window_us = 1_000_000;
        refused("probe_rtt_duration_us", c);
    }
}
