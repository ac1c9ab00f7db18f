//! Per-flow sender state: the scoreboard (`Seg`), ACKs on their way (`AckEv`), and `Flow`
//! with its loss detection, RTT/RTO estimator and send window.

use std::collections::VecDeque;

use ccp_algs::nuwa::{core as nuwa_core, NuwaConfig, ReceiverLaw};

use crate::results::Histogram;
use ccp_libccp::Primitives;

use super::events::{push_ev, Ev, Heap};
use super::{BYTES_PENDING, DUP_THRESH, INIT_CWND, MSS, RTO_INIT, RTO_MAX, RTO_MIN};

pub(super) const OUT: u8 = 0;
pub(super) const LOST: u8 = 1;
pub(super) const DELIV: u8 = 2;

/// Sender scoreboard entry of one sequence number (one packet).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Seg {
    /// Id of the latest transmission (0: never sent).
    pub(super) tx: u64,
    pub(super) sent_ns: u64,
    /// Retransmitted at least once (Karn: no RTT sample).
    pub(super) retx: bool,
    pub(super) state: u8,
    // rate-sample snapshot at the latest transmission (Linux tcp_rate.c)
    pub(super) delivered_at_send: u64,
    pub(super) delivered_ns_at_send: u64,
    pub(super) first_sent_ns_at_send: u64,
}

/// A packet on its way: it leaves the bottleneck, reaches the receiver, and its ACK arrives
/// back at `at`.
#[derive(Debug, Clone, Copy)]
pub(super) struct AckEv {
    pub(super) at: u64,
    pub(super) seq: u64,
    pub(super) tx: u64,
    pub(super) qdelay_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Pending,
    Active,
    Done,
}

pub(super) struct Flow {
    pub(super) id: usize,
    pub(super) cong_alg: String,
    pub(super) rtt_ns: u64,
    pub(super) start_ns: u64,
    pub(super) stop_ns: u64,
    pub(super) phase: Phase,
    pub(super) sid: u16,
    // control
    pub(super) cwnd: u32,
    /// The receiver's advertised window (bytes; `u32::MAX`: none). The sender keeps
    /// `min(cwnd, rwnd)` in flight.
    pub(super) rwnd: u32,
    /// A law at the receiver (`receiver = "nuwa"`) that sets `rwnd` per packet.
    pub(super) rx: Option<ReceiverLaw>,
    /// ACKs that carried a receiver's window, and those whose window was the send window.
    pub(super) rx_acks: u64,
    pub(super) rx_limited: u64,
    pub(super) rate: u32,
    pub(super) next_send_ns: u64,
    pub(super) pace_event: Option<u64>,
    // scoreboard: seqs [snd_una, next_seq)
    pub(super) snd_una: u64,
    pub(super) next_seq: u64,
    pub(super) board: VecDeque<Seg>,
    pub(super) tx_counter: u64,
    /// transmissions in send order, for loss detection
    pub(super) txq: VecDeque<(u64, u64)>,
    /// the highest delivered transmission ids, descending
    pub(super) top_tx: [u64; DUP_THRESH],
    pub(super) retxq: VecDeque<u64>,
    /// packets in flight (sent, not delivered, not declared lost)
    pub(super) pipe: u32,
    // rate sampling
    pub(super) delivered_pkts: u64,
    pub(super) delivered_ns: u64,
    pub(super) first_sent_ns: u64,
    pub(super) rate_out: u64,
    pub(super) rate_in: u64,
    // RTT / RTO (RFC 6298)
    pub(super) srtt_ns: u64,
    pub(super) rttvar_ns: u64,
    pub(super) rto_ns: u64,
    pub(super) last_rtt_us: u64,
    pub(super) rto_deadline: Option<u64>,
    pub(super) rto_event: Option<u64>,
    // network
    pub(super) acks: VecDeque<AckEv>,
    /// an `Ev::Ack` for this flow is in the heap
    pub(super) ack_armed: bool,
    // stats
    pub(super) sent: u64,
    pub(super) retransmits: u64,
    pub(super) timeouts: u64,
    pub(super) drops_buffer: u64,
    pub(super) drops_random: u64,
    pub(super) declared_lost: u64,
    pub(super) delivered_bytes: u64,
    pub(super) reports: u64,
    pub(super) invoke_errors: u64,
    pub(super) rtt_hist: Histogram,
    pub(super) qdelay_hist: Histogram,
    // current series interval
    pub(super) iv_bytes: u64,
    pub(super) iv_rtt_sum_us: u64,
    pub(super) iv_rtt_n: u64,
    pub(super) iv_qd_sum_ns: u64,
    pub(super) iv_qd_n: u64,
}

impl Flow {
    pub(super) fn new(id: usize, spec: &crate::scenario::FlowSpec, end_ns: u64) -> Self {
        let start_ns = (spec.start_s * 1e9).round() as u64;
        let stop_ns = spec
            .stop_s
            .map_or(end_ns, |s| ((s * 1e9).round() as u64).min(end_ns));
        Flow {
            id,
            cong_alg: spec.cong_alg(),
            rtt_ns: ((spec.rtt_ms * 1e6).round() as u64).max(1),
            start_ns,
            stop_ns,
            phase: Phase::Pending,
            sid: 0,
            cwnd: INIT_CWND,
            rwnd: u32::MAX,
            rx: spec.receiver.map(|kind| {
                let law = ReceiverLaw::new(&NuwaConfig::default(), INIT_CWND, MSS);
                match kind {
                    crate::scenario::ReceiverKind::Nuwa => law,
                    crate::scenario::ReceiverKind::NuwaKalman => {
                        law.with_kalman(nuwa_core::KALMAN_Q_US, nuwa_core::KALMAN_R_US)
                    }
                }
            }),
            rx_acks: 0,
            rx_limited: 0,
            rate: 0,
            next_send_ns: 0,
            pace_event: None,
            snd_una: 0,
            next_seq: 0,
            board: VecDeque::new(),
            tx_counter: 0,
            txq: VecDeque::new(),
            top_tx: [0; DUP_THRESH],
            retxq: VecDeque::new(),
            pipe: 0,
            delivered_pkts: 0,
            delivered_ns: 0,
            first_sent_ns: 0,
            rate_out: 0,
            rate_in: 0,
            srtt_ns: 0,
            rttvar_ns: 0,
            rto_ns: RTO_INIT,
            last_rtt_us: 0,
            rto_deadline: None,
            rto_event: None,
            acks: VecDeque::new(),
            ack_armed: false,
            sent: 0,
            retransmits: 0,
            timeouts: 0,
            drops_buffer: 0,
            drops_random: 0,
            declared_lost: 0,
            delivered_bytes: 0,
            reports: 0,
            invoke_errors: 0,
            rtt_hist: Histogram::default(),
            qdelay_hist: Histogram::default(),
            iv_bytes: 0,
            iv_rtt_sum_us: 0,
            iv_rtt_n: 0,
            iv_qd_sum_ns: 0,
            iv_qd_n: 0,
        }
    }

    pub(super) fn note_delivered_tx(&mut self, tx: u64) {
        let t = &mut self.top_tx;
        if tx <= t[DUP_THRESH - 1] || t.contains(&tx) {
            return;
        }
        t[DUP_THRESH - 1] = tx;
        t.sort_unstable_by(|a, b| b.cmp(a));
    }

    /// Declare lost every in-flight transmission with `DUP_THRESH` later-sent transmissions
    /// delivered. Returns how many.
    pub(super) fn detect_losses(&mut self) -> u32 {
        let thresh = self.top_tx[DUP_THRESH - 1];
        let mut n = 0;
        while let Some(&(tx, seq)) = self.txq.front() {
            if tx >= thresh {
                break;
            }
            self.txq.pop_front();
            if seq < self.snd_una {
                continue;
            }
            let s = &mut self.board[(seq - self.snd_una) as usize];
            if s.state == OUT && s.tx == tx {
                s.state = LOST;
                self.pipe -= 1;
                self.retxq.push_back(seq);
                n += 1;
            }
        }
        self.declared_lost += u64::from(n);
        n
    }

    /// RFC 6298 estimator; resets the RTO backoff.
    pub(super) fn rtt_update(&mut self, r: u64) {
        if self.srtt_ns == 0 {
            self.srtt_ns = r;
            self.rttvar_ns = r / 2;
        } else {
            let err = self.srtt_ns.abs_diff(r);
            self.rttvar_ns = (3 * self.rttvar_ns + err) / 4;
            self.srtt_ns = (7 * self.srtt_ns + r) / 8;
        }
        // Linux's rule (tcp_set_rto): the variance term has a tcp_rto_min floor, so a path
        // with a steady RTT still gets srtt + 200 ms, not srtt + G (RFC 6298's G = 1 ms would
        // fire spuriously whenever a loss repair stalls ACKs for a little over one RTT)
        self.rto_ns = (self.srtt_ns + RTO_MIN.max(4 * self.rttvar_ns)).min(RTO_MAX);
    }

    pub(super) fn set_rto(
        &mut self,
        heap: &mut Heap,
        seq: &mut u64,
        fi: u32,
        deadline: Option<u64>,
    ) {
        self.rto_deadline = deadline;
        if let Some(d) = deadline {
            if self.rto_event.is_none_or(|e| e > d) {
                self.rto_event = Some(d);
                push_ev(heap, seq, d, Ev::Rto(fi));
            }
        }
    }

    /// The window the sender enforces: TCP's send window, `min(cwnd, rwnd)`.
    pub(super) fn send_window(&self) -> u32 {
        self.cwnd.min(self.rwnd)
    }

    pub(super) fn prims(&self) -> Primitives {
        Primitives {
            rtt_sample_us: self.last_rtt_us,
            rate_outgoing: self.rate_out,
            rate_incoming: self.rate_in,
            bytes_in_flight: self.pipe * MSS,
            packets_in_flight: self.pipe,
            // the send window: with a receive window it is what a Nuwa sender adopts (the
            // paper's sender copies rwnd), without one it is cwnd
            snd_cwnd: self.send_window(),
            snd_rate: u64::from(self.rate),
            bytes_pending: BYTES_PENDING,
            ..Default::default()
        }
    }
}
