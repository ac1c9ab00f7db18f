//! Fuzz target: everything a datapath can send the agent.
//!
//! An input is a sequence of datagrams, each `[peer: u8][len: u16 LE][len bytes]`; a short
//! tail is one last datagram from peer 0. Every input runs through both ways the agent
//! reads datapath messages:
//!
//! 1. [`Guarded`] (the portus path) over a fake unix-like socket with two datapaths
//!    (`peer & 1`); `peer & 0x80` makes the agent's next send to that datapath fail, which
//!    drops it (the dead-peer path). Whatever the guard passes must parse with portus's own
//!    parser as exactly the CREATE, MEASURE and READY messages it checked (portus ends its
//!    run loop, panics or hits `unreachable!` on anything else), CREATE fields within the
//!    documented ranges, and no more live flows than the caps.
//! 2. The in-process agent ([`InlineAgent`]: guard checks, normalization, every model-free
//!    controller, portus's serializers): must not panic, answers bounded, live flows capped.

#![no_main]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ccp_runtime::flows::{FlowTables, MAX_FLOWS_PER_DATAPATH};
use ccp_runtime::ipc::guard::{
    GuardStats, Guarded, CREATE, MAX_INIT_CWND_BYTES, MAX_MSS, MEASURE, READY,
};
use ccp_runtime::agent::inline::InlineAgent;
use ccp_runtime::{Agent, AgentOptions};
use ccp_sim::DatapathIpc;
use libfuzzer_sys::fuzz_target;
use portus::ipc::Ipc;
use portus::serialize::Msg;

/// A unix-like socket with datagrams from two datapaths (addresses 0 and 1).
struct FakeIpc {
    inbox: RefCell<VecDeque<(u8, Vec<u8>)>>,
    /// A send to this address fails once.
    fail_next: RefCell<[bool; 2]>,
}

// one thread only, as in the agent
unsafe impl Send for FakeIpc {}

impl Ipc for FakeIpc {
    type Addr = u8;

    fn name() -> String {
        // the transport on which the guard drops datapaths whose sends fail
        "unix".into()
    }

    fn send(&self, _msg: &[u8], to: &u8) -> portus::Result<()> {
        let mut f = self.fail_next.borrow_mut();
        let slot = &mut f[usize::from(*to & 1)];
        if std::mem::take(slot) {
            return Err(portus::Error("peer gone".into()));
        }
        Ok(())
    }

    fn recv(&self, out: &mut [u8]) -> portus::Result<(usize, u8)> {
        let (peer, d) = self
            .inbox
            .borrow_mut()
            .pop_front()
            .ok_or_else(|| portus::Error("empty".into()))?;
        if peer & 0x80 != 0 {
            self.fail_next.borrow_mut()[usize::from(peer & 1)] = true;
        }
        let n = d.len().min(out.len());
        out[..n].copy_from_slice(&d[..n]);
        Ok((n, peer & 1))
    }

    fn close(&mut self) -> portus::Result<()> {
        Ok(())
    }
}

fn datagrams(mut data: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut v = Vec::new();
    while data.len() >= 3 && v.len() < 4096 {
        let peer = data[0];
        let len = usize::from(u16::from_le_bytes([data[1], data[2]]));
        let rest = &data[3..];
        let n = len.min(rest.len());
        v.push((peer, rest[..n].to_vec()));
        data = &rest[n..];
    }
    if !data.is_empty() {
        v.push((0, data.to_vec()));
    }
    v
}

fn through_guard(dgrams: &[(u8, Vec<u8>)]) {
    let ipc = FakeIpc {
        inbox: RefCell::new(dgrams.iter().cloned().collect()),
        fail_next: RefCell::new([false; 2]),
    };
    let stats = Arc::new(GuardStats::default());
    let tables = Arc::new(FlowTables::default());
    // the algorithms that need no model (the registry's), as the agent offers them
    let available: Vec<String> = ccp_algs::Registry::builtin()
        .names()
        .into_iter()
        .map(String::from)
        .collect();
    let g = Guarded::new(
        ipc,
        stats.clone(),
        tables,
        available.clone(),
        Arc::new(AtomicBool::new(false)),
    );
    let mut out = [0u8; 1024];
    // the guard returns an error only when the socket does (here: no datagram left)
    while let Ok((n, addr)) = g.recv(&mut out) {
        assert!(n <= out.len());
        let mut at = 0;
        while at < n {
            // what portus's Backend::next does with the buffer
            let (msg, len) = Msg::from_buf(&out[at..n]).expect("portus parses it");
            assert!(len >= 8 && at + len <= n, "framing {at}+{len} of {n}");
            let typ = u16::from_le_bytes([out[at], out[at + 1]]);
            match msg {
                Msg::Cr(c) => {
                    assert_eq!(typ, CREATE);
                    assert!((1..=MAX_MSS).contains(&c.mss), "mss {}", c.mss);
                    assert!(
                        (c.mss..=MAX_INIT_CWND_BYTES).contains(&c.init_cwnd),
                        "init_cwnd {} mss {}",
                        c.init_cwnd,
                        c.mss
                    );
                    assert!(c.src_port <= 65535 && c.dst_port <= 65535);
                    if let Some(name) = &c.cong_alg {
                        assert!(available.contains(name), "{name} is not offered");
                    }
                }
                Msg::Ms(m) => {
                    assert_eq!(typ, MEASURE);
                    assert!(m.fields.len() <= 16);
                }
                Msg::Rdy(_) => assert_eq!(typ, READY),
                Msg::Ins(_) | Msg::Other(_) => panic!("the guard passed type {typ}"),
            }
            at += len;
        }
        // an answer, as portus would send one (exercises failed sends and dropped peers)
        let _ = g.send(&out[..n.min(8)], &addr);
        let live = stats.live_flows.load(Ordering::Relaxed) as usize;
        // two datapaths: at most two full tables (and never above the overall cap)
        assert!(live <= 2 * MAX_FLOWS_PER_DATAPATH);
    }
}

struct Inline {
    _agent: Agent,
    inline: InlineAgent,
}

// one fuzzing thread
unsafe impl Send for Inline {}

fn inline() -> &'static Mutex<Inline> {
    static I: OnceLock<Mutex<Inline>> = OnceLock::new();
    I.get_or_init(|| {
        let agent = Agent::new(&AgentOptions::default()).expect("agent");
        let inline = agent.inline().expect("inline agent");
        Mutex::new(Inline {
            _agent: agent,
            inline,
        })
    })
}

fn through_inline(dgrams: &[(u8, Vec<u8>)]) {
    let mut g = inline().lock().unwrap_or_else(|e| e.into_inner());
    let a = &mut g.inline;
    a.reset();
    for (_, d) in dgrams {
        a.handle(d);
        let mut answers = 0;
        while let Ok(Some(_)) = a.recv(Duration::ZERO) {
            answers += 1;
        }
        // one datagram holds at most 1024/12 messages; READY adds the installs
        assert!(answers <= 200, "{answers} answers to one datagram");
        assert!(a.live_flows() <= MAX_FLOWS_PER_DATAPATH);
    }
}

fuzz_target!(|data: &[u8]| {
    let dgrams = datagrams(data);
    through_guard(&dgrams);
    through_inline(&dgrams);
});
