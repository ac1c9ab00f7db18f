//! Malformed, truncated and oversized datapath messages do not stop the agent: after each
//! kind of junk, a well-formed flow is still created and answered.

mod common;

use std::time::Duration;

use ccp_runtime::ipc::guard::{CHANGE_PROG, HDR_LEN, INSTALL, MEASURE, UPDATE_FIELDS};
use ccp_runtime::{Agent, AgentOptions};
use crossbeam_channel::{unbounded, Receiver, Sender};

fn ready() -> Vec<u8> {
    wire::ready(7)
}

fn create(sid: u32, name: &str) -> Vec<u8> {
    wire::create(sid, name, 14480, 1448)
}

use ccp_runtime::ipc::wire::{self, header, measure};

fn typ(m: &[u8]) -> u16 {
    wire::type_and_sid(m).unwrap().0
}
fn sid(m: &[u8]) -> u32 {
    wire::type_and_sid(m).unwrap().1
}

/// Receive until a message of `want` type for `for_sid` arrives; return it.
fn expect(rx: &Receiver<Vec<u8>>, want: u16, for_sid: u32) -> Vec<u8> {
    loop {
        let m = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| {
            panic!("no message of type {want} for sid {for_sid}: the agent stopped answering")
        });
        if typ(&m) == want && sid(&m) == for_sid {
            return m;
        }
        assert!(
            typ(&m) == INSTALL || typ(&m) == CHANGE_PROG || typ(&m) == UPDATE_FIELDS,
            "unexpected message type {}",
            typ(&m)
        );
    }
}

/// Create a Reno flow and drive one report through it; returns the answer.
fn roundtrip(tx: &Sender<Vec<u8>>, rx: &Receiver<Vec<u8>>, s: u32) -> Vec<u8> {
    tx.send(create(s, "ccp_reno")).unwrap();
    let cp = expect(rx, CHANGE_PROG, s);
    let uid = wire::change_prog_uid(&cp).unwrap();
    let fields = common::reno_report();
    tx.send(measure(s, uid, &fields)).unwrap();
    expect(rx, UPDATE_FIELDS, s)
}

#[test]
fn junk_messages_are_dropped_and_counted_and_the_agent_keeps_serving() {
    let agent = Agent::new(&AgentOptions::default()).unwrap();
    let (to_agent, agent_rx) = unbounded::<Vec<u8>>();
    let (agent_tx, from_agent) = unbounded::<Vec<u8>>();
    let running = agent
        .spawn(portus::ipc::chan::Socket::<portus::ipc::Blocking>::new(
            agent_tx, agent_rx,
        ))
        .unwrap();
    to_agent.send(ready()).unwrap();
    let _ = roundtrip(&to_agent, &from_agent, 1);

    let mut rng_state = 0x2545F4914F6CDD1Du64;
    let mut junk: Vec<Vec<u8>> = Vec::new();
    // random bytes
    for _ in 0..50 {
        let n = (rng_state % 200) as usize;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            rng_state ^= rng_state << 13;
            rng_state ^= rng_state >> 7;
            rng_state ^= rng_state << 17;
            v.push(rng_state as u8);
        }
        junk.push(v);
    }
    // truncated CREATE and MEASURE, a CREATE whose name has no NUL, an empty message
    junk.push(create(9, "ccp_reno")[..40].to_vec());
    junk.push(measure(9, 1, &[1, 2, 3])[..20].to_vec());
    let mut no_nul = create(9, "");
    no_nul[HDR_LEN + 24..].fill(b'x');
    junk.push(no_nul);
    junk.push(Vec::new());
    // oversized: larger than portus's 1024-byte buffer (would panic its chan backend)
    let mut big = measure(9, 1, &[0; 16]);
    big.resize(4000, 0xAB);
    junk.push(big.clone());
    let mut big2 = header(MEASURE, 3000, 9);
    big2.resize(3000, 0);
    junk.push(big2);
    // agent-bound types (portus: unreachable!/unimplemented!)
    for t in [INSTALL, UPDATE_FIELDS, CHANGE_PROG] {
        let mut m = header(t, 16, 1);
        m.resize(16, 0);
        junk.push(m);
    }
    // a MEASURE that claims more fields than it carries
    let mut lying = measure(1, 1, &[1, 2]);
    lying[12] = 9;
    junk.push(lying);
    for j in &junk {
        to_agent.send(j.clone()).unwrap();
    }
    // the agent still serves existing and new flows
    let _ = roundtrip(&to_agent, &from_agent, 1);
    let ans = roundtrip(&to_agent, &from_agent, 2);
    assert_eq!(typ(&ans), UPDATE_FIELDS);
    assert!(!running.is_finished(), "the agent loop ended");
    let rejected = agent.stats.rejected();
    assert!(
        rejected >= 12,
        "expected the hand-made junk to be counted, got {rejected}"
    );
    assert!(
        agent
            .stats
            .oversized
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
    );
    assert!(
        agent
            .stats
            .bad_type
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 3
    );
    let records = running.records();
    assert!(records.iter().any(|r| r.sid == 2 && r.alg == "reno"));
    running
        .stop(|| {
            let _ = to_agent.send(vec![0]);
        })
        .unwrap();
}

#[test]
fn names_dispatch_and_preference_suffix() {
    let agent = Agent::new(&AgentOptions {
        default_alg: "reno".into(),
        ..Default::default()
    })
    .unwrap();
    let (to_agent, agent_rx) = unbounded::<Vec<u8>>();
    let (agent_tx, from_agent) = unbounded::<Vec<u8>>();
    let running = agent
        .spawn(portus::ipc::chan::Socket::<portus::ipc::Blocking>::new(
            agent_tx, agent_rx,
        ))
        .unwrap();
    let cases = [
        (1, "ccp_cubic", "cubic"),
        (2, "cubic;w=0.8,0.1,0.1", "cubic"),
        (3, "ccp", "reno"),
        (4, "no_such_alg", "reno"),
        (5, "ccp;w=1,1,1", "reno"),
    ];
    for (s, name, _) in cases {
        to_agent.send(create(s, name)).unwrap();
        expect(&from_agent, CHANGE_PROG, s);
    }
    let records = running.records();
    for (s, name, alg) in cases {
        let r = records.iter().find(|r| r.sid == s).unwrap();
        assert_eq!(r.alg, alg, "{name}");
        assert_eq!(r.requested, name);
    }
    let w2 = records.iter().find(|r| r.sid == 2).unwrap().w;
    assert_eq!(w2.as_array(), [0.8, 0.1, 0.1]);
    // an invalid suffix keeps the flow with the default preference, and is counted
    let w5 = records.iter().find(|r| r.sid == 5).unwrap().w;
    assert_eq!(w5, ccp_algs::Preference::default());
    assert_eq!(
        agent
            .stats
            .bad_preference
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    running
        .stop(|| {
            let _ = to_agent.send(vec![0]);
        })
        .unwrap();
}
