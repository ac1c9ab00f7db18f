//! Knob checking for every algorithm's config table: each config struct's `validate()`
//! refuses a value outside its documented range, NaN and infinities with a [`KnobError`] that
//! names the knob, its value and the range. The tables themselves are [`crate::AlgsConfig`]
//! (generated from the registry table, [`crate::registry`]): what the agent's `--config` TOML
//! file holds under `[algs.<name>]`, and what tests and the simulator runner pass in code.
//! Missing tables and keys take each paper's defaults; unknown keys are errors.

use std::fmt;

use crate::controller::FlowMetrics;

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

/// Report intervals (µs) an algorithm may ask for: what the agent clamps to (1 ms to 10 s,
/// [`crate::controller::MIN_REPORT_INTERVAL_US`] to [`crate::controller::MAX_REPORT_INTERVAL_US`]).
pub(crate) const INTERVAL_US: (u64, u64) = (
    crate::controller::MIN_REPORT_INTERVAL_US as u64,
    crate::controller::MAX_REPORT_INTERVAL_US as u64,
);

/// The report clock of a learned window algorithm (Owl, Nuwa-RL): one report, and one
/// decision, every `interval_rtts` smoothed RTTs, at least `min_interval_ms`;
/// `initial_interval_ms` before the first RTT sample. Its three knobs stay plain keys of each
/// algorithm's table (so a typo or a wrong type is reported at its own key, with the table's
/// valid keys); each config's `clock()` builds this, which checks and applies them once here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReportClock {
    /// Report (decision) interval, in smoothed RTTs: one policy decision per interval.
    pub interval_rtts: f64,
    /// Shortest report interval (ms).
    pub min_interval_ms: f64,
    /// Report interval before the first RTT sample (ms).
    pub initial_interval_ms: f64,
}

impl ReportClock {
    /// Check the three knobs, in declaration order, as knobs of `k`'s table.
    pub(crate) fn validate(&self, k: Knobs) -> Result<(), KnobError> {
        k.real(
            "interval_rtts",
            self.interval_rtts,
            Range::Closed(0.1, 10.0),
        )?;
        k.real(
            "min_interval_ms",
            self.min_interval_ms,
            Range::Closed(1.0, 10_000.0),
        )?;
        k.real(
            "initial_interval_ms",
            self.initial_interval_ms,
            Range::Closed(1.0, 10_000.0),
        )
    }

    /// The next report interval (µs) of a flow with these metrics
    /// ([`FlowMetrics::rtt_clock_us`]).
    pub fn interval_us(&self, m: &FlowMetrics) -> u32 {
        m.rtt_clock_us(
            self.interval_rtts,
            self.min_interval_ms,
            self.initial_interval_ms,
        )
    }

    /// The report interval before the first RTT sample (µs): the fold program's initial one.
    pub fn initial_us(&self) -> u32 {
        (self.initial_interval_ms * 1e3).round() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
