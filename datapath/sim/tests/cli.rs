//! The `ccp-sim` binary: a separate datapath process talking to an agent over unix sockets.

mod common;
use common::*;

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ccp-sim"))
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let dir = std::env::temp_dir().join(format!("ccp-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "duration_s = 5\n[link]\nrate_mbps = 10\n[[flow]]\nrtt_ms = -1\n",
    )
    .unwrap();
    let out = bin().args(["--scenario"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("flow[0].rtt_ms"), "{err}");

    let out = bin()
        .args(["--scenario", "/nonexistent/x.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read scenario file"));

    // clap: unknown transport
    let out = bin()
        .args(["--scenario", "x.toml", "--ipc", "carrier-pigeon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_agent_exits_1() {
    let sc = scenarios_dir().join("one-flow.toml");
    let pid = std::process::id();
    // the agent socket never appears: the first send gives up after its bounded wait (polled
    // with a deadline that only a hang reaches, not a bound on how fast this host is)
    let mut child = bin()
        .arg("--scenario")
        .arg(&sc)
        .args([
            "--agent",
            &format!("nobody-{pid}"),
            "--name",
            &format!("cli-{pid}-x"),
        ])
        .args(["--agent-wait-s", "0.3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("ccp-sim still waits for an agent 120 s after --agent-wait-s 0.3");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no agent socket"), "{err}");
}

#[test]
fn runs_against_an_agent_over_unix_sockets() {
    let pid = std::process::id();
    let agent_name = format!("ccp-sim-cli-{pid}-agent");
    let agent = UnixAgent::serve("cubic", &agent_name);
    let dir = std::env::temp_dir().join(format!("ccp-sim-cli-run-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let sc = dir.join("s.toml");
    std::fs::write(
        &sc,
        "duration_s = 10\n[link]\nrate_mbps = 20\nbuffer_bdp = 1\n\
         [[flow]]\nalg = \"cubic\"\nrtt_ms = 20\n",
    )
    .unwrap();
    let csv = dir.join("series.csv");
    let out = bin()
        .arg("--scenario")
        .arg(&sc)
        .args(["--ipc", "unix", "--agent", &agent_name, "--json", "--csv"])
        .arg(&csv)
        .args(["--name", &format!("ccp-sim-cli-{pid}-dp")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let log = agent.stop(v["messages_to_agent"].as_u64().unwrap());
    let _ = std::fs::remove_file(format!("/tmp/ccp/{agent_name}"));
    assert!(v["utilization"].as_f64().unwrap() > 0.85, "{v}");
    assert_eq!(v["flows"][0]["alg"], "cubic");
    assert_eq!(log.creates(), [(1, "cubic")]);
    assert_eq!(log.algs(), ["cubic"]);
    assert_eq!(log.closes(), 1);
    assert_eq!(v["reports"].as_u64().unwrap(), log.reports());
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 101);
    let _ = std::fs::remove_dir_all(&dir);
}
