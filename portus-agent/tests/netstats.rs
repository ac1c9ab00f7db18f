//! The agent binary with `--netstats-url`: the poller's counters in the metrics, the agent
//! serving flows whatever the statistics endpoint answers, and bad flags refused.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccp_runtime::ipc::guard::{CHANGE_PROG, UPDATE_FIELDS};
use ccp_runtime::ipc::wire;
use common::{reno_report, unique, AgentProc, Peer};

const T: Duration = Duration::from_secs(10);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("metrics connect");
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// An endpoint answering garbage until `good` is set, then a valid sample.
fn endpoint(good: Arc<AtomicBool>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut seq = 0u64;
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
            let mut b = [0u8; 1024];
            let _ = s.read(&mut b);
            seq += 1;
            let body = if good.load(Ordering::SeqCst) {
                format!(
                    r#"{{"version":1,"seq":{seq},"paths":[{{"dst":"default","pnc_pkts":2,"pna":0.5,"known_share":1}}]}}"#
                )
            } else {
                "<html>not the statistics</html>".to_string()
            };
            let _ = s.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    port
}

#[test]
fn the_agent_polls_counts_and_keeps_serving_whatever_the_endpoint_says() {
    let good = Arc::new(AtomicBool::new(false));
    let ep = endpoint(good.clone());
    let name = unique("netstats");
    let cfg = std::env::temp_dir().join(format!("{name}.toml"));
    std::fs::write(
        &cfg,
        "[netstats]\nperiod_ms = 100\ntimeout_ms = 80\nstale_after_ms = 400\n",
    )
    .unwrap();
    let metrics = free_port();
    let m = format!("127.0.0.1:{metrics}");
    let url = format!("http://127.0.0.1:{ep}/netstats");
    let mut agent = AgentProc::start(
        &name,
        &[
            "--alg",
            "reno",
            "--no-control",
            "--config",
            cfg.to_str().unwrap(),
            "--metrics",
            &m,
            "--netstats-url",
            &url,
        ],
        &[("CCP_LOG", "info")],
    );
    let mut peer = Peer::bind(&format!("{name}-dp"), &name);
    peer.send(&wire::create_from(
        1,
        "reno",
        14480,
        1448,
        ("10.0.1.1:40000", "10.0.2.2:5201"),
    ))
    .unwrap();
    let cp = peer.expect(CHANGE_PROG, 1, T);
    let uid = wire::change_prog_uid(&cp).unwrap();
    let report = |peer: &mut Peer| {
        peer.send(&wire::measure(1, uid, &reno_report())).unwrap();
        peer.expect(UPDATE_FIELDS, 1, T);
    };
    let until = |what: &str, peer: &mut Peer, f: &dyn Fn(&str) -> bool| {
        let t0 = Instant::now();
        loop {
            report(peer); // every report is answered meanwhile
            let text = scrape(metrics);
            if f(&text) {
                return text;
            }
            assert!(t0.elapsed() < T, "timed out: {what}\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let text = until("bad replies counted", &mut peer, &|t| {
        metric(t, "ccp_netstats_polls_failed_total{reason=\"bad_json\"}") >= 3.0
    });
    assert_eq!(metric(&text, "ccp_netstats_fresh_paths"), 0.0);
    assert_eq!(metric(&text, "ccp_netstats_polls_ok_total"), 0.0);
    good.store(true, Ordering::SeqCst);
    let text = until("a good reply", &mut peer, &|t| {
        metric(t, "ccp_netstats_fresh_paths") == 1.0
    });
    assert!(metric(&text, "ccp_netstats_polls_ok_total") >= 1.0);
    assert!(agent.is_running());
    assert_eq!(agent.stop(T).and_then(|s| s.code()), Some(0));
    let _ = std::fs::remove_file(&cfg);
}

#[test]
fn bad_netstats_flags_are_refused_naming_the_fix() {
    let bin = env!("CARGO_BIN_EXE_ccp-agent");
    let name = unique("nsbad");
    let cfg = std::env::temp_dir().join(format!("{name}.toml"));
    for (args, conf, says) in [
        (
            vec!["--netstats-url", "https://r:9465/"],
            "",
            "https is not supported",
        ),
        (
            vec!["--netstats-url", "http://r:9465/", "--sim", "x.toml"],
            "",
            "cannot be used with",
        ),
        (
            vec![],
            "[netstats]\nurl = \"r:9465\"\n",
            "not an http:// URL",
        ),
        (
            vec![],
            "[netstats]\nperiod_ms = 100\ntimeout_ms = 100\n",
            "timeout_ms = 100",
        ),
    ] {
        std::fs::write(&cfg, conf).unwrap();
        let o = Command::new(bin)
            .args(["--ipc", "unix", "--unix-name", &name, "--no-control"])
            .args(["--config", cfg.to_str().unwrap()])
            .args(&args)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?} {conf}: {e}");
        assert!(e.contains(says), "{args:?} {conf}: {e}");
    }
    let _ = std::fs::remove_file(&cfg);
}
