//! The world: its state and construction, the event loop, and the lockstep exchange with the
//! agent (flows start and stop here).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::link::{Link, LinkCounters};
use crate::results::TimePoint;
use crate::scenario::Scenario;
use ccp_libccp::ipc::DatapathIpc;
use ccp_libccp::proto;
use ccp_libccp::{ffi, Datapath, MAX_CONNECTIONS};

use super::events::{push_ev, Ev, Heap};
use super::flow::{Flow, Phase};
use super::stats::NetStatsPublisher;
use super::{SimError, SimOptions, INIT_CWND, MSS};

/// Where the world reaches its agent: a borrowed IPC for [`Simulator::run`], an owned one
/// for a [`Session`].
pub(super) trait IpcHolder {
    fn ipc(&mut self) -> &mut dyn DatapathIpc;
}

impl IpcHolder for &mut dyn DatapathIpc {
    fn ipc(&mut self) -> &mut dyn DatapathIpc {
        &mut **self
    }
}

impl IpcHolder for Box<dyn DatapathIpc> {
    fn ipc(&mut self) -> &mut dyn DatapathIpc {
        &mut **self
    }
}

pub(super) struct World<H: IpcHolder> {
    pub(super) sc: Scenario,
    pub(super) opts: SimOptions,
    pub(super) ipc: H,
    pub(super) dp: Datapath,
    pub(super) now: u64,
    pub(super) end_ns: u64,
    pub(super) heap: Heap,
    pub(super) seq: u64,
    pub(super) link: Link,
    pub(super) buffer_pkts: u64,
    pub(super) loss: f64,
    pub(super) rng: ChaCha8Rng,
    pub(super) flows: Vec<Flow>,
    pub(super) sid_to_flow: Vec<u32>,
    pub(super) waits: Vec<(u32, u16, &'static str)>,
    pub(super) series_ns: u64,
    pub(super) series: Vec<TimePoint>,
    pub(super) sim_packets: u64,
    pub(super) reports: u64,
    pub(super) creates: u64,
    pub(super) to_agent: u64,
    pub(super) from_agent: u64,
    pub(super) rejected: u64,
    pub(super) unknown_sid: u64,
    pub(super) agent_wait: Duration,
    /// Return to the caller after any event that produced a report (sessions).
    pub(super) yield_on_report: bool,
    /// The current event produced a report.
    pub(super) reported: bool,
    /// The bottleneck's in-network statistics, when the scenario exports them and the run
    /// has somewhere to publish them.
    pub(super) netstats: Option<NetStatsPublisher>,
}

const NO_FLOW: u32 = u32::MAX;

impl<H: IpcHolder> World<H> {
    pub(super) fn new(sc: &Scenario, opts: &SimOptions, dp: Datapath, ipc: H) -> Self {
        let end_ns = (sc.duration_s * 1e9).round() as u64;
        let buffer_pkts = sc.buffer_packets();
        let flows: Vec<Flow> = sc
            .flows
            .iter()
            .enumerate()
            .map(|(i, s)| Flow::new(i, s, end_ns))
            .collect();
        let series_ns = (opts.series_interval.as_nanos() as u64).max(1);
        let mut w = World {
            sc: sc.clone(),
            opts: opts.clone(),
            ipc,
            dp,
            now: 0,
            end_ns,
            heap: BinaryHeap::new(),
            seq: 0,
            link: Link::new(&sc.link.capacity, buffer_pkts),
            buffer_pkts,
            loss: sc.link.loss,
            rng: ChaCha8Rng::seed_from_u64(sc.seed),
            flows,
            sid_to_flow: vec![NO_FLOW; MAX_CONNECTIONS + 1],
            waits: Vec::new(),
            series_ns,
            series: Vec::new(),
            sim_packets: 0,
            reports: 0,
            creates: 0,
            to_agent: 0,
            from_agent: 0,
            rejected: 0,
            unknown_sid: 0,
            agent_wait: Duration::ZERO,
            yield_on_report: false,
            reported: false,
            netstats: None,
        };
        if let (Some(spec), Some(cell)) = (sc.netstats, &opts.network_stats) {
            cell.clear();
            let period_ns = ((spec.period_s * 1e9).round() as u64).max(1);
            w.netstats = Some(NetStatsPublisher {
                spec,
                cell: cell.clone(),
                period_ns,
                seq: 0,
                last_ns: 0,
                last: LinkCounters::default(),
            });
            if period_ns <= end_ns {
                push_ev(&mut w.heap, &mut w.seq, period_ns, Ev::NetStats);
            }
        }
        for i in 0..w.flows.len() {
            let (a, b) = (w.flows[i].start_ns, w.flows[i].stop_ns);
            push_ev(&mut w.heap, &mut w.seq, a, Ev::Start(i as u32));
            if b < end_ns {
                push_ev(&mut w.heap, &mut w.seq, b, Ev::Stop(i as u32));
            }
        }
        if series_ns <= end_ns {
            push_ev(&mut w.heap, &mut w.seq, series_ns, Ev::Sample);
        }
        push_ev(&mut w.heap, &mut w.seq, end_ns, Ev::End);
        w
    }

    pub(super) fn run(&mut self) -> Result<(), SimError> {
        self.run_until(&mut |_| false).map(|_| ())
    }

    /// Process events until `pause` says so (asked after every event) or the scenario ends;
    /// returns `true` at the end.
    pub(super) fn run_until(
        &mut self,
        pause: &mut dyn FnMut(&mut dyn DatapathIpc) -> bool,
    ) -> Result<bool, SimError> {
        while let Some(Reverse((t, _, _, ev))) = self.heap.pop() {
            debug_assert!(t >= self.now);
            self.now = t;
            self.reported = false;
            match ev {
                Ev::Start(i) => self.start_flow(i as usize)?,
                Ev::Stop(i) => self.stop_flow(i as usize)?,
                Ev::Ack(i) => self.on_ack_event(i as usize)?,
                Ev::Pace(i) => {
                    let f = &mut self.flows[i as usize];
                    if f.phase == Phase::Active && f.pace_event == Some(t) {
                        f.pace_event = None;
                        self.try_send(i as usize);
                    }
                }
                Ev::Rto(i) => self.on_rto_event(i as usize)?,
                Ev::Sample => self.sample(),
                Ev::NetStats => self.publish_netstats(),
                Ev::End => {
                    for i in 0..self.flows.len() {
                        if self.flows[i].phase == Phase::Active {
                            self.stop_flow(i)?;
                        }
                    }
                    return Ok(true);
                }
            }
            if pause(self.ipc.ipc()) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Pass to libccp whatever the agent sent on its own (outside the report/answer
    /// exchange, e.g. a training step's action) while the world stood still.
    pub(super) fn drain_agent(&mut self) -> Result<(), SimError> {
        while let Some(m) = self
            .ipc
            .ipc()
            .recv(Duration::ZERO)
            .map_err(|source| SimError::Ipc {
                context: "receive from agent",
                source,
            })?
        {
            self.from_agent += 1;
            self.dp.set_now(self.now);
            match self.dp.read_msg(&m) {
                Ok(r) if r >= 0 => self.pass_to_receiver(&m),
                _ => self.rejected += 1,
            }
        }
        Ok(())
    }

    /// Send what libccp queued; if it queued a CREATE or a report, block until the agent's
    /// answer for that socket arrives, feeding every agent message to libccp in order.
    pub(super) fn exchange(&mut self) -> Result<(), SimError> {
        for m in self.dp.take_outbox() {
            if let Some(h) = proto::header(&m) {
                match h.typ {
                    proto::CREATE => {
                        self.creates += 1;
                        self.waits.push((h.sid, proto::CHANGE_PROG, "CREATE"));
                    }
                    proto::MEASURE if proto::measure_num_fields(&m).unwrap_or(0) > 0 => {
                        self.reports += 1;
                        if let Some(&fi) = self.sid_to_flow.get(h.sid as usize) {
                            if fi != NO_FLOW {
                                self.flows[fi as usize].reports += 1;
                            }
                        }
                        self.waits
                            .push((h.sid, proto::UPDATE_FIELDS, "report (MEASURE)"));
                        self.reported = true;
                    }
                    // READY (the agent answers with INSTALLs, nothing to wait for) and
                    // closes (a MEASURE without fields)
                    proto::READY | proto::MEASURE => {}
                    _ => {}
                }
            }
            self.ipc.ipc().send(&m).map_err(|source| SimError::Ipc {
                context: "send to agent",
                source,
            })?;
            self.to_agent += 1;
        }
        if self.waits.is_empty() {
            return Ok(());
        }
        let timeout = self.opts.agent_timeout;
        let started = Instant::now();
        let deadline = started + timeout;
        while let Some(&(sid, _, what)) = self.waits.first() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.waits.clear();
                return Err(SimError::AgentTimeout {
                    sid,
                    msg: what,
                    waited: timeout,
                });
            }
            let Some(m) = self.ipc.ipc().recv(left).map_err(|source| SimError::Ipc {
                context: "receive from agent",
                source,
            })?
            else {
                continue;
            };
            self.from_agent += 1;
            self.dp.set_now(self.now);
            match self.dp.read_msg(&m) {
                Err(why) => {
                    self.rejected += 1;
                    tracing::debug!(why, "refused an agent message");
                }
                Ok(r) if r < 0 => {
                    self.rejected += 1;
                    if r == ffi::LIBCCP_UNKNOWN_CONNECTION {
                        self.unknown_sid += 1;
                    }
                }
                Ok(_) => self.pass_to_receiver(&m),
            }
            if let Some(h) = proto::header(&m) {
                // a report is answered by an UPDATE_FIELDS, or by a CHANGE_PROG when the agent
                // switches the flow's algorithm (`ccp_auto`)
                let answers = |w: &(u32, u16, &str)| {
                    w.0 == h.sid
                        && (w.1 == h.typ
                            || (w.1 == proto::UPDATE_FIELDS && h.typ == proto::CHANGE_PROG))
                };
                if let Some(p) = self.waits.iter().position(answers) {
                    self.waits.remove(p);
                }
            }
        }
        self.agent_wait += started.elapsed();
        Ok(())
    }

    /// The control registers an accepted agent message writes reach the receiver-side law of
    /// its flow, if it has one (the paper's RL process hands the receiver its `k`).
    fn pass_to_receiver(&mut self, m: &[u8]) {
        // the flow first: an answer to a flow without a receiver is not parsed again
        let Some(h) = proto::header(m) else {
            return;
        };
        let Some(&fi) = self.sid_to_flow.get(h.sid as usize) else {
            return;
        };
        let Some(rx) = self.flows.get_mut(fi as usize).and_then(|f| f.rx.as_mut()) else {
            return;
        };
        for (idx, v) in proto::control_writes(m).map_or_else(Vec::new, |(_, w)| w) {
            rx.set_control(idx, v);
        }
    }

    fn start_flow(&mut self, fi: usize) -> Result<(), SimError> {
        self.dp.set_now(self.now);
        let f = &mut self.flows[fi];
        let sid = self
            .dp
            .connection_start(INIT_CWND, MSS, &f.cong_alg)
            .ok_or(SimError::Libccp {
                call: "ccp_connection_start (table full)",
                code: -1,
            })?;
        f.sid = sid;
        f.phase = Phase::Active;
        f.cwnd = self.dp.cwnd(sid);
        f.next_send_ns = self.now;
        self.sid_to_flow[sid as usize] = fi as u32;
        self.exchange()?;
        self.try_send(fi);
        Ok(())
    }

    fn stop_flow(&mut self, fi: usize) -> Result<(), SimError> {
        let f = &mut self.flows[fi];
        if f.phase != Phase::Active {
            return Ok(());
        }
        f.phase = Phase::Done;
        f.stop_ns = self.now;
        f.acks.clear();
        f.rto_deadline = None;
        let sid = f.sid;
        self.dp.set_now(self.now);
        self.dp.connection_free(sid);
        self.sid_to_flow[sid as usize] = NO_FLOW;
        self.exchange()
    }
}
