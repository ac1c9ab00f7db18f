//! The share probe and the share guard: controlled trials of the flow's own share of the
//! bottleneck (as PCC's), and a guard that lifts a flow whose trials read it starved.
//!
//! Why: next to a throughput-leaning flow a latency-leaning one backs off in every queue
//! refill and decays to the minimum rate. From one flow's ACKs a neighbour's queue and a
//! capacity fade look alike; what separates them is how the queue answers the flow's *own*
//! rate.
//!
//! - **Trigger.** While the flow is starved by its own record (rate below
//!   `share_probe_below_capacity`·`Ĉ`, or, after an early start-up, until its trials' average
//!   reaches that) or guarded, over a standing queue (the MI's smallest RTT sample above
//!   `share_probe_min_latency_ratio`·`D̂`: no packet got through without waiting, CoDel's
//!   test), a trial starts at most every `share_probe_every_mis` MIs.
//! - **Trial.** `h` = `share_probe_half_mis` MIs at `x·(1 ± δ)`, then `h` at `x·(1 ∓ δ)`
//!   (order random). Its `2h + 2` MI means: the first and last carry packets sent outside
//!   it. A FIFO of capacity `C` queues the trial's extra bytes, a triangle of height
//!   `h·δ·x·len`, so the middle MIs' mean RTT exceeds the outer ones' by `h·δ·len·(x/C)/2`.
//!   Scaled by the trial's delivery over its sending, that reads `thr/C`: near 1 alone
//!   behind a queue, `≪ 1` beside others that keep it. Trials with a loss, a timeout or an
//!   MI without an RTT sample are dropped (a full drop-tail buffer answers with drops).
//! - **Guard.** On when a trial leaves the moving average (gain `share_gain`) of at least
//!   `share_guard_min_trials` trials below `share_guard_below`; only a trial ends it (one
//!   reading more, or a dropped one). Sticky because `Ĉ` is the flow's own delivery record,
//!   which a flow that started into a busy link measured small. While on, every decision's
//!   action is at least `share_guard_min_action`, `share_guard_pkts` packets per RTT are added
//!   (within the additive cap), and a loss costs one cut to `share_guard_loss_factor`·x.
//! - **Early start-up.** A start-up that ended before `share_probe_early_doublings`
//!   doublings (a latecomer meeting the neighbours' queue) leaves a `Ĉ` of its first windows:
//!   such a flow counts as starved until its trials read otherwise.
//! - **Peers' veto** ([`super::peers`]): no guard while the agent's MOCC flows fill the link
//!   and this one has `share_peers_fair` of their mean throughput.

use std::sync::Arc;

use super::peers::{PeerSlot, Peers};
use super::{Decision, FlowState, Governor};
use crate::controller::FlowInfo;
use crate::mocc::core::MiSample;
use crate::mocc::MoccConfig;
use crate::signals::Interval;

/// What the share probe measured so far.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct ShareProbeMetrics {
    /// Trials finished without loss (they count).
    pub trials: u32,
    /// Trials dropped for a loss, a timeout or an MI without an RTT sample.
    pub dropped_trials: u32,
    /// Moving average of the trials' own-share estimates (`None` before the first).
    pub share: Option<f64>,
    /// Decisions taken while the guard was on.
    pub guarded_decisions: u64,
    /// Trials whose average called for the guard but the local peers vetoed it.
    pub peer_vetoes: u32,
}

/// Longest half of a share trial (MIs).
const MAX_HALF_MIS: usize = 4;

/// Gain of the smoothed throughput a flow shows its local peers (per MI).
const PEER_GAIN: f64 = 0.1;

/// The share probe and guard of one flow, with its entry in the local peers' table.
#[derive(Debug, Clone)]
pub struct ShareProbe {
    /// MIs of the running trial observed so far plus 1; 0: no trial.
    step: u8,
    /// Rate multiplier for the next MI.
    factor: f64,
    /// +1: the trial's first half is up, −1: down.
    sign: f64,
    /// The trial's MI mean RTTs (µs; NaN where unusable).
    rtt: [f64; 2 * MAX_HALF_MIS + 2],
    len_us: f64,
    /// Bytes acknowledged in the trial's MIs.
    acked: f64,
    /// Bytes the policy's rate (without the trial's factor) would have sent in them.
    base: f64,
    /// MIs since the last trial started.
    since: u32,
    rng: u64,
    /// Flow id for traces.
    id: u32,
    guard: bool,
    /// A loss while guarded: the next decision cuts by `share_guard_loss_factor`.
    cut: bool,
    metrics: ShareProbeMetrics,
    /// This flow in the agent's table of MOCC flows.
    peer: PeerSlot,
    /// Smoothed throughput shown to the peers (bytes/s).
    peer_thr_bps: Option<f64>,
}

impl ShareProbe {
    /// No trial yet; the flow joins `peers` with its first policy MI.
    pub fn new(info: &FlowInfo, peers: Arc<Peers>) -> Self {
        Self {
            step: 0,
            factor: 1.0,
            sign: 0.0,
            rtt: [0.0; 2 * MAX_HALF_MIS + 2],
            len_us: 0.0,
            acked: 0.0,
            base: 0.0,
            since: 0,
            rng: 0x9E37_79B9_7F4A_7C15 ^ u64::from(info.sock_id),
            id: info.sock_id,
            guard: false,
            cut: false,
            metrics: ShareProbeMetrics::default(),
            peer: PeerSlot::new(peers),
            peer_thr_bps: None,
        }
    }

    /// What the probe measured so far.
    pub fn metrics(&self) -> ShareProbeMetrics {
        self.metrics
    }

    /// Whether the guard is on (the next decision is guarded).
    pub fn guard(&self) -> bool {
        self.guard
    }

    /// Start-up ended before `share_probe_early_doublings` doublings: `Ĉ` says little.
    fn early(flow: &FlowState) -> bool {
        flow.startup_doublings
            .is_some_and(|n| n < flow.config.share_probe_early_doublings)
    }

    /// Shows the peers this MI's smoothed throughput and `Ĉ` (only while the probe and the
    /// peers' veto are on).
    fn publish_to_peers(&mut self, flow: &FlowState, s: &MiSample) {
        let c = &flow.config;
        if c.share_probe_every_mis == 0 || c.share_peers_fair.is_nan() || c.share_peers_fair <= 0.0
        {
            return;
        }
        let thr = self.peer_thr_bps.map_or(s.throughput_bps, |old| {
            old + PEER_GAIN * (s.throughput_bps - old)
        });
        if thr.is_finite() {
            self.peer_thr_bps = Some(thr);
            let cap = (!Self::early(flow)).then_some(flow.capacity_bps);
            self.peer.publish(thr, cap);
        }
    }

    /// After an observed MI of the policy phase: advances the running trial (setting the
    /// next MI's rate multiplier) or starts one; a loss while guarded asks the next decision
    /// for one cut. Only a finished trial turns the guard on or off.
    fn probe_step(&mut self, flow: &FlowState, iv: &Interval) {
        let c = &flow.config;
        let rate = flow.rate;
        // a standing queue: even the MI's fastest packet waited (CoDel's test)
        let standing = match (iv.rtt_min_us, flow.base_rtt_us) {
            (Some(m), Some(b)) if b > 0.0 => m as f64 / b,
            _ => 1.0,
        };
        let lossy = iv.lost_pkts > 0 || iv.timeout;
        // below half the link: by `Ĉ`, the flow's own delivery record, or, after an early
        // start-up (whose `Ĉ` records only the first windows: a small link or a busy one),
        // by the trials' share until they read half or more
        let starved = rate < c.share_probe_below_capacity * flow.capacity_bps
            || (Self::early(flow)
                && self
                    .metrics
                    .share
                    .is_none_or(|s| s < c.share_probe_below_capacity));
        self.since = self.since.saturating_add(1);
        if self.step > 0 {
            let h = (c.share_probe_half_mis as usize).clamp(1, MAX_HALF_MIS);
            let k = usize::from(self.step); // MIs of the trial observed, this one included
            let rtt = iv
                .rtt_mean_us
                .filter(|m| m.is_finite() && *m > 0.0 && !lossy);
            self.rtt[k - 1] = rtt.unwrap_or(f64::NAN);
            self.len_us += iv.interval_us as f64;
            self.acked += iv.acked_bytes as f64;
            self.base += rate * iv.interval_us as f64 / 1e6;
            self.step += 1;
            // MI k + 1 is sent under this factor; MI j's ACKs carry the packets of MI j − 1
            self.factor = if k < h {
                1.0 + self.sign * c.share_probe_delta
            } else if k < 2 * h {
                1.0 - self.sign * c.share_probe_delta
            } else {
                1.0
            };
            if k == 2 * h + 2 {
                self.step = 0;
                self.finish_trial(c, h);
            }
            return;
        }
        if lossy && self.guard {
            self.cut = true;
        }
        // a guarded flow keeps probing whatever its rate: `Ĉ` is its own delivery record,
        // which a flow that started into a busy link measured small
        if c.share_probe_every_mis > 0
            && self.since >= c.share_probe_every_mis
            && (starved || self.guard)
            && standing > c.share_probe_min_latency_ratio
        {
            // xorshift64: a random order of the halves cancels the path's own trends
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.sign = if self.rng & 1 == 0 { 1.0 } else { -1.0 };
            self.len_us = 0.0;
            self.acked = 0.0;
            self.base = 0.0;
            self.since = 0;
            self.step = 1;
            self.factor = 1.0 + self.sign * c.share_probe_delta;
        }
    }

    /// A trial's reading, `thr/C = 2·contrast/(h·δ·len) · delivered/sent` (module header),
    /// into the average and the guard. The peers are asked only when the average calls for
    /// the guard.
    fn finish_trial(&mut self, c: &MoccConfig, h: usize) {
        let r = &self.rtt[..2 * h + 2];
        let len = self.len_us / r.len() as f64;
        let middle = r[1..=2 * h].iter().sum::<f64>() / (2 * h) as f64;
        let contrast = self.sign * (middle - (r[0] + r[2 * h + 1]) / 2.0);
        let delivered = self.acked / self.base;
        let share =
            (2.0 * contrast / (h as f64 * c.share_probe_delta * len) * delivered).clamp(-1.0, 1.0);
        let m = &mut self.metrics;
        if !share.is_finite() {
            tracing::trace!(id = self.id, sign = self.sign, rtt = ?r, "mocc share trial dropped");
            m.dropped_trials += 1;
            self.guard = false;
            return;
        }
        m.trials += 1;
        let avg = m
            .share
            .map_or(share, |old| old + c.share_gain * (share - old));
        m.share = Some(avg);
        let low = m.trials >= c.share_guard_min_trials && avg < c.share_guard_below;
        let vetoed = low
            && self
                .peer
                .not_starved(c.share_peers_fair, c.share_peers_busy);
        if vetoed {
            m.peer_vetoes += 1;
        }
        self.guard = low && !vetoed;
        tracing::trace!(id = self.id, share, avg, guard = self.guard, vetoed, sign = self.sign, rtt = ?r, len, delivered, "mocc share trial");
    }
}

impl Governor for ShareProbe {
    fn observe(&mut self, flow: &FlowState, iv: &Interval, s: &MiSample) {
        self.publish_to_peers(flow, s);
        self.probe_step(flow, iv);
    }

    fn decide(&mut self, flow: &FlowState, d: &mut Decision) {
        let cut = std::mem::take(&mut self.cut);
        if !self.guard {
            return;
        }
        let c = &flow.config;
        self.metrics.guarded_decisions += 1;
        d.guarded = true;
        d.action = d.action.max(c.share_guard_min_action);
        d.add = d.add.max(flow.pkts_per_rtt_within_cap(c.share_guard_pkts));
        if cut {
            let f = c.share_guard_loss_factor;
            d.cut = Some(if f.is_finite() {
                f.clamp(0.1, 1.0)
            } else {
                1.0
            });
        }
    }

    /// The running trial's rate multiplier, within `[0.1, 10]`; 1 for a non-finite one (a
    /// NaN `share_probe_delta` knob).
    fn rate_factor(&self) -> f64 {
        let f = self.factor;
        if f.is_finite() {
            f.clamp(0.1, 10.0)
        } else {
            1.0
        }
    }
}
