//! The agent's report→decision latency, and the CPU it spends, over the in-process channel
//! and the agent's unix datagram socket (`ccp_runtime::ipc::unix`, the transport of a
//! user-space datapath), with the receive spin off and on (`ccp_runtime::ipc::spin`).
//!
//!     cargo bench -p ccp-runtime --bench agent_latency
//!
//! A fake datapath creates one flow, then sends reports one at a time and waits for each
//! answer (the agent's full path: guard, portus parse, the algorithm's decision, the
//! UPDATE_FIELDS answer). Printed per case: p50/p99 of the round trip, reports per second,
//! and the agent's CPU: the process's CPU time less the datapath thread's own, per wall
//! second (1.00 = one core kept busy), while reports flow and over one idle second after
//! (no reports: a spin that stops costs nothing there).
//!
//! The datapath side waits for each answer in one of two ways: `dp=block` (a blocking
//! receive: the round trip then carries the datapath thread's own wake-up too) and `dp=poll`
//! (it polls without blocking, as the kernel does not sleep: the round trip is the agent's).
//! Cases run on the host as it is ("idle") and with one busy-looping thread per core
//! ("busy"); on a shared or loaded machine the "idle" figures are not an idle host's.
//! Then every algorithm (the learned ones with the shipped models in `models/`) over unix
//! with the default spin, the datapath polling. No figure is asserted.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccp_runtime::agent::build_registry;
use ccp_runtime::ipc::chan::ChanSocket;
use ccp_runtime::ipc::guard::{CHANGE_PROG, UPDATE_FIELDS};
use ccp_runtime::ipc::spin::{Spin, DEFAULT_MAX};
use ccp_runtime::ipc::unix::UnixSocket;
use ccp_runtime::ipc::wire;
use ccp_runtime::{Agent, AgentOptions};

const N: usize = 20_000;

/// The datapath's end.
trait Dp {
    fn send(&mut self, m: &[u8]);
    /// The next message; `poll`: without blocking, spinning until one comes.
    fn recv(&mut self, poll: bool) -> Vec<u8>;
}

struct Chan(
    crossbeam_channel::Sender<Vec<u8>>,
    crossbeam_channel::Receiver<Vec<u8>>,
);
impl Dp for Chan {
    fn send(&mut self, m: &[u8]) {
        self.0.send(m.to_vec()).expect("agent gone");
    }
    fn recv(&mut self, poll: bool) -> Vec<u8> {
        if poll {
            let t = Instant::now();
            loop {
                if let Ok(m) = self.1.try_recv() {
                    return m;
                }
                assert!(t.elapsed() < Duration::from_secs(5), "no answer");
                std::hint::spin_loop();
            }
        }
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
    fn recv(&mut self, poll: bool) -> Vec<u8> {
        self.0.set_nonblocking(poll).expect("nonblocking");
        let t = Instant::now();
        loop {
            match self.0.recv(&mut self.2) {
                Ok(n) => return self.2[..n].to_vec(),
                Err(e) if poll && e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(t.elapsed() < Duration::from_secs(5), "no answer");
                    std::hint::spin_loop();
                }
                Err(e) => panic!("no answer: {e}"),
            }
        }
    }
}

/// CPU seconds: the whole process, and the calling thread.
fn cpu() -> (f64, f64) {
    let t = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec for the call
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    };
    (
        t(libc::CLOCK_PROCESS_CPUTIME_ID),
        t(libc::CLOCK_THREAD_CPUTIME_ID),
    )
}

/// The CPU the rest of the process (the agent) spent per wall second since `since`.
fn others_cpu(since: ((f64, f64), Instant)) -> f64 {
    let ((p0, t0), w0) = since;
    let (p1, t1) = cpu();
    ((p1 - p0) - (t1 - t0)) / w0.elapsed().as_secs_f64()
}

/// One busy-looping thread per core (the "busy host"). Their CPU cannot be told from the
/// agent's, so busy cases print latency only.
struct Busy {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    n: usize,
}
impl Busy {
    fn none() -> Self {
        Self {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            n: 0,
        }
    }
    fn start() -> Self {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Self { stop, threads, n }
    }
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn wait_for(dp: &mut dyn Dp, typ: u16, poll: bool) -> Vec<u8> {
    loop {
        let m = dp.recv(poll);
        if wire::type_and_sid(&m).map(|t| t.0) == Some(typ) {
            return m;
        }
    }
}

/// What one case measured.
struct Figures {
    p50_us: f64,
    p99_us: f64,
    per_s: f64,
    /// The agent's CPU per wall second while reports flowed, and while idle (None on the
    /// busy host).
    cpu_active: Option<f64>,
    cpu_idle: Option<f64>,
}

fn run(dp: &mut dyn Dp, alg: &str, sid: u32, poll: bool, busy: &Busy) -> Figures {
    dp.send(&wire::create(sid, &format!("ccp_{alg}"), 14480, 1448));
    let cp = wait_for(dp, CHANGE_PROG, false);
    let uid = wire::change_prog_uid(&cp).expect("uid");
    let (registry, _, _) = build_registry(&options()).expect("the agent's registry");
    let prog = registry
        .get(alg)
        .expect("an algorithm the agent runs")
        .program();
    let fields = wire::one_rtt_report(&prog);
    let msg = wire::measure(sid, uid, &fields);
    for _ in 0..1000 {
        dp.send(&msg);
        wait_for(dp, UPDATE_FIELDS, poll);
    }
    let mut lat = Vec::with_capacity(N);
    let since = (cpu(), Instant::now());
    for _ in 0..N {
        let t = Instant::now();
        dp.send(&msg);
        wait_for(dp, UPDATE_FIELDS, poll);
        lat.push(t.elapsed());
    }
    let total = since.1.elapsed();
    let cpu_active = others_cpu(since);
    let idle_since = (cpu(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let cpu_idle = others_cpu(idle_since);
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)].as_secs_f64() * 1e6;
    let measured = busy.n == 0;
    Figures {
        p50_us: p(0.50),
        p99_us: p(0.99),
        per_s: N as f64 / total.as_secs_f64(),
        cpu_active: measured.then_some(cpu_active),
        cpu_idle: measured.then_some(cpu_idle),
    }
}

fn print(label: &str, f: &Figures) {
    // CPU less the datapath thread's can come out a hair below 0: no "-0.00"
    let c = |x: Option<f64>| x.map_or("  -  ".to_string(), |v| format!("{:5.2}", v.max(0.0)));
    println!(
        "{label:<44} p50 {:7.1} us  p99 {:7.1} us  {:7.0} reports/s  agent CPU {} active, {} idle",
        f.p50_us,
        f.p99_us,
        f.per_s,
        c(f.cpu_active),
        c(f.cpu_idle)
    );
}

fn spin(on: bool) -> Spin {
    if on {
        Spin::default()
    } else {
        Spin::off()
    }
}

fn chan_case(alg: &str, spin_on: bool, poll: bool, busy: &Busy) -> Figures {
    let agent = Agent::new(&options()).expect("agent");
    let (to_agent, agent_rx) = crossbeam_channel::unbounded();
    let (agent_tx, from_agent) = crossbeam_channel::unbounded();
    let running = agent
        .spawn(ChanSocket::with_spin(agent_tx, agent_rx, spin(spin_on)))
        .expect("spawn");
    let mut chan = Chan(to_agent.clone(), from_agent);
    let f = run(&mut chan, alg, 1, poll, busy);
    running
        .stop(|| {
            let _ = to_agent.send(vec![0]);
        })
        .expect("stop");
    f
}

fn unix_case(alg: &str, spin_on: bool, poll: bool, busy: &Busy) -> (Figures, &'static str) {
    let pid = std::process::id();
    let name = format!("bench-agent-{pid}");
    let dp_path = format!("/tmp/ccp/bench-dp-{pid}");
    let mut sock = UnixSocket::bind(&name).expect("bind the agent's socket");
    sock.set_spin(spin(spin_on));
    let agent = Agent::new(&options()).expect("agent");
    let running = agent.spawn(sock).expect("spawn");
    let _ = std::fs::remove_file(&dp_path);
    let dp = UnixDatagram::bind(&dp_path).expect("bind datapath");
    dp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let agent_path = format!("/tmp/ccp/{name}");
    let mut unix = Unix(dp, agent_path.clone(), vec![0u8; 4096]);
    let f = run(&mut unix, alg, 1, poll, busy);
    let ran = running.records().first().map_or("none", |r| r.alg);
    running
        .stop(|| {
            let _ = unix.0.send_to(&[0], &agent_path);
        })
        .expect("stop");
    let _ = std::fs::remove_file(&dp_path);
    (f, ran)
}

fn options() -> AgentOptions {
    AgentOptions {
        models: Some(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../models")
                .canonicalize()
                .expect("the repository's models/"),
        ),
        ..AgentOptions::default()
    }
}

fn main() {
    // `cargo test --benches` runs this with --bench absent: nothing to time there
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    println!(
        "one cubic flow, {N} reports answered one at a time; spin = the agent's receive spin \
         (max {} us)",
        DEFAULT_MAX.as_micros()
    );
    for host in ["idle", "busy"] {
        let busy = if host == "busy" {
            Busy::start()
        } else {
            Busy::none()
        };
        for (spin_on, poll) in [(false, false), (true, false), (false, true), (true, true)] {
            let tag = format!(
                "spin={} dp={} host={host}",
                if spin_on { "on " } else { "off" },
                if poll { "poll " } else { "block" }
            );
            print(
                &format!("chan {tag}"),
                &chan_case("cubic", spin_on, poll, &busy),
            );
            print(
                &format!("unix {tag}"),
                &unix_case("cubic", spin_on, poll, &busy).0,
            );
        }
        busy.stop();
    }
    println!("every algorithm over unix, spin on (default), dp=poll, host=idle:");
    let none = Busy::none();
    let (registry, _, unavailable) = build_registry(&options()).expect("the agent's registry");
    for (alg, why) in unavailable {
        println!("  {alg:<6} not measured: {why}");
    }
    for alg in registry.names() {
        let (f, ran) = unix_case(alg, true, true, &none);
        print(&format!("  {alg:<6} (ran as {ran})"), &f);
    }
}
