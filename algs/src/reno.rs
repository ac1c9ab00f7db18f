//! Reno (RFC 5681) as a CCP algorithm: the baseline every learned scheme is measured against.
//!
//! Model, in bytes, with `acked` the bytes newly acknowledged in a report interval:
//!
//! ```text
//!   slow start            (cwnd <  ssthresh):  cwnd += acked
//!   congestion avoidance  (cwnd >= ssthresh):  cwnd += mss · acked / cwnd
//!   loss (dup-ACK/SACK):  ssthresh = max(cwnd/2, 2·mss); cwnd = ssthresh     (once per episode)
//!   retransmission timeout: ssthresh = max(cwnd/2, 2·mss); cwnd = 1·mss
//!                           (inside a recovery episode: cwnd = 1·mss, ssthresh kept)
//! ```
//!
//! Reacts to: acknowledged bytes, lost-packet samples and timeouts reported by the fold
//! program. Ignores: delay (beyond sizing its report clock), ECN, pacing (it never sets a
//! rate, so the datapath sends as the window allows).
//!
//! Choices where CCP differs from in-kernel Reno: the window grows once per report instead of
//! once per ACK (same average growth; RFC 5681 §3.1 allows byte counting, RFC 3465). A
//! report fires every `max(srtt/2, min_interval)` and at once on any loss or timeout, so a
//! reduction is never later than the ACK that revealed the loss. Further losses before the
//! window at the reduction has been acknowledged (at least 1.25 current RTTs, at most four)
//! belong to the same congestion event and are ignored: NewReno's recovery phase (RFC 6582)
//! without per-packet state, see `LossClock` (in [`crate::window`], shared with Cubic, BBR,
//! Owl and Nuwa-RL).

use crate::controller::{Action, Algorithm, Controller, FlowInfo, FlowMetrics};
use crate::signals::{FoldProgram, Interval, ProgramBuilder, Trigger};
use crate::window::{half_rtt_interval, Congestion, LossClock, WINDOW_FIELDS};

/// Reno's knobs.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
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

impl RenoConfig {
    /// Check every knob against its range (see `config`).
    pub fn validate(&self) -> Result<(), crate::config::KnobError> {
        use crate::config::Knobs;
        let k = Knobs("reno");
        k.interval_us("min_interval_us", self.min_interval_us)?;
        k.interval_us("initial_interval_us", self.initial_interval_us)
    }
}

/// The Reno algorithm.
#[derive(Debug, Clone, Default)]
pub struct Reno {
    pub config: RenoConfig,
}

impl crate::controller::FromConfig for Reno {
    type Config = RenoConfig;
    fn from_config(config: &RenoConfig) -> Self {
        Self {
            config: config.clone(),
        }
    }
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
    /// Continue in congestion avoidance from the window in force: slow start from a window
    /// the path already holds would double it in one RTT.
    fn hand_over(&mut self, h: &crate::Handover) {
        self.cwnd = f64::from(h.cwnd_bytes).max(2.0 * self.mss);
        self.ssthresh = self.cwnd;
    }

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
        let event = self.clock.advance(iv, self.metrics.srtt_us, self.cwnd);
        tracing::trace!(
            now_us = self.clock.now_us,
            acked = iv.acked_bytes,
            lost = iv.lost_pkts,
            timeout = iv.timeout,
            rtt_mean_us = iv.rtt_mean_us.unwrap_or(0.0),
            cwnd = self.cwnd,
            ?event,
            "reno report"
        );
        match event {
            Congestion::NewEpisode { timeout } => {
                self.ssthresh = (self.cwnd / 2.0).max(2.0 * self.mss);
                self.cwnd = if timeout { self.mss } else { self.ssthresh };
            }
            Congestion::TimeoutInEpisode => self.cwnd = self.mss,
            Congestion::None => {}
        }
        if iv.lost_pkts == 0 && !iv.timeout {
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

    /// A flow slow-started to 100 kB that just lost `lost` packets: cwnd = ssthresh = 50 kB.
    fn after_a_loss(lost: u64) -> RenoFlow {
        let mut f = RenoFlow::new(RenoConfig::default(), &info());
        f.on_report(&iv(90_000, 0, false));
        assert_eq!(f.cwnd_bytes(), 100_000.0);
        f.on_report(&iv(0, lost, false));
        assert_eq!(f.cwnd_bytes(), 50_000.0);
        f
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

    #[test]
    fn one_reduction_until_the_window_at_the_loss_is_acknowledged() {
        // slow-start overshoot: cwnd 100 kB, losses keep arriving for three RTTs (40 ms)
        let mut f = after_a_loss(5);
        // 100 ms later (2.5 RTTs) 60 kB of the 100 kB outstanding are acknowledged: same episode
        for _ in 0..5 {
            f.on_report(&iv(12_000, 2, false));
        }
        assert_eq!(f.cwnd_bytes(), 50_000.0);
        assert_eq!(f.ssthresh_bytes(), 50_000.0);
        // the rest is acknowledged; the next loss is a new congestion event
        f.on_report(&iv(40_000, 0, false));
        let before = f.cwnd_bytes();
        f.on_report(&iv(0, 1, false));
        assert_eq!(f.cwnd_bytes(), before / 2.0);
    }

    #[test]
    fn an_episode_ends_after_four_rtts_even_without_acknowledgements() {
        let mut f = after_a_loss(5);
        // 7 × 20 ms = 140 ms < 4 RTTs (160 ms): still the same episode
        for _ in 0..7 {
            f.on_report(&iv(0, 1, false));
        }
        assert_eq!(f.cwnd_bytes(), 50_000.0);
        f.on_report(&iv(0, 1, false));
        assert_eq!(f.cwnd_bytes(), 25_000.0);
    }

    #[test]
    fn a_timeout_inside_an_episode_keeps_ssthresh() {
        let mut f = after_a_loss(5);
        let a = f.on_report(&iv(0, 0, true));
        assert_eq!(a.cwnd_bytes, Some(1000));
        assert_eq!(f.ssthresh_bytes(), 50_000.0);
        // slow start back to the kept ssthresh
        f.on_report(&iv(1_000, 0, false));
        assert_eq!(f.cwnd_bytes(), 2_000.0);
    }

    #[test]
    fn tail_losses_reported_just_after_one_rtt_are_the_same_episode() {
        // the VM case: the cumulative ACK passes the window at the reduction after one RTT,
        // and the window's lost tail is reported a few ms later (RACK's reordering window)
        let mut f = after_a_loss(4);
        f.on_report(&iv(101_000, 0, false)); // +20 ms
        f.on_report(&iv(0, 0, false)); // +40 ms: one RTT, window acknowledged
        let tail = Interval {
            interval_us: 5_000,
            ..iv(0, 4, false)
        };
        let before = f.cwnd_bytes();
        assert!(before > 50_000.0, "{before}");
        f.on_report(&tail); // +45 ms < 1.25 RTT
        assert_eq!(f.cwnd_bytes(), before);
        f.on_report(&tail); // +50 ms: a new episode
        assert_eq!(f.cwnd_bytes(), before / 2.0);
    }
}
