//! The paper's core of a MOCC flow: the MI measurement, the features, eq. 1, the reward
//! (eq. 2), start-up and the cwnd cap. The governors ([`super::governors`]) act on each
//! decision on the way from the policy's action to the rate.

use std::collections::VecDeque;
use std::sync::Arc;

use super::config::MoccConfig;
use super::governors::{self, Decision, Governor, Peers, ShareProbe, ShareProbeMetrics};
use crate::controller::{Action, FlowInfo, FlowMetrics};
use crate::learned::LearnedCore;
use crate::policy::PolicySpec;
use crate::pref::Preference;
use crate::signals::Interval;

/// History length `η` (Table 2).
pub const HISTORY: usize = 10;
/// Features per MI: `l`, `p`, `q`.
pub const FEATURES_PER_MI: usize = 3;
/// Index of `w_thr` in the observation; `w_lat`, `w_loss` follow.
pub const W_OFFSET: usize = HISTORY * FEATURES_PER_MI;
/// Observation length: 10 MIs × 3 features + 3 preference weights.
pub const OBS_DIM: usize = W_OFFSET + 3;
/// Version of the observation layout above.
pub const FEATURE_VERSION: u32 = 1;
/// Action bound: `a ∈ [−ACTION_BOUND, ACTION_BOUND]`.
pub const ACTION_BOUND: f32 = 5.0;
/// Upper bound of the sending ratio `l` (also its value when nothing was acked).
pub const L_MAX: f64 = 4.0;
/// Upper bound of the latency ratio `p`.
pub const P_MAX: f64 = 5.0;
/// Bound of `|q|`.
pub const Q_MAX: f64 = 1.0;

/// The policy layout every MOCC model must have.
pub fn policy_spec() -> PolicySpec {
    PolicySpec {
        algorithm: "mocc",
        feature_version: FEATURE_VERSION,
        obs_dim: OBS_DIM,
        act_dim: 1,
        act_low: vec![-ACTION_BOUND],
        act_high: vec![ACTION_BOUND],
        recurrent_hidden: None,
        masked: false,
    }
}

/// Eq. 1: the rate after action `a` with scale `alpha`. Symmetric in log-rate:
/// `rate_update(rate_update(x, a, α), −a, α) == x`.
pub fn rate_update(x: f64, a: f64, alpha: f64) -> f64 {
    if a >= 0.0 {
        x * (1.0 + alpha * a)
    } else {
        x / (1.0 - alpha * a)
    }
}

/// Encode one MI's raw `(l, p, q)` into the observation's bounded, zero-neutral values.
pub fn encode_mi(l: f64, p: f64, q: f64) -> [f32; FEATURES_PER_MI] {
    let fin = |v: f64| if v.is_finite() { v } else { 0.0 };
    [
        fin(l.clamp(0.0, L_MAX) - 1.0) as f32,
        fin(p.clamp(1.0, P_MAX) - 1.0) as f32,
        fin(q.clamp(-Q_MAX, Q_MAX)) as f32,
    ]
}

/// Where a flow is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum MoccPhase {
    /// Doubling per MI until loss or a latency rise.
    Startup,
    /// The policy decides every MI.
    Policy,
}

/// What the last observed MI measured (raw values, before encoding).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct MiSample {
    /// Bytes sent in the MI (derived, see the module header).
    pub sent_bytes: f64,
    /// Bytes acknowledged in the MI.
    pub acked_bytes: f64,
    /// Sending ratio `l` (clamped to `[0, L_MAX]`).
    pub l: f64,
    /// Latency ratio `p` (≥ 1, unclamped).
    pub p: f64,
    /// Latency gradient `q` (unclamped).
    pub q: f64,
    /// Throughput `acked_bytes / len` (bytes/s).
    pub throughput_bps: f64,
    /// `(O_thr, O_lat, O_loss)`, each in `[0, 1]`.
    pub objectives: [f64; 3],
    /// The preference in force when the MI was observed.
    pub w: [f64; 3],
}

/// What a flow's governors see of it: the knobs, the rate in force and the estimates.
#[derive(Debug, Clone)]
pub struct FlowState {
    pub config: MoccConfig,
    /// Maximum segment size (bytes).
    pub mss: f64,
    /// The decided rate in force (bytes/s), before any governor's trial factor.
    pub rate: f64,
    /// Capacity estimate `Ĉ` (bytes/s; 0 before any sample).
    pub capacity_bps: f64,
    /// Base latency estimate `D̂` (µs).
    pub base_rtt_us: Option<f64>,
    /// Doublings of the start-up once it handed over (`None`: no start-up ran, or it still
    /// runs).
    pub startup_doublings: Option<u32>,
    /// Reports, smoothed and minimum RTT, the last decision.
    pub metrics: FlowMetrics,
}

impl FlowState {
    /// `k·MSS/srtt` (bytes/s), at most `additive_increase_cap·rate`; 0 before the first RTT
    /// sample or when `k` is not a positive finite number.
    pub fn pkts_per_rtt_within_cap(&self, k: f64) -> f64 {
        let srtt = self.metrics.srtt_us;
        if !(k > 0.0 && k.is_finite() && srtt > 0.0 && srtt.is_finite()) {
            return 0.0;
        }
        let cap = self.config.additive_increase_cap * self.rate;
        let cap = if cap.is_finite() { cap.max(0.0) } else { 0.0 };
        (k * self.mss / (srtt / 1e6)).min(cap)
    }
}

/// One MOCC flow's features, action and reward.
#[derive(Debug, Clone)]
pub struct MoccCore {
    spec: PolicySpec,
    w: Preference,
    phase: MoccPhase,
    /// What the governors see.
    pub(super) flow: FlowState,
    /// Start-up doublings so far.
    doublings: u32,
    history: VecDeque<[f32; FEATURES_PER_MI]>,
    /// Bytes in flight at the last ACK of the previous MI, if trusted.
    prev_inflight: Option<u64>,
    last_mean_rtt_us: Option<f64>,
    min_mean_rtt_us: Option<f64>,
    /// Delivery-rate samples (bytes/s) of the last `cwnd_cap_delivery_mis` MIs with ACKs.
    recent_delivery: VecDeque<f64>,
    last: Option<MiSample>,
    /// Run in this order on every decision ([`governors::stack`]).
    governors: Vec<Box<dyn Governor>>,
}

impl MoccCore {
    /// A flow with no local peers.
    pub fn new(config: MoccConfig, info: &FlowInfo) -> Self {
        Self::with_peers(config, info, Arc::default())
    }

    /// A flow that shows its throughput to, and compares it with, the flows of `peers`.
    pub fn with_peers(config: MoccConfig, info: &FlowInfo, peers: Arc<Peers>) -> Self {
        let mss = f64::from(info.mss.max(1));
        let phase = if config.startup {
            MoccPhase::Startup
        } else {
            MoccPhase::Policy
        };
        let init_cwnd = f64::from(info.init_cwnd_bytes).max(mss);
        let rate = match config.initial_rate_mbps {
            Some(mbps) => mbps * 1e6 / 8.0,
            None => init_cwnd / (config.initial_rtt_ms.max(1e-3) / 1e3),
        };
        let mut c = Self {
            spec: policy_spec(),
            w: info.preference,
            phase,
            governors: governors::stack(info, peers),
            flow: FlowState {
                config,
                mss,
                rate,
                capacity_bps: 0.0,
                base_rtt_us: None,
                startup_doublings: None,
                metrics: FlowMetrics::default(),
            },
            doublings: 0,
            history: VecDeque::with_capacity(HISTORY + 1),
            prev_inflight: None,
            last_mean_rtt_us: None,
            min_mean_rtt_us: None,
            recent_delivery: VecDeque::new(),
            last: None,
        };
        c.flow.rate = c.bound(c.flow.rate);
        c
    }

    pub fn phase(&self) -> MoccPhase {
        self.phase
    }

    /// Current pacing rate (bytes/s).
    pub fn rate_bps(&self) -> f64 {
        self.flow.rate
    }

    /// The preference the next observation carries.
    pub fn preference(&self) -> Preference {
        self.w
    }

    /// Capacity estimate `Ĉ` (bytes/s; 0 before any sample).
    pub fn capacity_bps(&self) -> f64 {
        self.flow.capacity_bps
    }

    /// Base latency estimate `D̂` (µs).
    pub fn base_rtt_us(&self) -> Option<f64> {
        self.flow.base_rtt_us
    }

    /// The last observed MI's measurements.
    pub fn last_sample(&self) -> Option<&MiSample> {
        self.last.as_ref()
    }

    /// `(O_thr, O_lat, O_loss)` of the last observed MI (zeros before any).
    pub fn objectives(&self) -> [f64; 3] {
        self.last.map(|s| s.objectives).unwrap_or_default()
    }

    /// The observation as the policy would see it now.
    pub fn features(&self) -> [f32; OBS_DIM] {
        let mut o = [0.0f32; OBS_DIM];
        let pad = HISTORY - self.history.len().min(HISTORY);
        for (i, g) in self.history.iter().enumerate() {
            let at = (pad + i) * FEATURES_PER_MI;
            o[at..at + FEATURES_PER_MI].copy_from_slice(g);
        }
        for (k, v) in self.w.as_array().iter().enumerate() {
            o[W_OFFSET + k] = *v as f32;
        }
        o
    }

    /// The governors' lowest rate, at least `min_rate_kbps` (bytes/s).
    fn min_rate(&self) -> f64 {
        let c = &self.flow.config;
        let mut floor = (c.min_rate_kbps * 1000.0 / 8.0).max(1.0);
        for g in &self.governors {
            if let Some(f) = g.min_rate(&self.flow) {
                floor = floor.max(f).min(c.max_rate_mbps * 1e6 / 8.0);
            }
        }
        floor
    }

    fn max_rate(&self) -> f64 {
        (self.flow.config.max_rate_mbps * 1e6 / 8.0).max(self.min_rate())
    }

    /// Clamp a rate into the bounds; NaN becomes the minimum.
    fn bound(&self, x: f64) -> f64 {
        if x.is_nan() {
            self.min_rate()
        } else {
            x.clamp(self.min_rate(), self.max_rate())
        }
    }

    /// The additive increase governor's term (bytes/s) for a decision it applies to:
    /// `κ·MSS/srtt`, at most `additive_increase_cap·rate`; 0 before the first RTT sample or
    /// when κ is not a positive finite number.
    pub fn additive_increase(&self) -> f64 {
        self.flow
            .pkts_per_rtt_within_cap(self.flow.config.additive_increase_pkts)
    }

    /// The next MI's length (µs): the smoothed RTT within `[min_mi, max_mi]`.
    pub fn mi_us(&self) -> u32 {
        let srtt = self.flow.metrics.srtt_us;
        let us = if srtt > 0.0 && srtt.is_finite() {
            srtt
        } else {
            self.flow.config.initial_rtt_ms * 1000.0
        };
        self.flow.config.mi_within_bounds_us(us)
    }

    /// The cwnd cap (bytes): `2·x·rtt + headroom·MSS`, at most
    /// `g(w)·d̂·D̂ + headroom·MSS` ([`Self::delivery_gain`]) when that gain is positive and a
    /// delivery sample exists, at least 4 MSS.
    pub fn cwnd_cap_bytes(&self) -> u32 {
        let srtt = self.flow.metrics.srtt_us;
        let rtt_us = match (srtt > 0.0, self.last_mean_rtt_us) {
            (true, Some(m)) => srtt.max(m),
            (true, None) => srtt,
            (false, Some(m)) => m,
            (false, None) => 1e6,
        };
        let mss = self.flow.mss;
        let headroom = self.flow.config.cwnd_headroom_pkts * mss;
        let mut bytes = 2.0 * self.flow.rate * rtt_us / 1e6 + headroom;
        let gain = self.delivery_gain();
        let delivered = self.recent_delivery.iter().copied().fold(0.0, f64::max);
        if let (true, Some(base_us)) = (gain > 0.0 && delivered > 0.0, self.flow.base_rtt_us) {
            bytes = bytes.min(gain * delivered * base_us / 1e6 + headroom);
        }
        bytes.max(4.0 * mss).min(f64::from(u32::MAX / 2)).max(1.0) as u32
    }

    /// The delivery bound's gain under the flow's current preference: `g₀ / (1 − w_thr)^k`
    /// with `g₀ = cwnd_cap_delivery_gain` and `k = cwnd_cap_delivery_w_power` (`1 − w_thr`
    /// is `w_lat + w_loss`, the weight on what the bound protects). 0 (no bound) when `g₀`
    /// is 0 or the flow weighs only throughput with `k > 0`.
    pub fn delivery_gain(&self) -> f64 {
        let c = &self.flow.config;
        let g0 = c.cwnd_cap_delivery_gain;
        if g0 <= 0.0 || c.cwnd_cap_delivery_w_power <= 0.0 {
            return g0.max(0.0);
        }
        let rest = (1.0 - self.w.thr()).clamp(0.0, 1.0);
        let g = g0 / rest.powf(c.cwnd_cap_delivery_w_power);
        if g.is_finite() && rest > 1e-9 {
            g
        } else {
            0.0
        }
    }

    /// What the share probe measured so far.
    pub fn share_probe(&self) -> ShareProbeMetrics {
        self.share().map(ShareProbe::metrics).unwrap_or_default()
    }

    /// Whether the share guard is on (the next decision is guarded).
    pub fn share_guard(&self) -> bool {
        self.share().is_some_and(ShareProbe::guard)
    }

    fn share(&self) -> Option<&ShareProbe> {
        self.governors
            .iter()
            .find_map(|g| (**g).as_any().downcast_ref::<ShareProbe>())
    }

    fn action(&mut self) -> Action {
        let factor = self.governors.iter().fold(1.0, |f, g| f * g.rate_factor());
        let a = Action {
            cwnd_bytes: Some(self.cwnd_cap_bytes()),
            rate_bps: Some(((self.flow.rate * factor) as u64).max(1)),
            report_interval_us: Some(self.mi_us()),
        };
        self.flow.metrics.record(&a);
        a
    }

    /// Fold one MI into the estimates and the history; returns its sample.
    fn measure(&mut self, iv: &Interval) -> MiSample {
        let len_us = if iv.interval_us > 0 {
            iv.interval_us as f64
        } else {
            f64::from(self.mi_us())
        };
        let acked = iv.acked_bytes as f64;
        let lost_bytes = iv.lost_pkts as f64 * self.flow.mss;
        let feedback = iv.acked_bytes > 0
            || iv.acked_pkts > 0
            || iv.lost_pkts > 0
            || iv.rtt_samples > 0
            || iv.timeout;

        // sending ratio: conservation of bytes in flight, else rate × MI length
        let cur_inflight = if feedback { iv.inflight_bytes } else { None };
        let sent = match (self.prev_inflight, cur_inflight) {
            (Some(prev), Some(cur)) => (acked + lost_bytes + cur as f64 - prev as f64).max(0.0),
            _ => self.flow.rate * len_us / 1e6,
        };
        self.prev_inflight = cur_inflight;
        let l = if acked > 0.0 {
            (sent / acked).clamp(0.0, L_MAX)
        } else {
            L_MAX
        };

        // latency ratio and gradient
        let mean = iv.rtt_mean_us.filter(|m| m.is_finite() && *m > 0.0);
        if let Some(m) = mean {
            self.min_mean_rtt_us = Some(self.min_mean_rtt_us.map_or(m, |mm| mm.min(m)));
            let sample_min = iv.rtt_min_us.map_or(m, |s| s as f64);
            let base = self.flow.base_rtt_us;
            self.flow.base_rtt_us = Some(base.map_or(sample_min, |b| b.min(sample_min)));
        }
        let q = match (mean, self.last_mean_rtt_us) {
            (Some(m), Some(prev)) => (m - prev) / len_us,
            _ => 0.0,
        };
        if mean.is_some() {
            self.last_mean_rtt_us = mean;
        }
        let p = match (self.last_mean_rtt_us, self.min_mean_rtt_us) {
            (Some(m), Some(mm)) => (m / mm).max(1.0),
            _ => 1.0,
        };

        // reward terms (eq. 2)
        let thr = acked * 1e6 / len_us;
        let cap_sample = match (iv.send_rate_bps, iv.recv_rate_bps) {
            (Some(s), Some(r)) if s > 0 && r > 0 => s.min(r) as f64,
            _ => thr,
        };
        self.flow.capacity_bps = self.flow.capacity_bps.max(cap_sample);
        if acked > 0.0 && cap_sample.is_finite() && cap_sample > 0.0 {
            let keep = self.flow.config.cwnd_cap_delivery_mis.clamp(1, 100) as usize;
            while self.recent_delivery.len() >= keep {
                self.recent_delivery.pop_front();
            }
            self.recent_delivery.push_back(cap_sample);
        }
        let o_thr = if self.flow.capacity_bps > 0.0 {
            (thr / self.flow.capacity_bps).min(1.0)
        } else {
            0.0
        };
        // a stall (nothing came back for a whole MI) measured no latency, but at least the MI
        let stalled = mean.is_none() && acked == 0.0;
        let o_lat = match (self.flow.base_rtt_us, self.last_mean_rtt_us) {
            (Some(b), Some(m)) if !stalled => (b / m).min(1.0),
            _ => 0.0,
        };
        let o_loss = if iv.timeout {
            0.0
        } else {
            1.0 - iv.loss_fraction()
        };

        let g = encode_mi(l, p, q);
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(g);

        let s = MiSample {
            sent_bytes: sent,
            acked_bytes: acked,
            l,
            p,
            q,
            throughput_bps: thr,
            objectives: [o_thr, o_lat, o_loss],
            w: self.w.as_array(),
        };
        self.last = Some(s);
        s
    }

    /// One start-up step: returns `true` when start-up ended with this MI.
    fn startup_step(&mut self, iv: &Interval, s: &MiSample) -> bool {
        let lossy = iv.lost_pkts > 0 || iv.timeout;
        if lossy || s.p > self.flow.config.startup_exit_latency_ratio {
            // Ĉ already holds this MI's sample; the MI's own throughput can be far below it
            // (SACK holes: the cumulative ACK stalls while the bottleneck stays busy)
            let est = self.flow.capacity_bps.max(s.throughput_bps);
            let handover = if est > 0.0 {
                est.min(self.flow.rate)
            } else {
                self.flow.rate / 2.0
            };
            self.flow.rate = self.bound(handover);
            return true;
        }
        if self.flow.rate >= self.max_rate() {
            return true;
        }
        if s.acked_bytes > 0.0 || iv.rtt_samples > 0 {
            self.doublings += 1;
            self.flow.rate = self.bound(2.0 * self.flow.rate);
        }
        false
    }
}

impl LearnedCore for MoccCore {
    fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    fn observe(&mut self, iv: &Interval, obs: &mut [f32], _mask: &mut [f32]) -> bool {
        self.flow.metrics.observe(iv);
        let s = self.measure(iv);
        let decide = match self.phase {
            MoccPhase::Startup => {
                let done = self.startup_step(iv, &s);
                if done {
                    self.flow.startup_doublings = Some(self.doublings);
                    self.phase = MoccPhase::Policy;
                }
                done
            }
            MoccPhase::Policy => {
                for g in &mut self.governors {
                    g.observe(&self.flow, iv, &s);
                }
                true
            }
        };
        if decide {
            for (o, v) in obs.iter_mut().zip(self.features()) {
                *o = v;
            }
        }
        decide
    }

    fn apply(&mut self, action: &[f32]) -> Action {
        let a = match action.first() {
            Some(a) if !a.is_nan() => f64::from(a.clamp(-ACTION_BOUND, ACTION_BOUND)),
            _ => 0.0,
        };
        let mut d = Decision::new(a);
        for g in &mut self.governors {
            g.decide(&self.flow, &mut d);
        }
        let x = match d.cut {
            Some(f) => self.flow.rate * f,
            None => rate_update(self.flow.rate, d.action, self.flow.config.alpha) + d.add,
        };
        if x.is_finite() {
            self.flow.rate = self.bound(x);
        }
        self.action()
    }

    fn hold(&mut self) -> Action {
        self.action()
    }

    fn reward(&self) -> f64 {
        self.last.map_or(0.0, |s| {
            s.w.iter()
                .zip(s.objectives.iter())
                .map(|(w, o)| w * o)
                .sum()
        })
    }

    fn initial_action(&mut self) -> Action {
        self.action()
    }

    fn set_preference(&mut self, w: Preference) {
        self.w = w;
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.flow.metrics
    }
}
