//! MOCC with the shipped model (`models/mocc.onnx`) on the simulated datapath: what the agent
//! must do with any model, not how good the model is. The model's quality (throughput and
//! queueing per preference, fairness, the landmark ordering, cellular traces) is measured by the
//! evaluation harness on its `eval` scenarios against Cubic and BBR (`bash ops/eval.sh --algs
//! mocc,cubic,bbr`, `ops/eval/README.md`); the thresholds that chose today's model (issue 5's
//! acceptance) left this file for that reason.
//!
//! To check a candidate without touching the checkout, point `CCP_MOCC_MODELS` at a directory
//! holding its `mocc.onnx` and `mocc.json` (a training run's `--out`), and `CCP_MOCC_CONFIG` at
//! a TOML file of `[algs.<name>]` knobs (as `ccp-agent --config`).

use std::path::PathBuf;
use std::process::Command;

use ccp_algs::AlgsConfig;
use ccp_runtime::agent::load_config;
use ccp_runtime::AgentOptions;

/// The model directory: `CCP_MOCC_MODELS`, else the checkout's `models/`.
fn models() -> PathBuf {
    match std::env::var_os("CCP_MOCC_MODELS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models"),
    }
}

/// The knobs file named by `CCP_MOCC_CONFIG`, if any.
fn config_file() -> Option<PathBuf> {
    std::env::var_os("CCP_MOCC_CONFIG").map(PathBuf::from)
}

/// The algorithms' knobs the agent runs under: the defaults, or `CCP_MOCC_CONFIG`'s.
fn algs_config() -> AlgsConfig {
    match config_file() {
        Some(path) => load_config(&path).unwrap_or_else(|e| panic!("CCP_MOCC_CONFIG: {e}")),
        None => AlgsConfig::default(),
    }
}

/// The shipped model was trained under the dynamics the agent runs (by default, or under
/// `CCP_MOCC_CONFIG`): its card's `dynamics` section, every knob of it, passes the agent's
/// own load-time check (`ModelCard::check_dynamics`), which names the first knob that differs.
#[test]
fn shipped_model_was_trained_under_the_agents_dynamics() {
    let agent = ccp_runtime::Agent::new(&AgentOptions {
        models: Some(models()),
        algs: algs_config(),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{:#}", anyhow::Error::from(e)));
    assert!(agent.registry().get("mocc").is_some());
}

/// The headline command from a checkout, as a user types it: the default `models/` directory,
/// a shipped scenario whose flow runs the agent's default algorithm (the ATT LTE trace).
/// The flow runs MOCC under the `--w` given, and the agent refuses no datapath message. (How
/// it compares with Cubic on cellular traces is a harness result: the `cellular` suite.)
#[test]
fn headline_command_runs_the_shipped_model() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    // as typed: no --models / --config unless a candidate is being checked
    let mut common: Vec<std::ffi::OsString> = vec![];
    if let Some(dir) = std::env::var_os("CCP_MOCC_MODELS") {
        common.extend(["--models".into(), dir]);
    }
    if let Some(path) = config_file() {
        common.extend(["--config".into(), path.into_os_string()]);
    }
    let run = |args: &[&str]| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
            .current_dir(&root)
            .args(args)
            .args(&common)
            .args(["--sim", "datapath/sim/scenarios/cellular.toml", "--json"])
            .output()
            .expect("run ccp-agent");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        serde_json::from_slice(&out.stdout).expect("--json output")
    };
    let m = run(&["--alg", "mocc", "--w", "0.4,0.5,0.1"]);
    let flow = &m["flows"][0];
    assert_eq!(flow["alg"], "mocc", "{m}");
    assert_eq!(
        flow["w"],
        serde_json::json!([0.4, 0.5, 0.1]),
        "--w reaches the flow: {m}"
    );
    assert_eq!(m["agent"]["messages_rejected"], 0, "{m}");
    let tm = flow["throughput_mbps"].as_f64().unwrap_or(f64::NAN);
    println!("cellular.toml: MOCC <0.4,0.5,0.1> {tm:.2} Mbit/s");
    assert!(tm > 0.0, "the flow delivered nothing: {m}");
}
