//! Owl's per-flow core: the features of Table I with their history and state mask (§IV-A),
//! the window (Algorithm 1's discrete actions in congestion avoidance; slow start and loss
//! recovery as standard TCP, §VI) and the utility of eq. 7.

use std::collections::VecDeque;

use super::config::OwlConfig;
use crate::controller::{Action, FlowInfo, FlowMetrics};
use crate::learned::LearnedCore;
use crate::netstats::NetStats;
use crate::policy::PolicySpec;
use crate::sanity;
use crate::signals::Interval;
use crate::window::{Congestion, LossClock};

/// Version of the observation layout; bump it whenever the features or their order change.
pub const FEATURE_VERSION: u32 = 1;
/// Features per interval: [`E2E_FEATURES`] end-to-end ones, then the in-network ones.
pub const FEATURES_PER_INTERVAL: usize = 10;
/// The end-to-end features come first ([`feature`] 0..7), the in-network ones last (7..10).
pub const E2E_FEATURES: usize = 7;

/// Where each feature sits in an interval's row (the observation is feature-major: feature
/// `f` of history slot `j`, oldest first, is `obs[f·k + j]`).
pub mod feature {
    /// `log2(1 + cwnd packets) / 24`.
    pub const CWND: usize = 0;
    /// `log2(1 + RTT ms) / 14`.
    pub const RTT: usize = 1;
    /// `log2(RTT / RTT_min) / 4`, in `[0, 1]` (what eq. 7 penalises).
    pub const RTT_INFLATION: usize = 2;
    /// `(RTT_t − RTT_{t−1}) / RTT_min`, in `[−1, 1]`.
    pub const RTT_VARIATION: usize = 3;
    /// `log2(1 + packets delivered per RTT) / 24`.
    pub const DELIVERED: usize = 4;
    /// Fraction of the interval's resolved packets that were lost, `[0, 1]`.
    pub const LOSS: usize = 5;
    /// `log2(1 + packets in flight) / 24`.
    pub const INFLIGHT: usize = 6;
    /// `log2(1 + PNC packets) / 24` (eq. 4); masked when stale or absent.
    pub const PNC: usize = 7;
    /// PNA (eq. 5), `[0, 1]`; masked when stale or absent.
    pub const PNA: usize = 8;
    /// Share of the path known, `[0, 1]`; 0 (present) when nothing fresh is known.
    pub const KNOWN_SHARE: usize = 9;
}

/// The window changes (packets) the policy chooses from, by action index (eq. 6).
pub const ACTIONS: [f64; 7] = [-10.0, -3.0, -1.0, 0.0, 1.0, 3.0, 10.0];
/// The index of "+0 packets": what a bare Owl answers, and what a bad index becomes.
pub const HOLD_ACTION: usize = 3;

/// Packet counts are scaled as `log2(1 + n) / COUNT_LOG2_MAX` (2^24 packets ≈ 25 GB).
pub const COUNT_LOG2_MAX: f64 = 24.0;
/// RTTs as `log2(1 + ms) / RTT_LOG2_MAX` (2^14 ms ≈ 16 s).
pub const RTT_LOG2_MAX: f64 = 14.0;
/// RTT inflation `log2(RTT / RTT_min)` is bounded to `[0, INFLATION_LOG2_MAX]` (16×).
pub const INFLATION_LOG2_MAX: f64 = 4.0;
/// Largest loss fraction eq. 7's `1/(1 − p)` sees.
pub const LOSS_MAX: f64 = 0.99;
/// Largest throughput term of eq. 7, in units of the flow's best delivery rate.
pub const LAMBDA_MAX: f64 = 4.0;
/// Largest window (bytes) ever set.
pub const MAX_CWND_BYTES: f64 = (1u64 << 30) as f64;

/// The policy layout of an Owl model under `config`: `history` intervals of
/// [`FEATURES_PER_INTERVAL`] features and as many mask values in, one action index in
/// `[0, 6]` out (the argmax of 7 Q-values).
pub fn policy_spec(config: &OwlConfig) -> PolicySpec {
    PolicySpec {
        algorithm: "owl",
        feature_version: FEATURE_VERSION,
        obs_dim: FEATURES_PER_INTERVAL * config.history as usize,
        act_dim: 1,
        act_low: vec![0.0],
        act_high: vec![(ACTIONS.len() - 1) as f32],
        recurrent_hidden: None,
        masked: true,
    }
}

/// The window change (packets) of a policy output: the index it rounds to, or
/// [`HOLD_ACTION`] when it is not a finite index of [`ACTIONS`]. Returns (change, valid).
pub fn action_delta(x: Option<f32>) -> (f64, bool) {
    match x.filter(|v| v.is_finite()).map(|v| f64::from(v).round()) {
        Some(i) if (0.0..ACTIONS.len() as f64).contains(&i) => (ACTIONS[i as usize], true),
        _ => (ACTIONS[HOLD_ACTION], false),
    }
}

/// Eq. 7: `U = λ − δ·λ/(1 − p) − β·log10(RTT/RTT_min)`, with `p` bounded by [`LOSS_MAX`] and
/// the delay ratio at least 1. `lambda` in whatever unit the caller chose (Owl: the flow's
/// best delivery rate).
pub fn utility(lambda: f64, loss: f64, rtt_ratio: f64, delta: f64, beta: f64) -> f64 {
    let p = if loss.is_finite() {
        loss.clamp(0.0, LOSS_MAX)
    } else {
        LOSS_MAX
    };
    let lambda = if lambda.is_finite() {
        lambda.max(0.0)
    } else {
        0.0
    };
    let ratio = if rtt_ratio.is_finite() {
        rtt_ratio.max(1.0)
    } else {
        1.0
    };
    lambda - delta * lambda / (1.0 - p) - beta * ratio.log10()
}

/// Which rule sets the window now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Below ssthresh: grow by the acknowledged bytes (RFC 5681), no policy.
    SlowStart,
    /// A loss episode is open (`window::LossClock`): the reduced window holds, no policy.
    Recovery,
    /// The policy's actions set the window (Algorithm 1).
    CongestionAvoidance,
}

/// A running minimum or maximum over a time window: a monotone deque of `(time µs, value)`.
#[derive(Debug, Clone)]
struct Windowed {
    window_us: u64,
    max: bool,
    q: VecDeque<(u64, f64)>,
}

impl Windowed {
    fn new(window_us: u64, max: bool) -> Self {
        Self {
            window_us,
            max,
            q: VecDeque::new(),
        }
    }

    fn push(&mut self, t: u64, v: f64) {
        let worse = |old: f64| if self.max { old <= v } else { old >= v };
        while self.q.back().is_some_and(|&(_, old)| worse(old)) {
            self.q.pop_back();
        }
        self.q.push_back((t, v));
        self.expire(t);
    }

    fn expire(&mut self, now: u64) {
        // the newest value always stays: a path silent for a window keeps its last estimate
        while self.q.len() > 1
            && self
                .q
                .front()
                .is_some_and(|&(t, _)| now.saturating_sub(t) > self.window_us)
        {
            self.q.pop_front();
        }
    }

    fn get(&self) -> Option<f64> {
        self.q.front().map(|&(_, v)| v)
    }
}

/// One interval's features and their mask.
#[derive(Debug, Clone, Copy)]
struct Row {
    v: [f32; FEATURES_PER_INTERVAL],
    m: [f32; FEATURES_PER_INTERVAL],
}

/// What the last interval measured, for the reward.
#[derive(Debug, Clone, Copy)]
struct Measured {
    /// `λ` in units of the best delivery rate (0 before any rate sample).
    lambda: f64,
    /// `λ` itself: cwnd/RTT in bytes/s.
    rate_bps: f64,
    loss: f64,
    rtt_ratio: f64,
}

/// A sample of in-network statistics and when (flow time, µs) it was taken.
#[derive(Debug, Clone, Copy)]
struct Sample {
    stats: NetStats,
    taken_us: u64,
}

/// One Owl flow.
pub struct OwlCore {
    config: OwlConfig,
    spec: PolicySpec,
    mss: f64,
    metrics: FlowMetrics,
    /// Loss episodes and flow time (`clock.now_us`, the sum of report intervals).
    clock: LossClock,
    cwnd: f64,
    ssthresh: f64,
    phase: Phase,
    rtt_min: Windowed,
    rate_max: Windowed,
    prev_rtt: Option<f64>,
    stats: Option<Sample>,
    rows: VecDeque<Row>,
    last: Option<Measured>,
    last_delta: f64,
    decisions: u64,
    bad_actions: u64,
}

/// A report with every value the datapath gave checked: the shared checks
/// ([`sanity::sanitized`]) plus the two fields only Owl reads, the flight and the best
/// delivery-rate sample.
fn sanitized(iv: &Interval) -> Interval {
    Interval {
        inflight_bytes: sanity::inflight_bytes(iv.inflight_bytes),
        delivery_rate_max_bps: sanity::delivery_rate_bps(iv.delivery_rate_max_bps),
        ..sanity::sanitized(iv)
    }
}

fn log_count(n: f64) -> f32 {
    ((1.0 + n.max(0.0)).log2() / COUNT_LOG2_MAX).clamp(0.0, 1.0) as f32
}

impl OwlCore {
    pub fn new(config: OwlConfig, info: &FlowInfo) -> Self {
        let mss = f64::from(info.mss.max(1));
        let window_us = (config.window_s * 1e6) as u64;
        let mut core = Self {
            spec: policy_spec(&config),
            mss,
            metrics: FlowMetrics::default(),
            clock: LossClock::default(),
            cwnd: 0.0,
            ssthresh: f64::INFINITY,
            phase: Phase::SlowStart,
            rtt_min: Windowed::new(window_us, false),
            rate_max: Windowed::new(window_us, true),
            prev_rtt: None,
            stats: None,
            rows: VecDeque::with_capacity(config.history as usize),
            last: None,
            last_delta: 0.0,
            decisions: 0,
            bad_actions: 0,
            config,
        };
        // the datapath's initial window (the paper's 10 packets), at least two packets
        core.cwnd = f64::from(info.init_cwnd_bytes)
            .max(2.0 * mss)
            .min(MAX_CWND_BYTES);
        core
    }

    /// The window (bytes).
    pub fn cwnd_bytes(&self) -> f64 {
        self.cwnd
    }
    /// The slow-start threshold (bytes; infinite before the first loss).
    pub fn ssthresh_bytes(&self) -> f64 {
        self.ssthresh
    }
    /// The rule that set the window at the last report.
    pub fn phase(&self) -> Phase {
        self.phase
    }
    /// The window change (packets) of the last action applied.
    pub fn last_delta_pkts(&self) -> f64 {
        self.last_delta
    }
    /// Actions applied, and those among them that were not a valid index (held).
    pub fn counts(&self) -> (u64, u64) {
        (self.decisions, self.bad_actions)
    }
    /// Flow time (µs): the sum of the report intervals so far.
    pub fn now_us(&self) -> u64 {
        self.clock.now_us
    }
    /// The observation and its mask as they stand (feature-major, oldest interval first,
    /// zero-padded and masked before `history` intervals exist).
    pub fn features(&self) -> (Vec<f32>, Vec<f32>) {
        let (mut obs, mut mask) = (vec![0.0; self.spec.obs_dim], vec![0.0; self.spec.obs_dim]);
        self.write_features(&mut obs, &mut mask);
        (obs, mask)
    }

    fn write_features(&self, obs: &mut [f32], mask: &mut [f32]) {
        obs.fill(0.0);
        mask.fill(0.0);
        let k = self.config.history as usize;
        let pad = k.saturating_sub(self.rows.len());
        for (i, r) in self.rows.iter().enumerate() {
            let j = pad + i;
            for f in 0..FEATURES_PER_INTERVAL {
                if let (Some(o), Some(m)) = (obs.get_mut(f * k + j), mask.get_mut(f * k + j)) {
                    *o = r.v[f];
                    *m = r.m[f];
                }
            }
        }
    }

    /// The fresh in-network sample at flow time `now`, if any.
    fn fresh_stats(&self, now: u64) -> Option<NetStats> {
        let stale_us = (self.config.stats_stale_ms * 1e3) as u64;
        self.stats
            .filter(|s| now.saturating_sub(s.taken_us) <= stale_us)
            .map(|s| s.stats)
    }

    /// The interval's row: the window after this report's loss response or growth, the
    /// interval's RTT, delivery, loss and flight, and the path's statistics if fresh.
    fn row(&self, iv: &Interval, rtt: Option<f64>, dt: f64) -> Row {
        use feature::*;
        let mut v = [0.0f32; FEATURES_PER_INTERVAL];
        let mut m = [1.0f32; FEATURES_PER_INTERVAL];
        v[CWND] = log_count(self.cwnd / self.mss);
        match (rtt, self.rtt_min.get()) {
            (Some(r), Some(min)) => {
                v[RTT] = ((1.0 + r / 1e3).log2() / RTT_LOG2_MAX).clamp(0.0, 1.0) as f32;
                v[RTT_INFLATION] =
                    ((r / min).log2().clamp(0.0, INFLATION_LOG2_MAX) / INFLATION_LOG2_MAX) as f32;
                let var = self.prev_rtt.map_or(0.0, |p| (r - p) / min);
                v[RTT_VARIATION] = var.clamp(-1.0, 1.0) as f32;
            }
            // no RTT sample yet: absent, not zero
            _ => (m[RTT], m[RTT_INFLATION], m[RTT_VARIATION]) = (0.0, 0.0, 0.0),
        }
        // packets per RTT (per interval before the first RTT): comparable with the window
        let per = rtt.unwrap_or(dt) / dt;
        v[DELIVERED] = log_count(iv.acked_pkts as f64 * per);
        v[LOSS] = iv.loss_fraction() as f32;
        match iv.inflight_bytes {
            Some(b) => v[INFLIGHT] = log_count(b as f64 / self.mss),
            None => m[INFLIGHT] = 0.0,
        }
        match self.fresh_stats(self.clock.now_us) {
            Some(s) => {
                v[PNC] = log_count(s.pnc_pkts());
                v[PNA] = s.pna() as f32;
                v[KNOWN_SHARE] = s.known_share() as f32;
            }
            // state masking (§IV-A): nothing fresh is known of the path
            None => (m[PNC], m[PNA]) = (0.0, 0.0),
        }
        Row { v, m }
    }

    fn report_interval_us(&self) -> u32 {
        self.config.clock().interval_us(&self.metrics)
    }

    /// Eq. 7 for the last interval's measurements with `λ` given.
    fn eq7(&self, lambda: f64, m: &Measured) -> f64 {
        utility(
            lambda,
            m.loss,
            m.rtt_ratio,
            self.config.delta,
            self.config.beta,
        )
    }

    fn action(&mut self) -> Action {
        let a = Action {
            cwnd_bytes: Some(self.cwnd.clamp(1.0, MAX_CWND_BYTES) as u32),
            rate_bps: None,
            report_interval_us: Some(self.report_interval_us()),
        };
        self.metrics.record(&a);
        a
    }
}

impl LearnedCore for OwlCore {
    fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    fn observe(&mut self, iv: &Interval, obs: &mut [f32], mask: &mut [f32]) -> bool {
        let iv = &sanitized(iv);
        self.metrics.observe(iv);
        let dt = iv.interval_us.max(1) as f64;
        let window = self.cwnd;
        let event = self.clock.advance(iv, self.metrics.srtt_us, window);
        let now = self.clock.now_us;
        if let Some(m) = iv.rtt_min_us {
            self.rtt_min.push(now, m as f64);
        }
        self.rtt_min.expire(now);
        if let Some(r) = iv.delivery_rate_max_bps {
            self.rate_max.push(now, r as f64);
        }
        self.rate_max.expire(now);
        let rtt = iv.rtt_mean_us.or(self.prev_rtt);

        // loss response as standard TCP, ssthresh as Cubic's (§VI)
        match event {
            Congestion::NewEpisode { timeout } => {
                self.ssthresh = (self.cwnd * self.config.loss_decrease).max(2.0 * self.mss);
                self.cwnd = if timeout { self.mss } else { self.ssthresh };
            }
            Congestion::TimeoutInEpisode => self.cwnd = self.mss,
            Congestion::None => {}
        }
        let loss = iv.lost_pkts > 0 || iv.timeout;
        self.phase = if self.cwnd < self.ssthresh {
            if !loss {
                // RFC 5681 §3.1, at most up to ssthresh: beyond it the policy decides
                let acked = iv.acked_bytes as f64;
                self.cwnd = (self.cwnd + acked.min(self.ssthresh - self.cwnd)).min(MAX_CWND_BYTES);
            }
            Phase::SlowStart
        } else if self.clock.in_episode() {
            Phase::Recovery
        } else {
            Phase::CongestionAvoidance
        };

        // eq. 7's inputs: λ = cwnd/RTT of the window in force during the interval
        self.last = rtt.map(|r| {
            // bytes/s: the configured capacity, or the flow's best rate
            let unit = if self.config.reward_rate_unit_mbps > 0.0 {
                self.config.reward_rate_unit_mbps * 1e6 / 8.0
            } else {
                self.rate_max.get().unwrap_or(0.0)
            };
            let rate_bps = window / (r / 1e6);
            let lambda = if unit > 0.0 {
                (rate_bps / unit).clamp(0.0, LAMBDA_MAX)
            } else {
                0.0
            };
            let rtt_ratio = self.rtt_min.get().map_or(1.0, |m| r / m);
            Measured {
                lambda,
                rate_bps,
                loss: iv.loss_fraction(),
                rtt_ratio,
            }
        });

        let row = self.row(iv, rtt, dt);
        if self.rows.len() == self.config.history as usize {
            self.rows.pop_front();
        }
        self.rows.push_back(row);
        if iv.rtt_mean_us.is_some() {
            self.prev_rtt = iv.rtt_mean_us;
        }
        tracing::trace!(
            now_us = now,
            cwnd = self.cwnd,
            ssthresh = self.ssthresh,
            phase = ?self.phase,
            ?event,
            "owl report"
        );

        // Algorithm 1 in congestion avoidance only, on an interval that acknowledged
        // something and has an RTT
        let due =
            self.phase == Phase::CongestionAvoidance && !loss && iv.acked_pkts > 0 && rtt.is_some();
        if due {
            self.write_features(obs, mask);
        }
        due
    }

    fn apply(&mut self, action: &[f32]) -> Action {
        let (delta, valid) = action_delta(action.first().copied());
        self.decisions += 1;
        if !valid {
            self.bad_actions += 1;
        }
        let lo = self.config.min_cwnd_pkts * self.mss;
        self.cwnd = (self.cwnd + delta * self.mss).clamp(lo, MAX_CWND_BYTES.max(lo));
        // a decrease moves ssthresh along: the policy's window, not slow start, rules in
        // congestion avoidance
        self.ssthresh = self.ssthresh.min(self.cwnd);
        self.last_delta = delta;
        self.action()
    }

    fn hold(&mut self) -> Action {
        self.action()
    }

    /// Eq. 7 for the last interval, `λ` in units of `reward_rate_unit_mbps` or else the
    /// flow's best delivery rate over the last `window_s` (0 before any RTT).
    fn reward(&self) -> f64 {
        self.last.map_or(0.0, |m| self.eq7(m.lambda, &m))
    }

    /// Eq. 7 with `λ` in units of what the link offered over the interval (the trainer's
    /// `--reward-unit interval`): full use of a varying link pays the same at any rate. A
    /// link that offered nothing (a trace's outage) pays nothing for sending (λ = 0); the
    /// delay and loss terms still count.
    fn reward_in_capacity(&self, capacity_bps: f64) -> f64 {
        match self.last {
            Some(m) if capacity_bps > 0.0 && capacity_bps.is_finite() => {
                self.eq7((m.rate_bps / capacity_bps).clamp(0.0, LAMBDA_MAX), &m)
            }
            Some(m) if capacity_bps == 0.0 => self.eq7(0.0, &m),
            _ => self.reward(),
        }
    }

    fn initial_action(&mut self) -> Action {
        self.action()
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }

    fn wants_network_stats(&self) -> bool {
        true
    }

    fn network_stats(&mut self, s: Option<&NetStats>) {
        self.stats = s.map(|&stats| Sample {
            stats,
            taken_us: self.clock.now_us.saturating_sub(stats.age_us()),
        });
    }
}
