//! The sender: sending and pacing, ACK handling (delivery, RTT and rate samples, loss
//! detection), retransmission timeouts, and invoking the datapath.

use std::cmp::Reverse;

use rand::Rng;

use ccp_libccp::Primitives;

use super::events::{push_ev, Ev};
use super::flow::{AckEv, Phase, Seg, DELIV, LOST, OUT};
use super::world::{IpcHolder, World};
use super::{SimError, MSS, RTO_MAX};

impl<H: IpcHolder> World<H> {
    /// Send while the window and the pacer allow.
    pub(super) fn try_send(&mut self, fi: usize) {
        let now = self.now;
        loop {
            let f = &mut self.flows[fi];
            if f.rate > 0 && now < f.next_send_ns {
                if f.pace_event.is_none() {
                    f.pace_event = Some(f.next_send_ns);
                    push_ev(
                        &mut self.heap,
                        &mut self.seq,
                        f.next_send_ns,
                        Ev::Pace(fi as u32),
                    );
                }
                return;
            }
            // bytes in flight <= cwnd, but always at least one packet
            if f.pipe > 0 && u64::from(f.pipe + 1) * u64::from(MSS) > u64::from(f.send_window()) {
                return;
            }
            let mut seq = None;
            while let Some(s) = f.retxq.pop_front() {
                if s >= f.snd_una && f.board[(s - f.snd_una) as usize].state == LOST {
                    seq = Some(s);
                    break;
                }
            }
            let seq = seq.unwrap_or_else(|| {
                f.board.push_back(Seg::default());
                f.next_seq += 1;
                f.next_seq - 1
            });
            if f.rate > 0 {
                let gap = u64::from(MSS) * 1_000_000_000 / u64::from(f.rate);
                f.next_send_ns = f.next_send_ns.max(now) + gap.max(1);
            }
            self.transmit(fi, seq);
        }
    }

    fn transmit(&mut self, fi: usize, seq: u64) {
        let now = self.now;
        let f = &mut self.flows[fi];
        if f.pipe == 0 {
            f.first_sent_ns = now;
            f.delivered_ns = now;
        }
        f.tx_counter += 1;
        let tx = f.tx_counter;
        let (delivered, delivered_ns, first_sent_ns) =
            (f.delivered_pkts, f.delivered_ns, f.first_sent_ns);
        let s = &mut f.board[(seq - f.snd_una) as usize];
        let is_retx = s.tx != 0;
        *s = Seg {
            tx,
            sent_ns: now,
            retx: s.retx || is_retx,
            state: OUT,
            delivered_at_send: delivered,
            delivered_ns_at_send: delivered_ns,
            first_sent_ns_at_send: first_sent_ns,
        };
        f.pipe += 1;
        f.sent += 1;
        if is_retx {
            f.retransmits += 1;
        }
        f.txq.push_back((tx, seq));
        if f.rto_deadline.is_none() {
            let d = now + f.rto_ns;
            f.set_rto(&mut self.heap, &mut self.seq, fi as u32, Some(d));
        }
        self.sim_packets += 1;
        if self.loss > 0.0 && self.rng.gen::<f64>() < self.loss {
            f.drops_random += 1;
            return;
        }
        match self.link.enqueue(now, MSS) {
            None => f.drops_buffer += 1,
            Some(dep) => {
                let at = dep + f.rtt_ns;
                f.acks.push_back(AckEv {
                    at,
                    seq,
                    tx,
                    qdelay_ns: dep - now,
                });
                if !f.ack_armed {
                    let head = f.acks.front().map_or(at, |a| a.at);
                    f.ack_armed = true;
                    push_ev(&mut self.heap, &mut self.seq, head, Ev::Ack(fi as u32));
                }
            }
        }
    }

    /// The flow's earliest ACK is due. ACKs that fall due before any other event are
    /// processed at once without going through the heap (the order is exactly the heap's:
    /// an event pushed now would sort after every queued event of the same instant).
    pub(super) fn on_ack_event(&mut self, fi: usize) -> Result<(), SimError> {
        self.flows[fi].ack_armed = false;
        loop {
            self.on_ack(fi)?;
            let f = &mut self.flows[fi];
            if f.ack_armed {
                return Ok(()); // a send re-armed it
            }
            let Some(next) = f.acks.front().map(|a| a.at) else {
                return Ok(());
            };
            // a session yields after every report, so the agent can act before the next ACK
            let yield_now = self.yield_on_report && self.reported;
            if !yield_now && self.heap.peek().is_none_or(|Reverse((t, ..))| next < *t) {
                self.now = next;
                continue;
            }
            f.ack_armed = true;
            push_ev(&mut self.heap, &mut self.seq, next, Ev::Ack(fi as u32));
            return Ok(());
        }
    }

    fn on_ack(&mut self, fi: usize) -> Result<(), SimError> {
        let now = self.now;
        let f = &mut self.flows[fi];
        let Some(a) = f.acks.pop_front() else {
            return Ok(());
        };
        if f.phase != Phase::Active {
            return Ok(());
        }
        if let Some(rx) = f.rx.as_mut() {
            // the receiver saw the packet half the propagation after it left the bottleneck
            // (one-way delay = sojourn + rtt/2). Its ACK advertises the window as it stood
            // when the packet arrived; the packet's own step shows from the next ACK on. (So
            // an event both ends see at the same packet, the slow-start exit, is not applied
            // twice: the sender halves its window at this ACK, the receiver's half arrives
            // at the next, and the sender adopts the smaller.)
            f.rwnd = rx.window();
            rx.on_packet(a.seq, a.qdelay_ns + f.rtt_ns / 2, MSS);
            f.rx_acks += 1;
            f.rx_limited += u64::from(f.rwnd <= f.cwnd);
        }
        f.note_delivered_tx(a.tx);
        let mut p = Primitives::default();
        let mut advanced = 0u32;
        let fresh = a.seq >= f.snd_una && f.board[(a.seq - f.snd_una) as usize].state != DELIV;
        if fresh {
            let idx = (a.seq - f.snd_una) as usize;
            let seg = f.board[idx];
            if seg.state == OUT {
                f.pipe -= 1;
            }
            f.board[idx].state = DELIV;
            f.delivered_pkts += 1;
            f.delivered_bytes += u64::from(MSS);
            f.iv_bytes += u64::from(MSS);
            f.qdelay_hist.record(a.qdelay_ns / 1000);
            f.iv_qd_sum_ns += a.qdelay_ns;
            f.iv_qd_n += 1;
            if seg.tx == a.tx {
                if !seg.retx {
                    let r = now - seg.sent_ns;
                    f.rtt_update(r);
                    let us = (r / 1000).max(1);
                    f.last_rtt_us = us;
                    f.rtt_hist.record(us);
                    f.iv_rtt_sum_us += us;
                    f.iv_rtt_n += 1;
                }
                // Linux-style rate sample over the packet's flight (~1 RTT)
                let bytes = (f.delivered_pkts - seg.delivered_at_send) * u64::from(MSS);
                let snd_int = seg.sent_ns - seg.first_sent_ns_at_send;
                let rcv_int = now - seg.delivered_ns_at_send;
                let longest = snd_int.max(rcv_int);
                if longest > 0 {
                    let per_s =
                        |int: u64| bytes * 1_000_000_000 / if int > 0 { int } else { longest };
                    f.rate_out = per_s(snd_int);
                    f.rate_in = per_s(rcv_int);
                }
                f.first_sent_ns = seg.sent_ns;
            }
            f.delivered_ns = now;
            if a.seq == f.snd_una {
                while f.board.front().is_some_and(|s| s.state == DELIV) {
                    f.board.pop_front();
                    f.snd_una += 1;
                    advanced += 1;
                }
                p.packets_acked = advanced;
                p.bytes_acked = advanced * MSS;
            } else {
                p.packets_misordered = 1;
                p.bytes_misordered = MSS;
            }
        }
        let lost = f.detect_losses();
        if advanced > 0 {
            // RFC 6298 (5.3): restart on new cumulative ACKs; stop when all is acked
            let d = (f.snd_una < f.next_seq).then(|| now + f.rto_ns);
            f.set_rto(&mut self.heap, &mut self.seq, fi as u32, d);
        }
        let mut prims = f.prims();
        prims.bytes_acked = p.bytes_acked;
        prims.packets_acked = p.packets_acked;
        prims.bytes_misordered = p.bytes_misordered;
        prims.packets_misordered = p.packets_misordered;
        prims.lost_pkts_sample = lost;
        self.invoke(fi, &prims)?;
        self.try_send(fi);
        Ok(())
    }

    fn invoke(&mut self, fi: usize, prims: &Primitives) -> Result<(), SimError> {
        let f = &mut self.flows[fi];
        self.dp.set_now(self.now);
        if self.dp.invoke(f.sid, prims) < 0 {
            f.invoke_errors += 1;
        }
        f.cwnd = self.dp.cwnd(f.sid);
        f.rate = self.dp.rate(f.sid);
        self.exchange()
    }

    pub(super) fn on_rto_event(&mut self, fi: usize) -> Result<(), SimError> {
        let now = self.now;
        let f = &mut self.flows[fi];
        if f.phase != Phase::Active || f.rto_event != Some(now) {
            return Ok(()); // stale timer entry
        }
        f.rto_event = None;
        match f.rto_deadline {
            None => return Ok(()),
            Some(d) if d > now => {
                f.rto_event = Some(d);
                push_ev(&mut self.heap, &mut self.seq, d, Ev::Rto(fi as u32));
                return Ok(());
            }
            Some(_) => {}
        }
        // RTO: everything in flight is lost; go back to the oldest unacked packet
        f.timeouts += 1;
        let mut n = 0u32;
        f.retxq.clear();
        for (i, s) in f.board.iter_mut().enumerate() {
            if s.state == OUT {
                s.state = LOST;
                n += 1;
            }
            if s.state == LOST {
                f.retxq.push_back(f.snd_una + i as u64);
            }
        }
        f.txq.clear();
        f.pipe = 0;
        f.declared_lost += u64::from(n);
        f.rto_ns = (f.rto_ns * 2).min(RTO_MAX);
        // like Linux's tcp_enter_loss: one packet until the algorithm decides
        f.cwnd = MSS;
        let d = (f.snd_una < f.next_seq).then(|| now + f.rto_ns);
        f.rto_deadline = None;
        f.set_rto(&mut self.heap, &mut self.seq, fi as u32, d);
        let mut prims = f.prims();
        prims.was_timeout = true;
        prims.lost_pkts_sample = n;
        self.invoke(fi, &prims)?;
        self.try_send(fi);
        Ok(())
    }
}
