//! Cubic (RFC 8312; RFC 9438 obsoletes it without changing the model below; the section
//! numbers are RFC 8312's) as a CCP algorithm.
//!
//! Model, with windows in MSS units, `t` the time since the last congestion event and
//! `RTT` the smoothed RTT:
//!
//! ```text
//!   W_cubic(t) = C·(t − K)³ + W_max,        K = ∛(W_max·(1 − β)/C)        (§4.1)
//!   W_est(t)   = W_max·β + 3·(1 − β)/(1 + β) · t/RTT                      (§4.2, TCP-friendly)
//!   per acked segment:  cwnd += (W_cubic(t + RTT) − cwnd)/cwnd           (§4.3, concave/convex)
//!   if W_cubic(t) < W_est(t): cwnd = W_est(t)                              (TCP-friendly region)
//!   on loss:    W_max = cwnd, or cwnd·(1 + β)/2 if cwnd < last W_max      (§4.6 fast convergence)
//!               ssthresh = cwnd = max(β·cwnd, 2)                          (§4.5)
//!   on timeout: ssthresh = max(β·cwnd, 2), cwnd = 1, epoch restarts        (§4.7)
//!   C = 0.4, β = 0.7; slow start below ssthresh as in Reno
//! ```
//!
//! Reacts to: acknowledged segments, loss samples, timeouts, and the RTT (which scales the
//! TCP-friendly line and the one-RTT look-ahead). Ignores: delay as a congestion signal, ECN.
//!
//! CCP choices: growth is applied once per report with the interval's acked segments
//! (`cwnd += (target − cwnd)·acked/cwnd`, never past the target), which is RFC 8312's per-ACK
//! rule integrated over the interval. Time `t` is datapath time, summed from report
//! intervals. Reports fire every `max(srtt/2, min_interval)` and at once on loss or timeout.
//! Losses inside a recovery episode are one congestion event; an episode lasts until the
//! window at its start has been acknowledged (at least 1.25 RTTs, at most four; see
//! `window::LossClock`). A timeout inside an episode restarts slow start from one segment but
//! keeps the episode's ssthresh and W_max.

use crate::controller::{Action, Algorithm, Controller, FlowInfo, FlowMetrics};
use crate::signals::{FoldProgram, Interval, ProgramBuilder, Trigger};
use crate::window::{half_rtt_interval, Congestion, LossClock, WINDOW_FIELDS};

/// Cubic's knobs (RFC 8312 names).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CubicConfig {
    /// Cubic scaling constant `C` (segments / s³).
    pub c: f64,
    /// Multiplicative decrease factor `β_cubic`.
    pub beta: f64,
    /// Fast convergence (§4.6).
    pub fast_convergence: bool,
    /// TCP-friendly region (§4.2).
    pub tcp_friendliness: bool,
    /// Shortest report interval (µs).
    pub min_interval_us: u32,
    /// Report interval before the first RTT sample (µs).
    pub initial_interval_us: u32,
}

impl Default for CubicConfig {
    fn default() -> Self {
        Self {
            c: 0.4,
            beta: 0.7,
            fast_convergence: true,
            tcp_friendliness: true,
            min_interval_us: 5_000,
            initial_interval_us: 10_000,
        }
    }
}

impl CubicConfig {
    /// Check every knob against its range (see `config`): `c` in (0, 100], `beta` in (0, 1).
    pub fn validate(&self) -> Result<(), crate::config::KnobError> {
        use crate::config::{Knobs, Range};
        let k = Knobs("cubic");
        k.real("c", self.c, Range::AboveTo(0.0, 100.0))?;
        k.real("beta", self.beta, Range::Open(0.0, 1.0))?;
        k.interval_us("min_interval_us", self.min_interval_us)?;
        k.interval_us("initial_interval_us", self.initial_interval_us)
    }
}

/// The Cubic algorithm.
#[derive(Debug, Clone, Default)]
pub struct Cubic {
    pub config: CubicConfig,
}

impl crate::controller::FromConfig for Cubic {
    type Config = CubicConfig;
    fn from_config(config: &CubicConfig) -> Self {
        Self {
            config: config.clone(),
        }
    }
}

impl Algorithm for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    fn program(&self) -> FoldProgram {
        ProgramBuilder::new("cubic_ack_clock", self.config.initial_interval_us)
            .fields(&WINDOW_FIELDS)
            .trigger(Trigger::IntervalOrLoss)
            .build()
    }

    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(CubicFlow::new(self.config.clone(), info))
    }
}

/// One Cubic flow. Windows are kept in segments (MSS units), as in the RFC.
#[derive(Debug, Clone)]
pub struct CubicFlow {
    config: CubicConfig,
    mss: f64,
    cwnd: f64,
    ssthresh: f64,
    w_max: f64,
    w_last_max: f64,
    k: f64,
    /// Start of the current congestion-avoidance epoch (µs), `None` until the first event.
    epoch_start_us: Option<u64>,
    clock: LossClock,
    metrics: FlowMetrics,
}

impl CubicFlow {
    pub fn new(config: CubicConfig, info: &FlowInfo) -> Self {
        let mss = f64::from(info.mss.max(1));
        Self {
            config,
            mss,
            cwnd: (f64::from(info.init_cwnd_bytes) / mss).max(2.0),
            ssthresh: f64::INFINITY,
            w_max: 0.0,
            w_last_max: 0.0,
            k: 0.0,
            epoch_start_us: None,
            clock: LossClock::default(),
            metrics: FlowMetrics::default(),
        }
    }

    /// Current window (segments).
    pub fn cwnd_segments(&self) -> f64 {
        self.cwnd
    }

    /// `W_max` of the current epoch (segments).
    pub fn w_max_segments(&self) -> f64 {
        self.w_max
    }

    fn w_cubic(&self, t: f64) -> f64 {
        self.config.c * (t - self.k).powi(3) + self.w_max
    }

    fn on_congestion(&mut self, timeout: bool) {
        let beta = self.config.beta;
        if self.config.fast_convergence && self.cwnd < self.w_last_max {
            self.w_last_max = self.cwnd;
            self.w_max = self.cwnd * (1.0 + beta) / 2.0;
        } else {
            self.w_last_max = self.cwnd;
            self.w_max = self.cwnd;
        }
        self.ssthresh = (self.cwnd * beta).max(2.0);
        self.cwnd = if timeout { 1.0 } else { self.ssthresh };
        self.k = (self.w_max * (1.0 - beta) / self.config.c).cbrt();
        // the epoch starts at the reduction; after a timeout, when slow start ends
        self.epoch_start_us = (!timeout).then_some(self.clock.now_us);
    }

    fn congestion_avoidance(&mut self, acked_segs: f64, srtt_s: f64) {
        let now = self.clock.now_us;
        // first CA epoch without a prior loss (slow start ended at ssthresh): the window now
        // is the plateau
        let start = *self.epoch_start_us.get_or_insert(now);
        if self.w_max <= 0.0 {
            self.w_max = self.cwnd;
            self.k = 0.0;
        }
        let t = (now - start) as f64 / 1e6;
        let target = self.w_cubic(t + srtt_s);
        if target > self.cwnd {
            let grow = (target - self.cwnd) * acked_segs / self.cwnd;
            self.cwnd = (self.cwnd + grow).min(target);
        } else {
            // concave plateau or overshoot: at most 1/100 segment per ACK (Linux's cnt=100·cwnd)
            self.cwnd += 0.01 * acked_segs / self.cwnd;
        }
        if self.config.tcp_friendliness && srtt_s > 0.0 {
            let beta = self.config.beta;
            let w_est = self.w_max * beta + 3.0 * (1.0 - beta) / (1.0 + beta) * t / srtt_s;
            if self.w_cubic(t) < w_est && self.cwnd < w_est {
                self.cwnd = w_est;
            }
        }
    }
}

impl Controller for CubicFlow {
    /// Continue in congestion avoidance from the window in force (as Reno does); the first
    /// epoch starts at that window, so growth is convex from it (`W_max` unknown).
    fn hand_over(&mut self, h: &crate::Handover) {
        self.cwnd = (f64::from(h.cwnd_bytes) / self.mss).max(2.0);
        self.ssthresh = self.cwnd;
    }

    fn initial_action(&mut self) -> Action {
        let a = Action {
            cwnd_bytes: Some((self.cwnd * self.mss) as u32),
            report_interval_us: Some(self.config.initial_interval_us),
            ..Default::default()
        };
        self.metrics.record(&a);
        a
    }

    fn on_report(&mut self, iv: &Interval) -> Action {
        self.metrics.observe(iv);
        let srtt_s = self.metrics.srtt_us / 1e6;
        match self
            .clock
            .advance(iv, self.metrics.srtt_us, self.cwnd * self.mss)
        {
            Congestion::NewEpisode { timeout } => self.on_congestion(timeout),
            Congestion::TimeoutInEpisode => {
                // ssthresh and W_max stay from the episode's reduction; slow start again
                self.cwnd = 1.0;
                self.epoch_start_us = None;
            }
            Congestion::None => {}
        }
        if iv.lost_pkts == 0 && !iv.timeout {
            let mut acked = iv.acked_bytes as f64 / self.mss;
            if self.cwnd < self.ssthresh {
                let ss = acked.min(self.ssthresh - self.cwnd);
                self.cwnd += ss;
                acked -= ss;
            }
            if acked > 0.0 {
                self.congestion_avoidance(acked, srtt_s);
            }
        }
        self.cwnd = self.cwnd.clamp(1.0, f64::from(u32::MAX / 2) / self.mss);
        let a = Action {
            cwnd_bytes: Some((self.cwnd * self.mss) as u32),
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

    fn iv(acked: u64, lost: u64, interval_us: u64) -> Interval {
        Interval {
            acked_bytes: acked,
            acked_pkts: acked / 1000,
            lost_pkts: lost,
            rtt_min_us: Some(40_000),
            rtt_mean_us: Some(40_000.0),
            rtt_samples: 1,
            interval_us,
            ..Default::default()
        }
    }

    #[test]
    fn loss_reduces_by_beta_and_sets_k() {
        let mut f = CubicFlow::new(CubicConfig::default(), &info());
        // slow start to 100 segments
        f.on_report(&iv(90_000, 0, 20_000));
        assert!((f.cwnd_segments() - 100.0).abs() < 1e-9);
        let a = f.on_report(&iv(0, 2, 20_000));
        assert_eq!(a.cwnd_bytes, Some(70_000));
        assert_eq!(f.w_max_segments(), 100.0);
        // K = cbrt(100 * 0.3 / 0.4)
        assert!((f.k - 75f64.cbrt()).abs() < 1e-9);
    }

    #[test]
    fn window_returns_to_w_max_near_k_and_probes_beyond() {
        // pure cubic curve (at 40 ms RTT and W_max = 100 the TCP-friendly line would lead)
        let cfg = CubicConfig {
            tcp_friendliness: false,
            ..Default::default()
        };
        let mut f = CubicFlow::new(cfg, &info());
        f.on_report(&iv(90_000, 0, 20_000));
        f.on_report(&iv(0, 1, 20_000));
        let k_us = (f.k * 1e6) as u64;
        // feed full windows of ACKs every 20 ms until well past K
        let mut t = 0;
        let mut at_k = None;
        while t < k_us + 3_000_000 {
            let w = (f.cwnd_segments() * 1000.0 / 2.0) as u64; // half a window per 20 ms
            f.on_report(&iv(w, 0, 20_000));
            t += 20_000;
            if at_k.is_none() && t >= k_us {
                at_k = Some(f.cwnd_segments());
            }
        }
        let at_k = at_k.unwrap();
        assert!((at_k - 100.0).abs() < 8.0, "cwnd at K = {at_k}");
        assert!(
            f.cwnd_segments() > 105.0,
            "convex probing, got {}",
            f.cwnd_segments()
        );
    }

    #[test]
    fn fast_convergence_releases_bandwidth() {
        let mut f = CubicFlow::new(CubicConfig::default(), &info());
        f.on_report(&iv(90_000, 0, 20_000));
        f.on_report(&iv(0, 1, 20_000)); // W_max = 100, cwnd = 70

        // the 100 segments outstanding at the loss are acknowledged: recovery is over
        f.on_report(&iv(100_000, 0, 60_000));
        let cwnd = f.cwnd_segments();
        assert!(cwnd < 100.0, "{cwnd}");
        f.on_report(&iv(0, 1, 20_000)); // loss below last W_max
        assert!((f.w_max_segments() - cwnd * 1.7 / 2.0).abs() < 1e-9);
    }

    #[test]
    fn tcp_friendly_region_grows_like_reno_on_short_rtt() {
        // tiny W_max: the cubic curve is flat, W_est dominates
        let mut f = CubicFlow::new(CubicConfig::default(), &info());
        f.on_report(&iv(0, 1, 20_000)); // W_max = 10, cwnd = 7
        let before = f.cwnd_segments();
        for _ in 0..50 {
            let w = (f.cwnd_segments() * 1000.0 / 2.0) as u64;
            f.on_report(&iv(w, 0, 20_000));
        }
        // 1 s at 40 ms RTT: W_est grows by 3·0.3/1.7·25 ≈ 13 segments
        assert!(f.cwnd_segments() - before > 10.0, "{}", f.cwnd_segments());
    }

    #[test]
    fn a_timeout_inside_an_episode_keeps_w_max_and_ssthresh() {
        let mut f = CubicFlow::new(CubicConfig::default(), &info());
        f.on_report(&iv(90_000, 0, 20_000));
        f.on_report(&iv(0, 1, 20_000)); // W_max = 100, ssthresh = cwnd = 70
        let t = Interval {
            timeout: true,
            ..iv(0, 0, 20_000)
        };
        let a = f.on_report(&t);
        assert_eq!(a.cwnd_bytes, Some(1000));
        assert_eq!(f.w_max_segments(), 100.0);
        assert!((f.ssthresh - 70.0).abs() < 1e-9);
    }
}
