//! The `ccp-agent` binary: bad input gives a clear message and exit code 2; `--sim --json`
//! prints the documented object.

use std::path::PathBuf;
use std::process::{Command, Output};

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(args)
        .output()
        .expect("run ccp-agent")
}

fn scenarios() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../datapath/sim/scenarios")
}

fn one_flow() -> String {
    scenarios().join("one-flow.toml").display().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bad_preference_vectors_exit_2_naming_the_problem() {
    let sc = one_flow();
    for (w, needle) in [
        ("0.4,0.5", "3 comma-separated numbers"),
        ("1,1,1", "sum to 3"),
        ("nan,0,1", "not finite"),
        ("-0.5,1,0.5", "outside [0,1]"),
        ("a,b,c", "not a number"),
    ] {
        let o = agent(&["--w", w, "--sim", &sc]);
        assert_eq!(o.status.code(), Some(2), "--w {w}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "--w {w}: {}", stderr(&o));
    }
}

#[test]
fn unknown_algorithm_exits_2_and_lists_the_available_ones() {
    let o = agent(&["--alg", "vegas", "--sim", &one_flow()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("unknown algorithm \"vegas\""), "{e}");
    assert!(e.contains("cubic") && e.contains("reno"), "{e}");
}

#[test]
fn bad_scenario_files_exit_2_naming_the_field() {
    let dir = std::env::temp_dir().join(format!("ccp-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("missing.toml", None, "missing.toml"),
        ("syntax.toml", Some("duration_s = = 3"), "syntax.toml"),
        (
            "typo.toml",
            Some("duration_s = 5\nseed = 1\n[link]\nrate_mbps = 10\nbufer_bdp = 1\n[[flow]]\nrtt_ms = 40\n"),
            "bufer_bdp",
        ),
        (
            "badalg.toml",
            Some("duration_s = 5\nseed = 1\n[link]\nrate_mbps = 10\nbuffer_bdp = 1\n[[flow]]\nalg = \"vegas\"\nrtt_ms = 40\n"),
            "vegas",
        ),
        (
            "badw.toml",
            Some("duration_s = 5\nseed = 1\n[link]\nrate_mbps = 10\nbuffer_bdp = 1\n[[flow]]\nw = [1, 1, 1]\nrtt_ms = 40\n"),
            "sum to 3",
        ),
        (
            "notrace.toml",
            Some("duration_s = 5\nseed = 1\n[link]\ntrace = \"nope.down\"\nbuffer_bdp = 1\n[[flow]]\nrtt_ms = 40\n"),
            "nope.down",
        ),
    ];
    for (name, body, needle) in cases {
        let p = dir.join(name);
        if let Some(b) = body {
            std::fs::write(&p, b).unwrap();
        }
        let o = agent(&["--sim", &p.display().to_string()]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{name}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{name}: {}", stderr(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_config_file_exits_2() {
    let p = std::env::temp_dir().join(format!("ccp-cfg-{}.toml", std::process::id()));
    std::fs::write(&p, "[algs.cubic]\nbeta = 0.7\ngamma = 3\n").unwrap();
    let o = agent(&["--config", &p.display().to_string(), "--sim", &one_flow()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("gamma"), "{}", stderr(&o));
    let _ = std::fs::remove_file(&p);
}

#[test]
fn sim_json_has_the_documented_fields() {
    let csv = std::env::temp_dir().join(format!("ccp-ts-{}.csv", std::process::id()));
    let o = agent(&[
        "--alg",
        "reno",
        "--sim",
        &scenarios()
            .join("three-staggered.toml")
            .display()
            .to_string(),
        "--json",
        "--csv",
        &csv.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let flows = v["flows"].as_array().expect("flows");
    assert_eq!(flows.len(), 3);
    for f in flows {
        for k in [
            "id",
            "alg",
            "w",
            "throughput_mbps",
            "utilization",
            "rtt_p50_ms",
            "rtt_p95_ms",
            "queue_delay_p95_ms",
            "loss_rate",
        ] {
            assert!(f.get(k).is_some(), "flow lacks {k}: {f}");
        }
    }
    for k in ["utilization", "jain", "queue_delay_p95_ms"] {
        assert!(v[k].is_number(), "{k} missing: {v}");
    }
    assert!(v["utilization"].as_f64().unwrap() > 0.8);
    // the time series: a header and 100 ms rows for each flow
    let text = std::fs::read_to_string(&csv).expect("csv written");
    let rows = text.lines().count();
    assert!(rows > 3 * 100, "{rows} rows");
    assert!(text.lines().next().unwrap().contains("cwnd"));
    let _ = std::fs::remove_file(&csv);
}

/// The simulator as a separate datapath process (`ccp-sim`) against the agent as a separate
/// process (`ccp-agent --ipc unix`) gives the same per-flow results as `ccp-agent --sim`.
#[test]
fn separate_processes_over_unix_match_the_in_process_run() {
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_ccp-agent"))
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let sim_bin = bin_dir.join("ccp-sim");
    if !sim_bin.exists() {
        // the profile of this test binary (target/<profile>/), so the path above exists
        let mut args = vec!["build", "-p", "ccp-sim", "--bin", "ccp-sim"];
        if bin_dir.file_name().is_some_and(|d| d == "release") {
            args.push("--release");
        }
        let st = Command::new(env!("CARGO"))
            .args(&args)
            .status()
            .expect("cargo build ccp-sim");
        assert!(st.success());
    }
    assert!(sim_bin.exists(), "{} not built", sim_bin.display());
    let sc = scenarios().join("rtt-unfair.toml").display().to_string();
    let name = format!("agent-proc-{}", std::process::id());
    let mut agent_proc = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(["--ipc", "unix", "--unix-name", &name, "--alg", "reno"])
        .spawn()
        .expect("start the agent");
    let sim = Command::new(&sim_bin)
        .args([
            "--scenario",
            &sc,
            "--ipc",
            "unix",
            "--agent",
            &name,
            "--json",
        ])
        .output()
        .expect("run ccp-sim");
    let _ = Command::new("kill")
        .args(["-TERM", &agent_proc.id().to_string()])
        .status();
    let status = agent_proc.wait().expect("agent exit");
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    assert_eq!(status.code(), Some(0), "agent exits cleanly on SIGTERM");
    let separate: serde_json::Value = serde_json::from_slice(&sim.stdout).expect("json");

    let inproc = agent(&["--alg", "reno", "--sim", &sc, "--json"]);
    assert_eq!(inproc.status.code(), Some(0), "{}", stderr(&inproc));
    let inproc: serde_json::Value = serde_json::from_slice(&inproc.stdout).expect("json");
    let a = separate["flows"].as_array().expect("flows");
    let b = inproc["flows"].as_array().expect("flows");
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        for k in [
            "throughput_mbps",
            "rtt_p95_ms",
            "queue_delay_p95_ms",
            "loss_rate",
        ] {
            assert_eq!(x[k], y[k], "{k} differs: {x} vs {y}");
        }
    }
    let _ = std::fs::remove_file(format!("/tmp/ccp/{name}"));
}

/// Serving the kernel datapath without the module: exit code 1 and what to do. (Skipped
/// where the ccp family is registered, i.e. the module is loaded on this machine.)
#[test]
fn netlink_without_the_module_says_to_load_it() {
    if std::path::Path::new("/sys/module/ccp_kernel").exists() {
        ccp_runtime::skip_test!("ccp-kernel is loaded here (/sys/module/ccp_kernel)");
        return;
    }
    let o = agent(&["--ipc", "netlink"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("the ccp generic netlink family is not registered")
            && e.contains("insmod datapath/kernel/ccp-kernel.ko"),
        "{e}"
    );
}

/// `--ipc bpf` without a loaded BPF datapath: exit 1, naming the pins it looked for and the
/// command that loads the datapath.
#[test]
fn bpf_without_the_datapath_says_to_load_it() {
    let pins = std::env::temp_dir().join(format!("ccp-no-pins-{}", std::process::id()));
    let p = pins.display().to_string();
    let o = agent(&["--ipc", "bpf", "--bpf-pins", &p, "--no-control"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("cannot serve the BPF datapath")
            && e.contains(&format!("{p}/stats"))
            && e.contains("ccp-bpf load"),
        "{e}"
    );
    // pins of something else (a folder without the maps): the same refusal, nothing served
    std::fs::create_dir_all(&pins).unwrap();
    std::fs::write(pins.join("stats"), b"not a map").unwrap();
    let o = agent(&["--ipc", "bpf", "--bpf-pins", &p, "--no-control"]);
    let _ = std::fs::remove_dir_all(&pins);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot serve the BPF datapath"),
        "{}",
        stderr(&o)
    );
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A flag the scenario overrides is reported on stderr (issue 44), naming the flows; a flag
/// that reaches every flow, or one not given, says nothing.
#[test]
fn flags_the_scenario_overrides_are_reported() {
    // one-flow.toml names `cubic` for its only flow: --alg reaches no flow
    let o = agent(&["--alg", "bbr", "--sim", &one_flow()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("note: --alg bbr applies to no flow: every flow of")
            && stderr(&o).contains("one-flow.toml names its algorithm"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).contains("   0 cubic "), "{}", stdout(&o));
    // the default, not given: nothing to report
    let o = agent(&["--sim", &one_flow()]);
    assert!(!stderr(&o).contains("note:"), "{}", stderr(&o));
    // rtt-unfair.toml names neither alg nor w: --alg and --w reach every flow, no note
    let sc = scenarios().join("rtt-unfair.toml").display().to_string();
    let o = agent(&["--alg", "reno", "--w", "0.1,0.8,0.1", "--sim", &sc]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("note:"), "{}", stderr(&o));
    let out = stdout(&o);
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 3);
    assert!(
        rows.iter()
            .all(|r| r.contains(" reno* ") && r.contains("0.10,0.80,0.10*")),
        "{rows:?}"
    );
    // portfolio.toml: flow 0 takes --alg, flows 5 to 7 give their own w
    let sc = scenarios().join("portfolio.toml").display().to_string();
    let o = agent(&["--alg", "reno", "--w", "0.3,0.3,0.4", "--sim", &sc]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("note: --alg reno runs flow 0; flows 1-7 of"),
        "{e}"
    );
    assert!(
        e.contains("note: --w 0.3,0.3,0.4 applies to flows 0-4; flows 5-7 of"),
        "{e}"
    );
}

/// `--plot FILE` writes one SVG with a line per flow in each panel and a legend entry per
/// flow.
#[test]
fn plot_draws_every_flow() {
    let file = std::env::temp_dir().join(format!("ccp-plot-{}.svg", std::process::id()));
    let sc = scenarios()
        .join("three-staggered.toml")
        .display()
        .to_string();
    let o = agent(&["--sim", &sc, "--plot", &file.display().to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&file).expect("the plot");
    let _ = std::fs::remove_file(&file);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for label in [">0 cubic<", ">1 cubic<", ">2 cubic<", "throughput (Mbit/s)"] {
        assert!(svg.contains(label), "{label}");
    }
    // Cubic is unpaced: throughput, queueing delay and cwnd, one line each per flow
    assert_eq!(svg.matches("<path ").count(), 9, "{svg}");
    // --plot needs --sim
    let o = agent(&["--plot", "/tmp/x.svg"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `ccp-agent --list | head`: a reader that has gone away ends the output quietly (exit 0,
/// nothing on stderr); `println!` panicked on the closed pipe. The pipe's read end is closed
/// before the agent starts, so every write it makes fails with EPIPE.
#[test]
fn a_closed_stdout_pipe_ends_the_listing_without_a_panic() {
    use std::os::fd::FromRawFd;
    for format in ["text", "c-header"] {
        let mut fds = [0i32; 2];
        // SAFETY: pipe(2) fills two descriptors we own from here on
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fds[0] and fds[1] are open and owned by nobody else
        let (read_end, write_end) = unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        };
        drop(read_end);
        let out = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
            .args([
                "--list",
                "--format",
                format,
                "--models",
                "/nonexistent-models",
            ])
            .stdout(write_end)
            .output()
            .expect("run ccp-agent");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "--format {format}: {err}");
        assert_eq!(out.status.code(), Some(0), "--format {format}: {err}");
    }
}
