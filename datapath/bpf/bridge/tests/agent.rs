//! The bridge between a real agent (its portus loop, over in-process channels) and records
//! as the BPF datapath writes them: the agent creates the flow as its algorithm, decides
//! every interval, its decisions reach the map answering the report they followed, Cubic's
//! window grows without loss and backs off on one, and once the agent is gone the bridge
//! stops writing (the datapath's fallback takes over).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ccp_bpf_bridge::record::{Decision, Kind, Record};
use ccp_bpf_bridge::{Bridge, DecisionSink, ANSWER_STALE_REPORTS};
use ccp_runtime::agent::{Agent, AgentOptions};

#[derive(Clone, Default)]
struct Sink(Rc<RefCell<Vec<(u32, Decision)>>>, Rc<RefCell<Vec<u32>>>);

impl DecisionSink for Sink {
    fn write(&mut self, flow: u32, d: &Decision) -> anyhow::Result<()> {
        self.0.borrow_mut().push((flow, *d));
        Ok(())
    }
    fn remove(&mut self, flow: u32) {
        self.1.borrow_mut().push(flow);
    }
}

const MSS: u32 = 1448;
const RTT_US: u64 = 40_000;

fn report(flow: u32, seq: u32, now_ns: u64, cwnd: u32, lost: u32) -> Record {
    Record {
        kind: Some(Kind::Report),
        flow,
        seq,
        alg: 2, // ccp_cubic
        now_ns,
        mss: MSS,
        interval_us: RTT_US,
        // a whole window acked per RTT
        bytes_acked: u64::from(cwnd),
        packets_acked: cwnd / MSS,
        lost_pkts: lost,
        acks: cwnd / MSS / 2,
        rtt_min_us: RTT_US as u32,
        rtt_max_us: RTT_US as u32,
        rtt_last_us: RTT_US as u32,
        rtt_samples: 4,
        rtt_sum_us: 4 * RTT_US,
        rate_outgoing: u64::from(cwnd) * 25,
        rate_incoming: u64::from(cwnd) * 25,
        delivered_bytes: u64::from(cwnd),
        snd_cwnd: cwnd,
        bytes_in_flight: cwnd,
        packets_in_flight: cwnd / MSS,
        bytes_pending: 1 << 30,
        ..Default::default()
    }
}

/// Pump the agent's messages until `done` holds or 5 s pass.
fn until<I: ccp_libccp::DatapathIpc>(
    b: &mut Bridge<I, Sink>,
    mut done: impl FnMut(&Bridge<I, Sink>) -> bool,
) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        b.flush();
        b.pump_agent(Duration::from_millis(5))
            .expect("agent channel");
        if done(b) {
            return true;
        }
    }
    false
}

#[test]
fn an_agent_decides_a_bpf_flow_through_the_bridge() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let agent = Agent::new(&AgentOptions::default()).expect("agent");
    let (to_agent, agent_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let (agent_tx, from_agent) = crossbeam_channel::unbounded::<Vec<u8>>();
    let sock = portus::ipc::chan::Socket::<portus::ipc::Blocking>::new(agent_tx, agent_rx);
    let running = agent.spawn(sock).expect("agent loop");
    let sink = Sink::default();
    let ipc = ccp_libccp::ChanIpc::new(to_agent.clone(), from_agent);
    let mut b = Bridge::new(ipc, sink.clone()).expect("bridge");

    let flow = 5;
    let mut now = 1_000_000_000u64;
    b.on_record(&Record {
        kind: Some(Kind::Create),
        flow,
        alg: 2,
        now_ns: now,
        mss: MSS,
        init_cwnd: 10 * MSS,
        ..Default::default()
    });
    // the agent answers the CREATE (its program for the flow)
    assert!(
        until(&mut b, |b| b.stats.agent_msgs >= 1),
        "no answer to CREATE"
    );

    // each report is invoked (the first applies the agent's program, the fold program
    // reports on the following ones), the agent answers its reports, and each decision
    // (stamped with the report it followed) is what the datapath applies next interval
    let mut cwnd = 10 * MSS;
    let mut seq = 0u32;
    let mut step = |b: &mut Bridge<ccp_libccp::ChanIpc, Sink>, cwnd: &mut u32, lost: u32| {
        seq += 1;
        now += RTT_US * 1000;
        b.on_record(&report(flow, seq, now, *cwnd, lost));
        let n0 = b.stats.agent_msgs;
        until(b, |b| b.stats.agent_msgs > n0);
        if let Some(last) = sink.0.borrow().last() {
            assert_eq!(last.0, flow);
            assert!(
                last.1.seq <= seq && seq - last.1.seq < 2,
                "decision for report {} at {seq}",
                last.1.seq
            );
            assert!(last.1.cwnd_bytes >= 2 * MSS && last.1.cwnd_bytes < 1 << 30);
            *cwnd = last.1.cwnd_bytes;
        }
    };
    // 10 loss-free intervals: slow start
    for _ in 0..10 {
        step(&mut b, &mut cwnd, 0);
    }
    let ds = sink.0.borrow().clone();
    assert!(
        ds.len() >= 8,
        "{} decisions for 10 reports: {:?}",
        ds.len(),
        b.stats
    );
    let first = ds[0].1.cwnd_bytes;
    assert!(cwnd > 4 * first, "slow start: window {first} -> {cwnd}");
    let recs = running.records();
    let rec = recs
        .iter()
        .find(|r| r.requested == "ccp_cubic")
        .expect("the agent's flow");
    assert_eq!(rec.alg, "cubic");

    // a loss: cubic backs off (beta 0.7)
    let before = cwnd;
    step(&mut b, &mut cwnd, 3);
    assert!(
        cwnd < before * 9 / 10 && cwnd > before / 2,
        "loss: window {before} -> {cwnd}"
    );
    // and grows again without loss
    let after = cwnd;
    for _ in 0..20 {
        step(&mut b, &mut cwnd, 0);
    }
    assert!(cwnd > after, "cubic after the loss: {after} -> {cwnd}");
    let ds = sink.0.borrow().clone();
    assert!(
        ds.windows(2).all(|w| w[0].1.seq <= w[1].1.seq),
        "decisions out of order"
    );
    assert!(ds.len() >= 28, "{} decisions for 31 reports", ds.len());
    // only reports before the agent's first answer fail to run a program
    assert!(b.stats.invoke_errors <= 2, "{:?}", b.stats);
    let after = cwnd;

    // the agent goes away: no answers, so after ANSWER_STALE_REPORTS reports the bridge
    // writes nothing more for the flow
    running
        .stop(|| {
            let _ = to_agent.send(vec![0xff]);
        })
        .expect("stop");
    let written = sink.0.borrow().len();
    for seq in 32..32 + 3 * ANSWER_STALE_REPORTS {
        now += RTT_US * 1000;
        b.on_record(&report(flow, seq, now, after, 0));
        b.flush();
        let _ = b.pump_agent(Duration::from_millis(2));
    }
    let late = sink.0.borrow().len() - written;
    assert!(
        late <= ANSWER_STALE_REPORTS as usize,
        "{late} decisions written without an agent"
    );
    let stale_seq = sink.0.borrow().last().map(|d| d.1.seq).unwrap_or(0);
    assert!(stale_seq <= 31 + ANSWER_STALE_REPORTS);

    // close: the flow's decision goes
    b.on_record(&Record {
        kind: Some(Kind::Close),
        flow,
        alg: 2,
        now_ns: now,
        mss: MSS,
        ..Default::default()
    });
    assert_eq!(*sink.1.borrow(), vec![flow]);
    assert_eq!(b.flows(), 0);
}

/// A report the ring kept while no bridge read it (older than `STALE_RECORD` by the
/// datapath's clock) creates its flow but runs no interval; a fresh one runs.
#[test]
fn a_backlog_of_stale_reports_creates_the_flow_and_runs_nothing() {
    let (to_agent, agent_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let (_agent_tx, from_agent) = crossbeam_channel::unbounded::<Vec<u8>>();
    let mut b = Bridge::new(
        ccp_libccp::ChanIpc::new(to_agent, from_agent),
        Sink::default(),
    )
    .expect("bridge");
    let t0 = 100_000_000_000u64;
    b.set_datapath_clock(t0 + 5_000_000_000);
    for seq in 1..=3 {
        b.on_record(&report(
            9,
            seq,
            t0 + u64::from(seq) * RTT_US * 1000,
            20 * MSS,
            0,
        ));
    }
    b.flush();
    assert_eq!(b.flows(), 1);
    assert_eq!(b.stats.flows_created, 1);
    assert_eq!(b.stats.stale_reports, 3);
    assert_eq!(b.stats.invokes, 0);
    // the agent heard of the flow (READY, CREATE)
    assert!(agent_rx.try_iter().count() >= 2);
    b.on_record(&report(9, 4, t0 + 4_500_000_000, 20 * MSS, 0));
    assert_eq!(b.stats.stale_reports, 3);
    assert_eq!(b.stats.invokes, 1);
}
