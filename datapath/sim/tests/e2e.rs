//! End to end: the simulator's libccp datapaths against the agent (the `ccp-runtime`
//! library's portus run loop) running ccp-algs controllers, in lockstep.

mod common;
use common::*;

use std::time::Duration;

use ccp_runtime::simrun::IpcKind;
use ccp_sim::{ChanIpc, Scenario, SimError, SimOptions, Simulator};

#[test]
fn one_cubic_flow_fills_the_link() {
    let sc = Scenario::from_file(scenarios_dir().join("one-flow.toml")).unwrap();
    let (r, log) = run_with(&sc, "reno", None);
    let f = &r.flows[0];
    assert_eq!(log.algs(), ["cubic"], "the flow asked for cubic");
    assert!(r.utilization >= 0.9, "utilization {}", r.utilization);
    assert!(f.utilization >= 0.9);
    assert_eq!(r.rejected_messages, 0);
    assert_eq!(f.invoke_errors, 0);
    assert_eq!(r.creates, 1);
    // one UPDATE_FIELDS per report, one CHANGE_PROG, and one INSTALL per program
    assert_eq!(log.reports(), r.reports);
    let programs = ccp_algs::Registry::builtin().iter().count() as u64;
    assert_eq!(r.messages_from_agent, r.reports + 1 + programs);
    // the agent took every datapath message: a READY, the CREATE, the reports and the close
    assert_eq!(log.accepted, r.messages_to_agent);
    assert_eq!(r.messages_to_agent, 1 + 1 + r.reports + 1);
    assert_eq!(log.rejected, 0);
    assert!(r.reports > 500, "{}", r.reports);
    // a 1-BDP buffer bounds the queueing delay by one base RTT
    assert!(f.queue_delay_p95_ms <= 41.0, "{}", f.queue_delay_p95_ms);
    assert!(f.rtt_p50_ms >= 40.0);
    assert_eq!(log.closes(), 1);
}

#[test]
fn two_cubic_flows_share_fairly() {
    let sc = scenario(
        "duration_s = 30\nseed = 2\n[link]\nrate_mbps = 50\nbuffer_bdp = 1\n\
         [[flow]]\nalg = \"cubic\"\nrtt_ms = 40\ncount = 2\n",
    );
    let (r, _) = run_with(&sc, "cubic", None);
    let j = r.jain_window(15.0, 30.0).unwrap();
    assert!(j >= 0.9, "jain {j}: {:?}", r.throughput_window(15.0, 30.0));
    assert!(r.utilization >= 0.9, "{}", r.utilization);
    assert_eq!(r.jain_window_s, Some((0.0, 30.0)));
}

fn lossy_two_flows(seed: u64) -> Scenario {
    scenario(&format!(
        "duration_s = 8\nseed = {seed}\n[link]\nrate_mbps = 30\nbuffer_bdp = 0.5\nloss = 0.01\n\
         [[flow]]\nalg = \"cubic\"\nrtt_ms = 30\n[[flow]]\nalg = \"reno\"\nrtt_ms = 60\n\
         start_s = 1\nw = [0.8, 0.1, 0.1]\n"
    ))
}

#[test]
fn same_seed_gives_identical_results() {
    let sc = lossy_two_flows(11);
    let (a, _) = run_with(&sc, "cubic", None);
    let (b, _) = run_with(&sc, "cubic", None);
    assert!(a.flows[0].drops_random > 0);
    assert!(a.same_outcome(&b), "{:?}\n{:?}", a.flows, b.flows);
    assert_eq!(a.series, b.series);
    let (c, _) = run_with(&lossy_two_flows(12), "cubic", None);
    assert!(
        !a.same_outcome(&c),
        "another seed should lose other packets"
    );
}

#[test]
fn unix_and_chan_transports_give_identical_results() {
    let sc = lossy_two_flows(4);
    let (chan, _) = run_with(&sc, "cubic", None);
    let (unix, log) = run_over(&sc, "cubic", None, IpcKind::Unix);
    assert_eq!(log.creates().len(), 2);
    assert!(
        unix.same_outcome(&chan),
        "{:?}\n{:?}",
        unix.flows,
        chan.flows
    );
}

#[test]
fn create_carries_the_requested_algorithm_and_preference() {
    let sc = scenario(
        "duration_s = 2\n[link]\nrate_mbps = 20\n\
         [[flow]]\nalg = \"cubic\"\nw = [0.4, 0.5, 0.1]\nrtt_ms = 20\n\
         [[flow]]\nalg = \"ccp_reno\"\nrtt_ms = 20\n\
         [[flow]]\nw = [0.8, 0.1, 0.1]\nrtt_ms = 20\n\
         [[flow]]\nrtt_ms = 20\n\
         [[flow]]\nalg = \"mocc\"\nrtt_ms = 20\n",
    );
    let (r, log) = run_with(&sc, "reno", None);
    let names: Vec<&str> = log.creates().iter().map(|(_, s)| *s).collect();
    assert_eq!(
        names,
        [
            "cubic;w=0.4,0.5,0.1",
            "ccp_reno",
            "ccp;w=0.8,0.1,0.1",
            "ccp",
            "mocc"
        ]
    );
    let sids: Vec<u32> = log.creates().iter().map(|(s, _)| *s).collect();
    assert_eq!(sids, [1, 2, 3, 4, 5]);
    // the agent hosts the builtin algorithms (no models): mocc falls back to the default
    assert!(ccp_algs::Registry::builtin().get("mocc").is_none());
    assert_eq!(log.algs(), ["cubic", "reno", "reno", "reno", "reno"]);
    assert_eq!(log.records[2].w.as_array(), [0.8, 0.1, 0.1]);
    assert_eq!(log.records[0].w.as_array(), [0.4, 0.5, 0.1]);
    assert_eq!(r.flows[0].alg.as_deref(), Some("cubic"));
    assert_eq!(r.flows[0].w, Some([0.4, 0.5, 0.1]));
    assert_eq!(r.flows[3].alg, None);
    // a flow that names no algorithm is labelled with the agent's default
    assert_eq!(r.flows[3].alg_label, "reno");
    assert!(r
        .flows
        .iter()
        .all(|f| f.reports > 0 && f.delivered_bytes > 0));
}

#[test]
fn flows_start_and_stop_on_time() {
    let sc = scenario(
        "duration_s = 12\n[link]\nrate_mbps = 20\nbuffer_bdp = 1\n\
         [[flow]]\nalg = \"cubic\"\nrtt_ms = 20\n\
         [[flow]]\nalg = \"cubic\"\nrtt_ms = 20\nstart_s = 2\nstop_s = 6\n",
    );
    let (r, log) = run_with(&sc, "cubic", None);
    let late = &r.flows[1];
    assert_eq!((late.start_s, late.stop_s), (2.0, 6.0));
    // the second flow is in the series only while active
    let t: Vec<f64> = r
        .series
        .iter()
        .filter(|p| p.flow == 1)
        .map(|p| p.t)
        .collect();
    assert!(
        t.first().unwrap() > &2.0 && t.last().unwrap() <= &6.0,
        "{t:?}"
    );
    assert!(late.throughput_mbps > 2.0, "{}", late.throughput_mbps);
    // one close per flow: the stop at 6 s, and the end of the run
    assert_eq!(log.closes(), 2);
    // once it left, the first flow takes the link back
    let back = r.throughput_window(9.0, 12.0);
    assert_eq!(back.len(), 1);
    assert!(back[0].1 > 17.0, "{back:?}");
    assert!(r.utilization > 0.9);
}

#[test]
fn shipped_scenarios_run() {
    for name in [
        "one-flow.toml",
        "three-staggered.toml",
        "rtt-unfair.toml",
        "lossy-long-rtt.toml",
        "cellular.toml",
        "portfolio.toml",
    ] {
        let sc = Scenario::from_file(scenarios_dir().join(name)).unwrap();
        let (r, log) = run_with(&sc, "cubic", None);
        assert_eq!(r.rejected_messages, 0, "{name}");
        assert_eq!(log.creates().len(), sc.flows.len(), "{name}");
        assert_eq!(log.closes(), sc.flows.len(), "{name}");
        assert!(r.flows.iter().all(|f| f.delivered_bytes > 0), "{name}");
        // (Cubic gets a few percent of a 600 ms path with 0.74% loss: ~1.2/sqrt(p) segments
        // per RTT)
        assert!(
            r.utilization > 0.01 && r.utilization <= 1.0,
            "{name}: {}",
            r.utilization
        );
        if name == "three-staggered.toml" {
            let starts: Vec<f64> = r.flows.iter().map(|f| f.start_s).collect();
            assert_eq!(starts, [0.0, 10.0, 20.0]);
            assert_eq!(r.jain_window_s, Some((20.0, 40.0)));
            assert!(r.utilization > 0.9, "{}", r.utilization);
        }
        if name == "lossy-long-rtt.toml" {
            let f = &r.flows[0];
            assert!(f.drops_random > 0 && f.loss_rate > 0.004, "{f:?}");
        }
    }
}

#[test]
fn a_silent_agent_times_out_with_a_clear_error() {
    let (to_agent, _agent_rx) = crossbeam_channel::unbounded();
    let (_agent_tx, from_agent) = crossbeam_channel::unbounded();
    let mut ipc = ChanIpc::new(to_agent, from_agent);
    let sc = scenario("duration_s = 1\n[link]\nrate_mbps = 10\n[[flow]]\nrtt_ms = 10\n");
    let opts = SimOptions {
        agent_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    // no wall-clock bound: the error says which wait ran out, and that it was the one given
    let e = Simulator::new(&sc, opts)
        .unwrap()
        .run(&mut ipc)
        .unwrap_err();
    match &e {
        SimError::AgentTimeout { sid, msg, waited } => assert_eq!(
            (*sid, *msg, *waited),
            (1, "CREATE", Duration::from_millis(200))
        ),
        other => panic!("expected AgentTimeout, got {other}"),
    }
    assert!(e.to_string().contains("socket id 1"), "{e}");
}

#[test]
fn bad_agent_messages_are_counted_not_fatal() {
    // a hand-written "agent": answers the CREATE with an UPDATE_FIELDS for an unknown
    // socket, a message of an unknown type, then a CHANGE_PROG to a program it never
    // installed (libccp ignores it); the flow then runs on its initial window
    let (to_agent, agent_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let (agent_tx, from_agent) = crossbeam_channel::unbounded::<Vec<u8>>();
    let agent = std::thread::spawn(move || {
        let hdr = |typ: u16, len: u16, sid: u32| {
            let mut v = typ.to_le_bytes().to_vec();
            v.extend_from_slice(&len.to_le_bytes());
            v.extend_from_slice(&sid.to_le_bytes());
            v
        };
        while let Ok(m) = agent_rx.recv() {
            let typ = u16::from_le_bytes([m[0], m[1]]);
            let sid = u32::from_le_bytes([m[4], m[5], m[6], m[7]]);
            if typ == 0 {
                let mut upd = hdr(3, 12, 77);
                upd.extend_from_slice(&0u32.to_le_bytes());
                agent_tx.send(upd).unwrap();
                agent_tx.send(hdr(9, 8, sid)).unwrap();
                let mut chg = hdr(4, 16, sid);
                chg.extend_from_slice(&999u32.to_le_bytes());
                chg.extend_from_slice(&0u32.to_le_bytes());
                agent_tx.send(chg).unwrap();
            }
        }
    });
    let mut ipc = ChanIpc::new(to_agent, from_agent);
    let sc = scenario("duration_s = 2\n[link]\nrate_mbps = 50\n[[flow]]\nrtt_ms = 10\n");
    let r = Simulator::new(&sc, SimOptions::default())
        .unwrap()
        .run(&mut ipc)
        .unwrap();
    drop(ipc);
    agent.join().unwrap();
    assert_eq!(r.messages_from_agent, 3);
    assert_eq!(r.rejected_messages, 2);
    assert_eq!(r.unknown_sid_messages, 1);
    let f = &r.flows[0];
    assert_eq!(f.reports, 0);
    assert!(f.invoke_errors > 0);
    // the initial window, 10 packets per 10.24 ms round trip (RTT + one transmission)
    assert!(
        (f.throughput_mbps - 11.72).abs() < 0.3,
        "{}",
        f.throughput_mbps
    );
}

#[test]
fn simulators_run_in_parallel_threads() {
    let sc = lossy_two_flows(9);
    let (want, _) = run_with(&sc, "cubic", None);
    let hs: Vec<_> = (0..3)
        .map(|_| {
            let sc = sc.clone();
            std::thread::spawn(move || run_with(&sc, "cubic", None).0)
        })
        .collect();
    for h in hs {
        assert!(h.join().unwrap().same_outcome(&want));
    }
}

#[test]
fn time_series_and_csv() {
    let sc = scenario(
        "duration_s = 3\n[link]\nrate_mbps = 20\n[[flow]]\nalg = \"cubic\"\nrtt_ms = 20\n",
    );
    let (r, _) = run_with(&sc, "cubic", None);
    assert_eq!(r.series.len(), 30);
    let bytes: u64 = r.series.iter().map(|p| p.delivered_bytes).sum();
    // the series covers all but what arrived after the last tick (none: it is at the end)
    assert_eq!(bytes, r.flows[0].delivered_bytes);
    let path = std::env::temp_dir().join(format!("ccp-sim-series-{}.csv", std::process::id()));
    r.write_csv(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "t_s,flow,throughput_mbps,rtt_ms,cwnd_bytes,rate_mbps,queue_delay_ms"
    );
    assert_eq!(lines.len(), 31);
    assert!(lines[30].starts_with("3.000,0,"), "{}", lines[30]);
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["flows"][0]["throughput_mbps"].as_f64().unwrap() > 10.0);
    assert!(json.get("series").is_none());
}
