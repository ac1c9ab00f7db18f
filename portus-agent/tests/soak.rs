//! Soak benchmark (issue 25, item 5): create/report/close cycles at full speed through the
//! unix IPC against the agent binary, printing the agent's resident memory as it goes. It is
//! a benchmark, not a timed assert: it checks that the agent is alive, answered every
//! message, and (create/report/close cycles) that its RSS stayed flat: at the end at most
//! `RSS_GROWTH_KIB` above the first sample after warm-up (a tenth of the cycles).
//!
//! ```text
//! cargo test --release -p ccp-agent --test soak -- --ignored --nocapture
//! CCP_SOAK_CYCLES=200000 CCP_AGENT_BIN=/path/to/other/ccp-agent cargo test ... (compare)
//! CCP_SOAK_MODE=creates ...   # CREATEs only, never closed (the live-flow cap's case)
//! ```
//!
//! Each cycle is one flow as a datapath runs it: CREATE (answered with CHANGE_PROG), one
//! report (answered with UPDATE_FIELDS), close; one datagram per message, socket ids never
//! reused. A reader thread drains the answers while the writer sends; the agent's receive
//! queue paces the writer.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccp_runtime::ipc::guard::{CHANGE_PROG, UPDATE_FIELDS};
use ccp_runtime::ipc::wire;
use common::{close, reno_report, unique, AgentProc, Peer};

/// Most the agent's RSS may grow from the first sample (after a tenth of the cycles) to the
/// end of the create/report/close cycles: a leak of a byte per cycle over 1 M cycles fails.
const RSS_GROWTH_KIB: u64 = 1024;

#[test]
#[ignore = "benchmark: 1 M cycles, run with --ignored --nocapture"]
fn soak_create_report_close_over_unix() {
    let cycles: u64 = std::env::var("CCP_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let creates_only = std::env::var("CCP_SOAK_MODE").is_ok_and(|m| m == "creates");
    let name = unique("soak");
    let mut agent = match std::env::var("CCP_AGENT_BIN") {
        Ok(bin) => AgentProc::start_bin(&bin, &name, &["--alg", "reno"], &[]),
        Err(_) => AgentProc::start(&name, &["--alg", "reno"], &[]),
    };
    let mut peer = Peer::bind(&unique("soak-dp"), &name);
    peer.send(&wire::ready(1)).unwrap();
    // the Reno program's uid, from a first flow
    peer.send(&wire::create(u32::MAX, "ccp_reno", 14480, 1448))
        .unwrap();
    let cp = peer.expect(CHANGE_PROG, u32::MAX, Duration::from_secs(5));
    let uid = wire::change_prog_uid(&cp).unwrap();
    peer.send(&close(u32::MAX)).unwrap();

    let changes = Arc::new(AtomicU64::new(0));
    let updates = Arc::new(AtomicU64::new(0));
    let reader = peer.sock.try_clone().unwrap();
    reader
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let (c2, u2) = (changes.clone(), updates.clone());
    let drain = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = reader.recv(&mut buf) {
            match wire::type_and_sid(&buf[..n]).map(|t| t.0) {
                Some(CHANGE_PROG) => c2.fetch_add(1, Ordering::Relaxed),
                Some(UPDATE_FIELDS) => u2.fetch_add(1, Ordering::Relaxed),
                _ => 0,
            };
        }
    });
    let report = reno_report();
    let rss0 = agent.rss_kib();
    println!(
        "soak: {cycles} {} over unix; agent pid {}",
        if creates_only {
            "CREATEs (never closed)"
        } else {
            "create/report/close cycles"
        },
        agent.pid()
    );
    println!(
        "{:>9} {:>9} {:>8} {:>10}",
        "cycles", "RSS MiB", "s", "cycles/s"
    );
    println!(
        "{:>9} {:>9.1} {:>8.1} {:>10}",
        0,
        rss0 as f64 / 1024.0,
        0.0,
        "-"
    );
    let t0 = Instant::now();
    let mut last = t0;
    let step = (cycles / 10).max(1);
    let mut max_rss = rss0;
    let mut rss_warm = None;
    for i in 0..cycles {
        let sid = (i % (u32::MAX as u64 - 1)) as u32 + 1;
        peer.send(&wire::create(sid, "ccp_reno", 14480, 1448))
            .expect("send CREATE (agent stuck?)");
        if !creates_only {
            peer.send(&wire::measure(sid, uid, &report))
                .expect("send MEASURE");
            peer.send(&close(sid)).expect("send close");
        }
        if (i + 1) % step == 0 {
            let rss = agent.rss_kib();
            max_rss = max_rss.max(rss);
            rss_warm.get_or_insert(rss);
            let now = Instant::now();
            println!(
                "{:>9} {:>9.1} {:>8.1} {:>10.0}",
                i + 1,
                rss as f64 / 1024.0,
                now.duration_since(t0).as_secs_f64(),
                step as f64 / now.duration_since(last).as_secs_f64()
            );
            last = now;
        }
    }
    // every answer in
    let deadline = Instant::now() + Duration::from_secs(30);
    while !creates_only && updates.load(Ordering::Relaxed) < cycles && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let rss1 = agent.rss_kib();
    assert!(agent.is_running(), "agent died: {}", agent.stderr_text());
    let st = agent.stop(Duration::from_secs(10));
    drain.join().unwrap();
    let (c, u) = (
        changes.load(Ordering::Relaxed),
        updates.load(Ordering::Relaxed),
    );
    println!(
        "soak: {cycles} cycles in {elapsed:.1} s ({:.0}/s); RSS {:.1} -> {:.1} MiB (max {:.1}); \
         answers: {c} CHANGE_PROG, {u} UPDATE_FIELDS; exit {:?}",
        cycles as f64 / elapsed,
        rss0 as f64 / 1024.0,
        rss1 as f64 / 1024.0,
        max_rss as f64 / 1024.0,
        st.and_then(|s| s.code())
    );
    if creates_only {
        // the agent answers up to its live-flow cap (an older agent: every CREATE)
        assert!(c >= cycles.min(1000), "answers missing: {c}");
    } else {
        assert!(c >= cycles && u >= cycles, "answers missing: {c} {u}");
        let warm = rss_warm.unwrap_or(rss0);
        assert!(
            rss1 <= warm + RSS_GROWTH_KIB,
            "RSS grew from {warm} KiB (after warm-up) to {rss1} KiB: more than \
             {RSS_GROWTH_KIB} KiB over the cycles (a leak?)"
        );
    }
}
