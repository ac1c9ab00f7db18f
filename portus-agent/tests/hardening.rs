//! Issue 25: no input from a datapath or an operator stops, freezes or grows the agent.
//!
//! Each test plays the adversary the issue describes: absurd CREATE fields, a datapath that
//! leaves before its answer goes out or stops reading, floods of flows, hostile socket names,
//! out-of-range knobs, FIFOs where files should be, names that would forge log lines.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use ccp_runtime::ipc::guard::{CHANGE_PROG, UPDATE_FIELDS};
use ccp_runtime::ipc::wire;
use ccp_runtime::{Agent, AgentOptions};
use common::{close, reno_report, unique, AgentProc, Peer};
use crossbeam_channel::{unbounded, Receiver, Sender};

const T: Duration = Duration::from_secs(5);

fn typ(m: &[u8]) -> u16 {
    wire::type_and_sid(m).map(|t| t.0).unwrap_or(u16::MAX)
}

/// Receive over the channel until a message of `want` type for `sid`, or `None` after `t`.
fn expect_chan(rx: &Receiver<Vec<u8>>, want: u16, sid: u32, t: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + t;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = rx.recv_timeout(left).ok()?;
        if wire::type_and_sid(&m) == Some((want, sid)) {
            return Some(m);
        }
    }
}

struct ChanAgent {
    agent: Agent,
    running: Option<ccp_runtime::RunningAgent>,
    tx: Sender<Vec<u8>>,
    rx: Receiver<Vec<u8>>,
}

impl ChanAgent {
    fn start(opts: AgentOptions) -> ChanAgent {
        let agent = Agent::new(&opts).expect("agent");
        let (tx, agent_rx) = unbounded::<Vec<u8>>();
        let (agent_tx, rx) = unbounded::<Vec<u8>>();
        let running = agent
            .spawn(portus::ipc::chan::Socket::<portus::ipc::Blocking>::new(
                agent_tx, agent_rx,
            ))
            .expect("spawn");
        ChanAgent {
            agent,
            running: Some(running),
            tx,
            rx,
        }
    }

    fn running(&self) -> &ccp_runtime::RunningAgent {
        self.running.as_ref().expect("running")
    }

    /// CREATE (any name), one report, answered; `None` if an answer does not come.
    fn cycle(&self, sid: u32, name: &str, close_it: bool) -> Option<()> {
        self.tx
            .send(wire::create(sid, name, 14480, 1448))
            .expect("send");
        let cp = expect_chan(&self.rx, CHANGE_PROG, sid, T)?;
        let uid = wire::change_prog_uid(&cp)?;
        self.tx
            .send(wire::measure(sid, uid, &reno_report()))
            .expect("send");
        expect_chan(&self.rx, UPDATE_FIELDS, sid, T)?;
        if close_it {
            self.tx.send(close(sid)).expect("send");
        }
        Some(())
    }
}

impl Drop for ChanAgent {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            let tx = self.tx.clone();
            let _ = r.stop(move || {
                let _ = tx.send(vec![0]);
            });
        }
    }
}

/// Item 2: a CREATE with mss >= 2^31 then a report used to panic Cubic (`clamp` with
/// min > max) and end the run loop. Absurd CREATE fields are refused (counted) before any
/// controller sees them; plausible extremes are clamped; the agent keeps serving.
#[test]
fn absurd_create_fields_never_reach_a_controller() {
    let a = ChanAgent::start(AgentOptions::default());
    let mut sid = 100;
    for name in ["ccp_cubic", "ccp_reno", "ccp", "ccp_bbr", "ccp_iris"] {
        // a sane flow of this algorithm tells its program's uid
        sid += 1;
        a.tx.send(wire::create(sid, name, 14480, 1448)).unwrap();
        let cp = expect_chan(&a.rx, CHANGE_PROG, sid, T).expect("sane CREATE answered");
        let uid = wire::change_prog_uid(&cp).unwrap();
        for (init_cwnd, mss) in ABSURD {
            sid += 1;
            a.tx.send(wire::create(sid, name, init_cwnd, mss)).unwrap();
            // reports of every program's shape, with extreme values
            for n in [7usize, 9, 10, 11, 16] {
                for v in [u64::MAX, 0, 1 << 32] {
                    a.tx.send(wire::measure(sid, uid, &vec![v; n])).unwrap();
                }
            }
            a.tx.send(close(sid)).unwrap();
        }
    }
    assert!(
        a.cycle(1, "ccp_cubic", true).is_some(),
        "the agent stopped answering"
    );
    assert!(!a.running().is_finished(), "the agent loop ended");
    // mss 0 and mss > 65535 are refused, each counted (4 of the 7 cases, 5 names)
    let refused = a
        .agent
        .stats
        .bad_create
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(refused, 5 * 4, "refused CREATEs");
}

/// (init_cwnd, mss) of CREATEs a datapath should never send.
const ABSURD: [(u32, u32); 7] = [
    (14480, 1 << 31),
    (14480, u32::MAX),
    (u32::MAX, 1 << 31),
    (14480, 0),
    (u32::MAX, 1448),
    (u32::MAX, 1),
    (0, 65535),
];

/// Item 2, the same through the in-process agent (training, `--ipc inline`).
#[test]
fn absurd_create_fields_inline() {
    use ccp_sim::DatapathIpc;
    let agent = Agent::new(&AgentOptions::default()).unwrap();
    let mut inline = agent.inline().unwrap();
    let mut sid = 0;
    for name in ["ccp_cubic", "ccp_reno", "ccp", "ccp_bbr", "ccp_iris"] {
        sid += 1;
        inline.handle(&wire::create(sid, name, 14480, 1448));
        let mut uid = None;
        while let Some(m) = inline.recv(Duration::ZERO).unwrap() {
            if typ(&m) == CHANGE_PROG {
                uid = wire::change_prog_uid(&m);
            }
        }
        let uid = uid.expect("sane CREATE answered");
        for (init_cwnd, mss) in ABSURD {
            sid += 1;
            inline.handle(&wire::create(sid, name, init_cwnd, mss));
            for n in [7usize, 9, 10, 11, 16] {
                for v in [u64::MAX, 0, 1 << 32] {
                    inline.handle(&wire::measure(sid, uid, &vec![v; n]));
                }
            }
            inline.handle(&close(sid));
        }
        while inline.recv(Duration::ZERO).unwrap().is_some() {}
    }
    assert_eq!(
        agent
            .stats
            .bad_create
            .load(std::sync::atomic::Ordering::Relaxed),
        5 * 4
    );
}

/// Item 3: a datapath whose socket is gone before the agent's INSTALL goes out used to end
/// the agent ("portus err: No such file or directory", exit 1). The failed send is logged
/// and survived; other datapaths are still served.
#[test]
fn a_datapath_gone_before_its_install_does_not_end_the_agent() {
    let name = unique("gone");
    let mut agent = AgentProc::start(&name, &["--alg", "reno"], &[]);
    for i in 0..20 {
        // bound, then unlinked: the agent's answers go to a path that no longer exists
        let ghost = Peer::bind(&unique("ghost"), &name);
        std::fs::remove_file(&ghost.path).unwrap();
        let m = if i % 2 == 0 {
            wire::ready(1)
        } else {
            wire::create(1, "ccp_reno", 14480, 1448)
        };
        ghost.send(&m).unwrap();
        drop(ghost);
    }
    // a closed socket whose file stays: the agent's sends are refused
    let path = PathBuf::from(common::SOCK_DIR).join(unique("closed"));
    let closed = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    closed
        .send_to(&wire::ready(2), PathBuf::from(common::SOCK_DIR).join(&name))
        .unwrap();
    drop(closed);
    std::thread::sleep(Duration::from_millis(200));
    let _ = std::fs::remove_file(&path);
    assert!(agent.is_running(), "agent exited: {}", agent.stderr_text());
    let mut good = Peer::bind(&unique("good"), &name);
    good.send(&wire::ready(3)).unwrap();
    good.roundtrip(7, T);
    let st = agent.stop(T).expect("agent did not stop on SIGTERM");
    assert_eq!(st.code(), Some(0), "{}", agent.stderr_text());
}

/// Item 4: a datapath that stops reading used to block the agent's sends forever: other
/// datapaths got no answers and SIGTERM waited for the peer to go away. Sends are bounded
/// in time and the stuck peer is dropped.
#[test]
fn a_datapath_that_stops_reading_does_not_freeze_the_agent() {
    let name = unique("stuck");
    let mut agent = AgentProc::start(&name, &["--alg", "reno"], &[]);
    let stuck = Peer::bind(&unique("stuck-dp"), &name);
    stuck.send(&wire::ready(1)).unwrap();
    // it never reads; its own sends must not block the test once the agent's queue is full
    stuck.sock.set_nonblocking(true).unwrap();
    for sid in 1..=200 {
        let _ = stuck.send(&wire::create(sid, "ccp_reno", 14480, 1448));
        std::thread::sleep(Duration::from_micros(200));
    }
    // no wall-clock bound on the answers: a frozen agent never answers the good peer (the
    // roundtrips' deadlines catch that), and the counters show why it did not freeze (the
    // stuck peer dropped after a failed send, its later answers discarded)
    let mut good = Peer::bind(&unique("good"), &name);
    good.send(&wire::ready(2)).unwrap();
    good.roundtrip(1, T);
    good.roundtrip(2, T);
    // the stuck peer keeps sending; the good one is still served
    for sid in 201..=260 {
        let _ = stuck.send(&wire::create(sid, "ccp_reno", 14480, 1448));
    }
    good.roundtrip(3, T);
    // sends never wait (issue 42): the stuck peer is dropped by the guard's periodic check
    // once its unread answers have waited the send timeout
    let deadline = Instant::now() + T;
    let stats = loop {
        let stats = agent
            .stats(T)
            .unwrap_or_else(|| panic!("no stats line on SIGUSR1: {}", agent.stderr_text()));
        if stats["dropped_datapaths"].as_u64() >= Some(1) || Instant::now() > deadline {
            break stats;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        stats["dropped_datapaths"].as_u64() >= Some(1),
        "the stuck datapath was never dropped: {stats}"
    );
    // the agent exits on SIGTERM while the stuck peer still holds its socket
    let st = agent.stop(T);
    assert_eq!(
        st.and_then(|s| s.code()),
        Some(0),
        "agent did not exit on SIGTERM within {T:?}: {}",
        agent.stderr_text()
    );
    drop(stuck);
}

/// Item 5: closed flows leave the agent's tables (50 k create/report/close cycles).
#[test]
fn closed_flows_leave_the_tables() {
    let a = ChanAgent::start(AgentOptions::default());
    for i in 0..50_000u32 {
        // socket ids are reused by a datapath, but not at once
        let sid = 1 + i;
        a.cycle(sid, "ccp_reno", true)
            .unwrap_or_else(|| panic!("cycle {i}: no answer"));
    }
    // the close of the last flow is processed before this answer
    a.cycle(999_999, "ccp_reno", false).unwrap();
    let records = a.running().records();
    assert!(
        records.len() <= 2 * 1024,
        "{} flow records after 50 k closed flows",
        records.len()
    );
    let sizes = a.running().table_sizes();
    assert_eq!(sizes.live, 1, "{sizes:?}");
    assert!(sizes.closed <= ccp_runtime::flows::CLOSED_KEPT, "{sizes:?}");
    assert_eq!(sizes.requests, 1, "{sizes:?}");
    assert_eq!(
        a.agent
            .stats
            .live_flows
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// Item 5: live flows are capped (libccp's socket ids are 16-bit: 65,535 per datapath); the
/// CREATEs beyond are refused and counted, and closing flows makes room again.
#[test]
fn live_flows_are_capped() {
    let a = ChanAgent::start(AgentOptions::default());
    let cap = ccp_runtime::flows::MAX_FLOWS_PER_DATAPATH as u32;
    for sid in 1..=cap + 500 {
        a.tx.send(wire::create(sid, "ccp_reno", 14480, 1448))
            .unwrap();
    }
    // the first `cap` are answered, the rest refused
    for sid in 1..=cap {
        expect_chan(&a.rx, CHANGE_PROG, sid, T).unwrap_or_else(|| panic!("flow {sid}"));
    }
    a.tx.send(wire::create(cap + 1000, "ccp_reno", 14480, 1448))
        .unwrap();
    assert!(expect_chan(&a.rx, CHANGE_PROG, cap + 1000, Duration::from_millis(500)).is_none());
    let records = a.running().records();
    assert!(records.len() <= cap as usize, "{} records", records.len());
    let refused = a
        .agent
        .stats
        .too_many_flows
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(refused, 501);
    a.tx.send(close(1)).unwrap();
    assert!(a.cycle(cap + 2000, "ccp_reno", true).is_some());
}

/// Run the agent with `args`; kill it if it has not exited after 10 s (status `None`).
fn agent_cmd(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run ccp-agent");
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Item 6: `--unix-name` is a plain file name under /tmp/ccp: no path, no `..`, bounded,
/// printable. Nothing outside /tmp/ccp is touched.
#[test]
fn unix_names_are_plain_file_names() {
    let outside = std::env::temp_dir().join(unique("victim"));
    std::fs::write(&outside, "keep me").unwrap();
    let rel = format!("../{}", outside.file_name().unwrap().to_string_lossy());
    let long = "a".repeat(200);
    for bad in [
        rel.as_str(),
        "..",
        ".",
        "",
        "a/b",
        "x\ny",
        long.as_str(),
        ".hidden",
    ] {
        let (code, e) = agent_cmd(&["--ipc", "unix", "--unix-name", bad]);
        assert_eq!(code, Some(2), "{bad:?}: {e}");
        assert!(e.contains("--unix-name"), "{bad:?}: {e}");
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me");
    let _ = std::fs::remove_file(&outside);
}

/// Item 6: a second agent with the same name used to steal the socket silently. A socket a
/// live process holds is refused; a stale socket file is replaced; a non-socket file is
/// never unlinked.
#[test]
fn a_socket_held_by_a_live_agent_is_refused() {
    let name = unique("held");
    let mut first = AgentProc::start(&name, &["--alg", "reno"], &[]);
    let (code, e) = agent_cmd(&["--ipc", "unix", "--unix-name", &name]);
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("in use"), "{e}");
    // the first agent still owns its socket and serves
    let mut p = Peer::bind(&unique("dp"), &name);
    p.send(&wire::ready(1)).unwrap();
    p.roundtrip(1, T);
    assert_eq!(first.stop(T).and_then(|s| s.code()), Some(0));
    // a stale socket file (no process behind it) is replaced
    let stale = unique("stale");
    let path = PathBuf::from(common::SOCK_DIR).join(&stale);
    drop(std::os::unix::net::UnixDatagram::bind(&path).unwrap());
    assert!(path.exists());
    let mut second = AgentProc::start(&stale, &[], &[]);
    assert!(second.is_running());
    assert_eq!(second.stop(T).and_then(|s| s.code()), Some(0));
    // a regular file is not a socket: refused, left alone
    let plain = unique("plain");
    let path = PathBuf::from(common::SOCK_DIR).join(&plain);
    std::fs::write(&path, "data").unwrap();
    let (code, e) = agent_cmd(&["--ipc", "unix", "--unix-name", &plain]);
    assert!(code.is_some_and(|c| c != 0), "{code:?} {e}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "data");
    let _ = std::fs::remove_file(&path);
}

/// Item 7: knobs out of range, NaN and infinities exit 2 naming the knob and its range.
#[test]
fn knobs_out_of_range_exit_2_naming_the_knob() {
    let sc = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../datapath/sim/scenarios/one-flow.toml")
        .display()
        .to_string();
    for (table, needle) in [
        (
            "[algs.cubic]\nbeta = 1.5\n",
            "algs.cubic.beta = 1.5: expected a finite number in (0, 1)",
        ),
        ("[algs.cubic]\nc = inf\n", "algs.cubic.c = inf"),
        ("[algs.cubic]\nc = nan\n", "algs.cubic.c = NaN"),
        (
            "[algs.reno]\nmin_interval_us = 0\n",
            "algs.reno.min_interval_us = 0",
        ),
        (
            "[algs.iris]\nmin_rate_kbps = -5.0\n",
            "algs.iris.min_rate_kbps = -5",
        ),
        (
            "[algs.bbr]\nreports_per_rtt = 0\n",
            "algs.bbr.reports_per_rtt = 0",
        ),
        ("[algs.mocc]\nmin_mi_ms = 0.0\n", "algs.mocc.min_mi_ms = 0"),
    ] {
        let p = std::env::temp_dir().join(format!("{}.toml", unique("knobs")));
        std::fs::write(&p, table).unwrap();
        let (code, e) = agent_cmd(&["--config", &p.display().to_string(), "--sim", &sc]);
        assert_eq!(code, Some(2), "{table}: {e}");
        assert!(e.contains(needle), "{table}: {e}");
        let _ = std::fs::remove_file(&p);
    }
}

fn mkfifo(p: &std::path::Path) {
    let st = Command::new("mkfifo").arg(p).status().expect("mkfifo");
    assert!(st.success());
}

/// Item 8: a FIFO in the models directory used to hang start-up, and SIGHUP (and then
/// SIGTERM). Only regular files are read.
#[test]
fn a_fifo_in_the_models_directory_hangs_nothing() {
    let dir = std::env::temp_dir().join(unique("fifo-models"));
    std::fs::create_dir_all(&dir).unwrap();
    mkfifo(&dir.join("mocc.onnx"));
    mkfifo(&dir.join("mocc.json"));
    // start-up: refused at once, naming the file
    let name = unique("fifo");
    let child = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(["--ipc", "unix", "--unix-name", &name, "--models"])
        .arg(&dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (status, out) = common::wait_bounded(child, Duration::from_secs(10));
    let e = String::from_utf8_lossy(&out.stderr);
    let status = status.expect("start-up hung on a FIFO in the models directory");
    assert_eq!(status.code(), Some(2), "{e}");
    assert!(e.contains("not a regular file"), "{e}");
    // reload: FIFOs appear after start-up; SIGHUP then SIGTERM
    let empty = std::env::temp_dir().join(unique("fifo-later"));
    std::fs::create_dir_all(&empty).unwrap();
    let models = empty.display().to_string();
    // CCP_LOG=info: the reload's outcome per model is an info line
    let mut agent = AgentProc::start(&name, &["--models", &models], &[("CCP_LOG", "info")]);
    mkfifo(&empty.join("mocc.onnx"));
    mkfifo(&empty.join("mocc.json"));
    agent.signal("HUP");
    // the reload ran: it read the directory and named the FIFO (no fixed wait)
    assert!(
        agent.wait_for_log("not a regular file", Duration::from_secs(10)),
        "SIGHUP hung on a FIFO, or the reload did not run: {}",
        agent.stderr_text()
    );
    let st = agent.stop(Duration::from_secs(5));
    assert_eq!(
        st.and_then(|s| s.code()),
        Some(0),
        "SIGHUP hung on a FIFO: {}",
        agent.stderr_text()
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&empty);
}

/// Item 8: a datapath-provided name with a newline used to forge a log line.
#[test]
fn datapath_names_cannot_forge_log_lines() {
    let name = unique("forge");
    let mut agent = AgentProc::start(&name, &[], &[("CCP_LOG", "info")]);
    let mut p = Peer::bind(&unique("dp"), &name);
    p.send(&wire::ready(1)).unwrap();
    for (sid, evil) in [
        "x\nFORGED ERROR ccp_runtime: owned",
        "ccp_nope\r\nFORGED",
        "nope;w=1,1,1\nFORGED",
        "\u{1b}[2Jccp",
    ]
    .iter()
    .enumerate()
    {
        p.send(&wire::create(sid as u32 + 1, evil, 14480, 1448))
            .unwrap();
    }
    p.roundtrip(9, T);
    agent.stop(T);
    let log = agent.stderr_text();
    for line in log.lines() {
        assert!(!line.starts_with("FORGED"), "forged line in:\n{log}");
        assert!(!line.contains("\u{1b}[2J"), "raw escape in:\n{log}");
    }
}

/// Item 8: per-CREATE warnings are rate-limited (30 k garbage CREATEs used to write 1.4 MB
/// of log).
#[test]
fn per_create_warnings_are_rate_limited() {
    let name = unique("loud");
    let mut agent = AgentProc::start(&name, &[], &[]);
    let p = Peer::bind(&unique("dp"), &name);
    let reader = p.sock.try_clone().unwrap();
    reader
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let drain = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let mut n = 0u64;
        while reader.recv(&mut buf).is_ok() {
            n += 1;
        }
        n
    });
    p.send(&wire::ready(1)).unwrap();
    for i in 0..30_000u32 {
        let sid = i + 1;
        let name = if i % 2 == 0 { "vegas" } else { "ccp;w=9,9,9" };
        p.send(&wire::create(sid, name, 14480, 1448)).unwrap();
        p.send(&close(sid)).unwrap();
    }
    let answers = drain.join().unwrap();
    assert!(agent.is_running());
    agent.stop(T);
    let log = agent.stderr_text();
    assert!(answers >= 1_000, "{answers} answers");
    assert!(
        log.len() < 32 * 1024,
        "{} bytes of log for 30 k garbage CREATEs:\n{}",
        log.len(),
        &log[..log.len().min(2000)]
    );
}

/// Issue 45: the receive spin (`--spin-max-us`) runs while reports keep coming and stops
/// when they stop; its cost is in the SIGUSR1 line. A bad value is a usage error.
#[test]
fn the_receive_spin_runs_only_while_reports_come() {
    let (code, e) = agent_cmd(&["--ipc", "unix", "--spin-max-us", "2001"]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("--spin-max-us 2001"), "{e}");

    let name = unique("spin");
    let agent = AgentProc::start(&name, &["--alg", "reno", "--spin-max-us", "2000"], &[]);
    let mut p = Peer::bind(&unique("dp"), &name);
    p.send(&wire::ready(1)).unwrap();
    p.roundtrip(1, T);
    let cp_uid = {
        p.send(&wire::create(2, "ccp_reno", 14480, 1448)).unwrap();
        let cp = p.expect(CHANGE_PROG, 2, T);
        wire::change_prog_uid(&cp).expect("uid")
    };
    // a report every 200 µs (the answers are read afterwards): the agent waits about that
    // long for each, far less than 2 ms, so it spins and the next report ends the spin
    let report = wire::measure(2, cp_uid, &reno_report());
    let start = Instant::now();
    for i in 1..=500u32 {
        p.send(&report).unwrap();
        while start.elapsed() < Duration::from_micros(200) * i {
            std::hint::spin_loop();
        }
    }
    for _ in 0..500 {
        p.expect(UPDATE_FIELDS, 2, T);
    }
    let busy = agent.stats(T).expect("stats line");
    let num = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert!(num(&busy, "spin_hits") > 0.0, "{busy}");
    // no reports: the spin stops (at most a few windows of 2 ms spent after the last one)
    std::thread::sleep(Duration::from_millis(600));
    let idle0 = agent.stats(T).expect("stats line");
    std::thread::sleep(Duration::from_millis(1500));
    let idle1 = agent.stats(T).expect("stats line");
    let spun = num(&idle1, "spin_ms") - num(&idle0, "spin_ms");
    assert!(
        spun < 5.0,
        "spun {spun} ms in 1.5 s without reports: {idle0} -> {idle1}"
    );
    assert_eq!(
        num(&idle1, "spin_hits"),
        num(&idle0, "spin_hits"),
        "{idle1}"
    );
}
