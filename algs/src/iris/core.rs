//! One Iris flow: epochs measured from reports, the RTT target, the fit history, and the
//! rate law by phase (cold start, drain, eq. 7).

use std::collections::VecDeque;

use super::config::{IrisConfig, IrisTarget};
use super::fit::{expected_rtt_change, fit_k, queue_load_objective, FitRejection};
use crate::controller::{Action, Controller, FlowInfo, FlowMetrics};
use crate::signals::Interval;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum IrisPhase {
    /// §V-C: exponential growth until the loss rate rises (or the queue load says congested).
    ColdStart,
    /// Draining the cold start's overshoot.
    Drain,
    /// Eq. 7.
    Steady,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct IrisMetrics {
    /// Accepted fits of `k`.
    pub fits: u64,
    /// Fits rejected by a guard (the previous `k` was kept).
    pub rejected_fits: u64,
    pub rejected_too_few: u64,
    pub rejected_ill_conditioned: u64,
    pub rejected_uncorrelated: u64,
    pub rejected_non_positive: u64,
    /// Current `k` (ms per packet/s); 0 before any.
    pub k: f64,
    /// Whether `k` comes from an accepted fit (else from the queue-model prior `τ/r`).
    pub k_fitted: bool,
    /// Intercept of the last accepted fit (ms).
    pub b: f64,
    /// Times the flow re-entered cold start.
    pub reprobes: u64,
    pub phase: IrisPhase,
    /// Last objective `U` and expected RTT change `d` (ms).
    pub last_u: f64,
    pub last_d_ms: f64,
    /// Last target delay `T` (ms).
    pub target_ms: f64,
    /// Rate decisions clamped by a guard.
    pub clamped_rates: u64,
    /// Random-loss estimate used by the receiving rate.
    pub random_loss: f64,
    /// Reports that carried a retransmission timeout.
    pub timeouts: u64,
}

impl Default for IrisMetrics {
    fn default() -> Self {
        Self {
            fits: 0,
            rejected_fits: 0,
            rejected_too_few: 0,
            rejected_ill_conditioned: 0,
            rejected_uncorrelated: 0,
            rejected_non_positive: 0,
            k: 0.0,
            k_fitted: false,
            b: 0.0,
            reprobes: 0,
            phase: IrisPhase::ColdStart,
            last_u: 0.0,
            last_d_ms: 0.0,
            target_ms: 0.0,
            clamped_rates: 0,
            random_loss: 0.0,
            timeouts: 0,
        }
    }
}

/// One fit sample: when, `x − r` (packets/s), `Δrtt` (ms).
#[derive(Debug, Clone, Copy)]
struct Sample {
    t_us: u64,
    u: f64,
    y: f64,
}

/// One Iris flow.
#[derive(Debug, Clone)]
pub struct IrisFlow {
    config: IrisConfig,
    mss: f64,
    tau_us: u64,
    /// Controller clock (µs): sum of report intervals.
    now_us: u64,
    phase: IrisPhase,
    /// Rate to send at (packets/s).
    rate: f64,
    /// Rates set, `(from_us, packets/s)`, oldest first.
    rate_log: VecDeque<(u64, f64)>,
    /// Last ACK time of the previous measured epoch (µs, datapath clock).
    prev_last_ack_us: Option<u64>,
    /// Packets delivered / lost since `prev_last_ack_us` in reports without an ACK time.
    pending_delivered: f64,
    pending_lost: f64,
    /// Packets SACKed (counted as delivered) whose cumulative ACK has not come yet.
    sacked_outstanding: f64,
    /// Random (non-congestive) loss rate: losses of epochs whose queue load is below target.
    random_loss: f64,
    /// Previous epoch's mean RTT (ms).
    prev_rtt_ms: Option<f64>,
    /// `(t_us, rtt_min_ms, rtt_mean_ms)` per epoch within the target window.
    /// Monotone deque of `(t_us, epoch min RTT ms)`: its front is the window minimum.
    min_window: VecDeque<(u64, f64)>,
    /// `(t_us, epoch mean RTT ms)` within the median window.
    mid_window: VecDeque<(u64, f64)>,
    /// Recent receiving rates `(t_us, packets/s)` (cold-start cap, drain target).
    /// `(t_us, r_i packets/s, packets, µs between last ACKs)` per measured epoch.
    recv_log: VecDeque<(u64, f64, f64, u64)>,
    /// The last epoch's receiving rate (packets/s); read by the tests.
    pub(super) last_recv_pps: Option<f64>,
    /// Monotone (decreasing) deque of `(t_us, smoothed receiving rate)` over `history_s`:
    /// its front is the capacity estimate.
    law_log: VecDeque<(u64, f64)>,
    history: VecDeque<Sample>,
    k: Option<f64>,
    next_refit_us: u64,
    /// Cold-start loss baseline: packets and losses seen so far in this cold start.
    cs_pkts: f64,
    cs_lost: f64,
    drain_until_us: u64,
    /// The current cold start is a re-probe.
    reprobing: bool,
    /// Consecutive cold-start epochs whose receiving rate fell behind the sending rate.
    cs_behind: u32,
    /// Largest receiving rate of the current cold start (packets/s).
    cs_max_recv: f64,
    idle_since_us: Option<u64>,
    metrics: FlowMetrics,
    iris: IrisMetrics,
}

impl IrisFlow {
    pub fn new(config: IrisConfig, info: &FlowInfo) -> Self {
        let mss = f64::from(info.mss.max(1));
        let tau_us = u64::from(config.epoch_ms.max(1)) * 1000;
        let rate = config.initial_rate_kbps * 1000.0 / 8.0 / mss;
        let mut f = Self {
            config,
            mss,
            tau_us,
            now_us: 0,
            phase: IrisPhase::ColdStart,
            rate,
            rate_log: VecDeque::new(),
            prev_last_ack_us: None,
            pending_delivered: 0.0,
            pending_lost: 0.0,
            sacked_outstanding: 0.0,
            random_loss: 0.0,
            prev_rtt_ms: None,
            min_window: VecDeque::new(),
            mid_window: VecDeque::new(),
            recv_log: VecDeque::new(),
            last_recv_pps: None,
            law_log: VecDeque::new(),
            history: VecDeque::new(),
            k: None,
            next_refit_us: 0,
            cs_pkts: 0.0,
            cs_lost: 0.0,
            drain_until_us: 0,
            reprobing: false,
            cs_behind: 0,
            cs_max_recv: 0.0,
            idle_since_us: None,
            metrics: FlowMetrics::default(),
            iris: IrisMetrics::default(),
        };
        f.rate = f.bound_abs(f.rate);
        f.rate_log.push_back((0, f.rate));
        f
    }

    /// Iris counters (fits, guards, current `k`, phase).
    pub fn iris_metrics(&self) -> &IrisMetrics {
        &self.iris
    }

    pub fn phase(&self) -> IrisPhase {
        self.phase
    }

    /// Current sending rate (packets/s).
    pub fn rate_pps(&self) -> f64 {
        self.rate
    }

    /// Current `k` (ms per packet/s), if any.
    pub fn k(&self) -> Option<f64> {
        self.k
    }

    /// Target delay `T` (ms) from the RTT window, per Iris-min / Iris-mid.
    pub fn target_ms(&self) -> Option<f64> {
        match self.config.target {
            IrisTarget::Min => self.min_window.front().map(|e| e.1),
            IrisTarget::Median => {
                let mut v: Vec<f64> = self.mid_window.iter().map(|e| e.1).collect();
                if v.is_empty() {
                    return None;
                }
                let mid = v.len() / 2;
                let (_, m, _) = v.select_nth_unstable_by(mid, |a, b| a.total_cmp(b));
                let m = *m;
                if v.len() % 2 == 1 {
                    Some(m)
                } else {
                    // even count: mean of the two middle values
                    let lo = v[..mid]
                        .iter()
                        .copied()
                        .max_by(|a, b| a.total_cmp(b))
                        .unwrap_or(m);
                    Some(0.5 * (lo + m))
                }
            }
        }
    }

    fn min_rate(&self) -> f64 {
        (self.config.min_rate_kbps * 1000.0 / 8.0 / self.mss).max(1e-3)
    }

    fn max_rate(&self) -> f64 {
        (self.config.max_rate_mbps * 1e6 / 8.0 / self.mss).max(self.min_rate())
    }

    fn bound_abs(&self, x: f64) -> f64 {
        if x.is_nan() {
            return self.min_rate();
        }
        x.clamp(self.min_rate(), self.max_rate())
    }

    fn tau_ms(&self) -> f64 {
        self.tau_us as f64 / 1000.0
    }

    fn srtt_us(&self) -> Option<f64> {
        (self.metrics.srtt_us > 0.0).then_some(self.metrics.srtt_us)
    }

    /// Time-weighted mean of the rates set over `[a, b]` (µs). Scans from the newest entry:
    /// the window lies one RTT back, a few entries from the end.
    fn sent_rate_over(&self, a: u64, b: u64) -> f64 {
        if b <= a {
            return self.rate_at(a);
        }
        let mut acc = 0.0;
        let mut hi = b;
        for &(from, x) in self.rate_log.iter().rev() {
            if from >= hi {
                continue;
            }
            let lo = from.max(a);
            acc += x * (hi - lo) as f64;
            hi = lo;
            if from <= a {
                break;
            }
        }
        if hi > a {
            // before the first entry: the initial rate
            let first = self.rate_log.front().map_or(self.rate, |e| e.1);
            acc += first * (hi - a) as f64;
        }
        acc / (b - a) as f64
    }

    fn rate_at(&self, t: u64) -> f64 {
        self.rate_log
            .iter()
            .rev()
            .find(|e| e.0 <= t)
            .or(self.rate_log.front())
            .map_or(self.rate, |e| e.1)
    }

    fn set_rate(&mut self, x: f64) {
        let x = if x.is_finite() {
            self.bound_abs(x)
        } else {
            self.iris.clamped_rates += 1;
            self.rate
        };
        self.rate = x;
        self.rate_log.push_back((self.now_us, x));
        // keep enough history to look back one RTT (plus slack)
        let keep = (3.0 * self.metrics.srtt_us).max(5e6) as u64;
        while self.rate_log.len() > 2 && self.rate_log[1].0.saturating_add(keep) < self.now_us {
            self.rate_log.pop_front();
        }
    }

    /// Largest smoothed receiving rate of the last `history_s` (packets/s).
    fn capacity_estimate(&self) -> Option<f64> {
        self.law_log.front().map(|e| e.1)
    }

    fn recent_max_recv(&self) -> Option<f64> {
        self.recv_log
            .iter()
            .map(|e| e.1)
            .max_by(|a, b| a.total_cmp(b))
    }

    /// Refit `k` from the history; on rejection keep the previous `k` (or the prior).
    fn refit(&mut self, r_pps: Option<f64>) {
        let cut = self
            .now_us
            .saturating_sub((self.config.history_s * 1e6) as u64);
        while self.history.front().is_some_and(|s| s.t_us < cut) {
            self.history.pop_front();
        }
        let res = fit_k(
            self.history.iter().map(|s| (s.u, s.y)),
            self.config.min_fit_samples,
            self.config.max_condition,
            self.config.min_fit_correlation,
        );
        match res {
            Ok(f) => {
                self.k = Some(f.k);
                self.iris.fits += 1;
                self.iris.k_fitted = true;
                self.iris.b = f.b;
            }
            Err(why) => {
                self.iris.rejected_fits += 1;
                match why {
                    FitRejection::TooFewSamples => self.iris.rejected_too_few += 1,
                    FitRejection::IllConditioned => self.iris.rejected_ill_conditioned += 1,
                    FitRejection::Uncorrelated => self.iris.rejected_uncorrelated += 1,
                    FitRejection::NonPositiveSlope => self.iris.rejected_non_positive += 1,
                }
                if self.k.is_none() {
                    // queue-model prior k₀ = τ/r (ms per packet/s)
                    if let Some(r) = r_pps.or(self.last_recv_pps).filter(|r| *r > 0.0) {
                        self.k = Some(self.tau_ms() / r);
                    }
                }
            }
        }
        self.iris.k = self.k.unwrap_or(0.0);
        self.next_refit_us = self
            .now_us
            .saturating_add((self.config.refit_interval_s * 1e6) as u64);
    }

    fn enter_steady_or_drain(&mut self, r: Option<f64>, inflight: Option<u64>, target: f64) {
        self.refit(r);
        self.reprobing = false;
        self.cs_behind = 0;
        let r = r.or(self.last_recv_pps);
        let excess = match (r, inflight) {
            (Some(r), Some(inf)) => {
                let limit = r * target / 1000.0 + self.config.queue_target_pkts;
                inf as f64 / self.mss > limit
            }
            _ => false,
        };
        if let (Some(r), true) = (r, excess) {
            self.phase = IrisPhase::Drain;
            let srtt = self.srtt_us().unwrap_or(self.tau_us as f64);
            self.drain_until_us = self.now_us.saturating_add((2.0 * srtt) as u64);
            self.set_rate(self.config.drain_gain * r);
        } else {
            self.phase = IrisPhase::Steady;
            if let Some(r) = r {
                self.set_rate(r.max(self.cs_max_recv));
            }
        }
        self.idle_since_us = None;
    }

    fn cwnd_cap_bytes(&self) -> u32 {
        let srtt_s = self.srtt_us().unwrap_or(1e6) / 1e6;
        let pkts = 2.0 * self.rate * srtt_s + self.config.queue_target_pkts;
        let bytes = (pkts * self.mss).max(4.0 * self.mss);
        bytes.min(f64::from(u32::MAX / 2)) as u32
    }

    fn action(&mut self) -> Action {
        tracing::trace!(
            target: "iris",
            t_s = self.now_us as f64 / 1e6,
            phase = ?self.phase,
            target_ms = self.iris.target_ms,
            u = self.iris.last_u,
            d_ms = self.iris.last_d_ms,
            k = self.iris.k,
            fits = self.iris.fits,
            rate_pps = self.rate,
            recv_pps = self.last_recv_pps.unwrap_or(0.0),
            random_loss = self.random_loss,
            srtt_ms = self.metrics.srtt_us / 1e3,
            "decision"
        );
        let a = Action {
            cwnd_bytes: Some(self.cwnd_cap_bytes()),
            rate_bps: Some(((self.rate * self.mss) as u64).max(1)),
            report_interval_us: Some(self.tau_us as u32),
        };
        self.metrics.record(&a);
        self.iris.phase = self.phase;
        a
    }
}

/// What one report measured, as the phases read it.
#[derive(Debug, Clone, Copy)]
struct Epoch {
    /// Controller clock after the report (µs).
    now: u64,
    /// The report's length (µs), as taken.
    len_us: u64,
    /// Packets lost, and delivered + lost, in the report.
    lost: f64,
    pkts: f64,
    /// `r_i` of eq. 12 (packets/s), when the report closed a measured epoch.
    recv: Option<f64>,
    /// `r` for eq. 7: the receiving rate over the last `max(τ, srtt)`.
    recv_law: Option<f64>,
    /// The report's mean RTT (ms).
    rtt_ms: Option<f64>,
    /// Target delay `T` (ms).
    target: Option<f64>,
    /// `x_i`: the rate the packets acked in this report were sent at (packets/s).
    x_i: f64,
    /// Queue-load objective `U_i` (eq. 3, 6).
    u: Option<f64>,
}

impl IrisFlow {
    /// Fold a report into the estimates (eq. 12's `r_i`, the RTT windows and `T`, the fit
    /// history, `U_i`, the random-loss rate) and say what it measured.
    fn measure(&mut self, iv: &Interval) -> Epoch {
        // an interval of 0 is unknown; one longer than a minute is a datapath glitch
        let len_us = if iv.interval_us > 0 {
            iv.interval_us.min(60_000_000)
        } else {
            self.tau_us
        };
        self.now_us = self.now_us.saturating_add(len_us);
        let now = self.now_us;
        let (delivered, lost) = self.count_packets(iv);
        let recv = self.receiving_rate(iv, delivered, lost);
        let recv_law = self.law_rate(recv);
        let (rtt_ms, target) = self.rtt_windows(iv);

        // x_i: the rate the packets acked in this epoch were sent at
        let x_i = match rtt_ms {
            Some(rtt) => {
                let rtt_us = (rtt * 1000.0) as u64;
                let b = now.saturating_sub(rtt_us);
                self.sent_rate_over(b.saturating_sub(len_us), b)
            }
            None => self.rate,
        };
        self.record_fit_sample(recv, rtt_ms, x_i);

        let u = match (rtt_ms, target) {
            (Some(rtt), Some(t)) => Some(queue_load_objective(
                x_i,
                rtt,
                t,
                self.config.queue_target_pkts,
                self.config.expansion,
            )),
            _ => None,
        };
        if let Some(u) = u {
            self.iris.last_u = u;
        }
        let pkts = delivered + lost;
        // losses of an epoch below the queue-load target are random, not congestive
        if pkts > 0.0 && !iv.timeout && u.is_some_and(|u| u <= 0.0) {
            let w = (pkts / 500.0).min(1.0);
            let frac = (lost / pkts).min(self.config.max_random_loss);
            self.random_loss += w * (frac - self.random_loss);
            self.iris.random_loss = self.random_loss;
        }
        Epoch {
            now,
            len_us,
            lost,
            pkts,
            recv,
            recv_law,
            rtt_ms,
            target,
            x_i,
            u,
        }
    }

    /// Packets `(delivered, lost)` in a report: delivered = SACKed + cumulatively acked,
    /// less cumulative ACKs of packets already counted when they were SACKed.
    fn count_packets(&mut self, iv: &Interval) -> (f64, f64) {
        let sacked = iv.misordered_pkts as f64;
        let cum = iv.acked_bytes as f64 / self.mss;
        let lost = iv.lost_pkts as f64;
        let seen = self.sacked_outstanding + sacked;
        let again = cum.min(seen);
        // a hole's retransmission is acked cumulatively without a SACK: count the hole
        // (once declared lost) as outstanding too, or every repaired hole would take one
        // SACKed packet off the count and the next full cumulative ACK would deliver them
        // all at once (a timeout declares the whole flight lost: not holes)
        self.sacked_outstanding = seen - again + if iv.timeout { 0.0 } else { lost };
        let delivered = sacked + cum - again;
        tracing::trace!(
            target: "iris",
            t_s = self.now_us as f64 / 1e6,
            acked = iv.acked_bytes,
            sacked = iv.misordered_pkts,
            lost = iv.lost_pkts,
            timeout = iv.timeout,
            inflight = ?iv.inflight_bytes,
            rtt_us = ?iv.rtt_mean_us,
            last_ack_us = ?iv.last_ack_us,
            interval_us = iv.interval_us,
            delivered,
            sacked_outstanding = self.sacked_outstanding,
            "report"
        );
        (delivered, lost)
    }

    /// Eq. 12's `r_i` (packets/s) when the report's last ACK closes an epoch; reports
    /// without an ACK time carry their packets over to the next.
    fn receiving_rate(&mut self, iv: &Interval, delivered: f64, lost: f64) -> Option<f64> {
        let now = self.now_us;
        let mut recv: Option<f64> = None;
        match (iv.last_ack_us, self.prev_last_ack_us) {
            (Some(t), Some(p)) if t > p => {
                let (dl, ls) = (self.pending_delivered + delivered, self.pending_lost + lost);
                // packets sent = delivered/(1 − random loss), never more than delivered + lost
                let sent = (dl / (1.0 - self.random_loss)).min(dl + ls);
                if sent > 0.0 && sent.is_finite() {
                    let r = sent * 1e6 / (t - p) as f64;
                    if r.is_finite() {
                        recv = Some(r);
                        self.recv_log.push_back((now, r, sent, t - p));
                        self.last_recv_pps = Some(r);
                    }
                }
                (self.pending_delivered, self.pending_lost) = (0.0, 0.0);
                self.prev_last_ack_us = Some(t);
            }
            (Some(t), None) => {
                (self.pending_delivered, self.pending_lost) = (0.0, 0.0);
                self.prev_last_ack_us = Some(t);
            }
            _ => {
                self.pending_delivered += delivered;
                self.pending_lost += lost;
            }
        }
        let recv_keep = (2.0 * self.metrics.srtt_us).max(4.0 * self.tau_us as f64) as u64;
        while self
            .recv_log
            .front()
            .is_some_and(|e| e.0.saturating_add(recv_keep) < now)
        {
            self.recv_log.pop_front();
        }
        recv
    }

    /// `r` for eq. 7: the receiving rate over the last `max(τ, srtt)`, i.e. `r_i` itself when
    /// the RTT is at most one epoch (the paper's setting), see the module header; also kept
    /// for the capacity estimate.
    fn law_rate(&mut self, recv: Option<f64>) -> Option<f64> {
        let now = self.now_us;
        let recv_law = recv.map(|r| {
            let span = self.metrics.srtt_us.max(self.tau_us as f64) as u64;
            let (mut n, mut dt) = (0.0, 0u64);
            for e in self.recv_log.iter().rev() {
                if e.0.saturating_add(span) <= now && dt > 0 {
                    break;
                }
                n += e.2;
                dt = dt.saturating_add(e.3);
            }
            if dt > 0 && n > 0.0 {
                n * 1e6 / dt as f64
            } else {
                r
            }
        });
        if let Some(r) = recv_law {
            while self.law_log.back().is_some_and(|e| e.1 <= r) {
                self.law_log.pop_back();
            }
            self.law_log.push_back((now, r));
        }
        let cap_keep = (self.config.history_s * 1e6) as u64;
        while self
            .law_log
            .front()
            .is_some_and(|e| e.0.saturating_add(cap_keep) < now)
        {
            self.law_log.pop_front();
        }
        recv_law
    }

    /// The report's mean RTT into the target windows; returns it (ms) and the target `T`.
    fn rtt_windows(&mut self, iv: &Interval) -> (Option<f64>, Option<f64>) {
        let now = self.now_us;
        let rtt_ms = iv.rtt_mean_us.map(|v| v / 1000.0).filter(|v| v.is_finite());
        if let Some(rtt) = rtt_ms {
            let rmin = iv.rtt_min_us.map(|v| v as f64 / 1000.0).unwrap_or(rtt);
            let rmin = rmin.min(rtt);
            while self.min_window.back().is_some_and(|e| e.1 >= rmin) {
                self.min_window.pop_back();
            }
            self.min_window.push_back((now, rmin));
            if self.config.target == IrisTarget::Median {
                self.mid_window.push_back((now, rtt));
            }
        }
        let win = (self.config.min_window_s * 1e6) as u64;
        while self.min_window.len() > 1
            && self
                .min_window
                .front()
                .is_some_and(|e| e.0.saturating_add(win) < now)
        {
            self.min_window.pop_front();
        }
        let win = (self.config.median_window_s * 1e6) as u64;
        while self.mid_window.len() > 1
            && self
                .mid_window
                .front()
                .is_some_and(|e| e.0.saturating_add(win) < now)
        {
            self.mid_window.pop_front();
        }
        let target = self.target_ms();
        if let Some(t) = target {
            self.iris.target_ms = t;
        }
        (rtt_ms, target)
    }

    /// The fit sample `(x_i − r_i, Δrtt_i)`, and the history trimmed to `history_s`.
    fn record_fit_sample(&mut self, recv: Option<f64>, rtt_ms: Option<f64>, x_i: f64) {
        let now = self.now_us;
        if let (Some(r), Some(rtt), Some(prev)) = (recv, rtt_ms, self.prev_rtt_ms) {
            self.history.push_back(Sample {
                t_us: now,
                u: x_i - r,
                y: rtt - prev,
            });
        }
        if rtt_ms.is_some() {
            self.prev_rtt_ms = rtt_ms;
        }
        let hist_keep = (self.config.history_s * 1e6) as u64;
        while self
            .history
            .front()
            .is_some_and(|s| s.t_us.saturating_add(hist_keep) < now)
        {
            self.history.pop_front();
        }
    }

    /// Cold start (§V-C): grow per RTT until the loss rate rises, the queue load says
    /// congested or the link receives clearly less than was sent; then drain or eq. 7.
    fn cold_start(&mut self, iv: &Interval, e: &Epoch) {
        // loss-rise test against this cold start's own loss rate
        let base = if self.cs_pkts > 0.0 {
            self.cs_lost / self.cs_pkts
        } else {
            0.0
        };
        let expected = base * e.pkts;
        let loss_rise = e.lost >= 3.0 && e.lost > expected + 3.0 * (expected + 1.0).sqrt();
        self.cs_pkts += e.pkts;
        self.cs_lost += e.lost;
        let congested = e.u.is_some_and(|u| u > 0.0);
        // eq. 2's own congestion sign: the link receives clearly less than was sent
        let behind = e.recv.is_some_and(|r| e.pkts >= 8.0 && r < 0.8 * e.x_i);
        self.cs_behind = if behind { self.cs_behind + 1 } else { 0 };
        if let Some(r) = e.recv_law {
            self.cs_max_recv = self.cs_max_recv.max(r);
        }
        if loss_rise || congested || self.cs_behind >= 2 {
            self.enter_steady_or_drain(e.recv, iv.inflight_bytes, e.target.unwrap_or(0.0));
        } else {
            let srtt = self.srtt_us().unwrap_or(0.0).max(self.tau_us as f64);
            let gain = if self.reprobing {
                self.config.reprobe_gain.max(1.0)
            } else {
                2.0
            };
            // per report, for its actual length (reports wait for ACKs at low rates)
            let grow = gain.powf(e.len_us.max(self.tau_us) as f64 / srtt);
            let cap = match self.recent_max_recv() {
                Some(r) => 2.0 * gain * r,
                None => 2.0 * self.rate,
            };
            let x = (self.rate * grow).min(cap.max(self.rate));
            self.set_rate(x);
        }
    }

    /// Drain after cold start: send below `r` until the flow's packets in flight fall to
    /// `r·T + B` (or `2·srtt` passed), then eq. 7 from the cold start's largest `r`.
    fn drain(&mut self, iv: &Interval, e: &Epoch) {
        let r = e.recv_law.or(self.last_recv_pps);
        let done = match (r, iv.inflight_bytes, e.target) {
            (Some(r), Some(inf), Some(t)) => {
                inf as f64 / self.mss <= r * t / 1000.0 + self.config.queue_target_pkts
            }
            _ => true,
        } || e.now >= self.drain_until_us;
        if done {
            self.phase = IrisPhase::Steady;
            self.idle_since_us = None;
            if let Some(r) = r {
                // the drain's deliveries echo the drain: resume at what the link
                // delivered while saturated
                self.set_rate(r.max(self.cs_max_recv));
            }
        } else if let Some(r) = e.recv_law {
            // drain the excess within one epoch, but never below drain_gain·r
            let excess = match (iv.inflight_bytes, e.target) {
                (Some(inf), Some(t)) => {
                    inf as f64 / self.mss - r * t / 1000.0 - self.config.queue_target_pkts
                }
                _ => f64::INFINITY,
            };
            let x = (r - excess.max(0.0) * 1000.0 / self.tau_ms()).max(self.config.drain_gain * r);
            self.set_rate(x);
        }
    }

    /// Steady state: refit `k` when due, eq. 7 within the guards, and the re-probe check.
    fn steady(&mut self, iv: &Interval, e: &Epoch) {
        if e.now >= self.next_refit_us {
            self.refit(e.recv);
        }
        let (Some(r), Some(u)) = (e.recv_law, e.u) else {
            return;
        };
        // below the queue-load target the link delivered all that was sent:
        // the next epoch receives at least the rate that built no queue
        let r = if u <= 0.0 {
            r.max(self.rate.min(self.capacity_estimate().unwrap_or(r)))
        } else {
            r
        };
        let x = self.eq7_within_guards(iv, e, r, u);
        self.set_rate(x);
        self.reprobe_check(e, r);
    }

    /// Eq. 7, `x = r + d/k`, within `r·(1 ± max_step)` and draining no more than the
    /// excess in flight within one epoch; a NaN keeps the rate.
    fn eq7_within_guards(&mut self, iv: &Interval, e: &Epoch, r: f64, u: f64) -> f64 {
        if self.k.is_none() {
            self.k = Some(self.tau_ms() / r);
            self.iris.k = self.tau_ms() / r;
        }
        let k = self.k.unwrap_or(self.tau_ms() / r);
        let d = expected_rtt_change(u, self.config.delta_ms);
        self.iris.last_d_ms = d;
        let raw = r + d / k;
        let mut lo = r * (1.0 - self.config.max_step).max(0.0);
        // drain no more than the flow's packets in flight beyond r·T + B within
        // one epoch (the RTT shows a drain one RTT late, the bytes in flight now)
        if let (Some(inf), Some(t)) = (iv.inflight_bytes, e.target) {
            let excess = inf as f64 / self.mss - r * t / 1000.0 - self.config.queue_target_pkts;
            lo = lo.max(r - excess.max(0.0) * 1000.0 / self.tau_ms());
        }
        let hi = r * (1.0 + self.config.max_step);
        let lo = lo.min(hi);
        if raw.is_nan() {
            self.iris.clamped_rates += 1;
            self.rate
        } else if raw < lo || raw > hi {
            self.iris.clamped_rates += 1;
            raw.clamp(lo, hi)
        } else {
            raw
        }
    }

    /// Re-enter cold start (growing by `reprobe_gain`) after the queue load stayed below one
    /// packet for `max(4·srtt, 8 epochs)` at ≥ 95 % of the capacity estimate.
    fn reprobe_check(&mut self, e: &Epoch, r: f64) {
        let load = e.x_i * (e.rtt_ms.unwrap_or(0.0) - e.target.unwrap_or(0.0)) / 1000.0;
        let at_capacity = e.x_i >= 0.95 * self.capacity_estimate().unwrap_or(r);
        if !(self.config.reprobe && load < 0.1 * self.config.queue_target_pkts && at_capacity) {
            self.idle_since_us = None;
            return;
        }
        let since = *self.idle_since_us.get_or_insert(e.now);
        let need = (4.0 * self.metrics.srtt_us).max(8.0 * self.tau_us as f64);
        if (e.now - since) as f64 >= need {
            self.phase = IrisPhase::ColdStart;
            self.reprobing = true;
            self.cs_max_recv = 0.0;
            self.iris.reprobes += 1;
            self.cs_pkts = 0.0;
            self.cs_lost = 0.0;
            self.idle_since_us = None;
        }
    }
}

impl Controller for IrisFlow {
    fn initial_action(&mut self) -> Action {
        self.action()
    }

    fn on_report(&mut self, iv: &Interval) -> Action {
        self.metrics.observe(iv);
        let e = self.measure(iv);
        if iv.timeout {
            // the datapath already retransmits; the rate law does not read losses, and a
            // timer is not a loss-rate measurement
            self.iris.timeouts += 1;
            return self.action();
        }
        match self.phase {
            IrisPhase::ColdStart => self.cold_start(iv, &e),
            IrisPhase::Drain => self.drain(iv, &e),
            IrisPhase::Steady => self.steady(iv, &e),
        }
        self.action()
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }
}
