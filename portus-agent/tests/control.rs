//! The control plane end to end: the agent binary over unix datagrams (a datapath played by
//! the test, CREATEs with real addresses), its control socket, its metrics endpoint, its
//! config file's `[[preference]]` rules and SIGHUP.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ccp_runtime::control::request;
use ccp_runtime::ipc::guard::{CHANGE_PROG, UPDATE_FIELDS};
use ccp_runtime::ipc::wire;
use common::{reno_report, unique, AgentProc, Peer};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(10);

struct Setup {
    agent: AgentProc,
    peer: Peer,
    ctl: PathBuf,
    flow_log: PathBuf,
    config: PathBuf,
    metrics: u16,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.flow_log);
        let _ = std::fs::remove_file(&self.config);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn start(config: &str) -> Setup {
    start_at(config, None)
}

/// An agent serving the control socket `ctl` (a new path if `None`).
fn start_at(config: &str, ctl: Option<PathBuf>) -> Setup {
    let name = unique("ctl");
    let dir = std::env::temp_dir();
    let ctl = ctl.unwrap_or_else(|| dir.join(format!("{name}.ctl.sock")));
    let flow_log = dir.join(format!("{name}.flows.jsonl"));
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(&cfg, config).unwrap();
    let metrics = free_port();
    let m = format!("127.0.0.1:{metrics}");
    let agent = AgentProc::start(
        &name,
        &[
            "--alg",
            "reno",
            "--w",
            "0.4,0.5,0.1",
            "--config",
            cfg.to_str().unwrap(),
            "--control",
            ctl.to_str().unwrap(),
            "--metrics",
            &m,
            "--flow-log",
            flow_log.to_str().unwrap(),
        ],
        &[("CCP_LOG", "info")],
    );
    let deadline = Instant::now() + T;
    while !ctl.exists() {
        assert!(Instant::now() < deadline, "no control socket");
        std::thread::sleep(Duration::from_millis(10));
    }
    let peer = Peer::bind(&format!("{name}-dp"), &name);
    Setup {
        agent,
        peer,
        ctl,
        flow_log,
        config: cfg,
        metrics,
    }
}

fn ctl(s: &Setup, req: Value) -> Value {
    request(&s.ctl, &req, T).expect("control request")
}

fn set_pref(s: &Setup, local: &str, remote: &str, w: [f64; 3]) -> Value {
    ctl(
        s,
        json!({"op": "set-pref", "local": local, "remote": remote, "w": w}),
    )
}

/// A flow: CREATE with addresses, wait for its program; returns the program uid.
fn create(s: &mut Setup, sid: u32, name: &str, local: &str, remote: &str) -> u32 {
    s.peer
        .send(&wire::create_from(sid, name, 14480, 1448, (local, remote)))
        .expect("send create");
    let cp = s.peer.expect(CHANGE_PROG, sid, T);
    wire::change_prog_uid(&cp).expect("uid")
}

fn report(s: &mut Setup, sid: u32, uid: u32) {
    s.peer
        .send(&wire::measure(sid, uid, &reno_report()))
        .expect("send measure");
    s.peer.expect(UPDATE_FIELDS, sid, T);
}

fn flow(flows: &Value, sid: u32) -> &Value {
    flows["flows"]
        .as_array()
        .and_then(|v| v.iter().find(|f| f["sid"] == json!(sid)))
        .unwrap_or_else(|| panic!("no flow {sid} in {flows}"))
}

fn log_events(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
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

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

const CONFIG: &str = r#"
[control]
pending_ttl_s = 1.5
max_connections = 3

[[preference]]
name = "web"
dst_port = 80
w = [0.2, 0.2, 0.6]
"#;

#[test]
fn preferences_resolve_in_order_change_mid_flow_and_pending_ones_expire() {
    let mut s = start(CONFIG);
    let a = ("10.0.1.1:40000", "10.0.2.2:5201");
    let b = ("10.0.1.1:40001", "10.0.2.2:80");
    let c = ("10.0.1.1:40002", "10.0.2.2:5201");

    // set before the flow exists: it waits
    let r = set_pref(&s, a.0, a.1, [0.8, 0.1, 0.1]);
    assert_eq!(r["state"], json!("pending"), "{r}");
    let ua = create(&mut s, 1, "ccp_reno", a.0, a.1);
    let ub = create(&mut s, 2, "ccp_reno", b.0, b.1);
    let uc = create(&mut s, 3, "ccp_reno;w=0.3,0.3,0.4", c.0, c.1);
    let _ = create(&mut s, 4, "ccp_reno", "0.0.0.0:0", "0.0.0.0:0");
    let flows = ctl(&s, json!({"op": "flows"}));
    for (sid, w, src) in [
        (1, [0.8, 0.1, 0.1], "socket"),
        (2, [0.2, 0.2, 0.6], "rule:web"),
        (3, [0.3, 0.3, 0.4], "request"),
        (4, [0.4, 0.5, 0.1], "default"),
    ] {
        let f = flow(&flows, sid);
        assert_eq!(f["w"], json!(w), "sid {sid}: {f}");
        assert_eq!(f["w_source"], json!(src), "sid {sid}: {f}");
    }
    assert_eq!(flow(&flows, 1)["src"], json!(a.0));
    assert_eq!(flow(&flows, 1)["dst"], json!(a.1));
    let ev = log_events(&s.flow_log);
    let created = ev
        .iter()
        .find(|e| e["event"] == json!("create") && e["sid"] == json!(1))
        .expect("create event");
    assert_eq!(created["w"], json!([0.8, 0.1, 0.1]));
    assert_eq!(created["w_source"], json!("socket"));

    // mid-flow: the rule's flow gets a socket entry; its next decision uses it
    report(&mut s, 2, ub);
    let r = set_pref(&s, b.0, b.1, [0.1, 0.8, 0.1]);
    assert_eq!(r["state"], json!("applied"), "{r}");
    assert_eq!(r["sids"], json!([2]));
    assert!(!log_events(&s.flow_log)
        .iter()
        .any(|e| e["event"] == json!("pref")));
    report(&mut s, 2, ub);
    let ev = log_events(&s.flow_log);
    let p = ev
        .iter()
        .find(|e| e["event"] == json!("pref") && e["sid"] == json!(2))
        .expect("pref event at the next decision");
    assert_eq!(p["w"], json!([0.1, 0.8, 0.1]));
    assert_eq!(p["w_source"], json!("socket"));
    assert_eq!(p["reports"], json!(2), "taken at the second decision");
    assert_eq!(
        flow(&ctl(&s, json!({"op": "flows"})), 2)["w_source"],
        json!("socket")
    );

    // cleared: back to the rule at the next decision
    let r = ctl(&s, json!({"op": "clear-pref", "local": b.0, "remote": b.1}));
    assert_eq!(r, json!({"ok": true, "removed": true}));
    report(&mut s, 2, ub);
    let f = flow(&ctl(&s, json!({"op": "flows"})), 2).clone();
    assert_eq!(
        (f["w"].clone(), f["w_source"].clone()),
        (json!([0.2, 0.2, 0.6]), json!("rule:web"))
    );

    // a pending entry that no flow claims expires (ttl 1.5 s)
    let d = ("10.0.1.1:40003", "10.0.2.2:5201");
    set_pref(&s, d.0, d.1, [1.0, 0.0, 0.0]);
    let listed = ctl(&s, json!({"op": "prefs"}));
    assert_eq!(
        listed["prefs"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    std::thread::sleep(Duration::from_millis(2600));
    let listed = ctl(&s, json!({"op": "prefs"}));
    let left: Vec<_> = listed["prefs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["local"].clone())
        .collect();
    assert_eq!(left, [json!(a.0)], "only the bound entry stays: {listed}");
    create(&mut s, 5, "ccp_reno", d.0, d.1);
    assert_eq!(
        flow(&ctl(&s, json!({"op": "flows"})), 5)["w_source"],
        json!("default")
    );

    // the metrics endpoint counts all this
    report(&mut s, 1, ua);
    report(&mut s, 3, uc);
    let m = scrape(s.metrics);
    assert!(m.starts_with("HTTP/1.1 200 OK"), "{m}");
    assert_eq!(metric(&m, "ccp_flows{alg=\"reno\"}"), Some(5.0), "{m}");
    assert_eq!(metric(&m, "ccp_decisions_total"), Some(5.0), "{m}");
    assert_eq!(metric(&m, "ccp_decision_seconds_count"), Some(5.0), "{m}");
    assert_eq!(
        metric(&m, "ccp_pref_flows_total{source=\"socket\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric(&m, "ccp_pref_flows_total{source=\"rule\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric(&m, "ccp_pref_flows_total{source=\"request\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric(&m, "ccp_pref_flows_total{source=\"default\"}"),
        Some(2.0)
    );
    assert_eq!(metric(&m, "ccp_pref_expired_total"), Some(1.0));
    assert_eq!(metric(&m, "ccp_pref_changed_mid_flow_total"), Some(2.0));
    assert_eq!(
        metric(&m, "ccp_pref_requests_total{outcome=\"set\"}"),
        Some(3.0)
    );
    let stats = ctl(&s, json!({"op": "stats"}));
    assert_eq!(
        stats["metrics"]["ccp_decisions_total"],
        json!(5.0),
        "{stats}"
    );
    assert!(s.agent.is_running());
}

#[test]
fn a_restarted_agent_takes_the_saved_preferences_back() {
    let mut s = start(CONFIG);
    let ctl_path = s.ctl.clone();
    let state = ccp_runtime::control::state_file(&ctl_path);
    let a = ("10.0.1.1:40000", "10.0.2.2:5201");
    let b = ("10.0.1.1:40001", "10.0.2.2:5201");
    set_pref(&s, a.0, a.1, [0.8, 0.1, 0.1]);
    create(&mut s, 1, "ccp_reno", b.0, b.1);
    set_pref(&s, b.0, b.1, [0.1, 0.8, 0.1]);
    assert!(s.agent.stop(T).is_some_and(|st| st.success()));
    assert!(!ctl_path.exists(), "the socket file goes with the agent");
    let saved = std::fs::read_to_string(&state).expect("saved preferences");
    assert!(saved.contains(a.0) && saved.contains(b.0), "{saved}");
    drop(s);
    // a new agent on the same control socket: both wait for their (re-announced) flows
    let mut s = start_at("", Some(ctl_path));
    let listed = ctl(&s, json!({"op": "prefs"}));
    assert_eq!(
        listed["prefs"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    create(&mut s, 1, "ccp_reno", b.0, b.1);
    let f = flow(&ctl(&s, json!({"op": "flows"})), 1).clone();
    assert_eq!(
        (f["w"].clone(), f["w_source"].clone()),
        (json!([0.1, 0.8, 0.1]), json!("socket"))
    );
    let _ = std::fs::remove_file(&state);
}

#[test]
fn sighup_reloads_rules_for_live_flows_and_a_bad_file_keeps_them() {
    let mut s = start(CONFIG);
    let c = ("10.0.1.1:40002", "10.0.2.2:5201");
    let u = create(&mut s, 3, "ccp_reno;w=0.3,0.3,0.4", c.0, c.1);
    report(&mut s, 3, u);
    std::fs::write(
        &s.config,
        format!("{CONFIG}\n[[preference]]\nname = \"iperf\"\ndst_port = \"5201-5210\"\nw = \"0.1,0.8,0.1\"\n"),
    )
    .unwrap();
    s.agent.signal("HUP");
    let deadline = Instant::now() + T;
    loop {
        report(&mut s, 3, u);
        let f = flow(&ctl(&s, json!({"op": "flows"})), 3).clone();
        if f["w_source"] == json!("rule:iperf") {
            assert_eq!(f["w"], json!([0.1, 0.8, 0.1]));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rule not applied after SIGHUP: {f}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // a broken file: the rules in force stay, the agent lives
    std::fs::write(&s.config, "[[preference]]\nuid = 1000\nw = [1, 0, 0]\n").unwrap();
    s.agent.signal("HUP");
    // the refusal is logged once the agent has read the file; the rules stay meanwhile
    let deadline = Instant::now() + T;
    while !s.agent.stderr_text().contains("config not reloaded") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    report(&mut s, 3, u);
    assert_eq!(
        flow(&ctl(&s, json!({"op": "flows"})), 3)["w_source"],
        json!("rule:iperf")
    );
    assert!(s.agent.is_running());
    assert!(
        s.agent.stderr_text().contains("config not reloaded"),
        "{}",
        s.agent.stderr_text()
    );
}

fn raw(s: &Setup) -> (UnixStream, BufReader<UnixStream>) {
    let c = UnixStream::connect(&s.ctl).expect("connect");
    c.set_read_timeout(Some(T)).unwrap();
    let r = BufReader::new(c.try_clone().unwrap());
    (c, r)
}

fn line(r: &mut BufReader<UnixStream>) -> Value {
    let mut l = String::new();
    r.read_line(&mut l).expect("reply");
    serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l:?}: {e}"))
}

#[test]
fn bad_requests_get_error_replies_and_the_socket_is_bounded() {
    let s = start(CONFIG);
    let (mut c, mut r) = raw(&s);
    for (req, code) in [
        ("garbage", "bad_json"),
        (
            r#"{"op":"set-pref","local":"1.2.3.4:5","remote":"x","w":[1,0,0]}"#,
            "bad_address",
        ),
        (
            r#"{"op":"set-pref","local":"1.2.3.4:5","remote":"1.2.3.5:6","w":[1,1,1]}"#,
            "bad_w",
        ),
        (r#"{"op":"nope"}"#, "unknown_op"),
    ] {
        c.write_all(format!("{req}\n").as_bytes()).unwrap();
        let v = line(&mut r);
        assert_eq!(v["code"], json!(code), "{req}: {v}");
    }
    // the same connection still works after errors
    c.write_all(b"{\"op\":\"ping\"}\n").unwrap();
    assert_eq!(line(&mut r)["ok"], json!(true));
    // a line over 4096 bytes: refused and closed
    let big = format!("{{\"op\":\"ping\",\"x\":\"{}\"}}\n", "a".repeat(5000));
    c.write_all(big.as_bytes()).unwrap();
    assert_eq!(line(&mut r)["code"], json!("too_large"));
    let mut rest = String::new();
    assert_eq!(r.read_line(&mut rest).unwrap_or(0), 0, "closed: {rest:?}");

    // at most max_connections (3) at once
    let held: Vec<_> = (0..3).map(|_| raw(&s)).collect();
    std::thread::sleep(Duration::from_millis(100));
    let (_c4, mut r4) = raw(&s);
    assert_eq!(line(&mut r4)["code"], json!("too_many_connections"));
    drop(held);
    // the slots are free once the agent has seen the three connections close
    let deadline = Instant::now() + T;
    let mut last = json!(null);
    while Instant::now() < deadline {
        last = request(&s.ctl, &json!({"op": "ping"}), T).unwrap();
        if last["ok"] == json!(true) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(last["ok"], json!(true), "{last}");
}

#[test]
fn the_control_socket_is_0660_and_refuses_other_users() {
    let s = start(CONFIG);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&s.ctl).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    // SAFETY: no preconditions
    if unsafe { libc_geteuid() } != 0 {
        ccp_runtime::skip_test!("not root: the refusal of another uid is not tested here");
        return;
    }
    // uid nobody with gid 0 passes the file's group permission, so the agent's own check
    // (SO_PEERCRED: not root, not the agent's user, no group configured, no CAP_NET_ADMIN)
    // is what refuses it
    use std::os::unix::process::CommandExt;
    let o = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(["ctl", "--control", s.ctl.to_str().unwrap(), "ping"])
        .uid(65534)
        .gid(0)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("not_permitted") && e.contains("uid 65534"),
        "{e}"
    );
    // and with another primary group the kernel refuses the connect itself
    let o = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(["ctl", "--control", s.ctl.to_str().unwrap(), "ping"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("Permission denied"), "{e}");
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

#[test]
fn bad_config_sections_exit_2_naming_the_problem() {
    let dir = std::env::temp_dir();
    for (text, needle) in [
        (
            "[[preference]]\nuid = 1000\nw = [1, 0, 0]\n",
            "uid/cgroup rules",
        ),
        (
            "[[preference]]\nw = [1, 0, 0]\n",
            "at least one of dst_port",
        ),
        ("[[preference]]\ndst_port = 80\n", "missing w"),
        ("[[preference]]\ndst_port = 80\nw = [1, 1, 0]\n", "sum to 2"),
        ("[[preference]]\ndst_port = 0\nw = [1, 0, 0]\n", "dst_port"),
        (
            "[[preference]]\ndst_subnet = \"fd00::/64\"\nw = [1, 0, 0]\n",
            "IPv4 addresses only",
        ),
        (
            "[[preference]]\ndst_port = 80\nw = [1, 0, 0]\nport = 1\n",
            "unknown field `port`",
        ),
        (
            "[control]\ngroup = \"no-such-group-ccp\"\n",
            "no such group",
        ),
        ("[control]\npending_ttl_s = 0\n", "pending_ttl_s"),
        ("[control]\nmax_connections = 0\n", "max_connections"),
    ] {
        let p = dir.join(format!("{}.toml", unique("badcfg")));
        std::fs::write(&p, text).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
            .args(["--list", "--config", p.to_str().unwrap()])
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&p);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{text}: {e}");
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn ctl_without_an_agent_says_how_to_reach_one_and_metrics_stay_local() {
    let o = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(["ctl", "--control", "/nonexistent/ccp.sock", "flows"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("is ccp-agent running"), "{e}");
    let o = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args([
            "--ipc",
            "unix",
            "--unix-name",
            &unique("m"),
            "--metrics",
            "0.0.0.0:0",
            "--no-control",
        ])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("--metrics-allow-remote"), "{e}");
}
