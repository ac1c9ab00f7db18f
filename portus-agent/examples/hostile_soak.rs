//! Hostile-peer soak (issue 42): healthy datapaths drive flows through a `ccp-agent --ipc
//! unix` while hostile peers come and go: datapaths that open flows and vanish (item 1),
//! that send READY and never read (item 2), and that read slowly. It prints the healthy
//! datapaths' answer latency (p50, p99, max), the answers they missed, the agent's counters
//! and memory, and a verdict: healthy p99 ≤ 1 ms and no missed answer.
//!
//! A benchmark command, not a test: `bash ops/hostile_soak.sh` (which builds the agent and
//! runs this), or directly:
//!
//! ```text
//! cargo run --release -p ccp-agent --example hostile_soak -- \
//!     [--agent target/release/ccp-agent] [--duration-s 60] [--hostile 100] [--healthy 4] \
//!     [--kinds vanishing,non-reading,slow]
//! ```
//!
//! `--agent` runs another build (e.g. one from before issue 42) to reproduce the defects.
//! Exit status: 0 when the verdict holds, 1 when it does not, 2 on bad arguments.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ccp_runtime::ipc::guard::{CHANGE_PROG, UPDATE_FIELDS};
use ccp_runtime::ipc::wire;

const SOCK_DIR: &str = "/tmp/ccp";
/// An answer not in within this long counts as missed.
const ANSWER_LIMIT: Duration = Duration::from_secs(1);

struct Args {
    agent: PathBuf,
    duration: Duration,
    hostile: usize,
    healthy: usize,
    /// Which hostile kinds run (0 vanishing, 1 never reading, 2 slow), in turn.
    kinds: Vec<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        agent: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/ccp-agent"),
        duration: Duration::from_secs(60),
        hostile: 100,
        healthy: 4,
        kinds: vec![0, 1, 2],
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it
            .next()
            .ok_or_else(|| format!("{k} needs a value (see the header of hostile_soak.rs)"))?;
        let num = |what: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("{what} {v:?}: not a whole number"))
        };
        match k.as_str() {
            "--agent" => a.agent = PathBuf::from(&v),
            "--duration-s" => a.duration = Duration::from_secs(num("--duration-s")?.max(1)),
            "--hostile" => a.hostile = num("--hostile")? as usize,
            "--healthy" => a.healthy = (num("--healthy")? as usize).max(1),
            "--kinds" => {
                a.kinds = v
                    .split(',')
                    .map(|k| match k {
                        "vanishing" => Ok(0),
                        "non-reading" => Ok(1),
                        "slow" => Ok(2),
                        _ => Err(format!(
                            "--kinds {k:?}: use vanishing, non-reading, slow (comma-separated)"
                        )),
                    })
                    .collect::<Result<_, _>>()?;
            }
            _ => {
                return Err(format!(
                "unknown option {k:?}: use --agent PATH, --duration-s N, --hostile N, --healthy N, --kinds K,K"
            ))
            }
        }
    }
    if !a.agent.is_file() {
        return Err(format!(
            "no agent binary at {} (build it: cargo build --release -p ccp-agent, or pass --agent)",
            a.agent.display()
        ));
    }
    Ok(a)
}

fn name(tag: &str, n: u64) -> String {
    format!("hsoak-{}-{tag}-{n}", std::process::id())
}

/// A datapath socket at `/tmp/ccp/<name>`, removed on drop (as a datapath that exits).
struct Dp {
    sock: UnixDatagram,
    path: PathBuf,
    agent: PathBuf,
}

impl Dp {
    fn bind(name: &str, agent: &Path) -> std::io::Result<Dp> {
        let path = Path::new(SOCK_DIR).join(name);
        let _ = std::fs::remove_file(&path);
        let sock = UnixDatagram::bind(&path)?;
        sock.set_write_timeout(Some(Duration::from_secs(2)))?;
        Ok(Dp {
            sock,
            path,
            agent: agent.to_path_buf(),
        })
    }

    fn send(&self, m: &[u8]) -> bool {
        self.sock.send_to(m, &self.agent).is_ok()
    }

    /// The next message of type `want` for `sid` within `limit`, skipping others.
    fn expect(&self, want: u16, sid: u32, limit: Duration, buf: &mut [u8]) -> Option<Vec<u8>> {
        self.expect_stamped(want, sid, limit, buf).map(|(m, _)| m)
    }

    /// Stamp every datagram this socket receives with the kernel's clock at the moment the
    /// sender's `send` queued it (`SO_TIMESTAMPNS`; af_unix stamps at send time).
    fn stamp_arrivals(&self) -> bool {
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on our own socket with a valid c_int
        unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        }
    }

    /// As [`Dp::expect`], with the message's kernel timestamp (CLOCK_REALTIME) if it has one.
    fn expect_stamped(
        &self,
        want: u16,
        sid: u32,
        limit: Duration,
        buf: &mut [u8],
    ) -> Option<(Vec<u8>, Option<SystemTime>)> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            self.sock
                .set_read_timeout(Some(left.max(Duration::from_micros(1))))
                .ok()?;
            let (n, stamp) = recv_stamped(&self.sock, buf)?;
            if wire::type_and_sid(&buf[..n]) == Some((want, sid)) {
                return Some((buf[..n].to_vec(), stamp));
            }
        }
    }
}

/// One datagram into `buf` and its `SCM_TIMESTAMPNS` stamp, if the socket stamps.
fn recv_stamped(sock: &UnixDatagram, buf: &mut [u8]) -> Option<(usize, Option<SystemTime>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // 64 bytes, aligned: room for one timespec cmsg
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data; every pointer set below outlives the call
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: a valid msghdr over `buf` and `cbuf` for the call
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return None;
    }
    let mut stamp = None;
    // SAFETY: walking the control messages the kernel wrote into `cbuf`, as CMSG_* define
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                stamp = Some(
                    UNIX_EPOCH
                        + Duration::new(ts.tv_sec as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32),
                );
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Some((n as usize, stamp))
}

impl Dp {}

impl Drop for Dp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[derive(Default)]
struct Healthy {
    /// Report→answer latencies (µs), as the datapath read the answer.
    lat_us: Vec<u64>,
    /// Report→answer sent (µs): to the kernel's stamp of the answer, when the agent's
    /// `send` queued it, without the datapath's own wake-up after it.
    sent_us: Vec<u64>,
    missed: u64,
    /// Of them, CREATEs not answered.
    missed_create: u64,
    flows: u64,
}

/// One healthy datapath: flows of 50 reports each, every report's answer timed.
fn healthy(
    i: usize,
    agent: PathBuf,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Healthy>>,
    up: Arc<AtomicU64>,
) {
    let report = {
        let prog = ccp_algs::Registry::builtin()
            .get("reno")
            .map(|a| a.program());
        match prog {
            Some(p) => wire::one_rtt_report(&p),
            None => return,
        }
    };
    let Ok(dp) = Dp::bind(&name("healthy", i as u64), &agent) else {
        return;
    };
    dp.stamp_arrivals();
    let mut buf = vec![0u8; 65536];
    let mut h = Healthy::default();
    dp.send(&wire::ready(i as u32 + 1));
    let mut sid = 0u32;
    while !stop.load(Ordering::Relaxed) {
        sid += 1;
        if !dp.send(&wire::create(sid, "ccp_reno", 14480, 1448)) {
            h.missed += 1;
            continue;
        }
        let Some(cp) = dp.expect(CHANGE_PROG, sid, ANSWER_LIMIT, &mut buf) else {
            h.missed += 1;
            h.missed_create += 1;
            continue;
        };
        let Some(uid) = wire::change_prog_uid(&cp) else {
            continue;
        };
        h.flows += 1;
        if h.flows == 1 {
            up.fetch_add(1, Ordering::SeqCst);
        }
        for _ in 0..50 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let (t, wall) = (Instant::now(), SystemTime::now());
            if !dp.send(&wire::measure(sid, uid, &report)) {
                h.missed += 1;
                continue;
            }
            match dp.expect_stamped(UPDATE_FIELDS, sid, ANSWER_LIMIT, &mut buf) {
                Some((_, stamp)) => {
                    h.lat_us.push(t.elapsed().as_micros() as u64);
                    if let Some(Ok(d)) = stamp.map(|s| s.duration_since(wall)) {
                        h.sent_us.push(d.as_micros() as u64);
                    }
                }
                None => h.missed += 1,
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        dp.send(&wire::measure(sid, 0, &[]));
    }
    if let Ok(mut o) = out.lock() {
        o.lat_us.extend(h.lat_us);
        o.sent_us.extend(h.sent_us);
        o.missed += h.missed;
        o.missed_create += h.missed_create;
        o.flows += h.flows;
    }
}

/// One hostile peer, again and again under new names until `stop`: by `kind` a datapath
/// that opens flows and vanishes, one that sends READY and reports and never reads, or one
/// that reads one answer every 50 ms.
fn hostile(i: usize, kind: usize, agent: PathBuf, stop: Arc<AtomicBool>, lives: Arc<AtomicU64>) {
    // the attackers are other processes on a real host; here they share the soak's cores
    // with the healthy datapaths, whose measured latency would include waiting for a CPU
    // behind 100 attacker threads: they run at a lower priority (nice 10)
    // SAFETY: setpriority on this thread's own id, no memory involved
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
    let mut buf = vec![0u8; 65536];
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let Ok(dp) = Dp::bind(&name(&format!("h{i}"), n), &agent) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        lives.fetch_add(1, Ordering::Relaxed);
        // each life lasts 0.3 to 2.3 s
        let life = Duration::from_millis(300 + (i as u64 * 131 + n * 977) % 2000);
        let t0 = Instant::now();
        dp.send(&wire::ready(1));
        match kind {
            0 => {
                // vanishing: open flows (read their answers), then exit without closing them
                for sid in 1..=200 {
                    if !dp.send(&wire::create(sid, "ccp_reno", 14480, 1448)) {
                        break;
                    }
                    let _ = dp.expect(CHANGE_PROG, sid, Duration::from_millis(200), &mut buf);
                }
                let left = life.saturating_sub(t0.elapsed());
                std::thread::sleep(left.min(Duration::from_millis(500)));
            }
            1 => {
                // never reads: keeps sending without reading a byte
                let _ = dp.sock.set_nonblocking(true);
                let mut sid = 0;
                while t0.elapsed() < life && !stop.load(Ordering::Relaxed) {
                    sid += 1;
                    let _ = dp
                        .sock
                        .send_to(&wire::create(sid, "ccp_reno", 14480, 1448), &dp.agent);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            _ => {
                // slow: one answer read every 50 ms
                for sid in 1..=20 {
                    dp.send(&wire::create(sid, "ccp_reno", 14480, 1448));
                }
                while t0.elapsed() < life && !stop.load(Ordering::Relaxed) {
                    let _ = dp.sock.set_read_timeout(Some(Duration::from_millis(1)));
                    let _ = dp.sock.recv(&mut buf);
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        drop(dp); // vanish: socket closed, file removed
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The agent's counters: SIGUSR1, then its `ccp-agent stats: {...}` line on stderr.
fn agent_stats(pid: u32, stderr: &Path) -> Option<serde_json::Value> {
    const TAG: &str = "ccp-agent stats: ";
    let count = |t: &str| t.lines().filter(|l| l.starts_with(TAG)).count();
    let before = count(&std::fs::read_to_string(stderr).unwrap_or_default());
    let _ = Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let t = std::fs::read_to_string(stderr).unwrap_or_default();
        if count(&t) > before && t.ends_with('\n') {
            let line = t.lines().filter_map(|l| l.strip_prefix(TAG)).nth(before)?;
            return serde_json::from_str(line).ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The agent's live flows (its flow tables, through the control socket), `-` if unknown.
fn live_flows(ctl: &Path) -> String {
    ccp_runtime::control::request(
        ctl,
        &serde_json::json!({"op": "flows"}),
        Duration::from_secs(2),
    )
    .ok()
    .and_then(|v| v["total"].as_u64())
    .map_or("-".into(), |n| n.to_string())
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

struct AgentChild(Child);

impl Drop for AgentChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("hostile_soak: error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(SOCK_DIR) {
        eprintln!("hostile_soak: error: cannot create {SOCK_DIR}: {e}");
        return ExitCode::from(1);
    }
    let agent_name = name("agent", 0);
    let agent_path = Path::new(SOCK_DIR).join(&agent_name);
    let stderr = std::env::temp_dir().join(format!("{agent_name}.stderr"));
    let ctl = std::env::temp_dir().join(format!("{agent_name}.ctl.sock"));
    let child = std::fs::File::create(&stderr).and_then(|f| {
        Command::new(&args.agent)
            .args(["--ipc", "unix", "--unix-name", &agent_name, "--alg", "reno"])
            .arg("--control")
            .arg(&ctl)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
    });
    let mut child = match child {
        Ok(c) => AgentChild(c),
        Err(e) => {
            eprintln!(
                "hostile_soak: error: cannot start {}: {e}",
                args.agent.display()
            );
            return ExitCode::from(1);
        }
    };
    let pid = child.0.id();
    let t_start = Instant::now();
    while !agent_path.exists() {
        if t_start.elapsed() > Duration::from_secs(20) || matches!(child.0.try_wait(), Ok(Some(_)))
        {
            eprintln!(
                "hostile_soak: error: the agent did not start: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
            return ExitCode::from(1);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    println!(
        "hostile soak: {} healthy datapaths, {} hostile peers (vanishing, never reading, slow) \
         for {} s against {} (pid {pid})",
        args.healthy,
        args.hostile,
        args.duration.as_secs(),
        args.agent.display()
    );
    let rss0 = rss_kib(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let results = Arc::new(Mutex::new(Healthy::default()));
    let lives = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    let up = Arc::new(AtomicU64::new(0));
    for i in 0..args.healthy {
        let (a, s, r, u) = (
            agent_path.clone(),
            stop.clone(),
            results.clone(),
            up.clone(),
        );
        threads.push(std::thread::spawn(move || healthy(i, a, s, r, u)));
    }
    // the healthy datapaths are up (a flow each) before the attack starts
    let t_up = Instant::now();
    while up.load(Ordering::SeqCst) < args.healthy as u64
        && t_up.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    for i in 0..args.hostile {
        let (a, s, l) = (agent_path.clone(), stop.clone(), lives.clone());
        let kind = args.kinds[i % args.kinds.len()];
        threads.push(std::thread::spawn(move || hostile(i, kind, a, s, l)));
    }
    let mut max_rss = rss0;
    let step = Duration::from_secs(10).min(args.duration);
    println!(
        "{:>6} {:>9} {:>12} {:>11}",
        "s", "RSS MiB", "hostile lives", "live flows"
    );
    while t_start.elapsed() < args.duration + Duration::from_millis(100) {
        std::thread::sleep(step);
        let rss = rss_kib(pid);
        max_rss = max_rss.max(rss);
        println!(
            "{:>6.0} {:>9.1} {:>12} {:>11}",
            t_start.elapsed().as_secs_f64(),
            rss as f64 / 1024.0,
            lives.load(Ordering::Relaxed),
            live_flows(&ctl)
        );
        if matches!(child.0.try_wait(), Ok(Some(_))) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let alive = matches!(child.0.try_wait(), Ok(None));
    // a new datapath after all of them: served at once (item 1's lock-out would refuse it)
    let after = Dp::bind(&name("after", 0), &agent_path).ok().map(|dp| {
        let mut buf = vec![0u8; 65536];
        dp.send(&wire::ready(9));
        let t = Instant::now();
        dp.send(&wire::create(1, "ccp_reno", 14480, 1448));
        dp.expect(CHANGE_PROG, 1, Duration::from_secs(2), &mut buf)
            .map(|_| t.elapsed())
    });
    let stats = if alive {
        agent_stats(pid, &stderr)
    } else {
        None
    };
    let rss1 = rss_kib(pid);
    let mut r = match results.lock() {
        Ok(mut r) => std::mem::take(&mut *r),
        Err(_) => Healthy::default(),
    };
    r.lat_us.sort_unstable();
    r.sent_us.sort_unstable();
    let (p50, p99, max) = (
        pct(&r.lat_us, 0.5),
        pct(&r.lat_us, 0.99),
        r.lat_us.last().map_or(f64::NAN, |v| *v as f64 / 1000.0),
    );
    println!(
        "healthy: {} answers over {} flows, {} missed (> {} ms; {} of them CREATEs); latency \
         p50 {p50:.3} ms, p99 {p99:.3} ms, max {max:.3} ms",
        r.lat_us.len(),
        r.flows,
        r.missed,
        ANSWER_LIMIT.as_millis(),
        r.missed_create,
    );
    println!(
        "healthy, to the answer's send (kernel stamp, {} of the answers): p50 {:.3} ms, p99 \
         {:.3} ms, max {:.3} ms",
        r.sent_us.len(),
        pct(&r.sent_us, 0.5),
        pct(&r.sent_us, 0.99),
        r.sent_us.last().map_or(f64::NAN, |v| *v as f64 / 1000.0),
    );
    println!(
        "hostile: {} lives; a new datapath afterwards: {}",
        lives.load(Ordering::Relaxed),
        match after.flatten() {
            Some(d) => format!("served in {:.3} ms", d.as_secs_f64() * 1000.0),
            None => "NOT served within 2 s".into(),
        }
    );
    println!(
        "agent: {}; RSS {:.1} -> {:.1} MiB (max {:.1})",
        if alive { "alive" } else { "EXITED" },
        rss0 as f64 / 1024.0,
        rss1 as f64 / 1024.0,
        max_rss as f64 / 1024.0
    );
    if let Some(s) = &stats {
        let g = |k: &str| s[k].as_u64().unwrap_or(0);
        println!(
            "agent counters: datapaths {}, live_flows {}, vanished_datapaths {}, \
             dropped_datapaths {}, send_failed {}, send_dropped {}, too_many_datapaths {}, \
             too_many_flows {}",
            g("datapaths"),
            g("live_flows"),
            g("vanished_datapaths"),
            g("dropped_datapaths"),
            g("send_failed"),
            g("send_dropped"),
            g("too_many_datapaths"),
            g("too_many_flows")
        );
    }
    let ok =
        alive && r.missed == 0 && !r.lat_us.is_empty() && p99 <= 1.0 && after.flatten().is_some();
    println!(
        "verdict: healthy p99 {p99:.3} ms (≤ 1 ms), {} missed answers (0), new datapath served: {}",
        r.missed,
        if ok { "PASS" } else { "FAIL" }
    );
    // the flows of vanished datapaths leave the caps at once and the tables a batch at a
    // time between datagrams: the second figure is what is left when that is done
    println!(
        "agent flow tables at the end: {} live flows",
        live_flows(&ctl)
    );
    std::thread::sleep(Duration::from_secs(1));
    println!(
        "agent flow tables 1 s later: {} live flows",
        live_flows(&ctl)
    );
    drop(child);
    let _ = std::fs::remove_file(&ctl);
    if ok {
        let _ = std::fs::remove_file(&stderr);
    } else {
        println!("the agent's log: {}", stderr.display());
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
