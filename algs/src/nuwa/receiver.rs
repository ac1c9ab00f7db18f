//! Nuwa at the receiver (the Nuwa-RL paper §III-A eq. 6–7, §IV-A Algorithm 1): the law on the
//! advertised window, from the relative one-way delay, as the paper deploys it. The simulator
//! runs it for a flow with `receiver = "nuwa"`; CCP's datapaths are senders and run the
//! sender-side form ([`super::program`]).
//!
//! ```text
//!   per data packet received:  owd = arrival − send time         (clocks need not agree)
//!                              D_c = owd − min(owd so far)        (eq. 6; Delay_min kept forever)
//!   slow start:                w ← w + bytes, until D_c > ssx: w ← w/2; a hole ends it too
//!   after:                     w ← law_step(w, T_d, D_c, ρ, k, mss, bytes)   (eq. 7, = the program's)
//!   the advertised window:     rwnd = ⌊w / mss⌋ · mss, w ∈ [2 packets, 1 GiB]
//! ```
//!
//! ([`ReceiverLaw::window`] before a packet's step is what the simulator's ACK of that
//! packet carries: the sender sees the step one ACK later, so the slow-start exit both ends
//! see at the same packet is not applied twice.)
//!
//! Choices (`docs/algorithms/nuwa.md`, "Receiver side"):
//! - **One law, two places.** The arithmetic is the fold program's, step for step
//!   ([`law_step`], the same fixed-point tanh), so the two forms differ only in where `D_c`
//!   comes from (one-way delay against RTT) and which window it sets.
//! - **The gain reaches the receiver as the program's registers.** The paper's RL process
//!   hands `k` to the receiver's kernel (Netlink); here the receiver takes `k`, `T_d`, ρ, the
//!   MSS and the slow-start exit from the values the agent writes into the sender's Nuwa
//!   program ([`ReceiverLaw::set_control`] by register index, [`reg::control_index`]), so one agent
//!   and one model serve both forms. The cut epoch and `base_us` are the sender's and ignored.
//! - **Loss is the sender's.** The receiver does not cut on loss (the paper leaves loss to
//!   the sender's stack); a hole in the sequence only ends its slow start. The sender's
//!   window is `min(cwnd, rwnd)` (TCP's send window, §II), and its Nuwa program adopts that
//!   window as its own (the paper's sender copies `rwnd` in congestion avoidance), so the
//!   sender's loss response and its RTO still act, and its law regrows a cut window up to
//!   `rwnd`.
//! - **Kalman filter** (optional, [`ReceiverLaw::with_kalman`]): the paper's extended version filters
//!   the one-way queueing delay; the law then steers the filtered `D_c`, slow start still exits
//!   on the raw sample. Measured against the raw estimate in `docs/algorithms/nuwa.md`.
//! - **Start**: the sender's initial window, in slow start (Linux's receive-window
//!   auto-tuning keeps `rwnd` ahead of a slow-starting sender; a window that doubles per RTT
//!   does that).

use super::config::{NuwaConfig, K_LIMIT};
use super::core::{
    k_register, kalman_step, law_step, reg, rho_us, ss_exit_us, target_us, K_SCALE, MAX_CWND_BYTES,
    MIN_CWND_PKTS, W_SCALE,
};

/// Largest `T_d`, ρ or slow-start exit the receiver accepts from a register (µs; 100 s).
const MAX_DELAY_US: u64 = 100_000_000;

/// One flow's receiver-side Nuwa: the advertised window.
#[derive(Debug, Clone)]
pub struct ReceiverLaw {
    /// Milli-bytes, as the program's `nuwa_w`.
    w: u64,
    ss: bool,
    min_owd_us: Option<u64>,
    /// The highest sequence number received, if any.
    highest: Option<u64>,
    k_reg: u64,
    td_us: u64,
    rho_us: u64,
    mss: u64,
    ssx_us: u64,
    /// `(q, r)` of the Kalman filter on `D_c` ([`kalman_step`]), if on, and its state.
    kalman: Option<(u64, u64)>,
    kx: u64,
    kp: u64,
}

impl ReceiverLaw {
    /// A receiver for a flow starting at `init_window` bytes with segments of `mss` bytes,
    /// with `config`'s gain, target, ρ and slow-start exit until the agent sets its own.
    pub fn new(config: &NuwaConfig, init_window: u32, mss: u32) -> Self {
        let mss = u64::from(mss.max(1));
        ReceiverLaw {
            w: u64::from(init_window).max(MIN_CWND_PKTS * mss) * W_SCALE,
            ss: true,
            min_owd_us: None,
            highest: None,
            k_reg: u64::from(k_register(config.k_init)),
            td_us: u64::from(target_us(config)),
            rho_us: u64::from(rho_us(config)).max(1),
            mss,
            ssx_us: u64::from(ss_exit_us(config)),
            kalman: None,
            kx: 0,
            kp: 0,
        }
    }

    /// The same receiver with the law steering a Kalman-filtered `D_c` (process noise `q_us`
    /// per packet, measurement noise `r_us`, [`kalman_step`]); slow start still exits on the
    /// raw sample (a lagging estimate would let it overshoot).
    pub fn with_kalman(mut self, q_us: u64, r_us: u64) -> Self {
        self.kalman = Some((q_us.min(MAX_DELAY_US), r_us.min(MAX_DELAY_US)));
        self
    }

    /// A control register of the sender's Nuwa program as the agent wrote it (`index` as
    /// [`reg::control_index`]). Values are bounded as the program's own use of them is
    /// (`k` ≤ [`K_LIMIT`], delays ≤ 100 s, ρ ≥ 1 µs, MSS in [1, 65535]); other registers are
    /// ignored.
    pub fn set_control(&mut self, index: u32, value: u64) {
        let is = |name| reg::control_index(name) == Some(index);
        if is(reg::K) {
            self.k_reg = value.clamp(1, (K_LIMIT * K_SCALE) as u64);
        } else if is(reg::TARGET_US) {
            self.td_us = value.min(MAX_DELAY_US);
        } else if is(reg::RHO_US) {
            self.rho_us = value.clamp(1, MAX_DELAY_US);
        } else if is(reg::MSS) {
            self.mss = value.clamp(1, u64::from(u16::MAX));
        } else if is(reg::SS_EXIT_US) {
            self.ssx_us = value.min(MAX_DELAY_US);
        }
    }

    /// A data packet `seq` of `bytes` arrived `owd_ns` after it was sent (by the sender's
    /// clock against the receiver's: any constant offset cancels in `D_c`). Returns the
    /// window the packet's ACK advertises (bytes).
    pub fn on_packet(&mut self, seq: u64, owd_ns: u64, bytes: u32) -> u32 {
        let owd = owd_ns / 1000;
        let min = self.min_owd_us.map_or(owd, |m| m.min(owd));
        self.min_owd_us = Some(min);
        let raw = owd - min;
        let dc = match self.kalman {
            None => raw,
            Some((q, r)) => {
                if self.highest.is_none() {
                    (self.kx, self.kp) = (raw, r * r);
                } else {
                    (self.kx, self.kp) = kalman_step(self.kx, self.kp, raw, q, r);
                }
                self.kx
            }
        };
        if self.highest.is_some_and(|h| seq > h.saturating_add(1)) {
            self.ss = false; // a hole: a loss, which is the sender's to answer
        }
        self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
        let bytes = u64::from(bytes);
        if self.ss {
            self.w = self.w.saturating_add(bytes * W_SCALE);
            if raw > self.ssx_us {
                self.w /= 2;
                self.ss = false;
            }
        } else {
            self.w = law_step(
                self.w,
                self.td_us,
                dc,
                self.rho_us,
                self.k_reg,
                self.mss,
                bytes,
            );
        }
        self.w = self
            .w
            .clamp(MIN_CWND_PKTS * self.mss * W_SCALE, MAX_CWND_BYTES * W_SCALE);
        self.window()
    }

    /// The advertised window: whole segments, as the program's `Cwnd`.
    pub fn window(&self) -> u32 {
        let bytes = self.w / (self.mss * W_SCALE) * self.mss;
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }

    /// The window in milli-bytes (the law's own resolution).
    pub fn window_milli(&self) -> u64 {
        self.w
    }

    pub fn in_slow_start(&self) -> bool {
        self.ss
    }

    /// `(k · 1000, T_d µs, ρ µs)` in force.
    pub fn registers(&self) -> (u64, u64, u64) {
        (self.k_reg, self.td_us, self.rho_us)
    }
}
