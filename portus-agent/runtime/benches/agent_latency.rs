//! Agent report→decision latency and throughput, over the in-process channel and unix
//! datagram sockets. A fake datapath creates one Cubic flow, then sends reports one at a time
//! and waits for each answer (the agent's full path: guard, portus parse, Interval decode,
//! Cubic decision, UPDATE_FIELDS serialization). Prints p50/p99 round-trip latency and
//! reports per second.
//!
//!     cargo bench -p ccp-agent --bench agent_latency

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use ccp_runtime::ipc::guard::{CHANGE_PROG, UPDATE_FIELDS};
use ccp_runtime::ipc::wire;
use ccp_runtime::{Agent, AgentOptions};

const N: usize = 50_000;

trait Dp {
    fn send(&mut self, m: &[u8]);
    fn recv(&mut self) -> Vec<u8>;
}

struct Chan(
    crossbeam_channel::Sender<Vec<u8>>,
    crossbeam_channel::Receiver<Vec<u8>>,
);
impl Dp for Chan {
    fn send(&mut self, m: &[u8]) {
        self.0.send(m.to_vec()).expect("agent gone");
    }
    fn recv(&mut self) -> Vec<u8> {
        self.1
            .recv_timeout(Duration::from_secs(5))
            .expect("no answer")
    }
}

struct Unix(UnixDatagram, String, Vec<u8>);
impl Dp for Unix {
    fn send(&mut self, m: &[u8]) {
        self.0.send_to(m, &self.1).expect("send");
    }
    fn recv(&mut self) -> Vec<u8> {
        let n = self.0.recv(&mut self.2).expect("no answer");
        self.2[..n].to_vec()
    }
}

fn wait_for(dp: &mut dyn Dp, typ: u16) -> Vec<u8> {
    loop {
        let m = dp.recv();
        if wire::type_and_sid(&m).map(|t| t.0) == Some(typ) {
            return m;
        }
    }
}

fn run(dp: &mut dyn Dp, label: &str) {
    dp.send(&wire::create(1, "ccp_cubic", 14480, 1448));
    let cp = wait_for(dp, CHANGE_PROG);
    let uid = wire::change_prog_uid(&cp).expect("uid");
    let prog = ccp_algs::Registry::builtin()
        .get("cubic")
        .expect("cubic")
        .program();
    let fields = wire::one_rtt_report(&prog);
    let msg = wire::measure(1, uid, &fields);
    let mut lat = Vec::with_capacity(N);
    // warm-up
    for _ in 0..1000 {
        dp.send(&msg);
        wait_for(dp, UPDATE_FIELDS);
    }
    let start = Instant::now();
    for _ in 0..N {
        let t = Instant::now();
        dp.send(&msg);
        wait_for(dp, UPDATE_FIELDS);
        lat.push(t.elapsed());
    }
    let total = start.elapsed();
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)].as_secs_f64() * 1e6;
    println!(
        "{label:>5}: report->decision p50 {:.1} us, p99 {:.1} us, {:.0} reports/s (one flow, {N} reports, answered one at a time)",
        p(0.50),
        p(0.99),
        N as f64 / total.as_secs_f64()
    );
}

fn main() {
    let agent = Agent::new(&AgentOptions::default()).expect("agent");

    let (to_agent, agent_rx) = crossbeam_channel::unbounded();
    let (agent_tx, from_agent) = crossbeam_channel::unbounded();
    let running = agent
        .spawn(portus::ipc::chan::Socket::<portus::ipc::Blocking>::new(
            agent_tx, agent_rx,
        ))
        .expect("spawn");
    let mut chan = Chan(to_agent.clone(), from_agent);
    run(&mut chan, "chan");
    running
        .stop(|| {
            let _ = to_agent.send(vec![0]);
        })
        .expect("stop");

    let name = format!("bench-agent-{}", std::process::id());
    let dp_path = format!("/tmp/ccp/bench-dp-{}", std::process::id());
    let sock = portus::ipc::unix::Socket::<portus::ipc::Blocking>::new(&name).expect("bind agent");
    let agent = Agent::new(&AgentOptions::default()).expect("agent");
    let running = agent.spawn(sock).expect("spawn");
    let _ = std::fs::remove_file(&dp_path);
    let dp = UnixDatagram::bind(&dp_path).expect("bind datapath");
    dp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let agent_path = format!("/tmp/ccp/{name}");
    let mut unix = Unix(dp, agent_path.clone(), vec![0u8; 4096]);
    run(&mut unix, "unix");
    running
        .stop(|| {
            let _ = unix.0.send_to(&[0], &agent_path);
        })
        .expect("stop");
    let _ = std::fs::remove_file(&dp_path);
    let _ = std::fs::remove_file(&agent_path);
}
