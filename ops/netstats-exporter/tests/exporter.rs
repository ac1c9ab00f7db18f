//! The exporter against the real kernel (loopback) and the agent's poller reading it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccp_algs::netstats::{NetworkStats, PathKey};
use ccp_netstats_exporter::model::{LinkCounters, QdiscCounters};
use ccp_netstats_exporter::rtnl::Rtnl;
use ccp_netstats_exporter::{
    compute, parse_link, parse_path, respond, sample_loop, Exporter, ExporterConfig, Published,
};
use ccp_runtime::sources::netstats::{NetStatsConfig, NetStatsPoller};

/// An rtnetlink socket, or why the test cannot run here.
fn rtnl_or_skip(test: &str) -> Option<Rtnl> {
    match Rtnl::open().and_then(|mut n| n.counters().map(|c| (n, c))) {
        Ok((n, c)) if c.contains_key("lo") => Some(n),
        Ok(_) => {
            ccp_runtime::testing::skip(test, "no loopback interface in this namespace");
            None
        }
        Err(e) => {
            ccp_runtime::testing::skip(test, format_args!("rtnetlink unavailable here ({e})"));
            None
        }
    }
}

/// Send `n` datagrams of `size` bytes to a socket on 127.0.0.1.
fn blast(n: usize, size: usize) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = rx.local_addr().unwrap();
    let buf = vec![0x5a; size];
    for _ in 0..n {
        let _ = tx.send_to(&buf, to);
    }
}

fn cfg(links: &[&str], paths: &[&str], period_ms: u64) -> ExporterConfig {
    ExporterConfig {
        links: links.iter().map(|l| parse_link(l).unwrap()).collect(),
        paths: paths.iter().map(|p| parse_path(p).unwrap()).collect(),
        period: Duration::from_millis(period_ms),
        known_share: 0.5,
        listen: "127.0.0.1:0".parse().unwrap(),
    }
}

#[test]
fn loopback_counters_move_when_packets_are_sent() {
    let Some(mut nl) = rtnl_or_skip("loopback_counters_move_when_packets_are_sent") else {
        return;
    };
    let before = nl.counters().unwrap()["lo"];
    blast(200, 1000);
    let after = nl.counters().unwrap()["lo"];
    // other processes may use loopback too: at least ours moved the counters
    assert!(
        after.tx_packets >= before.tx_packets + 200,
        "{before:?} {after:?}"
    );
    assert!(after.tx_bytes >= before.tx_bytes + 200 * 1000);
    assert!(after.rx_packets >= before.rx_packets + 200);
    // lo has a root qdisc (noqueue, no statistics) or none: never a made-up queue
    assert_eq!(after.qdisc.map(|q| q.qlen).unwrap_or(0), 0);
}

#[test]
fn unmeasurable_periods_publish_nothing() {
    // a fake router's eth1: (tx packets, qdisc drops) per reading; the third reading is after
    // the interface was re-created (counters back near zero)
    let mut snaps = vec![(100u64, 0u32), (1100, 10), (50, 10), (1050, 30), (2050, 30)].into_iter();
    let out: Published = Arc::new(Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    // what was published when each reading was taken (a reading publishes the period that
    // ends with it, before the next one)
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (o2, st2, seen2) = (out.clone(), stop.clone(), seen.clone());
    let read = move || {
        let now = o2
            .lock()
            .unwrap()
            .as_ref()
            .map(|x: &ccp_netstats_exporter::Sample| {
                (x.seq, x.links[0]["drops"].as_u64().unwrap())
            });
        seen2.lock().unwrap().push(now);
        let Some((pk, drops)) = snaps.next() else {
            st2.store(true, Ordering::Relaxed);
            return Err(std::io::Error::other("done"));
        };
        let c = LinkCounters {
            tx_packets: pk,
            tx_bytes: pk * 1500,
            qdisc: Some(QdiscCounters {
                drops,
                qlen: 0,
                backlog_bytes: 0,
            }),
            ..Default::default()
        };
        Ok(HashMap::from([("eth1".to_string(), c)]))
    };
    let c = cfg(&["eth1=100mbit"], &[], 100);
    sample_loop(&c, read, &out, &stop);
    let seen = seen.lock().unwrap().clone();
    let drops: Vec<Option<u64>> = seen.iter().map(|s| s.map(|x| x.1)).collect();
    // periods: 0→1 (10 drops), 1→2 went back (nothing), 2→3 (20), 3→4 (0)
    assert_eq!(drops, [None, None, Some(10), Some(10), Some(20), Some(0)]);
    let seqs: Vec<u64> = seen.iter().flatten().map(|x| x.0).collect();
    assert_eq!(seqs[0], seqs[1], "the reset period published nothing");
    assert!(seqs[1] < seqs[2] && seqs[2] < seqs[3]);
}

#[test]
fn paths_take_their_own_links_and_the_server_answers_only_get() {
    let c = cfg(
        &["eth1=100mbit", "eth2=10mbit"],
        &["default", "10.0.2.0/24=eth1"],
        1000,
    );
    let z = LinkCounters::default();
    let prev = HashMap::from([("eth1".to_string(), z), ("eth2".to_string(), z)]);
    let mut cur = prev.clone();
    // eth1: 50 Mbit/s; eth2: 9 Mbit/s and 40 packets dropped by its interface
    cur.get_mut("eth1").unwrap().tx_bytes = 6_250_000;
    let e2 = cur.get_mut("eth2").unwrap();
    e2.tx_bytes = 1_125_000;
    e2.tx_dropped = 40;
    let (paths, links) = compute(&c, &prev, &cur, 1.0).unwrap();
    assert_eq!(paths[0]["dst"], "default");
    assert_eq!(paths[0]["pnc_pkts"], 40.0);
    assert!((paths[0]["pna"].as_f64().unwrap() - 0.1).abs() < 1e-9);
    assert_eq!(paths[1]["dst"], "10.0.2.0/24");
    assert_eq!(
        (paths[1]["pnc_pkts"].as_f64(), paths[1]["pna"].as_f64()),
        (Some(0.0), Some(0.5))
    );
    assert_eq!(paths[1]["known_share"], 0.5);
    assert_eq!(links[1]["name"], "eth2");
    assert_eq!(links[1]["drops"], 40);
    // a link gone from the dump: no sample
    cur.remove("eth2");
    assert!(compute(&c, &prev, &cur, 1.0).unwrap_err().contains("eth2"));

    let p: Published = Arc::new(Mutex::new(None));
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    assert!(text(respond(b"GET /netstats HTTP/1.1\r\n\r\n", &p)).starts_with("HTTP/1.1 503"));
    *p.lock().unwrap() = Some(ccp_netstats_exporter::Sample {
        seq: 3,
        at: Instant::now(),
        period_ms: 1000,
        paths,
        links,
    });
    let ok = text(respond(b"GET /netstats?x HTTP/1.1\r\nHost: r\r\n\r\n", &p));
    assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
    let body = ok.split("\r\n\r\n").nth(1).unwrap();
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        (v["version"].as_u64(), v["seq"].as_u64()),
        (Some(1), Some(3))
    );
    // what the agent's poller reads
    assert_eq!(
        ccp_runtime::sources::netstats::parse_reply(body.as_bytes())
            .unwrap()
            .len(),
        2
    );
    assert!(text(respond(b"POST /netstats HTTP/1.1\r\n\r\n", &p)).starts_with("HTTP/1.1 405"));
    assert!(text(respond(b"GET /other HTTP/1.1\r\n\r\n", &p)).starts_with("HTTP/1.1 404"));
    assert!(text(respond(b"\xff\xfe", &p)).starts_with("HTTP/1.1 405"));
}

#[test]
fn bad_flags_exit_2_naming_the_fix() {
    let bin = env!("CARGO_BIN_EXE_ccp-netstats-exporter");
    for (args, says) in [
        (
            &["--link", "nosuchif0=1gbit"][..],
            "no interface \"nosuchif0\"",
        ),
        (&["--link", "lo=1gbps"][..], "bytes per second"),
        (&["--link", "lo"][..], "NAME=RATE"),
        (
            &["--link", "lo=1gbit", "--path", "foo"][..],
            "--path \"foo\"",
        ),
        (
            &["--link", "lo=1gbit", "--period-ms", "5"][..],
            "--period-ms 5",
        ),
        (&[][..], "--link"),
    ] {
        let o = Command::new(bin).args(args).output().unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        if e.contains("rtnetlink") {
            eprintln!("SKIPPED {args:?}: {e}");
            continue;
        }
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

#[test]
fn the_agents_poller_reads_the_exporter_on_loopback() {
    let Some(mut nl) = rtnl_or_skip("the_agents_poller_reads_the_exporter_on_loopback") else {
        return;
    };
    // loopback as a 8 Mbit/s port: our blast fills it (PNA 0)
    let c = cfg(&["lo=8mbit"], &["default", "127.0.0.0/8=lo"], 100);
    let x = Exporter::spawn(c, move || nl.counters()).unwrap();
    let url = format!("http://{}/netstats", x.addr).parse().unwrap();
    let pcfg = NetStatsConfig {
        url: None,
        period: Duration::from_millis(100),
        timeout: Duration::from_millis(80),
        stale_after: Duration::from_millis(600),
    };
    let poller = NetStatsPoller::spawn(url, &pcfg).unwrap();
    let src = poller.source();
    let local = PathKey {
        dst: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    };
    let until = |what: &str, f: &dyn Fn() -> bool| {
        let t0 = Instant::now();
        while !f() {
            assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
            blast(20, 8000); // about 1.6 MB/s at this pace: twice the port
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    until("a saturated sample", &|| {
        src.latest(&local).is_some_and(|s| s.pna() == 0.0)
    });
    let s = src.latest(&local).unwrap();
    assert_eq!(s.known_share(), 0.5);
    assert!(s.pnc_pkts().is_finite() && s.pnc_pkts() >= 0.0);
    assert!(s.age_us() < 600_000);
    let first = s.seq();
    until("a newer sample", &|| {
        src.latest(&PathKey::default())
            .is_some_and(|s| s.seq() > first)
    });
    assert!(src.counters.ok.load(Ordering::Relaxed) >= 2);
    // the exporter goes away: the poller's samples go stale and are withdrawn
    let addr: SocketAddr = x.addr;
    x.stop();
    until("masked after the exporter stopped", &|| {
        src.latest(&local).is_none()
    });
    let failed: u64 = src
        .counters
        .failed
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum();
    assert!(failed >= 1, "no failed poll counted after {addr} stopped");
    poller.stop();
}
