//! The user-space side of the BPF datapath (`datapath/bpf`): a libccp host between the BPF
//! programs and `ccp-agent`.
//!
//! The BPF programs measure every ACK and send one record per interval (about an RTT) over a
//! ring buffer; they take their window and pacing rate from a map. The agent speaks libccp's
//! protocol (portus): it installs fold programs, answers CREATE and MEASURE. The bridge hosts
//! libccp for every BPF flow, exactly as the simulator does for its flows:
//!
//! - a CREATE record starts a libccp connection named as the socket's congestion control
//!   (`ccp_cubic`, ...), whose CREATE goes to the agent; a REPORT of a flow the bridge never
//!   saw created (it started before the bridge) starts one too;
//! - a REPORT record becomes one `ccp_invoke` with the interval's measurements as
//!   primitives (sums for the counts, the interval's mean RTT sample, the last rates), so the
//!   agent's fold program runs once per interval instead of once per ACK;
//! - what libccp then asks for (`set_cwnd`, `set_rate_abs`: the program's or the agent's
//!   window and rate) becomes the flow's decision in the map, stamped with the report it
//!   answers, while the agent is alive for that flow: it answered within
//!   [`ANSWER_STALE_REPORTS`] reports. Otherwise nothing is written and the datapath's
//!   in-BPF fallback (Cubic) takes the flow once its last decision is [`record::STALE_REPORTS`] old;
//! - a CLOSE record frees the connection (libccp's close goes to the agent) and the flow's
//!   decision.
//!
//! When the agent goes away (a send fails), the bridge drops its libccp state and, every
//! [`AGENT_RETRY`], starts afresh (READY) and re-creates every live flow, so a restarted
//! agent gets them back.

pub mod record;
pub mod serve;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ccp_libccp::{Datapath, DatapathIpc, Primitives};
use thiserror::Error;
use tracing::{debug, info, warn};

use record::{Decision, Kind, Record, ALG_NAMES};

/// Unanswered reports after which the bridge stops writing a flow's decisions (the agent
/// answers each MEASURE of the fold program, which reports about once per interval).
pub const ANSWER_STALE_REPORTS: u32 = 4;
/// How often the bridge tries to reach a lost agent again.
pub const AGENT_RETRY: Duration = Duration::from_millis(500);
/// A report read this long after it was written is stale: the ring kept it while no bridge
/// read (an agent starting, restarting). Its flow is created; its interval is not run (a
/// decision for it would be stale in the datapath anyway).
pub const STALE_RECORD: Duration = Duration::from_secs(1);
/// Most flows the bridge hosts (libccp's connection table).
pub const MAX_FLOWS: usize = ccp_libccp::MAX_CONNECTIONS;

/// Where decisions go: the BPF map "decisions" (or a test's record of them).
pub trait DecisionSink {
    fn write(&mut self, flow: u32, d: &Decision) -> anyhow::Result<()>;
    fn remove(&mut self, flow: u32);
}

#[derive(Debug, Error)]
pub enum BridgeError {
    #[error("libccp: ccp_init failed ({0})")]
    Init(i32),
}

/// Counters (the bridge's log shows them on exit; `ccp-agent --ipc bpf` adds them to its
/// SIGUSR1 line as `bridge`).
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BridgeStats {
    pub records: u64,
    pub bad_records: u64,
    pub flows_created: u64,
    pub flows_refused: u64,
    pub invokes: u64,
    /// reports older than [`STALE_RECORD`] when read (a backlog the ring kept while no
    /// bridge ran): their flow is created, their interval not run
    pub stale_reports: u64,
    pub invoke_errors: u64,
    /// libccp's code of the last failed invoke (`ccp_error.h`)
    pub invoke_error_last: i32,
    pub decisions: u64,
    pub decisions_refused: u64,
    pub decision_write_errors: u64,
    pub agent_msgs: u64,
    pub msgs_sent: u64,
    pub agent_msgs_refused: u64,
    pub agent_lost: u64,
    pub agent_found: u64,
}

#[derive(Debug)]
struct Flow {
    alg: u32,
    mss: u32,
    /// libccp connection, when the agent is up
    sid: Option<u16>,
    /// last report seen
    seq: u32,
    /// `seq` when the agent last sent something for this flow
    answered: Option<u32>,
    /// a program ran on this connection (an `ccp_invoke` succeeded)
    attached: bool,
    /// window (bytes) of the last record, for a re-created connection
    cwnd: u32,
}

/// The bridge: libccp, the agent's IPC and the decision map.
pub struct Bridge<I: DatapathIpc, S: DecisionSink> {
    dp: Option<Datapath>,
    ipc: I,
    sink: S,
    flows: HashMap<u32, Flow>,
    by_sid: HashMap<u16, u32>,
    now_ns: u64,
    next_try: Option<Instant>,
    dp_id: u32,
    /// reports written before this (datapath clock, ns) are stale; 0: none
    stale_before_ns: u64,
    pub stats: BridgeStats,
}

fn sat32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A REPORT's interval as one ACK's primitives.
pub fn primitives(r: &Record) -> Primitives {
    let mss = u64::from(r.mss);
    let rtt = if r.rtt_samples > 0 {
        r.rtt_sum_us / u64::from(r.rtt_samples)
    } else {
        u64::from(r.rtt_last_us)
    };
    Primitives {
        bytes_acked: sat32(r.bytes_acked),
        packets_acked: r.packets_acked,
        bytes_misordered: sat32(u64::from(r.packets_misordered) * mss),
        packets_misordered: r.packets_misordered,
        ecn_bytes: sat32(u64::from(r.ecn_packets) * mss),
        ecn_packets: r.ecn_packets,
        lost_pkts_sample: r.lost_pkts,
        was_timeout: r.timeouts > 0,
        rtt_sample_us: rtt,
        rate_outgoing: r.rate_outgoing,
        rate_incoming: r.rate_incoming,
        bytes_in_flight: r.bytes_in_flight,
        packets_in_flight: r.packets_in_flight,
        snd_cwnd: r.snd_cwnd,
        snd_rate: r.snd_rate,
        bytes_pending: r.bytes_pending,
    }
}

/// libccp's register type of the implicit registers and the indices of Cwnd and Rate
/// (`ccp_priv.h`), the message types that write them (`serialize.h`).
const IMPLICIT_REG: u8 = 2;
const CWND_REG: u32 = 4;
const RATE_REG: u32 = 5;
const UPDATE_FIELDS: u16 = 3;
const CHANGE_PROG: u16 = 4;

/// The window and rate an agent message sets (UPDATE_FIELDS, CHANGE_PROG), if any. libccp
/// stages them until the connection's next `ccp_invoke`; the bridge hands them to the
/// datapath at once. For a message libccp accepted (`read_msg`'s validation).
pub fn implicit_writes(msg: &[u8]) -> (Option<u64>, Option<u64>) {
    let typ = msg.get(0..2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let len = msg
        .get(2..4)
        .map_or(0, |b| usize::from(u16::from_le_bytes([b[0], b[1]])));
    let body = msg.get(8..len.min(msg.len())).unwrap_or(&[]);
    let (n, recs) = match typ {
        Some(UPDATE_FIELDS) => (body.first().map_or(0, |&n| usize::from(n)), body.get(4..)),
        Some(CHANGE_PROG) => (
            body.get(4..8)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize),
            body.get(8..),
        ),
        _ => return (None, None),
    };
    let (mut cwnd, mut rate) = (None, None);
    for r in recs.unwrap_or(&[]).chunks_exact(13).take(n) {
        if r[0] != IMPLICIT_REG {
            continue;
        }
        let idx = u32::from_le_bytes([r[1], r[2], r[3], r[4]]);
        let mut v = [0u8; 8];
        v.copy_from_slice(&r[5..13]);
        let v = u64::from_le_bytes(v);
        match idx {
            CWND_REG if v != 0 => cwnd = Some(v),
            RATE_REG if v != 0 => rate = Some(v),
            _ => {}
        }
    }
    (cwnd, rate)
}

/// The socket id of an agent message (libccp header: type u16, length u16, socket id u32).
fn msg_sid(msg: &[u8]) -> Option<u16> {
    let b = msg.get(4..8)?;
    let sid = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    u16::try_from(sid).ok()
}

impl<I: DatapathIpc, S: DecisionSink> Bridge<I, S> {
    /// A bridge whose libccp datapath starts (READY) at the first [`Bridge::flush`].
    pub fn new(ipc: I, sink: S) -> Result<Self, BridgeError> {
        let mut b = Bridge {
            dp: None,
            ipc,
            sink,
            flows: HashMap::new(),
            by_sid: HashMap::new(),
            now_ns: 0,
            next_try: None,
            dp_id: 0,
            stale_before_ns: 0,
            stats: BridgeStats::default(),
        };
        b.start_datapath()?;
        Ok(b)
    }

    fn start_datapath(&mut self) -> Result<(), BridgeError> {
        self.dp_id = self.dp_id.wrapping_add(1);
        let dp = Datapath::new(self.dp_id, self.now_ns).map_err(|e| BridgeError::Init(e.0))?;
        self.dp = Some(dp);
        self.by_sid.clear();
        let ids: Vec<u32> = self.flows.keys().copied().collect();
        for id in ids {
            self.connect(id);
        }
        Ok(())
    }

    fn connect(&mut self, id: u32) {
        let Some(dp) = self.dp.as_mut() else { return };
        let Some(f) = self.flows.get_mut(&id) else {
            return;
        };
        f.attached = false;
        f.answered = None;
        let name = ALG_NAMES.get(f.alg as usize).copied().unwrap_or("ccp");
        f.sid = dp.connection_start(f.cwnd.max(f.mss), f.mss, name);
        match f.sid {
            Some(sid) => {
                self.by_sid.insert(sid, id);
            }
            None => self.stats.flows_refused += 1,
        }
    }

    /// Live flows.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Whether the agent is reachable (no send failed since the last (re)start).
    pub fn agent_up(&self) -> bool {
        self.dp.is_some()
    }

    fn set_now(&mut self, ns: u64) {
        self.now_ns = self.now_ns.max(ns);
        if let Some(dp) = self.dp.as_mut() {
            dp.set_now(self.now_ns);
        }
    }

    /// The datapath's clock now (`CLOCK_MONOTONIC`, ns: `bpf_ktime_get_ns`): reports
    /// older than [`STALE_RECORD`] are not run. Never called (tests): none is stale.
    pub fn set_datapath_clock(&mut self, now_ns: u64) {
        self.stale_before_ns = now_ns.saturating_sub(STALE_RECORD.as_nanos() as u64);
    }

    /// One record of the ring.
    pub fn on_record(&mut self, r: &Record) {
        self.stats.records += 1;
        self.set_now(r.now_ns);
        match r.kind() {
            Kind::Create => self.create(r),
            Kind::Report => {
                if !self.flows.contains_key(&r.flow) {
                    // started before this bridge: announce it now
                    self.create(r);
                }
                self.report(r);
            }
            Kind::Close => self.close(r.flow),
        }
    }

    fn create(&mut self, r: &Record) {
        if self.flows.contains_key(&r.flow) {
            return;
        }
        if self.flows.len() >= MAX_FLOWS {
            self.stats.flows_refused += 1;
            return;
        }
        let cwnd = if r.kind() == Kind::Create {
            r.init_cwnd
        } else {
            r.snd_cwnd
        };
        self.flows.insert(
            r.flow,
            Flow {
                alg: r.alg,
                mss: r.mss,
                sid: None,
                seq: 0,
                answered: None,
                attached: false,
                cwnd,
            },
        );
        self.stats.flows_created += 1;
        self.connect(r.flow);
        debug!(
            flow = r.flow,
            alg = ALG_NAMES[r.alg as usize],
            "flow created"
        );
    }

    fn report(&mut self, r: &Record) {
        let Some(f) = self.flows.get_mut(&r.flow) else {
            return;
        };
        f.seq = f.seq.max(r.seq);
        f.cwnd = r.snd_cwnd;
        if r.now_ns < self.stale_before_ns {
            self.stats.stale_reports += 1;
            return;
        }
        let (Some(sid), Some(dp)) = (f.sid, self.dp.as_mut()) else {
            return;
        };
        self.stats.invokes += 1;
        let ret = dp.invoke(sid, &primitives(r));
        if ret < 0 {
            // no program yet (CREATE unanswered), or the program faulted
            self.stats.invoke_errors += 1;
            self.stats.invoke_error_last = ret;
            debug!(flow = r.flow, seq = r.seq, ret, attached = f.attached, prims = ?primitives(r), "invoke failed");
            return;
        }
        f.attached = true;
        self.decide(r.flow);
    }

    /// Write the flow's decision if the agent is alive for it.
    fn decide(&mut self, id: u32) {
        self.decide_with(id, (None, None));
    }

    /// ... with the window and rate of an agent message that libccp has only staged.
    fn decide_with(&mut self, id: u32, staged: (Option<u64>, Option<u64>)) {
        let (Some(f), Some(dp)) = (self.flows.get(&id), self.dp.as_ref()) else {
            return;
        };
        let (Some(sid), Some(answered)) = (f.sid, f.answered) else {
            return;
        };
        if !f.attached || f.seq.saturating_sub(answered) > ANSWER_STALE_REPORTS || f.seq == 0 {
            return;
        }
        let cwnd = staged.0.unwrap_or(u64::from(dp.cwnd(sid)));
        let d = Decision {
            seq: f.seq,
            cwnd_bytes: u32::try_from(cwnd).unwrap_or(u32::MAX),
            rate: staged.1.unwrap_or(u64::from(dp.rate(sid))),
        };
        if d.to_bytes().is_none() {
            self.stats.decisions_refused += 1;
            return;
        }
        match self.sink.write(id, &d) {
            Ok(()) => self.stats.decisions += 1,
            Err(e) => {
                self.stats.decision_write_errors += 1;
                warn!(flow = id, error = %e, "cannot write the decision");
            }
        }
    }

    fn close(&mut self, id: u32) {
        if let Some(f) = self.flows.remove(&id) {
            if let (Some(sid), Some(dp)) = (f.sid, self.dp.as_mut()) {
                dp.connection_free(sid);
                self.by_sid.remove(&sid);
            }
            self.sink.remove(id);
        }
    }

    /// One message from the agent.
    pub fn on_agent_msg(&mut self, msg: &[u8]) {
        self.stats.agent_msgs += 1;
        let Some(dp) = self.dp.as_mut() else { return };
        match dp.read_msg(msg) {
            Err(why) => {
                self.stats.agent_msgs_refused += 1;
                debug!(why, "agent message refused");
                return;
            }
            Ok(ret) if ret < 0 => {
                self.stats.agent_msgs_refused += 1;
                return;
            }
            Ok(_) => {}
        }
        let Some(id) = msg_sid(msg).and_then(|s| self.by_sid.get(&s).copied()) else {
            return;
        };
        if let Some(f) = self.flows.get_mut(&id) {
            f.answered = Some(f.seq);
        }
        self.decide_with(id, implicit_writes(msg));
    }

    /// Send what libccp queued for the agent; on a failed send, drop libccp's state (the
    /// flows fall back in BPF) and retry from scratch every [`AGENT_RETRY`].
    pub fn flush(&mut self) {
        if self.dp.is_none() {
            let due = self.next_try.is_none_or(|t| Instant::now() >= t);
            if !due {
                return;
            }
            if let Err(e) = self.start_datapath() {
                warn!(error = %e, "cannot restart libccp");
                self.next_try = Some(Instant::now() + AGENT_RETRY);
                return;
            }
        }
        let Some(dp) = self.dp.as_mut() else { return };
        for msg in dp.take_outbox() {
            self.stats.msgs_sent += 1;
            if let Err(e) = self.ipc.send(&msg) {
                if self.next_try.is_none() {
                    warn!(error = %e, "agent unreachable: flows fall back to the in-BPF Cubic; retrying");
                }
                self.stats.agent_lost += 1;
                self.dp = None;
                self.by_sid.clear();
                for f in self.flows.values_mut() {
                    f.sid = None;
                    f.attached = false;
                    f.answered = None;
                }
                self.next_try = Some(Instant::now() + AGENT_RETRY);
                return;
            }
        }
        if self.next_try.take().is_some() {
            self.stats.agent_found += 1;
            info!(flows = self.flows.len(), "agent reachable: flows announced");
        }
    }

    /// Handle every message the agent has sent, without waiting for more.
    pub fn pump_ready(&mut self) -> anyhow::Result<()> {
        while let Some(m) = self.ipc.try_recv()? {
            self.on_agent_msg(&m);
        }
        Ok(())
    }

    /// Receive and handle the agent's messages for up to `wait` (at least one attempt).
    pub fn pump_agent(&mut self, wait: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.ipc.recv(left) {
                Ok(Some(m)) => self.on_agent_msg(&m),
                Ok(None) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            if Instant::now() >= deadline {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_from_an_interval() {
        let r = Record {
            kind: Some(Kind::Report),
            flow: 1,
            seq: 1,
            alg: 2,
            mss: 1000,
            bytes_acked: 5_000_000_000,
            packets_acked: 10,
            packets_misordered: 3,
            ecn_packets: 2,
            lost_pkts: 4,
            timeouts: 1,
            rtt_samples: 4,
            rtt_sum_us: 200_000,
            rtt_last_us: 1,
            snd_cwnd: 20_000,
            ..Default::default()
        };
        let p = primitives(&r);
        assert_eq!(p.bytes_acked, u32::MAX);
        assert_eq!(p.bytes_misordered, 3000);
        assert_eq!(p.ecn_bytes, 2000);
        assert_eq!(p.lost_pkts_sample, 4);
        assert!(p.was_timeout);
        assert_eq!(p.rtt_sample_us, 50_000);
        assert_eq!(p.snd_cwnd, 20_000);
        let none = Record {
            rtt_samples: 0,
            rtt_last_us: 41_000,
            ..r
        };
        assert_eq!(primitives(&none).rtt_sample_us, 41_000);
    }

    fn fields_msg(typ: u16, head: &[u8], recs: &[(u8, u32, u64)]) -> Vec<u8> {
        let mut m = vec![0u8; 8];
        m[0..2].copy_from_slice(&typ.to_le_bytes());
        m[4..8].copy_from_slice(&3u32.to_le_bytes());
        m.extend_from_slice(head);
        for &(t, i, v) in recs {
            m.push(t);
            m.extend_from_slice(&i.to_le_bytes());
            m.extend_from_slice(&v.to_le_bytes());
        }
        let n = m.len() as u16;
        m[2..4].copy_from_slice(&n.to_le_bytes());
        m
    }

    #[test]
    fn window_and_rate_of_agent_messages() {
        // UPDATE_FIELDS: u8 count, 3 bytes padding, 13-byte records
        let upd = fields_msg(
            UPDATE_FIELDS,
            &[3, 0, 0, 0],
            &[
                (IMPLICIT_REG, CWND_REG, 30_000),
                (0, 7, 1),
                (IMPLICIT_REG, RATE_REG, 9_000_000),
            ],
        );
        assert_eq!(implicit_writes(&upd), (Some(30_000), Some(9_000_000)));
        // a count smaller than the records: the rest is not read
        let short = fields_msg(
            UPDATE_FIELDS,
            &[1, 0, 0, 0],
            &[(0, 7, 1), (IMPLICIT_REG, CWND_REG, 5)],
        );
        assert_eq!(implicit_writes(&short), (None, None));
        // CHANGE_PROG: u32 program uid, u32 count, records
        let mut head = 42u32.to_le_bytes().to_vec();
        head.extend_from_slice(&1u32.to_le_bytes());
        let chg = fields_msg(CHANGE_PROG, &head, &[(IMPLICIT_REG, CWND_REG, 14_480)]);
        assert_eq!(implicit_writes(&chg), (Some(14_480), None));
        // other messages, truncated ones: nothing
        assert_eq!(
            implicit_writes(&fields_msg(
                2,
                &[1, 0, 0, 0],
                &[(IMPLICIT_REG, CWND_REG, 1)]
            )),
            (None, None)
        );
        assert_eq!(implicit_writes(&upd[..10]), (None, None));
    }

    #[test]
    fn socket_id_of_a_message() {
        assert_eq!(msg_sid(&[2, 0, 20, 0, 7, 0, 0, 0]), Some(7));
        assert_eq!(msg_sid(&[2, 0, 20, 0, 0, 0, 1, 0]), None);
        assert_eq!(msg_sid(&[2, 0]), None);
    }
}
