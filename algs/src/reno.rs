//! Reno (RFC 5681) as a CCP algorithm: the baseline every learned scheme is measured against.
//!
//! Model, in bytes, with `acked` the bytes newly acknowledged in a report interval:
//!
//! ```text
//!   slow start            (cwnd <  ssthresh):  cwnd += acked
//!   congestion avoidance  (cwnd >= ssthresh):  cwnd += mss · acked / cwnd
//!   loss (dup-ACK/SACK):  ssthresh = max(cwnd/2, 2·mss); cwnd = ssthresh     (once per RTT)
//!   retransmission timeout: ssthresh = max(cwnd/2, 2·mss); cwnd = 1·mss
//! ```
//!
//! Reacts to: acknowledged bytes, lost-packet samples and timeouts reported by the fold
//! program. Ignores: delay (beyond sizing its report clock), ECN, pacing (it never sets a
//! rate, so the datapath sends as the window allows).
//!
//! Choices where CCP differs from in-kernel Reno: the window grows once per report instead of
//! once per ACK (same average growth; RFC 5681 §3.1 allows byte counting, RFC 3465). A
//! report fires every `max(srtt/2, min_interval)` and at once on any loss or timeout, so a
//! reduction is never later than the ACK that revealed the loss. Further losses within one
//! smoothed RTT of a reduction belong to the same congestion event and are ignored (the
//! effect of NewReno's recovery phase, RFC 6582, without per-packet state).

use crate::controller::{Action, Algorithm, Controller, FlowInfo, FlowMetrics};
use crate::signals::{fields, FoldProgram, Interval, ProgramBuilder, Trigger};

/// Reno's knobs.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RenoConfig {
    /// Shortest report interval (µs).
    pub min_interval_us: u32,
    /// Report interval before the first RTT sample (µs).
    pub initial_interval_us: u32,
}

impl Default for RenoConfig {
    fn default() -> Self {
        Self {
            min_interval_us: 5_000,
            initial_interval_us: 10_000,
        }
    }
}

/// Fields Reno and Cubic need from the datapath.
pub(crate) const WINDOW_FIELDS: [&str; 7] = [
    fields::ACKED_BYTES,
    fields::ACKED_PKTS,
    fields::LOST_PKTS,
    fields::TIMEOUT,
    fields::RTT_MIN_US,
    fields::RTT_SUM_US,
    fields::RTT_CNT,
];

/// The Reno algorithm.
#[derive(Debug, Clone, Default)]
pub struct Reno {
    pub config: RenoConfig,
}

impl Algorithm for Reno {
    fn name(&self) -> &'static str {
        "reno"
    }

    fn program(&self) -> FoldProgram {
        ProgramBuilder::new("reno_ack_clock", self.config.initial_interval_us)
            .fields(&WINDOW_FIELDS)
            .trigger(Trigger::IntervalOrLoss)
            .build()
    }

    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(RenoFlow::new(self.config.clone(), info))
    }
}

/// Loss-recovery bookkeeping shared by Reno and Cubic: elapsed datapath time and the end of
/// the current congestion event.
#[derive(Debug, Clone, Default)]
pub(crate) struct LossClock {
    /// Datapath time elapsed since the flow started (µs), summed from report intervals.
    pub now_us: u64,
    /// No further reduction before this time (µs).
    pub recovery_until_us: u64,
}

impl LossClock {
    /// Advance time; returns `true` if this interval starts a new congestion event.
    pub fn advance(&mut self, iv: &Interval, srtt_us: f64) -> bool {
        self.now_us += iv.interval_us;
        let lossy = iv.lost_pkts > 0 || iv.timeout;
        if lossy && (iv.timeout || self.now_us >= self.recovery_until_us) {
            // The event lasts until data sent at the loss is acknowledged: one *current* RTT.
            // At slow-start exit the queue inflates the RTT well above srtt, and a window of
            // srtt would count the overshoot's later losses as a second event.
            let rtt = [
                Some(srtt_us),
                iv.rtt_mean_us,
                iv.rtt_last_us.map(|v| v as f64),
            ]
            .into_iter()
            .flatten()
            .fold(1.0, f64::max);
            self.recovery_until_us = self.now_us + rtt as u64;
            true
        } else {
            false
        }
    }
}

/// Report interval for window algorithms: half a smoothed RTT, at least `min_us`.
pub(crate) fn half_rtt_interval(srtt_us: f64, min_us: u32, initial_us: u32) -> u32 {
    if srtt_us <= 0.0 {
        initial_us
    } else {
        ((srtt_us / 2.0) as u32).max(min_us)
    }
}

/// One Reno flow.
#[derive(Debug, Clone)]
pub struct RenoFlow {
    config: RenoConfig,
    mss: f64,
    cwnd: f64,
    ssthresh: f64,
    clock: LossClock,
    metrics: FlowMetrics,
}

impl RenoFlow {
    pub fn new(config: RenoConfig, info: &FlowInfo) -> Self {
        let mss = f64::from(info.mss.max(1));
        Self {
            config,
            mss,
            cwnd: f64::from(info.init_cwnd_bytes).max(2.0 * mss),
            ssthresh: f64::INFINITY,
            clock: LossClock::default(),
            metrics: FlowMetrics::default(),
        }
    }

    pub fn cwnd_bytes(&self) -> f64 {
        self.cwnd
    }

    pub fn ssthresh_bytes(&self) -> f64 {
        self.ssthresh
    }
}

impl Controller for RenoFlow {
    fn initial_action(&mut self) -> Action {
        let a = Action {
            cwnd_bytes: Some(self.cwnd as u32),
            report_interval_us: Some(self.config.initial_interval_us),
            ..Default::default()
        };
        self.metrics.record(&a);
        a
    }

    fn on_report(&mut self, iv: &Interval) -> Action {
        self.metrics.observe(iv);
        let new_event = self.clock.advance(iv, self.metrics.srtt_us);
        if new_event {
            self.ssthresh = (self.cwnd / 2.0).max(2.0 * self.mss);
            self.cwnd = if iv.timeout { self.mss } else { self.ssthresh };
        } else if iv.lost_pkts == 0 && !iv.timeout {
            let acked = iv.acked_bytes as f64;
            if self.cwnd < self.ssthresh {
                // slow start, not beyond ssthresh in one step (RFC 5681 §3.1)
                let room = self.ssthresh - self.cwnd;
                let ss = acked.min(room);
                self.cwnd += ss;
                self.cwnd += self.mss * (acked - ss) / self.cwnd;
            } else {
                self.cwnd += self.mss * acked / self.cwnd;
            }
        }
        self.cwnd = self.cwnd.clamp(self.mss, f64::from(u32::MAX / 2));
        let a = Action {
            cwnd_bytes: Some(self.cwnd as u32),
            rate_bps: None,
            report_interval_us: Some(half_rtt_interval(
                self.metrics.srtt_us,
                self.config.min_interval_us,
                self.config.initial_interval_us,
            )),
        };
        self.metrics.record(&a);
        a
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> FlowInfo {
        FlowInfo::for_test()
    }

    fn iv(acked: u64, lost: u64, timeout: bool) -> Interval {
        Interval {
            acked_bytes: acked,
            acked_pkts: acked / 1000,
            lost_pkts: lost,
            timeout,
            rtt_min_us: Some(40_000),
            rtt_mean_us: Some(40_000.0),
            rtt_samples: 1,
            interval_us: 20_000,
            ..Default::default()
        }
    }

    #[test]
    fn slow_start_doubles_per_window_then_halves_on_loss() {
        let mut f = RenoFlow::new(RenoConfig::default(), &info());
        f.initial_action();
        let a = f.on_report(&iv(10_000, 0, false));
        assert_eq!(a.cwnd_bytes, Some(20_000));
        let a = f.on_report(&iv(0, 3, false));
        assert_eq!(a.cwnd_bytes, Some(10_000));
        assert_eq!(f.ssthresh_bytes(), 10_000.0);
        // a second loss within one RTT is the same congestion event
        let a = f.on_report(&iv(0, 1, false));
        assert_eq!(a.cwnd_bytes, Some(10_000));
        // congestion avoidance: one MSS per window of acked bytes
        let a = f.on_report(&iv(10_000, 0, false));
        assert_eq!(a.cwnd_bytes, Some(11_000));
        // report interval follows srtt/2
        assert_eq!(a.report_interval_us, Some(20_000));
    }

    #[test]
    fn timeout_collapses_to_one_mss() {
        let mut f = RenoFlow::new(RenoConfig::default(), &info());
        f.on_report(&iv(50_000, 0, false));
        let a = f.on_report(&iv(0, 0, true));
        assert_eq!(a.cwnd_bytes, Some(1000));
        assert_eq!(f.ssthresh_bytes(), 30_000.0);
    }
}
