//! Scenario files: every bad input is a `ScenarioError` naming the field and the fix.

use std::path::{Path, PathBuf};

use ccp_sim::{Buffer, Capacity, Scenario, ScenarioError};

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("ccp-sim-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const BASE: &str = "duration_s = 10\n[link]\nrate_mbps = 10\n[[flow]]\nrtt_ms = 10\n";

fn err(dir: &TempDir, text: &str) -> ScenarioError {
    let p = dir.write("s.toml", text);
    Scenario::from_file(&p).expect_err("scenario should be refused")
}

fn field(e: &ScenarioError) -> &str {
    match e {
        ScenarioError::Field { field, .. } => field,
        other => panic!("expected a field error, got {other}"),
    }
}

#[test]
fn bad_files_name_the_field_and_the_fix() {
    let d = TempDir::new("bad");
    let with = |a: &str, b: &str| BASE.replace(a, b);
    let cases: Vec<(String, &str)> = vec![
        (with("rate_mbps = 10", "rate_mbps = -5"), "link.rate_mbps"),
        (with("rate_mbps = 10", "rate_mbps = 0"), "link.rate_mbps"),
        (with("rate_mbps = 10", "trace = \"t\"\nrate_mbps = 10"), "link"),
        (with("rate_mbps = 10", "loss = 0.1"), "link"),
        (with("rate_mbps = 10", "rate_mbps = 10\nloss = 1.0"), "link.loss"),
        (with("rate_mbps = 10", "rate_mbps = 10\nloss = -0.1"), "link.loss"),
        (with("rate_mbps = 10", "rate_mbps = 10\nbuffer_pkts = 0"), "link.buffer_pkts"),
        (with("rate_mbps = 10", "rate_mbps = 10\nbuffer_bdp = -1"), "link.buffer_bdp"),
        (
            with("rate_mbps = 10", "rate_mbps = 10\nbuffer_bdp = 1\nbuffer_pkts = 5"),
            "link",
        ),
        (
            with("rate_mbps = 10", "rate_mbps = 10\ntrace_scale = 2"),
            "link.trace_scale",
        ),
        (
            with(
                "rate_mbps = 10",
                "rate_mbps = 10\nrate_schedule = [{ at_s = 0, rate_mbps = 5 }]",
            ),
            "link.rate_schedule[0].at_s",
        ),
        (with("rtt_ms = 10", "rtt_ms = 0"), "flow[0].rtt_ms"),
        (with("rtt_ms = 10", "rtt_ms = -3"), "flow[0].rtt_ms"),
        (format!("{BASE}start_s = 5\nstop_s = 5\n"), "flow[0].stop_s"),
        (format!("{BASE}start_s = 10\n"), "flow[0].start_s"),
        (format!("{BASE}count = 0\n"), "flow[0].count"),
        (format!("{BASE}w = [0.5, 0.5]\n"), "flow[0].w"),
        (format!("{BASE}w = [0.5, 0.6, 0.1]\n"), "flow[0].w"),
        (
            format!("{BASE}w = [0.30000000000000004, 0.30000000000000004, 0.39999999999999997]\nalg = \"cubic\"\n"),
            "flow[0].w",
        ),
        (format!("{BASE}alg = \"vegas\"\n"), "flow[0].alg"),
        (with("duration_s = 10", "duration_s = 0"), "duration_s"),
        (
            "duration_s = 10\n[link]\nrate_mbps = 10\n".to_string(),
            "flow",
        ),
    ];
    for (text, want) in cases {
        let e = err(&d, &text);
        assert_eq!(field(&e), want, "for:\n{text}\n-> {e}");
        let msg = e.to_string();
        assert!(msg.contains(want), "{msg}");
        assert!(msg.len() > want.len() + 20, "message too terse: {msg}");
    }
    // the message says what to do
    let e = err(&d, &with("rate_mbps = 10", "rate_mbps = -5"));
    assert!(e.to_string().contains("e.g. rate_mbps = 50"), "{e}");
    let e = err(&d, &format!("{BASE}alg = \"vegas\"\n"));
    assert!(e.to_string().contains("cubic"), "{e}");
}

#[test]
fn syntax_errors_and_unknown_keys_are_parse_errors() {
    let d = TempDir::new("parse");
    for (text, needle) in [
        (BASE.replace("rate_mbps", "rat_mbps"), "rat_mbps"),
        (format!("{BASE}rttms = 3\n"), "rttms"),
        (format!("{BASE}[extra]\nx = 1\n"), "extra"),
        ("duration_s = \n".to_string(), "duration_s"),
        (
            BASE.replace("duration_s = 10", "duration_s = \"ten\""),
            "duration_s",
        ),
        (BASE.replace("duration_s = 10\n", ""), "duration_s"),
    ] {
        let e = err(&d, &text);
        assert!(matches!(e, ScenarioError::Parse(_)), "{e}");
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
}

#[test]
fn missing_file_is_a_read_error() {
    let e = Scenario::from_file("/nonexistent/ccp-sim/none.toml").unwrap_err();
    assert!(matches!(e, ScenarioError::Read { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/ccp-sim/none.toml"));
}

#[test]
fn traces_resolve_next_to_the_scenario_and_are_checked() {
    let d = TempDir::new("trace");
    let text =
        |t: &str| format!("duration_s = 5\n[link]\ntrace = \"{t}\"\n[[flow]]\nrtt_ms = 20\n");
    d.write("ok.trace", "0\n0\n1\n2\n");
    let sc = Scenario::from_file(d.write("a.toml", &text("ok.trace"))).unwrap();
    match &sc.link.capacity {
        Capacity::Trace {
            opportunities_ms,
            path,
            ..
        } => {
            assert_eq!(&**opportunities_ms, &[0, 0, 1, 2]);
            assert_eq!(path, &d.0.join("ok.trace"));
        }
        other => panic!("{other:?}"),
    }
    // default buffer: 1 BDP at the trace's mean rate (4 packets / 2 ms = 24 Mbit/s)
    assert_eq!(sc.link.buffer, Buffer::Bdp(1.0));
    assert_eq!(sc.buffer_packets(), 40);

    d.write("empty.trace", "\n\n");
    d.write("back.trace", "1\n5\n3\n");
    d.write("junk.trace", "1\nabc\n");
    d.write("zero.trace", "0\n");
    for (file, needle) in [
        ("missing.trace", "cannot read"),
        ("empty.trace", "empty"),
        ("back.trace", "line 3"),
        ("junk.trace", "line 2"),
        ("zero.trace", "0 ms"),
    ] {
        let e = err(&d, &text(file));
        assert!(matches!(e, ScenarioError::Trace { .. }), "{file}: {e}");
        assert!(e.to_string().contains(needle), "{file}: {e}");
        assert!(e.to_string().contains(file), "{file}: {e}");
    }
}

#[test]
fn shipped_scenarios_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let one = Scenario::from_file(dir.join("one-flow.toml")).unwrap();
    assert_eq!(one.flows.len(), 1);
    assert_eq!(one.flows[0].alg.as_deref(), Some("cubic"));
    assert_eq!(one.duration_s, 30.0);
    // 50 Mbit/s x 40 ms = 250 kB = 167 packets
    assert_eq!(one.buffer_packets(), 167);
    let rtt = Scenario::from_file(dir.join("rtt-unfair.toml")).unwrap();
    let rtts: Vec<f64> = rtt.flows.iter().map(|f| f.rtt_ms).collect();
    assert_eq!(rtts, [20.0, 60.0, 120.0]);
    assert!(rtt.flows.iter().all(|f| f.alg.is_none()));
    let lossy = Scenario::from_file(dir.join("lossy-long-rtt.toml")).unwrap();
    assert_eq!(lossy.link.loss, 0.0074);
    // 20 Mbit/s x 600 ms = 1.5 MB = 1000 packets
    assert_eq!(lossy.buffer_packets(), 1000);
    let cell = Scenario::from_file(dir.join("cellular.toml")).unwrap();
    let mean = cell.link.capacity.mean_bps();
    assert!(mean > 3e6 && mean < 6e6, "{mean}");
    let three = Scenario::from_file(dir.join("three-staggered.toml")).unwrap();
    let starts: Vec<f64> = three.flows.iter().map(|f| f.start_s).collect();
    assert_eq!(starts, [0.0, 10.0, 20.0]);
    // the default scenario (ops/run.sh): flows take turns, each starting at a multiple of
    // the trace's period, so every one sees the same capacity; none overlaps another
    let p = Scenario::from_file(dir.join("portfolio.toml")).unwrap();
    let Capacity::Trace {
        opportunities_ms, ..
    } = &p.link.capacity
    else {
        panic!(
            "portfolio.toml: not a mahimahi trace: {:?}",
            p.link.capacity
        );
    };
    let period_s = *opportunities_ms.last().unwrap() as f64 / 1e3;
    assert_eq!(period_s, 30.0);
    let mean = p.link.capacity.mean_bps();
    assert!(mean > 15e6 && mean < 19e6, "{mean}");
    for (i, f) in p.flows.iter().enumerate() {
        assert_eq!(f.start_s, 30.0 * i as f64, "flow {i}");
        assert!(f.stop_s.unwrap() <= f.start_s + period_s, "flow {i}");
    }
    assert!(p.flows[0].alg.is_none() && p.flows[0].w.is_none());
    let autos: Vec<_> = p
        .flows
        .iter()
        .filter(|f| f.alg.as_deref() == Some("auto"))
        .collect();
    assert!(autos.len() == 3 && autos.iter().all(|f| f.w.is_some()));
}
