//! Jury's per-flow core: signals (§3.1), the occupancy estimate (eq. 5), post-processing
//! (eq. 6), the window update (eq. 7–8), exploration and significance (§3.4), reward (eq. 9).

use std::collections::VecDeque;

use super::config::{JuryConfig, Probe};
use crate::controller::{Action, FlowInfo, FlowMetrics};
use crate::learned::LearnedCore;
use crate::policy::PolicySpec;
use crate::signals::Interval;

/// Version of the observation layout; bump it whenever the features or their order change.
pub const FEATURE_VERSION: u32 = 1;
/// Values per interval in the observation: RTT change, delivery-ratio change, queue.
pub const FEATURES_PER_INTERVAL: usize = 3;
/// Bound of `|ΔRTT / Δt|` (eq. 1: the aggregate rate's excess over capacity, a fraction).
pub const D_MAX: f64 = 1.0;
/// Bound of `|(1 − L_t)/(1 − L_{t−1}) − 1|`.
pub const LOSS_DEV_MAX: f64 = 0.5;
/// Bound of the standing queue `(RTT_t − RTT_min) / Δt`, in control intervals.
pub const Q_MAX: f64 = 4.0;
/// Largest radius δ of the action range (its smallest and `|μ|`'s bound are knobs:
/// [`JuryConfig::min_delta`], [`JuryConfig::mu_bound`]).
pub const DELTA_MAX: f32 = 1.0;
/// Largest window (bytes) and pacing rate (bytes/s) ever set.
pub const MAX_CWND_BYTES: f64 = (1u64 << 30) as f64;
pub const MAX_RATE_BPS: f64 = 12.5e9;
/// Rate decisions remembered to pair ACKs with the rate their packets were sent at.
const RATE_MEMORY: usize = 1024;

/// The policy layout of a Jury model under `config`: `history` stacked intervals in, the
/// range `(μ, δ) ∈ [−1, 1] × [min_delta, 1]` out.
pub fn policy_spec(config: &JuryConfig) -> PolicySpec {
    PolicySpec {
        algorithm: "jury",
        feature_version: FEATURE_VERSION,
        obs_dim: FEATURES_PER_INTERVAL * config.history as usize,
        act_dim: 2,
        act_low: vec![-config.mu_bound as f32, config.min_delta as f32],
        act_high: vec![config.mu_bound as f32, DELTA_MAX],
        recurrent_hidden: None,
        masked: false,
    }
}

/// Eq. 5: the flow's share of the bottleneck from a rate ratio `a = x_{t+1}/x_t` and the
/// throughput ratio `g = thr_{t+1}/thr_t` it caused, clamped to `[0, 1]`; `None` when `a` is
/// too close to 1 (`|ln a| < min_probe`) or an input is not a positive finite number.
pub fn occupancy(a: f64, g: f64, min_probe: f64) -> Option<f64> {
    if !(a.is_finite() && g.is_finite() && a > 0.0 && g > 0.0) || a.ln().abs() < min_probe {
        return None;
    }
    let r = (a - g) / (g * (a - 1.0));
    r.is_finite().then(|| r.clamp(0.0, 1.0))
}

/// Eq. 5 over a window of intervals: eq. 4 is linear in the share `s` once rearranged,
/// `a/g − 1 = (a − 1)·s`, so the window's estimate is the least-squares fit
/// `s = Σ(a−1)(a/g−1) / Σ(a−1)²`, which is the moving average of eq. 5's per-interval
/// values weighted by `(a − 1)²` (a probe ten times larger counts a hundred times more:
/// eq. 5 divides throughput noise by `a − 1`).
///
/// With an instrument ([`Self::push_iv`]: a trial's step `u`, independent of everything
/// else that moves the rate) the fit is the instrumental-variable one,
/// `s = Σ u·(a/g−1) / Σ u·(a−1)`: what else moved `a` (the policy's steps, which the other
/// flows may share) is uncorrelated with `u` and drops out of both sums.
#[derive(Debug, Clone)]
pub struct OccupancyFit {
    n: usize,
    /// `(u, x, v)`: instrument, regressor `a − 1`, response `a/g − 1`.
    points: VecDeque<(f64, f64, f64)>,
    min_probe: f64,
    estimate: Option<f64>,
}

impl OccupancyFit {
    /// A fit over the last `n` points that needs `Σu² ≥ min_probe²`.
    pub fn new(n: u32, min_probe: f64) -> Self {
        Self {
            n: (n as usize).max(1),
            points: VecDeque::new(),
            min_probe,
            estimate: None,
        }
    }

    /// Add one interval's rate ratio `a` and throughput ratio `g` (ignored unless both are
    /// positive and finite); returns the estimate, which holds while the window's probes are
    /// too small.
    pub fn push(&mut self, a: f64, g: f64) -> Option<f64> {
        if a.is_finite() && g.is_finite() && a > 0.0 && g > 0.0 {
            self.push_uv(a - 1.0, a / g - 1.0)
        } else {
            self.estimate
        }
    }

    /// Add one point of the regression `v = u·s` directly: `u` the flow's own step (its
    /// probe), `v` eq. 4's `a/g − 1` (ignored unless both are finite).
    pub fn push_uv(&mut self, u: f64, v: f64) -> Option<f64> {
        self.push_iv(u, u, v)
    }

    /// Add one point `v = x·s` with instrument `u` (ignored unless all three are finite).
    pub fn push_iv(&mut self, u: f64, x: f64, v: f64) -> Option<f64> {
        if u.is_finite() && x.is_finite() && v.is_finite() {
            if self.points.len() == self.n {
                self.points.pop_front();
            }
            self.points.push_back((u, x, v));
            let (uv, ux, uu) = self
                .points
                .iter()
                .fold((0.0, 0.0, 0.0), |(uv, ux, uu), (u, x, v)| {
                    (uv + u * v, ux + u * x, uu + u * u)
                });
            if uu >= self.min_probe * self.min_probe && ux > 0.0 && (uv / ux).is_finite() {
                self.estimate = Some((uv / ux).clamp(0.0, 1.0));
            }
        }
        self.estimate
    }

    pub fn estimate(&self) -> Option<f64> {
        self.estimate
    }
}

/// Eq. 6: the action within the policy's range `[μ − δ, μ + δ]` that a flow with occupancy
/// `ratio_bw` takes; within `[−2, 2]` for the action box's `μ` and `δ` (not clipped to
/// `[−1, 1]`: a policy at `μ = ±1` would then give every flow on one side the same step).
pub fn post_process(mu: f64, delta: f64, ratio_bw: f64) -> f64 {
    mu + (1.0 - 2.0 * ratio_bw.clamp(0.0, 1.0)) * delta
}

/// Eq. 7: the window after action `a` with gain `alpha`.
pub fn window_update(cwnd: f64, a: f64, alpha: f64) -> f64 {
    if a >= 0.0 {
        cwnd * (1.0 + alpha * a)
    } else {
        cwnd / (1.0 - alpha * a)
    }
}

/// A moving average over the last `n` values.
#[derive(Debug, Clone)]
struct Sma {
    n: usize,
    v: VecDeque<f64>,
}

impl Sma {
    fn new(n: u32) -> Self {
        let n = (n as usize).max(1);
        Self {
            n,
            v: VecDeque::with_capacity(n),
        }
    }
    fn push(&mut self, x: f64) -> f64 {
        if self.v.len() == self.n {
            self.v.pop_front();
        }
        self.v.push_back(x);
        self.mean().unwrap_or(x)
    }
    fn mean(&self) -> Option<f64> {
        (!self.v.is_empty()).then(|| self.v.iter().sum::<f64>() / self.v.len() as f64)
    }
}

/// One decision as sent: when, at what pacing rate and window, and which trial it was part of.
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// Flow time of the decision (µs).
    at: u64,
    /// Pacing rate (bytes/s).
    rate: f64,
    /// `Σ ln own step` ([`Probe::Own`], [`Probe::Explore`]); `ln` of the trial's factor
    /// ([`Probe::Trial`]).
    own: f64,
    /// [`Probe::Trial`]: the trial plan (gap and pair) the decision belongs to.
    plan: u64,
    /// The trial's sign in effect (0: in the gap).
    sign: i8,
}

/// What one half of a trial delivered: the ACKs of packets sent wholly within it.
#[derive(Debug, Clone, Copy, Default)]
struct Half {
    bytes: f64,
    us: f64,
    /// `Σ pacing rate · interval` over the same intervals.
    rate_us: f64,
}

/// A trial whose ACKs are still coming in.
#[derive(Debug, Clone, Copy)]
struct Pending {
    plan: u64,
    plus: Half,
    minus: Half,
}

/// What the last interval measured, for the reward.
#[derive(Debug, Clone, Copy)]
struct Measured {
    queue_us: f64,
    loss: f64,
}

/// One Jury flow.
pub struct JuryCore {
    config: JuryConfig,
    spec: PolicySpec,
    mss: f64,
    metrics: FlowMetrics,
    /// Flow time (µs): the sum of the report intervals so far.
    clock_us: u64,
    /// The window eq. 7 sets (bytes); the datapath gets it times the trial's factor.
    cwnd: f64,
    /// The pacing rate the datapath gets (bytes/s), the trial's factor included.
    rate: f64,
    /// Every decision as sent, oldest first.
    rates: VecDeque<Sent>,
    /// See `rates`.
    own: f64,
    /// [`Probe::Trial`]: the trial's sign for each coming decision (0: between trials).
    plan: VecDeque<i8>,
    /// The trial's sign in effect.
    trial: i8,
    /// The trials' random stream (its own: independent of exploration's).
    trial_rng: u64,
    /// Trial plans made so far (the current one's number).
    plan_seq: u64,
    /// Trials whose halves' ACKs are being summed (at most two: the last and the one before).
    pending: VecDeque<Pending>,
    prev_thr: Option<f64>,
    prev_rtt: Option<f64>,
    rtt_min: Option<f64>,
    /// Largest delivery-rate sample seen (bytes/s; the datapath's per-packet `tcp_rate`
    /// samples, which a hole-filling ACK does not inflate as it does an interval's throughput).
    thr_max: f64,
    prev_loss: f64,
    loss_min: Option<f64>,
    d: Sma,
    l: Sma,
    occ: OccupancyFit,
    history: VecDeque<[f32; FEATURES_PER_INTERVAL]>,
    last: Option<Measured>,
    rng: u64,
    last_action: f64,
    decisions: u64,
    forced: u64,
    explored: u64,
}

impl JuryCore {
    pub fn new(config: JuryConfig, info: &FlowInfo) -> Self {
        let mss = f64::from(info.mss.max(1));
        let spec = policy_spec(&config);
        let mut core = Self {
            spec,
            mss,
            metrics: FlowMetrics::default(),
            clock_us: 0,
            cwnd: 0.0,
            rate: 0.0,
            rates: VecDeque::new(),
            own: 0.0,
            prev_thr: None,
            prev_rtt: None,
            rtt_min: None,
            thr_max: 0.0,
            prev_loss: 0.0,
            loss_min: None,
            d: Sma::new(config.signal_window),
            l: Sma::new(config.signal_window),
            occ: OccupancyFit::new(config.occupancy_window, config.min_probe),
            history: VecDeque::with_capacity(config.history as usize),
            last: None,
            // a per-flow stream: flows of one host explore independently, runs repeat
            rng: splitmix(u64::from(info.sock_id) ^ 0x6a75_7279_5f65_7870),
            plan: VecDeque::new(),
            trial: 0,
            trial_rng: splitmix(splitmix(u64::from(info.sock_id) ^ 0x6a75_7279_5f74_7269)),
            plan_seq: 0,
            pending: VecDeque::new(),
            last_action: 0.0,
            decisions: 0,
            forced: 0,
            explored: 0,
            config,
        };
        let init = match core.config.initial_cwnd_pkts {
            Some(w) => w * mss,
            None => f64::from(info.init_cwnd_bytes.max(1)),
        };
        core.cwnd = core.bound_cwnd(init);
        core.set_rate();
        core
    }

    /// The smoothed occupancy estimate (0 before any estimate: a new flow assumes it has no
    /// share, so eq. 6 takes the top of the policy's range).
    pub fn ratio_bw(&self) -> f64 {
        self.occ.estimate().unwrap_or(0.0)
    }
    /// The window the datapath gets (bytes): eq. 7's, times `1 + 2ε` for the whole of a
    /// trial. A trial moves the flow's rate by its pacing alone: the window, the same in both
    /// halves, leaves the pacing room (`1 + ε` for the faster half, and as much again for
    /// the RTT that half's own queue adds), so a half sends at its paced rate from its first
    /// packet. A window cut would instead silence the flow until enough ACKs came back, and
    /// the half would send far less than its pacing says (docs/algorithms/jury.md, "The
    /// estimator on packets").
    pub fn cwnd_bytes(&self) -> f64 {
        let room = if self.trial != 0 {
            1.0 + 2.0 * self.config.trial_eps
        } else {
            1.0
        };
        (self.cwnd * room).min(MAX_CWND_BYTES)
    }
    /// The window eq. 7 set (bytes), without the trial.
    pub fn base_cwnd_bytes(&self) -> f64 {
        self.cwnd
    }
    /// The trial's sign in effect: `+1`, `−1`, or 0 between trials (always 0 but with
    /// [`Probe::Trial`]).
    pub fn trial_sign(&self) -> i8 {
        self.trial
    }
    fn trial_factor(&self) -> f64 {
        1.0 + f64::from(self.trial) * self.config.trial_eps
    }
    /// The pacing rate (bytes/s).
    pub fn rate_bps(&self) -> f64 {
        self.rate
    }
    /// The last action applied (after post-processing and exploration).
    pub fn last_action(&self) -> f64 {
        self.last_action
    }
    /// Decisions the policy made, intervals the significance rule increased without it, and
    /// actions exploration replaced.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.decisions, self.forced, self.explored)
    }
    /// The observation as it stands (oldest interval first, zero-padded).
    pub fn features(&self) -> Vec<f32> {
        let mut obs = vec![0.0; self.spec.obs_dim];
        self.write_features(&mut obs);
        obs
    }

    /// [`Self::features`] into `out` (`obs_dim` values), without allocating: the per-report
    /// path.
    fn write_features(&self, out: &mut [f32]) {
        out.fill(0.0);
        let pad = self.config.history as usize - self.history.len();
        for (i, f) in self.history.iter().enumerate() {
            let o = (pad + i) * FEATURES_PER_INTERVAL;
            if let Some(slot) = out.get_mut(o..o + FEATURES_PER_INTERVAL) {
                slot.copy_from_slice(f);
            }
        }
    }

    /// The window's bounds: at least `min_cwnd_pkts`; at most `max_cwnd_bdp` times the
    /// largest delivery-rate sample over the smallest RTT (plus `min_cwnd_pkts`), once both
    /// exist.
    fn cwnd_cap(&self) -> f64 {
        let lo = self.config.min_cwnd_pkts * self.mss;
        match self.rtt_min {
            Some(r) if self.thr_max > 0.0 => {
                (self.config.max_cwnd_bdp * self.thr_max * r / 1e6 + lo).min(MAX_CWND_BYTES)
            }
            _ => MAX_CWND_BYTES,
        }
    }

    fn bound_cwnd(&self, c: f64) -> f64 {
        let lo = self.config.min_cwnd_pkts * self.mss;
        if c.is_finite() {
            c.min(self.cwnd_cap()).max(lo)
        } else {
            lo
        }
    }

    /// Eq. 8: pace at `cwnd / RTT_t` (the last interval's mean RTT; before any sample the
    /// configured initial RTT), and remember the rate for the occupancy estimate.
    fn set_rate(&mut self) {
        let rtt_us = self
            .prev_rtt
            .unwrap_or(self.config.initial_rtt_ms * 1000.0)
            .max(1.0);
        self.rate = (self.cwnd * self.trial_factor() * 1e6 / rtt_us).clamp(1.0, MAX_RATE_BPS);
        if self.rates.len() == RATE_MEMORY {
            self.rates.pop_front();
        }
        self.rates.push_back(Sent {
            at: self.clock_us,
            rate: self.rate,
            own: self.own,
            plan: self.plan_seq,
            sign: self.trial,
        });
    }

    /// The decision in effect at flow time `t` (µs).
    fn sent_at(&self, t: f64) -> Option<Sent> {
        self.rates
            .iter()
            .rev()
            .find(|s| (s.at as f64) <= t)
            .or(self.rates.front())
            .copied()
    }

    /// The pacing rate, and `Σ ln own step`, in effect at flow time `t` (µs).
    fn rate_at(&self, t: f64) -> (f64, f64) {
        self.sent_at(t)
            .map_or((self.rate, self.own), |s| (s.rate, s.own))
    }

    /// [`Probe::Trial`]'s measurement, per report: this interval's ACKs (`bytes` over `dt`
    /// µs, packets sent one RTT `rtt` earlier) count towards a half of a trial only if every
    /// packet went out within that half; an interval that acked nothing counts too. Once
    /// ACKs of a later plan arrive, a trial whose halves both counted gives eq. 4's point: `a` the ratio of the halves' mean pacing rates,
    /// `g` of their throughputs, the instrument `u` the trial's own ratio
    /// `(1 + ε)/(1 − ε) − 1`.
    fn measure_trial(&mut self, bytes: f64, dt: f64, rtt: f64) {
        let hi = self.clock_us as f64 - rtt;
        let (Some(first), Some(last)) = (self.sent_at(hi - dt), self.sent_at(hi - 1.0)) else {
            return;
        };
        while let Some(p) = self.pending.front().copied() {
            if p.plan >= first.plan {
                break;
            }
            self.pending.pop_front();
            if p.plus.us > 0.0 && p.minus.us > 0.0 && p.plus.bytes > 0.0 && p.minus.bytes > 0.0 {
                let eps = self.config.trial_eps;
                let a = (p.plus.rate_us / p.plus.us) / (p.minus.rate_us / p.minus.us);
                let g = (p.plus.bytes / p.plus.us) / (p.minus.bytes / p.minus.us);
                self.occ
                    .push_iv((1.0 + eps) / (1.0 - eps) - 1.0, a - 1.0, a / g - 1.0);
            }
        }
        if first.sign == 0 || first.plan != last.plan || first.sign != last.sign {
            return;
        }
        if self.pending.back().is_none_or(|p| p.plan != first.plan) {
            if self.pending.len() == 2 {
                self.pending.pop_front();
            }
            self.pending.push_back(Pending {
                plan: first.plan,
                plus: Half::default(),
                minus: Half::default(),
            });
        }
        if let Some(p) = self.pending.back_mut() {
            let h = if first.sign > 0 {
                &mut p.plus
            } else {
                &mut p.minus
            };
            h.bytes += bytes;
            h.us += dt;
            h.rate_us += 0.5 * (first.rate + last.rate) * dt;
        }
    }

    /// Take action `a`; `common` is the part of it not the flow's own ([`Probe`]: the
    /// policy's centre μ, or the post-processed action exploration replaced; 0 for a step
    /// the policy did not choose).
    fn step(&mut self, a: f64, common: f64) {
        let alpha = self.config.alpha;
        self.cwnd = self.bound_cwnd(window_update(self.cwnd, a, alpha));
        if self.config.probe == Probe::Trial {
            self.trial = self.next_trial();
            self.own = self.trial_factor().ln();
        } else {
            self.own += (window_update(1.0, a, alpha) / window_update(1.0, common, alpha)).ln();
        }
        self.last_action = a;
        self.set_rate();
    }

    fn action(&mut self) -> Action {
        let a = Action {
            cwnd_bytes: Some(self.cwnd_bytes() as u32),
            rate_bps: Some(self.rate as u64),
            report_interval_us: None,
        };
        self.metrics.record(&a);
        a
    }

    /// The trial's sign for the next decision: plans a gap of `U{gap_min..=gap_max}` zeros
    /// and a pair `(s, −s)` of `trial_intervals` each, `s = ±1` at random, whenever the last
    /// plan is spent.
    fn next_trial(&mut self) -> i8 {
        if self.plan.is_empty() {
            self.plan_seq += 1;
            let (lo, n) = (
                self.config.trial_gap_min,
                self.config.trial_intervals as usize,
            );
            let hi = self.config.trial_gap_max.max(lo);
            let gap = lo + (self.trial_unit() * f64::from(hi - lo + 1)).floor() as u32;
            let sign: i8 = if self.trial_unit() < 0.5 { 1 } else { -1 };
            self.plan
                .extend(std::iter::repeat_n(0, gap.min(hi) as usize));
            self.plan.extend(std::iter::repeat_n(sign, n));
            self.plan.extend(std::iter::repeat_n(-sign, n));
        }
        self.plan.pop_front().unwrap_or(0)
    }

    fn trial_unit(&mut self) -> f64 {
        self.trial_rng = splitmix(self.trial_rng);
        (self.trial_rng >> 11) as f64 / (1u64 << 53) as f64
    }

    fn next_unit(&mut self) -> f64 {
        self.rng = splitmix(self.rng);
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// §3.1, per report: the signals, the occupancy estimate, the reward's inputs.
    fn measure(&mut self, iv: &Interval) {
        let dt = iv.interval_us.max(1) as f64;
        self.clock_us = self.clock_us.saturating_add(iv.interval_us.max(1));
        if let Some(m) = iv.rtt_min_us {
            let m = m as f64;
            self.rtt_min = Some(self.rtt_min.map_or(m, |r| r.min(m)));
        }
        let rtt = iv.rtt_mean_us.or(self.prev_rtt);
        let total = iv.acked_pkts.saturating_add(iv.lost_pkts);
        let loss = if total > 0 {
            iv.lost_pkts as f64 / total as f64
        } else {
            self.prev_loss
        };
        // RTT change over the interval: eq. 1's (Σx − c)/c once a queue exists
        let d_raw = match (iv.rtt_mean_us, self.prev_rtt) {
            (Some(now), Some(before)) => (now - before) / dt,
            _ => 0.0,
        };
        let l_raw = (1.0 - loss) / (1.0 - self.prev_loss).max(0.01) - 1.0;
        let d = self.d.push(d_raw).clamp(-D_MAX, D_MAX);
        let l = self.l.push(l_raw).clamp(-LOSS_DEV_MAX, LOSS_DEV_MAX);
        let queue_us = match (rtt, self.rtt_min) {
            (Some(r), Some(m)) => (r - m).max(0.0),
            _ => 0.0,
        };
        let q = (queue_us / dt).clamp(0.0, Q_MAX);
        if self.history.len() == self.config.history as usize {
            self.history.pop_front();
        }
        self.history.push_back([
            (d / D_MAX) as f32,
            (l / LOSS_DEV_MAX) as f32,
            (q / Q_MAX) as f32,
        ]);

        // eq. 5 on the packets these ACKs acknowledge: sent one RTT earlier, at the rate in
        // effect then (`trial`: summed over the halves of each trial), against the interval
        // before (the other probes)
        let thr = iv.acked_bytes as f64 * 1e6 / dt;
        if let (Probe::Trial, Some(r)) = (self.config.probe, rtt) {
            self.measure_trial(iv.acked_bytes as f64, dt, r);
        } else if let (Some(prev), Some(r)) = (self.prev_thr, rtt) {
            if prev > 0.0 && thr > 0.0 {
                let sent = self.clock_us as f64 - r - dt / 2.0;
                let (now, before) = (self.rate_at(sent), self.rate_at(sent - dt));
                let g = thr / prev;
                match self.config.probe {
                    Probe::Rate => {
                        self.occ.push(now.0 / before.0, g);
                    }
                    Probe::Own | Probe::Explore => {
                        self.occ.push((now.1 - before.1).exp(), g);
                    }
                    Probe::Trial => {}
                }
            }
        }
        self.prev_thr = Some(thr);
        if let Some(d) = iv.delivery_rate_max_bps {
            self.thr_max = self.thr_max.max(d as f64);
        }
        self.prev_rtt = rtt;
        if total > 0 {
            self.prev_loss = loss;
            self.loss_min = Some(self.loss_min.map_or(loss, |m| m.min(loss)));
        }
        self.last = Some(Measured { queue_us, loss });
    }
}

impl LearnedCore for JuryCore {
    fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    fn observe(&mut self, iv: &Interval, obs: &mut [f32], _mask: &mut [f32]) -> bool {
        self.metrics.observe(iv);
        self.measure(iv);
        if iv.acked_pkts < u64::from(self.config.min_pkts) || self.prev_rtt.is_none() {
            // §3.4 statistical significance: too few packets to judge, increase at once
            self.forced += 1;
            self.step(1.0, 0.0);
            return false;
        }
        self.write_features(obs);
        true
    }

    fn apply(&mut self, action: &[f32]) -> Action {
        let get = |i: usize| action.get(i).copied().filter(|v| v.is_finite());
        let mu =
            f64::from(get(0).unwrap_or(0.0)).clamp(-self.config.mu_bound, self.config.mu_bound);
        let delta =
            f64::from(get(1).unwrap_or(0.0)).clamp(self.config.min_delta, f64::from(DELTA_MAX));
        let mut a = post_process(mu, delta, self.ratio_bw());
        let post = a;
        if a.abs() < self.config.explore_band && self.next_unit() < self.config.explore_prob {
            a = if self.next_unit() < 0.5 { -1.0 } else { 1.0 };
            self.explored += 1;
        }
        self.decisions += 1;
        let common = match self.config.probe {
            Probe::Explore => post,
            Probe::Rate | Probe::Own | Probe::Trial => mu,
        };
        self.step(a, common);
        self.action()
    }

    fn hold(&mut self) -> Action {
        self.action()
    }

    /// Eq. 9 with its loss term a penalty (the default, see the module header):
    /// `ratio^ζ − ratio·(β1·(RTT − RTT_min) + β2·(1 − (1 − L_t)/(1 − L_min)))`, RTT in µs;
    /// with `printed_loss_term`, as printed: `... − β2·(1 − L_t)/(1 − L_min))`.
    fn reward(&self) -> f64 {
        let Some(m) = self.last else { return 0.0 };
        let c = &self.config;
        let ratio = self.ratio_bw();
        let delivered = (1.0 - m.loss) / (1.0 - self.loss_min.unwrap_or(0.0)).max(1e-3);
        let loss_term = if c.printed_loss_term {
            -c.beta2 * delivered
        } else {
            c.beta2 * (1.0 - delivered).max(0.0)
        };
        ratio.powf(c.zeta) - ratio * (c.beta1 * m.queue_us + loss_term)
    }

    fn initial_action(&mut self) -> Action {
        self.action()
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }
}

/// SplitMix64: a small, seedable generator (exploration needs no more).
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
