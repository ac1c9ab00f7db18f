//! Issue 42: agent hardening, third round. No peer that stops reading or vanishes can lock
//! others out; every operator file is read as a bounded regular file.
//!
//! Each test plays the adversary of one item of the issue against the agent binary.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccp_runtime::ipc::guard::{CHANGE_PROG, UPDATE_FIELDS};
use ccp_runtime::ipc::wire;
use common::*;

const T: Duration = Duration::from_secs(10);

/// Receive until a message of type `want` for `sid` arrives (skipping others); `None` after
/// `limit`.
fn try_expect(p: &mut Peer, want: u16, sid: u32, limit: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let m = p.recv(left)?;
        if wire::type_and_sid(&m) == Some((want, sid)) {
            return Some(m);
        }
    }
}

/// CREATE a Reno flow and drive one report through it; `false` if an answer did not come
/// within `limit`.
fn try_roundtrip(p: &mut Peer, sid: u32, limit: Duration) -> bool {
    if p.send(&wire::create(sid, "ccp_reno", 14480, 1448)).is_err() {
        return false;
    }
    let Some(cp) = try_expect(p, CHANGE_PROG, sid, limit) else {
        return false;
    };
    let Some(uid) = wire::change_prog_uid(&cp) else {
        return false;
    };
    if p.send(&wire::measure(sid, uid, &reno_report())).is_err() {
        return false;
    }
    try_expect(p, UPDATE_FIELDS, sid, limit).is_some()
}

/// Item 1: datapaths that open flows and exit were noticed only when the agent next sent to
/// them, which a flow without reports never makes it do: 64 of them made every later
/// datapath `too_many_datapaths` for good. The agent checks its datapaths' liveness on its
/// own and frees the vanished ones' slots and flows.
#[test]
fn vanished_datapaths_free_their_slots_and_flows() {
    let name = unique("vanish");
    let ctl = std::env::temp_dir().join(format!("{name}.ctl.sock"));
    let agent = AgentProc::start(
        &name,
        &["--alg", "reno", "--control", ctl.to_str().unwrap()],
        &[],
    );
    for _ in 0..64 {
        let mut ghost = Peer::bind(&unique("ghost"), &name);
        ghost.send(&wire::ready(1)).unwrap();
        ghost
            .send(&wire::create(1, "ccp_reno", 14480, 1448))
            .unwrap();
        // the agent answered the CREATE: it has nothing more to send this datapath
        assert!(try_expect(&mut ghost, CHANGE_PROG, 1, T).is_some());
        drop(ghost); // its socket closes and its file goes: it exited
    }
    // one more that opens 1,000 flows and exits
    let mut ghost = Peer::bind(&unique("ghost-flows"), &name);
    ghost.send(&wire::ready(1)).unwrap();
    for sid in 1..=1000 {
        ghost
            .send(&wire::create(sid, "ccp_reno", 14480, 1448))
            .unwrap();
        assert!(try_expect(&mut ghost, CHANGE_PROG, sid, T).is_some());
    }
    drop(ghost);
    // a new datapath is served, within seconds
    let t0 = Instant::now();
    let mut good = Peer::bind(&unique("after"), &name);
    good.send(&wire::ready(2)).unwrap();
    let mut served = false;
    let mut sid = 1;
    while t0.elapsed() < T {
        if try_roundtrip(&mut good, sid, Duration::from_millis(300)) {
            served = true;
            break;
        }
        sid += 1;
    }
    println!(
        "a new datapath served after {:.3} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        served,
        "no answer to a new datapath within {T:?} after 65 vanished ones"
    );
    // and the vanished ones' flows are gone: only the new datapath's one is live
    let deadline = Instant::now() + T;
    let mut last = serde_json::Value::Null;
    while Instant::now() < deadline {
        last = agent.stats(T).expect("stats");
        if last["live_flows"].as_u64() == Some(1) && last["datapaths"].as_u64() == Some(1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(last["live_flows"].as_u64(), Some(1), "{last}");
    assert_eq!(last["datapaths"].as_u64(), Some(1), "{last}");
    // and closed in the agent itself (portus and the flow tables), not only off the caps
    let mut flows = serde_json::Value::Null;
    while Instant::now() < deadline {
        flows = ccp_runtime::control::request(&ctl, &serde_json::json!({"op": "flows"}), T)
            .expect("control request");
        if flows["total"].as_u64() == Some(1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(flows["total"].as_u64(), Some(1), "{}", flows["total"]);
}

/// Item 1 at the full size: four datapaths that each open 65,535 flows (the agent's
/// cap: 262,140 in all) and exit made every later CREATE `too_many_flows` for good. A new
/// datapath's CREATE is answered within 2 s of their exit. Ignored (a benchmark of about a
/// minute, 1.5 GB in the agent): `cargo test --release -p ccp-agent --test hardening3 --
/// --ignored --nocapture`.
#[test]
#[ignore]
fn ghost_flows_at_the_cap_leave_within_2_s() {
    const PER: u32 = 65_535;
    let name = unique("ghost262k");
    let agent = AgentProc::start(&name, &["--alg", "reno"], &[]);
    let t_fill = Instant::now();
    let ghosts: Vec<_> = (0..4)
        .map(|g| {
            let name = name.clone();
            std::thread::spawn(move || {
                let ghost = Peer::bind(&unique(&format!("ghost{g}")), &name);
                ghost.send(&wire::ready(1)).unwrap();
                // a reader that keeps up, so the ghost is not dropped as a non-reader
                let rx = ghost.sock.try_clone().unwrap();
                rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let reader = std::thread::spawn(move || {
                    let mut buf = vec![0u8; 65536];
                    let mut answers = 0u32;
                    while answers < PER {
                        match rx.recv(&mut buf) {
                            Ok(n)
                                if wire::type_and_sid(&buf[..n]).map(|t| t.0)
                                    == Some(CHANGE_PROG) =>
                            {
                                answers += 1
                            }
                            Ok(_) => {}
                            Err(_) => break,
                        }
                    }
                    answers
                });
                for sid in 1..=PER {
                    ghost
                        .send(&wire::create(sid, "ccp_reno", 14480, 1448))
                        .unwrap();
                }
                let answered = reader.join().unwrap();
                (ghost, answered)
            })
        })
        .collect();
    let ghosts: Vec<_> = ghosts.into_iter().map(|t| t.join().unwrap()).collect();
    let answered: u32 = ghosts.iter().map(|g| g.1).sum();
    let stats = agent.stats(T).expect("stats");
    println!(
        "4 ghosts opened {answered} flows in {:.1} s; agent: live_flows {}, RSS {} MiB",
        t_fill.elapsed().as_secs_f64(),
        stats["live_flows"],
        agent.rss_kib() / 1024
    );
    assert_eq!(answered, 4 * PER, "{stats}");
    assert_eq!(
        stats["live_flows"].as_u64(),
        Some(4 * u64::from(PER)),
        "{stats}"
    );
    drop(ghosts); // they exit: sockets closed, files removed
    let t0 = Instant::now();
    let mut good = Peer::bind(&unique("after262k"), &name);
    good.send(&wire::ready(2)).unwrap();
    let mut sid = 1;
    let mut served = None;
    while t0.elapsed() < T {
        if try_roundtrip(&mut good, sid, Duration::from_millis(200)) {
            served = Some(t0.elapsed());
            break;
        }
        sid += 1;
    }
    let stats = agent.stats(T).expect("stats");
    println!(
        "a new datapath served after {served:?} (CREATEs tried: {sid}); agent: {stats}; RSS {} MiB",
        agent.rss_kib() / 1024
    );
    let served = served.expect("a new datapath was not served within 10 s");
    assert!(served <= Duration::from_secs(2), "served after {served:?}");
}

/// Item 2: thirty datapaths that sent READY and never read filled the agent's socket send
/// buffer (their unread answers were charged to it), so a healthy datapath got no answers
/// and was dropped. Each datapath has a send budget of its own.
#[test]
fn a_healthy_datapath_among_100_non_readers_gets_every_answer() {
    let name = unique("nonread");
    let agent = AgentProc::start(&name, &["--alg", "reno"], &[]);
    let mut idle = Vec::new();
    for _ in 0..100 {
        let p = Peer::bind(&unique("idle"), &name);
        p.send(&wire::ready(1)).unwrap();
        idle.push(p);
    }
    let mut good = Peer::bind(&unique("healthy"), &name);
    good.send(&wire::ready(2)).unwrap();
    let mut answered = 0;
    for sid in 1..=20 {
        if try_roundtrip(&mut good, sid, Duration::from_secs(5)) {
            answered += 1;
        }
        // the idle ones keep knocking (each message brings a dropped one back)
        for p in idle.iter().step_by(7) {
            let _ = p.sock.set_nonblocking(true);
            let _ = p.send(&wire::ready(1));
        }
    }
    let stats = agent.stats(T).expect("stats");
    println!("healthy datapath: {answered} of 20 answered; {stats}");
    assert_eq!(answered, 20, "{stats}");
}

/// Item 1 (seen in ops/hostile_soak.sh): with every slot taken, a new datapath was admitted
/// by forgetting any datapath without live flows, so a healthy one between two flows lost
/// its slot to a flood of new ones and its next CREATE was refused. It keeps its slot.
#[test]
fn a_datapath_between_flows_keeps_its_slot_under_a_flood_of_new_ones() {
    let name = unique("flood");
    let _agent = AgentProc::start(&name, &["--alg", "reno"], &[]);
    let mut holders = Vec::new();
    for _ in 0..63 {
        let mut p = Peer::bind(&unique("holder"), &name);
        p.send(&wire::ready(1)).unwrap();
        p.send(&wire::create(1, "ccp_reno", 14480, 1448)).unwrap();
        assert!(try_expect(&mut p, CHANGE_PROG, 1, T).is_some());
        holders.push(p);
    }
    let mut good = Peer::bind(&unique("between"), &name);
    good.send(&wire::ready(2)).unwrap();
    assert!(try_roundtrip(&mut good, 1, T));
    good.send(&close(1)).unwrap();
    let mut flood = Vec::new();
    for _ in 0..20 {
        let p = Peer::bind(&unique("new"), &name);
        p.send(&wire::ready(3)).unwrap();
        p.send(&wire::create(1, "ccp_reno", 14480, 1448)).unwrap();
        flood.push(p);
    }
    assert!(
        try_roundtrip(&mut good, 2, T),
        "a datapath between two flows lost its slot to new datapaths"
    );
    drop(flood);
    drop(holders);
}

/// Item 5: control clients that sent requests and never read their replies held their
/// slots for good (the idle timeout covered reads only). Replies have a write deadline.
#[test]
fn control_clients_that_never_read_lose_their_slots() {
    let name = unique("ctl-noread");
    let ctl = std::env::temp_dir().join(format!("{name}.ctl.sock"));
    let cfg = std::env::temp_dir().join(format!("{name}.toml"));
    std::fs::write(&cfg, "[control]\nmax_connections = 3\n").unwrap();
    let _agent = AgentProc::start(
        &name,
        &[
            "--control",
            ctl.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ],
        &[],
    );
    let deadline = Instant::now() + T;
    while !ctl.exists() {
        assert!(Instant::now() < deadline, "no control socket");
        std::thread::sleep(Duration::from_millis(10));
    }
    // three clients fill both directions of their connections and never read
    let reqs = "{\"op\":\"flows\"}\n".repeat(4096);
    let mut hogs = Vec::new();
    for _ in 0..3 {
        let mut c = UnixStream::connect(&ctl).unwrap();
        c.set_nonblocking(true).unwrap();
        let mut sent = 0usize;
        let t0 = Instant::now();
        // until the agent stops reading (its replies are stuck), at most 5 s
        while t0.elapsed() < Duration::from_secs(5) {
            match c.write(reqs.as_bytes()) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(50));
                    match c.write(reqs.as_bytes()) {
                        Ok(n) => sent += n,
                        Err(_) => break,
                    }
                }
                Err(_) => break,
            }
        }
        assert!(sent > 0);
        hogs.push(c);
    }
    // a new client is served once the stuck replies hit their deadline
    let t0 = Instant::now();
    let mut last = String::new();
    let mut ok = false;
    while t0.elapsed() < Duration::from_secs(15) {
        match ccp_runtime::control::request(&ctl, &serde_json::json!({"op": "ping"}), T) {
            Ok(v) if v["ok"] == serde_json::json!(true) => {
                ok = true;
                break;
            }
            Ok(v) => last = v.to_string(),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "a new control client served after {:.3} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        ok,
        "3 clients that never read still hold every slot: {last}"
    );
    drop(hogs);
    let _ = std::fs::remove_file(&cfg);
}

/// Item 6: 8 idle TCP connections filled the metrics endpoint; 100 slow scrapers that
/// reconnect let almost no scrape through. Per-connection deadlines, more slots, and the
/// oldest connection still without a request yields to a new one.
#[test]
fn metrics_scrapes_are_answered_among_100_slow_scrapers() {
    let name = unique("loris");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let m = format!("127.0.0.1:{port}");
    let _agent = AgentProc::start(&name, &["--no-control", "--metrics", &m], &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let mut lorises = Vec::new();
    for _ in 0..100 {
        let stop = stop.clone();
        lorises.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                // a byte of the request head now and then, never the end of it
                for b in b"GET /metrics HTTP/1.1\r\nX-Slow: ".iter().cycle() {
                    if stop.load(Ordering::Relaxed) || s.write_all(&[*b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut answered = 0;
    for _ in 0..20 {
        let got = (|| -> std::io::Result<String> {
            let mut s = TcpStream::connect(("127.0.0.1", port))?;
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        })();
        if got.is_ok_and(|t| t.starts_with("HTTP/1.1 200") && t.contains("ccp_")) {
            answered += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for t in lorises {
        let _ = t.join();
    }
    println!("{answered} of 20 scrapes answered among 100 slow scrapers");
    assert!(answered >= 18, "{answered} of 20 scrapes answered");
}

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().expect("mkfifo");
    assert!(st.success());
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(unique(tag));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn one_flow() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../datapath/sim/scenarios/one-flow.toml")
        .display()
        .to_string()
}

/// Run the agent with `args`; its exit code and stderr, or `None` if it had not exited
/// within 20 s (a hang: it is killed). Prints how long it took.
fn run_bounded(what: &str, args: &[&str]) -> Option<(Option<i32>, String)> {
    let t0 = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ccp-agent");
    let (status, out) = common::wait_bounded(child, Duration::from_secs(20));
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    println!(
        "{what}: {:?} after {:.3} s",
        status.map(|s| s.code()),
        t0.elapsed().as_secs_f64()
    );
    status.map(|s| (s.code(), e))
}

/// Items 4 and 8: a FIFO as the `--sim` scenario or as `portfolio.json` hung start-up.
#[test]
fn fifos_as_operator_files_exit_2_at_once_naming_the_file() {
    let d = scratch("fifo-files");
    let sc = d.join("scenario.toml");
    mkfifo(&sc);
    let (code, e) = run_bounded("FIFO scenario", &["--sim", &sc.display().to_string()])
        .expect("a FIFO as the scenario hung the agent");
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("scenario.toml") && e.contains("FIFO"), "{e}");

    let models = d.join("models");
    std::fs::create_dir_all(&models).unwrap();
    mkfifo(&models.join("portfolio.json"));
    let (code, e) = run_bounded(
        "FIFO portfolio",
        &[
            "--models",
            &models.display().to_string(),
            "--sim",
            &one_flow(),
        ],
    )
    .expect("a FIFO as portfolio.json hung the agent");
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("portfolio.json") && e.contains("FIFO"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Items 4, 7 and 8: `/dev/zero` behind a symlink, a 2 GiB sparse model, a symlink loop:
/// refused at once (by their type and size, before any read), exit 2 naming the file.
#[test]
fn devices_sparse_giants_and_symlink_loops_exit_2_naming_the_file() {
    let d = scratch("bounded-files");
    let zero = |name: &str| {
        let p = d.join(name);
        std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
        p.display().to_string()
    };
    // the scenario and the config
    let sc = zero("zero.toml");
    let (code, e) = run_bounded("/dev/zero scenario", &["--sim", &sc]).expect("hung");
    assert_eq!(code, Some(2), "{e}");
    assert!(
        e.contains("zero.toml") && e.contains("character device"),
        "{e}"
    );
    let cfg = zero("zero-config.toml");
    let (code, e) = run_bounded(
        "/dev/zero config",
        &["--config", &cfg, "--sim", &one_flow()],
    )
    .expect("hung");
    assert_eq!(code, Some(2), "{e}");
    assert!(
        e.contains("zero-config.toml") && e.contains("character device"),
        "{e}"
    );

    // portfolio.json -> /dev/zero
    let m1 = d.join("m1");
    std::fs::create_dir_all(&m1).unwrap();
    std::os::unix::fs::symlink("/dev/zero", m1.join("portfolio.json")).unwrap();
    let (code, e) = run_bounded(
        "/dev/zero portfolio",
        &["--models", &m1.display().to_string(), "--sim", &one_flow()],
    )
    .expect("hung");
    assert_eq!(code, Some(2), "{e}");
    assert!(
        e.contains("portfolio.json") && e.contains("character device"),
        "{e}"
    );

    // a 2 GiB sparse mocc.onnx beside a card
    let m2 = d.join("m2");
    std::fs::create_dir_all(&m2).unwrap();
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/mocc.json");
    std::fs::copy(&shipped, m2.join("mocc.json")).unwrap();
    let f = std::fs::File::create(m2.join("mocc.onnx")).unwrap();
    f.set_len(2 << 30).unwrap();
    drop(f);
    let (code, e) = run_bounded(
        "2 GiB sparse model",
        &["--models", &m2.display().to_string(), "--sim", &one_flow()],
    )
    .expect("hung");
    assert_eq!(code, Some(2), "{e}");
    assert!(
        e.contains("mocc.onnx") && e.contains("2147483648 bytes"),
        "{e}"
    );

    // a symlink loop between the model and its card
    let m3 = d.join("m3");
    std::fs::create_dir_all(&m3).unwrap();
    std::os::unix::fs::symlink(m3.join("mocc.json"), m3.join("mocc.onnx")).unwrap();
    std::os::unix::fs::symlink(m3.join("mocc.onnx"), m3.join("mocc.json")).unwrap();
    let (code, e) = run_bounded(
        "symlink loop model",
        &["--models", &m3.display().to_string(), "--sim", &one_flow()],
    )
    .expect("hung");
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("mocc.") && e.contains("symbolic links"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}
