//! The event loop: bulk senders driven by libccp, one bottleneck, ACK clocking.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccp_algs::netstats::{NetStats, NetStatsCell};
use ccp_algs::nuwa::{core as nuwa_core, NuwaConfig, ReceiverLaw};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::ipc::DatapathIpc;
use crate::libccp::{ffi, Datapath, Primitives, MAX_CONNECTIONS};
use crate::link::{Link, LinkCounters};
use crate::proto;
use crate::results::{FlowResult, Histogram, SimResults, TimePoint};
use crate::scenario::{NetStatsSpec, Scenario, ScenarioError, PACKET_BYTES};

/// Bytes per packet, and the flows' MSS.
const MSS: u32 = PACKET_BYTES;
/// Initial window: 10 segments (RFC 6928, Linux).
const INIT_CWND: u32 = 10 * MSS;
/// `Flow.bytes_pending` of a bulk sender: always plenty.
const BYTES_PENDING: u32 = 1 << 30;
const MS: u64 = 1_000_000;
const RTO_INIT: u64 = 1_000 * MS;
const RTO_MIN: u64 = 200 * MS;
const RTO_MAX: u64 = 60_000 * MS;
/// A transmission is declared lost once this many later transmissions were delivered.
const DUP_THRESH: usize = 3;

/// Run options that are not part of the scenario.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// How long to wait (wall clock) for the agent's answer to a CREATE or a report.
    pub agent_timeout: Duration,
    /// The name results show for flows that use the agent's default algorithm.
    pub default_alg: String,
    /// Time-series resolution (simulated time).
    pub series_interval: Duration,
    /// The id this datapath announces in its READY message.
    pub datapath_id: u32,
    /// Where the bottleneck publishes its in-network statistics when the scenario has
    /// `[netstats]` (the agent reads the same cell: `AgentOptions::network_stats`); cleared
    /// when a run starts. `None`: published nowhere, as for a separate agent process.
    pub network_stats: Option<Arc<NetStatsCell>>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            agent_timeout: Duration::from_secs(10),
            default_alg: "default".into(),
            series_interval: Duration::from_millis(100),
            datapath_id: 0,
            network_stats: None,
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("bad simulator option: {0}")]
    Options(String),
    #[error(
        "the agent did not answer the {msg} of socket id {sid} within {waited:?}: is the agent \
         running on the same IPC, and does it answer every CREATE with one CHANGE_PROG and \
         every report with one UPDATE_FIELDS? (raise SimOptions::agent_timeout if it is slow)"
    )]
    AgentTimeout {
        sid: u32,
        msg: &'static str,
        waited: Duration,
    },
    #[error("IPC {context} failed: {source}")]
    Ipc {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("libccp {call} failed with code {code}")]
    Libccp { call: &'static str, code: i32 },
}

/// A packet-level simulation of one scenario. Create with [`Simulator::new`], run against an
/// agent with [`Simulator::run`] (repeatable: each run starts from scratch).
#[derive(Debug, Clone)]
pub struct Simulator {
    scenario: Scenario,
    opts: SimOptions,
}

impl Simulator {
    pub fn new(scenario: &Scenario, opts: SimOptions) -> Result<Self, SimError> {
        scenario.validate()?;
        if opts.series_interval.is_zero() {
            return Err(SimError::Options(
                "series_interval must be > 0 (e.g. 100 ms)".into(),
            ));
        }
        if opts.agent_timeout.is_zero() {
            return Err(SimError::Options(
                "agent_timeout must be > 0 (e.g. 10 s)".into(),
            ));
        }
        Ok(Simulator {
            scenario: scenario.clone(),
            opts,
        })
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Start a run that the caller advances step by step ([`Session::advance`]); the
    /// session owns its IPC. Used by training environments, which pause the world at
    /// decision points.
    pub fn session(&self, ipc: Box<dyn DatapathIpc>) -> Result<Session, SimError> {
        let wall = Instant::now();
        let dp = Datapath::new(self.opts.datapath_id, 0).map_err(|e| SimError::Libccp {
            call: "ccp_init",
            code: e.0,
        })?;
        let mut world = World::new(&self.scenario, &self.opts, dp, ipc);
        world.yield_on_report = true;
        world.exchange()?; // READY
        Ok(Session {
            world: Some(world),
            wall,
            finished: false,
        })
    }

    /// Run the scenario with the agent at the other end of `ipc`. Blocks until the simulated
    /// duration has elapsed; the agent must answer in lockstep (see the crate docs).
    pub fn run(&mut self, ipc: &mut dyn DatapathIpc) -> Result<SimResults, SimError> {
        let wall = Instant::now();
        let dp = Datapath::new(self.opts.datapath_id, 0).map_err(|e| SimError::Libccp {
            call: "ccp_init",
            code: e.0,
        })?;
        let mut w = World::new(&self.scenario, &self.opts, dp, ipc);
        w.exchange()?; // READY
        w.run()?;
        Ok(w.results(wall.elapsed().as_secs_f64()))
    }
}

/// A run advanced by its caller: `advance` until a pause condition, act on the agent side
/// while the world stands still, `advance` again; `finish` for the results.
pub struct Session {
    world: Option<World<Box<dyn DatapathIpc>>>,
    wall: Instant,
    finished: bool,
}

impl Session {
    /// Process events until `pause` returns `true` (it is asked after every event, with the
    /// session's IPC) or the scenario ends. Messages the agent queued since the last call are
    /// applied first. Returns `true` once the scenario has ended.
    pub fn advance(
        &mut self,
        pause: &mut dyn FnMut(&mut dyn DatapathIpc) -> bool,
    ) -> Result<bool, SimError> {
        let Some(w) = self.world.as_mut() else {
            return Ok(true);
        };
        if self.finished {
            return Ok(true);
        }
        w.drain_agent()?;
        self.finished = w.run_until(pause)?;
        Ok(self.finished)
    }

    /// Simulated time (s).
    pub fn now_s(&self) -> f64 {
        self.world.as_ref().map_or(0.0, |w| w.now as f64 / 1e9)
    }

    /// The session's IPC (the agent side, e.g. to queue updates between steps).
    pub fn ipc(&mut self) -> Option<&mut dyn DatapathIpc> {
        self.world.as_mut().map(|w| w.ipc.ipc())
    }

    /// The results of what was simulated so far (the whole scenario once `advance` returned
    /// `true`). A session can be finished once.
    pub fn finish(&mut self) -> Option<SimResults> {
        let w = self.world.take()?;
        Some(w.results(self.wall.elapsed().as_secs_f64()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Sample,
    NetStats,
    Start(u32),
    Stop(u32),
    Ack(u32),
    Pace(u32),
    Rto(u32),
    End,
}

impl Ev {
    /// Order among events at the same instant: samples close the interval first, then
    /// stops and the end (a flow is active over `[start, stop)`), then everything else.
    fn class(self) -> u8 {
        match self {
            Ev::Sample | Ev::NetStats => 0,
            Ev::Stop(_) | Ev::End => 1,
            _ => 2,
        }
    }
}

type Heap = BinaryHeap<Reverse<(u64, u8, u64, Ev)>>;

fn push_ev(heap: &mut Heap, seq: &mut u64, t: u64, ev: Ev) {
    *seq += 1;
    heap.push(Reverse((t, ev.class(), *seq, ev)));
}

const OUT: u8 = 0;
const LOST: u8 = 1;
const DELIV: u8 = 2;

/// Sender scoreboard entry of one sequence number (one packet).
#[derive(Debug, Clone, Copy, Default)]
struct Seg {
    /// Id of the latest transmission (0: never sent).
    tx: u64,
    sent_ns: u64,
    /// Retransmitted at least once (Karn: no RTT sample).
    retx: bool,
    state: u8,
    // rate-sample snapshot at the latest transmission (Linux tcp_rate.c)
    delivered_at_send: u64,
    delivered_ns_at_send: u64,
    first_sent_ns_at_send: u64,
}

/// A packet on its way: it leaves the bottleneck, reaches the receiver, and its ACK arrives
/// back at `at`.
#[derive(Debug, Clone, Copy)]
struct AckEv {
    at: u64,
    seq: u64,
    tx: u64,
    qdelay_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Pending,
    Active,
    Done,
}

struct Flow {
    id: usize,
    cong_alg: String,
    rtt_ns: u64,
    start_ns: u64,
    stop_ns: u64,
    phase: Phase,
    sid: u16,
    // control
    cwnd: u32,
    /// The receiver's advertised window (bytes; `u32::MAX`: none). The sender keeps
    /// `min(cwnd, rwnd)` in flight.
    rwnd: u32,
    /// A law at the receiver (`receiver = "nuwa"`) that sets `rwnd` per packet.
    rx: Option<ReceiverLaw>,
    /// ACKs that carried a receiver's window, and those whose window was the send window.
    rx_acks: u64,
    rx_limited: u64,
    rate: u32,
    next_send_ns: u64,
    pace_event: Option<u64>,
    // scoreboard: seqs [snd_una, next_seq)
    snd_una: u64,
    next_seq: u64,
    board: VecDeque<Seg>,
    tx_counter: u64,
    /// transmissions in send order, for loss detection
    txq: VecDeque<(u64, u64)>,
    /// the highest delivered transmission ids, descending
    top_tx: [u64; DUP_THRESH],
    retxq: VecDeque<u64>,
    /// packets in flight (sent, not delivered, not declared lost)
    pipe: u32,
    // rate sampling
    delivered_pkts: u64,
    delivered_ns: u64,
    first_sent_ns: u64,
    rate_out: u64,
    rate_in: u64,
    // RTT / RTO (RFC 6298)
    srtt_ns: u64,
    rttvar_ns: u64,
    rto_ns: u64,
    last_rtt_us: u64,
    rto_deadline: Option<u64>,
    rto_event: Option<u64>,
    // network
    acks: VecDeque<AckEv>,
    /// an `Ev::Ack` for this flow is in the heap
    ack_armed: bool,
    // stats
    sent: u64,
    retransmits: u64,
    timeouts: u64,
    drops_buffer: u64,
    drops_random: u64,
    declared_lost: u64,
    delivered_bytes: u64,
    reports: u64,
    invoke_errors: u64,
    rtt_hist: Histogram,
    qdelay_hist: Histogram,
    // current series interval
    iv_bytes: u64,
    iv_rtt_sum_us: u64,
    iv_rtt_n: u64,
    iv_qd_sum_ns: u64,
    iv_qd_n: u64,
}

impl Flow {
    fn new(id: usize, spec: &crate::scenario::FlowSpec, end_ns: u64) -> Self {
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

    fn note_delivered_tx(&mut self, tx: u64) {
        let t = &mut self.top_tx;
        if tx <= t[DUP_THRESH - 1] || t.contains(&tx) {
            return;
        }
        t[DUP_THRESH - 1] = tx;
        t.sort_unstable_by(|a, b| b.cmp(a));
    }

    /// Declare lost every in-flight transmission with `DUP_THRESH` later-sent transmissions
    /// delivered. Returns how many.
    fn detect_losses(&mut self) -> u32 {
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
    fn rtt_update(&mut self, r: u64) {
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

    fn set_rto(&mut self, heap: &mut Heap, seq: &mut u64, fi: u32, deadline: Option<u64>) {
        self.rto_deadline = deadline;
        if let Some(d) = deadline {
            if self.rto_event.is_none_or(|e| e > d) {
                self.rto_event = Some(d);
                push_ev(heap, seq, d, Ev::Rto(fi));
            }
        }
    }

    /// The window the sender enforces: TCP's send window, `min(cwnd, rwnd)`.
    fn send_window(&self) -> u32 {
        self.cwnd.min(self.rwnd)
    }

    fn prims(&self) -> Primitives {
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

/// Where the world reaches its agent: a borrowed IPC for [`Simulator::run`], an owned one
/// for a [`Session`].
trait IpcHolder {
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

struct World<H: IpcHolder> {
    sc: Scenario,
    opts: SimOptions,
    ipc: H,
    dp: Datapath,
    now: u64,
    end_ns: u64,
    heap: Heap,
    seq: u64,
    link: Link,
    buffer_pkts: u64,
    loss: f64,
    rng: ChaCha8Rng,
    flows: Vec<Flow>,
    sid_to_flow: Vec<u32>,
    waits: Vec<(u32, u16, &'static str)>,
    series_ns: u64,
    series: Vec<TimePoint>,
    sim_packets: u64,
    reports: u64,
    creates: u64,
    to_agent: u64,
    from_agent: u64,
    rejected: u64,
    unknown_sid: u64,
    agent_wait: Duration,
    /// Return to the caller after any event that produced a report (sessions).
    yield_on_report: bool,
    /// The current event produced a report.
    reported: bool,
    /// The bottleneck's in-network statistics, when the scenario exports them and the run
    /// has somewhere to publish them.
    netstats: Option<NetStatsPublisher>,
}

/// Samples the bottleneck switch every period (the Owl paper §IV-A eq. 4–5, over one switch and
/// one link) and publishes the result.
struct NetStatsPublisher {
    spec: NetStatsSpec,
    cell: Arc<NetStatsCell>,
    period_ns: u64,
    seq: u64,
    last_ns: u64,
    last: LinkCounters,
}

const NO_FLOW: u32 = u32::MAX;

impl<H: IpcHolder> World<H> {
    fn new(sc: &Scenario, opts: &SimOptions, dp: Datapath, ipc: H) -> Self {
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

    fn run(&mut self) -> Result<(), SimError> {
        self.run_until(&mut |_| false).map(|_| ())
    }

    /// Process events until `pause` says so (asked after every event) or the scenario ends;
    /// returns `true` at the end.
    fn run_until(
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
    fn drain_agent(&mut self) -> Result<(), SimError> {
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
    fn exchange(&mut self) -> Result<(), SimError> {
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
                if let Some(p) = self.waits.iter().position(|w| w.0 == h.sid && w.1 == h.typ) {
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

    /// Send while the window and the pacer allow.
    fn try_send(&mut self, fi: usize) {
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
    fn on_ack_event(&mut self, fi: usize) -> Result<(), SimError> {
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

    fn on_rto_event(&mut self, fi: usize) -> Result<(), SimError> {
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

    fn sample(&mut self) {
        let t = self.now as f64 / 1e9;
        let dt = self.series_ns as f64 / 1e9;
        for f in &mut self.flows {
            if f.phase != Phase::Active {
                continue;
            }
            self.series.push(TimePoint {
                t,
                flow: f.id,
                throughput_mbps: f.iv_bytes as f64 * 8.0 / dt / 1e6,
                rtt_ms: if f.iv_rtt_n > 0 {
                    f.iv_rtt_sum_us as f64 / f.iv_rtt_n as f64 / 1e3
                } else {
                    f64::NAN
                },
                cwnd_bytes: u64::from(f.send_window()),
                rate_mbps: f64::from(f.rate) * 8.0 / 1e6,
                queue_delay_ms: if f.iv_qd_n > 0 {
                    f.iv_qd_sum_ns as f64 / f.iv_qd_n as f64 / 1e6
                } else {
                    f64::NAN
                },
                delivered_bytes: f.iv_bytes,
            });
            f.iv_bytes = 0;
            f.iv_rtt_sum_us = 0;
            f.iv_rtt_n = 0;
            f.iv_qd_sum_ns = 0;
            f.iv_qd_n = 0;
        }
        let next = self.now + self.series_ns;
        if next <= self.end_ns {
            push_ev(&mut self.heap, &mut self.seq, next, Ev::Sample);
        }
    }

    /// The bottleneck's PNC and PNA over the period that ends now, published for every flow.
    fn publish_netstats(&mut self) {
        let now = self.now;
        let Some(p) = self.netstats.as_mut() else {
            return;
        };
        let c = self.link.counters(now);
        let p_in = c.arrived - p.last.arrived;
        let p_out = c.departed - p.last.departed;
        let out_bytes = (c.departed_bytes - p.last.departed_bytes) as f64;
        let cap = self.link.capacity_bytes(p.last_ns, now);
        let pna = if cap > 0.0 {
            (cap - out_bytes) / cap
        } else {
            0.0
        };
        p.seq += 1;
        match NetStats::new(
            p_in.abs_diff(p_out) as f64,
            pna,
            p.spec.known_share,
            p.seq,
            0,
        ) {
            Ok(s) => p.cell.publish(s),
            Err(e) => tracing::warn!(error = %e, "bottleneck statistics not published"),
        }
        p.last = c;
        p.last_ns = now;
        let next = now + p.period_ns;
        if next <= self.end_ns {
            push_ev(&mut self.heap, &mut self.seq, next, Ev::NetStats);
        }
    }

    fn results(self, wall_s: f64) -> SimResults {
        let ms = |v: Option<u64>| v.map_or(f64::NAN, |us| us as f64 / 1e3);
        let mut flows = Vec::with_capacity(self.flows.len());
        for (f, spec) in self.flows.iter().zip(&self.sc.flows) {
            // a flow that never started (cannot happen for valid scenarios) has no interval
            let (a, b) = (f.start_ns, f.stop_ns.max(f.start_ns));
            let secs = (b - a) as f64 / 1e9;
            let cap = self.link.capacity_bytes(a, b);
            let dropped = f.drops_buffer + f.drops_random;
            flows.push(FlowResult {
                id: f.id,
                alg: spec.alg.clone(),
                alg_label: spec
                    .alg
                    .clone()
                    .unwrap_or_else(|| self.opts.default_alg.clone()),
                w: spec.w.map(|w| w.as_array()),
                rtt_base_ms: spec.rtt_ms,
                start_s: a as f64 / 1e9,
                stop_s: b as f64 / 1e9,
                throughput_mbps: if secs > 0.0 {
                    f.delivered_bytes as f64 * 8.0 / secs / 1e6
                } else {
                    0.0
                },
                utilization: if cap > 0.0 {
                    f.delivered_bytes as f64 / cap
                } else {
                    0.0
                },
                rtt_p50_ms: ms(f.rtt_hist.quantile(0.5)),
                rtt_p95_ms: ms(f.rtt_hist.quantile(0.95)),
                rtt_mean_ms: f.rtt_hist.mean().map_or(f64::NAN, |us| us / 1e3),
                queue_delay_p50_ms: ms(f.qdelay_hist.quantile(0.5)),
                queue_delay_p95_ms: ms(f.qdelay_hist.quantile(0.95)),
                queue_delay_mean_ms: f.qdelay_hist.mean().map_or(f64::NAN, |us| us / 1e3),
                one_way_delay_p95_ms: ms(f.qdelay_hist.quantile(0.95)) + spec.rtt_ms / 2.0,
                loss_rate: if f.sent > 0 {
                    dropped as f64 / f.sent as f64
                } else {
                    0.0
                },
                packets_sent: f.sent,
                retransmits: f.retransmits,
                timeouts: f.timeouts,
                drops_buffer: f.drops_buffer,
                drops_random: f.drops_random,
                declared_lost: f.declared_lost,
                delivered_bytes: f.delivered_bytes,
                reports: f.reports,
                invoke_errors: f.invoke_errors,
                receiver_limited: f
                    .rx
                    .as_ref()
                    .map(|_| f.rx_limited as f64 / f.rx_acks.max(1) as f64),
            });
        }
        // capacity while at least one flow was active: union of the active intervals
        let mut iv: Vec<(u64, u64)> = self
            .flows
            .iter()
            .map(|f| (f.start_ns, f.stop_ns.max(f.start_ns)))
            .collect();
        iv.sort_unstable();
        let mut cap = 0.0;
        let mut cur: Option<(u64, u64)> = None;
        for (a, b) in iv {
            cur = match cur {
                Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
                Some((ca, cb)) => {
                    cap += self.link.capacity_bytes(ca, cb);
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        if let Some((ca, cb)) = cur {
            cap += self.link.capacity_bytes(ca, cb);
        }
        let delivered: u64 = self.flows.iter().map(|f| f.delivered_bytes).sum();
        let mut qdelay_all = Histogram::default();
        for f in &self.flows {
            qdelay_all.merge(&f.qdelay_hist);
        }
        let overlap_a = self.flows.iter().map(|f| f.start_ns).max().unwrap_or(0);
        let overlap_b = self.flows.iter().map(|f| f.stop_ns).min().unwrap_or(0);
        let mut r = SimResults {
            duration_s: self.sc.duration_s,
            seed: self.sc.seed,
            buffer_pkts: self.buffer_pkts,
            flows,
            utilization: if cap > 0.0 {
                delivered as f64 / cap
            } else {
                0.0
            },
            jain: None,
            jain_window_s: None,
            queue_delay_p95_ms: ms(qdelay_all.quantile(0.95)),
            sim_packets: self.sim_packets,
            wall_s,
            packets_per_wall_s: if wall_s > 0.0 {
                self.sim_packets as f64 / wall_s
            } else {
                0.0
            },
            reports: self.reports,
            creates: self.creates,
            messages_to_agent: self.to_agent,
            messages_from_agent: self.from_agent,
            rejected_messages: self.rejected,
            unknown_sid_messages: self.unknown_sid,
            libccp_log_lines: self.dp.log_lines(),
            agent_wait_s: self.agent_wait.as_secs_f64(),
            series: self.series,
            series_interval_s: self.series_ns as f64 / 1e9,
        };
        if overlap_b > overlap_a {
            let (t0, t1) = (overlap_a as f64 / 1e9, overlap_b as f64 / 1e9);
            r.jain_window_s = Some((t0, t1));
            r.jain = r.jain_window(t0, t1);
        }
        r
    }
}
