//! Nuwa-RL's per-flow core (the features of §IV-B, the gain `k` its actions set, eq. 10's
//! reward) and the fold program that applies the window law of §III-A / Algorithm 1 on every
//! ACK, with an integer reference of that program's arithmetic for the tests.

use std::collections::VecDeque;

use super::config::NuwaConfig;
use crate::controller::{Action, FlowInfo, FlowMetrics};
use crate::learned::LearnedCore;
use crate::policy::PolicySpec;
use crate::sanity;
use crate::signals::{fields, FoldProgram, Interval, ProgramBuilder, Trigger, INFINITY};
use crate::window::{Congestion, LossClock};

/// Version of the observation layout; bump it whenever the features or their order change.
pub const FEATURE_VERSION: u32 = 1;
/// Length of the observation: one row of [`feature`]s (the LSTM carries the history).
pub const OBS_DIM: usize = 5;

/// Where each feature sits in the observation.
pub mod feature {
    /// Bytes acknowledged in the period (`rcv_data`), as `log2(1 + packets) / 24`.
    pub const RCV_DATA: usize = 0;
    /// The datapath's window at the report (`new_win`), as `log2(1 + packets) / 24`.
    pub const WINDOW: usize = 1;
    /// What stands in for the receive buffer space (`racv_space`): the free share of the
    /// queueing-delay budget, `(T_d − D_c) / T_d` in `[−1, 1]`.
    pub const SPACE: usize = 2;
    /// The last RTT sample (`rtt_us`), as `log2(1 + ms) / 14`.
    pub const RTT: usize = 3;
    /// The gain in force, `ln(k / k_min) / ln(k_max / k_min)` in `[0, 1]` (0 if they are equal).
    pub const GAIN: usize = 4;
}

/// The multipliers on `k` the policy chooses from, by action index (eq. 8).
pub const ACTIONS: [f64; 5] = [0.25, 1.0, 1.05, 1.25, 2.85];
/// The index of "×1": what a bare Nuwa answers, and what a bad index becomes.
pub const HOLD_ACTION: usize = 1;

/// Packet counts are scaled as `log2(1 + n) / COUNT_LOG2_MAX` (2^24 packets ≈ 25 GB).
pub const COUNT_LOG2_MAX: f64 = 24.0;
/// RTTs as `log2(1 + ms) / RTT_LOG2_MAX` (2^14 ms ≈ 16 s).
pub const RTT_LOG2_MAX: f64 = 14.0;
/// Largest throughput eq. 10 sees, in units of the flow's best delivery rate
/// (`reward_rate_unit_mbps` = 0).
pub const X_MAX: f64 = 4.0;
/// Largest throughput eq. 10 sees in units of `reward_rate_unit_mbps`.
pub const X_MAX_UNITS: f64 = 1e6;
/// Smallest throughput eq. 10 sees (an α-fair utility with α ≥ 1 is −∞ at 0).
pub const X_MIN: f64 = 1e-3;
/// Largest delay ratio `RTT / RTT_min` eq. 10 sees.
pub const TAU_MAX: f64 = 1e3;

// ---- the fold program --------------------------------------------------------------------

/// `θ` in the program is a fixed-point number: `θ · THETA_ONE` (and so is `x`).
pub const THETA_ONE: u64 = 4096;
/// `x = |T_d − D_c| / ρ` is capped at 4 (`tanh 4` = 0.99933; the rational reaches 1 at 3.65).
pub const X_CAP: u64 = 4 * THETA_ONE;
/// The program's window `Report.nuwa_w` is in milli-bytes (`cwnd · 1000`).
pub const W_SCALE: u64 = 1000;
/// `Control.nuwa_k` is `k · 1000` (milli-packets per RTT).
pub const K_SCALE: f64 = 1000.0;
/// Bytes of one ACK the law and slow start count at most (a larger cumulative ACK, after a
/// long repair, grows the window as this many): keeps the per-ACK products below 2^64.
pub const ACK_CAP_BYTES: u64 = 2 * 1024 * 1024;
/// The loss cut `loss_decrease` is applied as `w · round(β · 1024) / 1024`.
pub const BETA_ONE: u64 = 1024;
/// The window the program keeps at least (packets) and at most (bytes).
pub const MIN_CWND_PKTS: u64 = 2;
pub const MAX_CWND_BYTES: u64 = 1 << 30;

/// Control registers the agent sets (full names; the program declares `&NAME[8..]`).
pub mod reg {
    /// `k · 1000`.
    pub const K: &str = "Control.nuwa_k";
    /// `T_d` (µs).
    pub const TARGET_US: &str = "Control.nuwa_td_us";
    /// `ρ` (µs).
    pub const RHO_US: &str = "Control.nuwa_rho_us";
    /// The flow's minimum RTT so far (µs), `u32::MAX` before any: `D_c`'s base.
    pub const BASE_US: &str = "Control.nuwa_base_us";
    /// The flow's MSS (bytes).
    pub const MSS: &str = "Control.nuwa_mss";
    /// Slow start ends when `D_c` exceeds this (µs).
    pub const SS_EXIT_US: &str = "Control.nuwa_ssx_us";
    /// Loss-cut epoch: each new value cuts the window once by `loss_decrease`.
    pub const CUT: &str = "Control.nuwa_cut";
    /// Every one, in the order [`super::NuwaCore::control_registers`] sends them.
    pub const ALL: [&str; 7] = [K, TARGET_US, RHO_US, BASE_US, MSS, SS_EXIT_US, CUT];

    /// `Control.<name>` → `<name>`.
    pub fn short(full: &'static str) -> &'static str {
        full.strip_prefix("Control.").unwrap_or(full)
    }

    /// The index portus gives `name` among the program's control registers (what an
    /// UPDATE_FIELDS names on the wire): `Control.interval_us` is declared first (0), then
    /// [`ALL`] in order. The simulator's receiver-side Nuwa reads the agent's writes by it.
    pub fn control_index(name: &str) -> Option<u32> {
        ALL.iter().position(|n| *n == name).map(|i| i as u32 + 1)
    }
}

/// The program's own registers, in declaration order: their slots in [`Interval::state`].
pub mod state {
    /// The window (milli-bytes), kept exactly across ACKs: the datapath holds whole packets.
    pub const W: (usize, &str) = (0, "nuwa_w");
    /// The `Cwnd` it wrote last (bytes): a different `Cwnd` at an ACK was set from outside
    /// (the agent, an RTO, the kernel's clamp) and is adopted.
    pub const CW: (usize, &str) = (1, "nuwa_cw");
    /// 1 in slow start, 0 under the law.
    pub const SS: (usize, &str) = (2, "nuwa_ss");
    /// The last loss-cut epoch applied.
    pub const CUT_SEEN: (usize, &str) = (3, "nuwa_cut_seen");
}

/// Report fields Nuwa reads (besides its state registers).
pub const NUWA_FIELDS: [&str; 8] = [
    fields::ACKED_BYTES,
    fields::ACKED_PKTS,
    fields::LOST_PKTS,
    fields::TIMEOUT,
    fields::RTT_MIN_US,
    fields::RTT_SUM_US,
    fields::RTT_CNT,
    fields::RTT_LAST_US,
];

/// `T_d` in µs.
pub fn target_us(c: &NuwaConfig) -> u32 {
    (c.target_delay_ms * 1e3).round().clamp(1.0, 1e8) as u32
}

/// `ρ` in µs (`rho · T_d`, at least 1).
pub fn rho_us(c: &NuwaConfig) -> u32 {
    (c.rho * c.target_delay_ms * 1e3).round().clamp(1.0, 1e9) as u32
}

/// The slow-start exit delay in µs.
pub fn ss_exit_us(c: &NuwaConfig) -> u32 {
    (c.slow_start_exit * c.target_delay_ms * 1e3)
        .round()
        .clamp(0.0, 1e9) as u32
}

/// `k` as the program's register: `round(k · 1000)`, at least 1.
pub fn k_register(k: f64) -> u32 {
    if k.is_finite() {
        (k * K_SCALE)
            .round()
            .clamp(1.0, super::config::K_LIMIT * K_SCALE) as u32
    } else {
        1
    }
}

/// Nuwa's fold program: the canonical folds Nuwa reads, its four state registers, the
/// seven control registers of [`reg`], and the per-ACK law. Each statement has at most six
/// operators (libccp has 8 temporaries), the locals are `nuwa_dc`, `nuwa_x`, `nuwa_y`,
/// `nuwa_z`, `nuwa_n` (portus allows 6). The statements, per ACK:
///
/// ```text
///   on every ACK:      w ← cwnd·1000 if Cwnd ≠ the Cwnd written last      (set from outside)
///                      w ← w·β  if the agent's cut epoch is new           (loss response)
///                      ss ← 0 on a loss; ss ← 1 on a timeout
///                      w ← w + ss·min(acked, 2 MiB)·1000                   (slow start)
///   on a valid RTT:    D_c = rtt − min(base, this interval's min)
///                      if ss and D_c > ss_exit: w ← w/2, ss ← 0             (slow-start exit)
///                      X = min(|T_d − D_c|·4096/ρ, 4·4096), Y = X²/4096, Z = Y²/4096
///                      Θ = min(X·(945·4096 + 105·Y + Z) / (945·4096 + 420·Y + 15·Z), 4096)
///                      g = Θ·K·(1 − ss)/4096                                 (θ·k·1000)
///                      Δ = g·min(acked, 2 MiB)·mss·1000 / w                  (milli-bytes)
///                      w ← w + Δ if D_c < T_d;  w ← max(w, Δ + 2·mss·1000) − Δ if D_c > T_d
///   last:              w ← clamp(w, 2 MSS, 1 GiB); Cwnd ← ⌊w / (1000·mss)⌋·mss
/// ```
pub fn program(c: &NuwaConfig, initial_interval_us: u32) -> FoldProgram {
    let beta = (c.loss_decrease * BETA_ONE as f64)
        .round()
        .clamp(1.0, BETA_ONE as f64) as u64;
    let (w, cw, ss, cut) = (state::W.1, state::CW.1, state::SS.1, state::CUT_SEEN.1);
    let on_ack = format!(
        "  (:= Report.{w} (!if (== Cwnd Report.{cw}) (* Cwnd {W_SCALE})))
  (:= Report.{w} (!if (== Control.nuwa_cut Report.{cut}) (/ (* Report.{w} {beta}) {BETA_ONE})))
  (:= Report.{cut} Control.nuwa_cut)
  (:= Report.{ss} (if (> Ack.lost_pkts_sample 0) 0))
  (:= Report.{ss} (if Flow.was_timeout 1))
  (:= Report.{w} (+ Report.{w} (* (* (min Ack.bytes_acked {ACK_CAP_BYTES}) Report.{ss}) {W_SCALE})))
"
    );
    let on_rtt = format!(
        "  (:= nuwa_dc (- Flow.rtt_sample_us (min Control.nuwa_base_us Report.rtt_min_us)))
  (:= Report.{w} (if (&& (== Report.{ss} 1) (> nuwa_dc Control.nuwa_ssx_us)) (/ Report.{w} 2)))
  (:= Report.{ss} (if (> nuwa_dc Control.nuwa_ssx_us) 0))
  (:= nuwa_x (min (/ (* (- (max Control.nuwa_td_us nuwa_dc) (min Control.nuwa_td_us nuwa_dc)) {THETA_ONE}) Control.nuwa_rho_us) {X_CAP}))
  (:= nuwa_y (/ (* nuwa_x nuwa_x) {THETA_ONE}))
  (:= nuwa_z (/ (* nuwa_y nuwa_y) {THETA_ONE}))
  (:= nuwa_n (* nuwa_x (+ (+ (* nuwa_y 105) nuwa_z) {P0})))
  (:= nuwa_n (min (/ nuwa_n (+ (+ (* nuwa_y 420) (* nuwa_z 15)) {P0})) {THETA_ONE}))
  (:= nuwa_x (/ (* (* nuwa_n Control.nuwa_k) (- 1 Report.{ss})) {THETA_ONE}))
  (:= nuwa_y (/ (* (* (* nuwa_x (min Ack.bytes_acked {ACK_CAP_BYTES})) Control.nuwa_mss) {W_SCALE}) (max Report.{w} 1)))
  (:= Report.{w} (if (> Control.nuwa_td_us nuwa_dc) (+ Report.{w} nuwa_y)))
  (:= Report.{w} (if (> nuwa_dc Control.nuwa_td_us) (- (max Report.{w} (+ nuwa_y (* Control.nuwa_mss {MINW}))) nuwa_y)))
",
        P0 = 945 * THETA_ONE,
        MINW = MIN_CWND_PKTS * W_SCALE,
    );
    let after = format!(
        "  (:= Report.{w} (max (min Report.{w} (* {MAX_CWND_BYTES} {W_SCALE})) (* Control.nuwa_mss {MINW})))
  (:= Cwnd (* (/ Report.{w} (* Control.nuwa_mss {W_SCALE})) Control.nuwa_mss))
  (:= Report.{cw} Cwnd)
",
        MINW = MIN_CWND_PKTS * W_SCALE,
    );
    ProgramBuilder::new("nuwa_law", initial_interval_us)
        .fields(&NUWA_FIELDS)
        .fields(&[fields::CWND_BYTES])
        .trigger(Trigger::IntervalOrLoss)
        .state(w, 0)
        .state(cw, 0)
        .state(ss, 1)
        .state(cut, 0)
        .control(reg::short(reg::K), u64::from(k_register(c.k_init)))
        .control(reg::short(reg::TARGET_US), u64::from(target_us(c)))
        .control(reg::short(reg::RHO_US), u64::from(rho_us(c)))
        .control(reg::short(reg::BASE_US), INFINITY)
        .control(reg::short(reg::MSS), 1500)
        .control(reg::short(reg::SS_EXIT_US), u64::from(ss_exit_us(c)))
        .control(reg::short(reg::CUT), 0)
        .on_ack(&on_ack)
        .on_rtt_sample(&on_rtt)
        .after(&after)
        .build()
}

/// The rational the program evaluates for `tanh x` (`x ≥ 0`): the [5/4] Padé approximant
/// `x(945 + 105x² + x⁴) / (945 + 420x² + 15x⁴)`, capped at 1 (it reaches 1 at x ≈ 3.65).
/// Odd in `x`. Largest error against `tanh` over all `x`: 1.36e-3 (at x ≈ 3.65).
pub fn tanh_approx(x: f64) -> f64 {
    let a = x.abs().min(X_CAP as f64 / THETA_ONE as f64);
    let a2 = a * a;
    let v = (a * (945.0 + 105.0 * a2 + a2 * a2) / (945.0 + 420.0 * a2 + 15.0 * a2 * a2)).min(1.0);
    v.copysign(x)
}

/// The program's `Θ = θ · 4096` for `T_d`, `D_c` and `ρ` in µs, in exactly its integer
/// arithmetic: the magnitude, and whether the window grows (`D_c < T_d`).
pub fn theta_fixed(target_us: u64, dc_us: u64, rho_us: u64) -> (u64, bool) {
    let diff = target_us.max(dc_us) - target_us.min(dc_us);
    let x = (diff * THETA_ONE / rho_us.max(1)).min(X_CAP);
    let y = x * x / THETA_ONE;
    let z = y * y / THETA_ONE;
    let n = x * (y * 105 + z + 945 * THETA_ONE);
    let th = (n / (y * 420 + z * 15 + 945 * THETA_ONE)).min(THETA_ONE);
    (th, target_us > dc_us)
}

/// The program's window after the law on one ACK in congestion avoidance (slow start off):
/// `w` in milli-bytes, `k_reg` as [`k_register`], the other values as the primitives and
/// registers hold them. The clamp of the last block is not applied.
pub fn law_step(
    w: u64,
    target_us: u64,
    dc_us: u64,
    rho_us: u64,
    k_reg: u64,
    mss: u64,
    acked: u64,
) -> u64 {
    let (th, up) = theta_fixed(target_us, dc_us, rho_us);
    let g = th * k_reg / THETA_ONE;
    let d = g * acked.min(ACK_CAP_BYTES) * mss * W_SCALE / w.max(1);
    if up {
        w + d
    } else if dc_us > target_us {
        w.max(d + mss * MIN_CWND_PKTS * W_SCALE) - d
    } else {
        w
    }
}

/// One step of the scalar Kalman filter on the queueing delay (the paper's extended version,
/// arXiv 2502.16498, filters the one-way queueing-delay estimate; its parameters are not
/// published): a random walk `D ← D + w`, `w ~ (0, q²)` per sample, observed as `z = D + v`,
/// `v ~ (0, r²)`. `x` the estimate (µs), `p` its variance (µs²), in integer arithmetic a fold
/// program can run (gain ×4096, no negative numbers). Returns the new `(x, p)`. `r = 0` passes
/// the sample through. Bounded for any input: delays to 100 s, `q` and `r` to 1 s (then no
/// product exceeds 2^53).
pub fn kalman_step(x: u64, p: u64, z: u64, q: u64, r: u64) -> (u64, u64) {
    const DELAY_MAX: u64 = 100_000_000;
    const NOISE_MAX: u64 = 1_000_000;
    let (x, z) = (x.min(DELAY_MAX), z.min(DELAY_MAX));
    let (q, r) = (q.clamp(1, NOISE_MAX), r.min(NOISE_MAX));
    let prior = p.min(2 * NOISE_MAX * NOISE_MAX) + q * q;
    let gain = prior * THETA_ONE / (prior + r * r);
    let step = (z.max(x) - z.min(x)) * gain / THETA_ONE;
    let x = if z > x { x + step } else { x - step };
    (x, (THETA_ONE - gain) * prior / THETA_ONE)
}

/// The filter's process noise (µs per sample) and measurement noise (µs) the simulator's
/// receiver uses with `receiver = "nuwa_kalman"`: a priori, not tuned: the queue moves by about
/// one transmission time per packet (0.1–1.2 ms at 10–100 Mbit/s), a cellular link's one-way
/// delay jitters by a few ms per packet; the steady gain ≈ q/r = 0.1 averages ~10 packets.
pub const KALMAN_Q_US: u64 = 500;
pub const KALMAN_R_US: u64 = 5_000;

// ---- the agent's side ----------------------------------------------------------------------

/// The policy layout of a Nuwa model under `config`: [`OBS_DIM`] features in, one action
/// index in `[0, 4]` out (the argmax of 5 outputs), an LSTM of `lstm_hidden` per flow.
pub fn policy_spec(config: &NuwaConfig) -> PolicySpec {
    PolicySpec {
        algorithm: "nuwa",
        feature_version: FEATURE_VERSION,
        obs_dim: OBS_DIM,
        act_dim: 1,
        act_low: vec![0.0],
        act_high: vec![(ACTIONS.len() - 1) as f32],
        recurrent_hidden: Some(config.lstm_hidden as usize),
        masked: false,
    }
}

/// The multiplier on `k` of a policy output: the index it rounds to, or ×1 ([`HOLD_ACTION`])
/// when it is not a finite index of [`ACTIONS`]. Returns (multiplier, valid).
pub fn action_gain(x: Option<f32>) -> (f64, bool) {
    match x.filter(|v| v.is_finite()).map(|v| f64::from(v).round()) {
        Some(i) if (0.0..ACTIONS.len() as f64).contains(&i) => (ACTIONS[i as usize], true),
        _ => (ACTIONS[HOLD_ACTION], false),
    }
}

/// Eq. 9: `U_α(x) = x^(1−α)/(1−α)`, `ln x` for α = 1.
pub fn alpha_fair(x: f64, alpha: f64) -> f64 {
    if (alpha - 1.0).abs() < 1e-12 {
        x.ln()
    } else {
        x.powf(1.0 - alpha) / (1.0 - alpha)
    }
}

/// Eq. 10: `γ·U_α(x) − θ·U_α(τ) − φ·loss` with the weights and α of `c`. `x` (throughput in
/// units of `reward_rate_unit_mbps`, or of the flow's best delivery rate when that is 0) is
/// bounded to `[X_MIN, X_MAX_UNITS]` (`[X_MIN, X_MAX]`), `τ` (RTT over the minimum RTT) to
/// `[1, TAU_MAX]`, the loss fraction to `[0, 1]`; a non-finite input takes the worst bound, so
/// the reward is always finite.
pub fn utility(x: f64, tau: f64, loss: f64, c: &NuwaConfig) -> f64 {
    let x_max = if c.reward_rate_unit_mbps > 0.0 {
        X_MAX_UNITS
    } else {
        X_MAX
    };
    eq10(x, x_max, tau, loss, c)
}

/// Eq. 10 with `x` bounded to `[X_MIN, x_max]`, `τ` to `[1, TAU_MAX]`, loss to `[0, 1]`.
fn eq10(x: f64, x_max: f64, tau: f64, loss: f64, c: &NuwaConfig) -> f64 {
    let x = if x.is_finite() {
        x.clamp(X_MIN, x_max)
    } else {
        X_MIN
    };
    let tau = if tau.is_finite() {
        tau.clamp(1.0, TAU_MAX)
    } else {
        TAU_MAX
    };
    let loss = if loss.is_finite() {
        loss.clamp(0.0, 1.0)
    } else {
        1.0
    };
    c.reward_throughput * alpha_fair(x, c.alpha)
        - c.reward_delay * alpha_fair(tau, c.alpha)
        - c.reward_loss * loss
}

/// Eq. 10 with `x` the flow's share of the bottleneck's capacity over the interval, bounded
/// to `[X_MIN, X_MAX]` (a flow can read more than the interval's capacity when its ACKs lag
/// the link's service); `τ` and loss as [`utility`].
pub fn utility_in_capacity(x: f64, tau: f64, loss: f64, c: &NuwaConfig) -> f64 {
    eq10(x, X_MAX, tau, loss, c)
}

/// Eq. 10's `τ` for a mean RTT `rtt_us` on a path whose minimum RTT is `base_us` (both µs,
/// `base_us` > 0): `RTT/RTT_min` as the paper, or, with `reward_delay_over_target`, only the
/// queueing delay beyond the law's target `T_d` counted, `(RTT_min + max(0, D_c − T_d)) /
/// RTT_min` with `D_c = RTT − RTT_min` (the queueing estimate the law steers): the queue the
/// law is asked to keep costs nothing, every millisecond beyond it costs what it did. Not
/// bounded here ([`utility`] bounds it).
pub fn delay_ratio(rtt_us: f64, base_us: f64, c: &NuwaConfig) -> f64 {
    if c.reward_delay_over_target {
        let excess = (rtt_us - base_us - c.target_delay_ms * 1e3).max(0.0);
        (base_us + excess) / base_us
    } else {
        rtt_us / base_us
    }
}

/// A running maximum over a time window: a monotone deque of `(time µs, value)`.
#[derive(Debug, Clone)]
struct WindowedMax {
    window_us: u64,
    q: VecDeque<(u64, f64)>,
}

impl WindowedMax {
    fn new(window_us: u64) -> Self {
        Self {
            window_us,
            q: VecDeque::new(),
        }
    }

    fn push(&mut self, t: u64, v: f64) {
        while self.q.back().is_some_and(|&(_, old)| old <= v) {
            self.q.pop_back();
        }
        self.q.push_back((t, v));
        // the newest value always stays
        while self.q.len() > 1
            && self
                .q
                .front()
                .is_some_and(|&(old, _)| t.saturating_sub(old) > self.window_us)
        {
            self.q.pop_front();
        }
    }

    fn get(&self) -> Option<f64> {
        self.q.front().map(|&(_, v)| v)
    }
}

/// What the last interval measured, for the reward.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Throughput in units of `reward_rate_unit_mbps` (0: of the flow's best delivery rate
    /// over `window_s`).
    pub x: f64,
    /// Mean RTT over the flow's minimum RTT, or with `reward_delay_over_target` the same
    /// counting only the queue beyond `T_d` ([`delay_ratio`]).
    pub tau: f64,
    /// Fraction of the interval's resolved packets that were lost.
    pub loss: f64,
    /// The interval's delivery rate (bytes/s; 0 when the interval delivered nothing), for
    /// [`LearnedCore::reward_in_capacity`].
    pub rate_bps: f64,
}

/// One Nuwa-RL flow, on the agent's side: the window itself lives in the datapath.
pub struct NuwaCore {
    config: NuwaConfig,
    spec: PolicySpec,
    mss: f64,
    metrics: FlowMetrics,
    clock: LossClock,
    k: f64,
    cut: u32,
    base_rtt_us: Option<u64>,
    rate_max: WindowedMax,
    /// The datapath's window at the last report (bytes).
    cwnd: f64,
    slow_start: bool,
    last: Option<Measured>,
    decisions: u64,
    bad_actions: u64,
}

/// A report with every value the datapath gave checked: the shared checks
/// ([`sanity::sanitized`]) plus the one field only Nuwa-RL reads, the datapath's window.
fn sanitized(iv: &Interval) -> Interval {
    Interval {
        cwnd_bytes: sanity::cwnd_bytes(iv.cwnd_bytes),
        ..sanity::sanitized(iv)
    }
}

fn log_count(n: f64) -> f32 {
    ((1.0 + n.max(0.0)).log2() / COUNT_LOG2_MAX).clamp(0.0, 1.0) as f32
}

impl NuwaCore {
    pub fn new(config: NuwaConfig, info: &FlowInfo) -> Self {
        let mss = f64::from(info.mss.max(1));
        let window_us = (config.window_s * 1e6) as u64;
        Self {
            spec: policy_spec(&config),
            mss,
            metrics: FlowMetrics::default(),
            clock: LossClock::default(),
            k: config.k_init.clamp(config.k_min, config.k_max),
            cut: 0,
            base_rtt_us: None,
            rate_max: WindowedMax::new(window_us),
            cwnd: f64::from(info.init_cwnd_bytes.max(1)),
            slow_start: true,
            last: None,
            decisions: 0,
            bad_actions: 0,
            config,
        }
    }

    /// The gain in force.
    pub fn k(&self) -> f64 {
        self.k
    }
    /// The loss-cut epoch sent to the program (one more per loss episode).
    pub fn cut_epoch(&self) -> u32 {
        self.cut
    }
    /// The flow's minimum RTT so far (µs).
    pub fn base_rtt_us(&self) -> Option<u64> {
        self.base_rtt_us
    }
    /// The datapath's window at the last report (bytes).
    pub fn cwnd_bytes(&self) -> f64 {
        self.cwnd
    }
    /// Whether the program was in slow start at the last report.
    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }
    /// What the last interval measured for the reward.
    pub fn measured(&self) -> Option<Measured> {
        self.last
    }
    /// Actions applied, and those among them that were not a valid index (held).
    pub fn counts(&self) -> (u64, u64) {
        (self.decisions, self.bad_actions)
    }
    /// The observation as it stands.
    pub fn features(&self, iv: &Interval) -> [f32; OBS_DIM] {
        let iv = sanitized(iv);
        let mut v = [0.0f32; OBS_DIM];
        let c = &self.config;
        v[feature::RCV_DATA] = log_count(iv.acked_bytes as f64 / self.mss);
        v[feature::WINDOW] = log_count(self.cwnd / self.mss);
        let target = c.target_delay_ms * 1e3;
        let rtt = iv.rtt_mean_us.or(iv.rtt_last_us.map(|r| r as f64));
        v[feature::SPACE] = match (rtt, self.base_rtt_us) {
            (Some(r), Some(b)) => {
                let dc = (r - b as f64).max(0.0);
                ((target - dc) / target).clamp(-1.0, 1.0) as f32
            }
            _ => 1.0,
        };
        if let Some(r) = iv.rtt_last_us.map(|r| r as f64).or(iv.rtt_mean_us) {
            v[feature::RTT] = ((1.0 + r / 1e3).log2() / RTT_LOG2_MAX).clamp(0.0, 1.0) as f32;
        }
        let span = (c.k_max / c.k_min).ln();
        v[feature::GAIN] = if span > 0.0 {
            ((self.k / c.k_min).ln() / span).clamp(0.0, 1.0) as f32
        } else {
            0.0
        };
        v
    }

    fn report_interval_us(&self) -> u32 {
        self.config.clock().interval_us(&self.metrics)
    }

    fn action(&mut self) -> Action {
        // the datapath owns the window: the agent sets the report clock, and the program's
        // registers through `control_registers`
        self.metrics.cwnd_bytes = self.cwnd as u64;
        Action {
            report_interval_us: Some(self.report_interval_us()),
            ..Default::default()
        }
    }
}

impl LearnedCore for NuwaCore {
    fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    fn observe(&mut self, iv: &Interval, obs: &mut [f32], _mask: &mut [f32]) -> bool {
        let iv = sanitized(iv);
        self.metrics.observe(&iv);
        if let Some(c) = iv.cwnd_bytes {
            self.cwnd = c as f64;
        }
        if let Some(ss) = iv.state[state::SS.0] {
            self.slow_start = ss != 0;
        }
        if let Some(m) = iv.rtt_min_us {
            self.base_rtt_us = Some(self.base_rtt_us.map_or(m, |b| b.min(m)));
        }
        // one cut per loss episode (the program applies it to its window at the next ACK);
        // after a timeout the datapath is down to one packet and the program slow-starts
        let event = self.clock.advance(&iv, self.metrics.srtt_us, self.cwnd);
        if event == (Congestion::NewEpisode { timeout: false }) && self.config.loss_decrease < 1.0 {
            self.cut = self.cut.wrapping_add(1);
        }
        let now = self.clock.now_us;
        if let Some(r) = iv.delivery_rate_bps() {
            self.rate_max.push(now, r);
        }
        let rtt = iv.rtt_mean_us.or(iv.rtt_last_us.map(|r| r as f64));
        self.last = rtt.map(|r| {
            // bytes/s: the reward's unit, or the flow's best rate
            let unit = if self.config.reward_rate_unit_mbps > 0.0 {
                self.config.reward_rate_unit_mbps * 1e6 / 8.0
            } else {
                self.rate_max.get().unwrap_or(0.0)
            };
            let x = match iv.delivery_rate_bps() {
                Some(d) if unit > 0.0 => d / unit,
                _ => 0.0,
            };
            let tau = self
                .base_rtt_us
                .map_or(1.0, |b| delay_ratio(r, b as f64, &self.config));
            Measured {
                x,
                tau,
                loss: iv.loss_fraction(),
                rate_bps: iv.delivery_rate_bps().unwrap_or(0.0),
            }
        });
        tracing::trace!(
            now_us = now,
            cwnd = self.cwnd,
            k = self.k,
            slow_start = self.slow_start,
            ?event,
            "nuwa report"
        );
        // the policy sets the law's gain: not asked in slow start, nor on an interval without
        // ACKs or an RTT
        let due =
            !self.slow_start && iv.acked_pkts > 0 && rtt.is_some() && self.base_rtt_us.is_some();
        if due {
            let f = self.features(&iv);
            for (o, v) in obs.iter_mut().zip(f) {
                *o = v;
            }
        }
        due
    }

    fn apply(&mut self, action: &[f32]) -> Action {
        let (gain, valid) = action_gain(action.first().copied());
        self.decisions += 1;
        if !valid {
            self.bad_actions += 1;
        }
        self.k = (self.k * gain).clamp(self.config.k_min, self.config.k_max);
        self.action()
    }

    fn hold(&mut self) -> Action {
        self.action()
    }

    /// Eq. 10 for the last interval (0 before any RTT).
    fn reward(&self) -> f64 {
        self.last
            .map_or(0.0, |m| utility(m.x, m.tau, m.loss, &self.config))
    }

    /// Eq. 10 with `x` in units of what the bottleneck offered over the interval (the
    /// trainer's `--reward-unit capacity`, a deviation decided in issue 39): a link filled
    /// pays `γ·U(1)` at any rate, so a gain that leaves a fast link half empty loses what it
    /// loses on a slow one. A link that offered nothing (a trace's outage) charges nothing for
    /// the throughput the flow could not have had (`x = 1`); the delay and loss terms count.
    fn reward_in_capacity(&self, capacity_bps: f64) -> f64 {
        match self.last {
            Some(m) if capacity_bps > 0.0 && capacity_bps.is_finite() => {
                utility_in_capacity(m.rate_bps / capacity_bps, m.tau, m.loss, &self.config)
            }
            Some(m) if capacity_bps == 0.0 => utility_in_capacity(1.0, m.tau, m.loss, &self.config),
            _ => self.reward(),
        }
    }

    fn initial_action(&mut self) -> Action {
        Action {
            report_interval_us: Some(self.report_interval_us()),
            ..Default::default()
        }
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }

    fn control_registers(&self) -> Vec<(&'static str, u32)> {
        let c = &self.config;
        let mss = self.mss.clamp(1.0, 65_535.0) as u32;
        vec![
            (reg::K, k_register(self.k)),
            (reg::TARGET_US, target_us(c)),
            (reg::RHO_US, rho_us(c)),
            (
                reg::BASE_US,
                self.base_rtt_us
                    .map_or(u32::MAX, |b| b.min(u64::from(u32::MAX)) as u32),
            ),
            (reg::MSS, mss),
            (reg::SS_EXIT_US, ss_exit_us(c)),
            (reg::CUT, self.cut),
        ]
    }
}
