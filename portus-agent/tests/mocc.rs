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

use std::path::{Path, PathBuf};
use std::process::Command;

use ccp_algs::AlgsConfig;
use ccp_runtime::agent::load_config;
use ccp_runtime::simrun::{run_sim, IpcKind, RunOptions, SimRun};
use ccp_runtime::AgentOptions;
use ccp_sim::Scenario;

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

fn run(text: &str, default_alg: &str) -> SimRun {
    run_with(text, default_alg, algs_config())
}

fn run_with(text: &str, default_alg: &str, algs: AlgsConfig) -> SimRun {
    let scenario = Scenario::from_toml_str(text, Path::new(".")).expect("scenario");
    let opts = RunOptions {
        agent: AgentOptions {
            default_alg: default_alg.into(),
            models: Some(models()),
            algs,
            ..Default::default()
        },
        ipc: IpcKind::Inline,
        ..Default::default()
    };
    run_sim(&scenario, &opts).expect("run")
}

/// p95 of the queueing delay the flows' packets met over `t0`–`t1` s (ms).
fn queue_p95_window(r: &SimRun, t0: f64, t1: f64) -> f64 {
    let mut q: Vec<f64> = r
        .results
        .series
        .iter()
        .filter(|p| p.t > t0 && p.t <= t1 && p.queue_delay_ms.is_finite())
        .map(|p| p.queue_delay_ms)
        .collect();
    assert!(!q.is_empty(), "no queue samples in {t0}-{t1} s");
    q.sort_by(f64::total_cmp);
    q[(0.95 * (q.len() - 1) as f64) as usize]
}

/// Crowds of one preference that keeps a standing queue, started 0.5 s apart on 40 ms
/// (1.5 BDP): once they have converged (15–40 s) the share probe must not hold a queue the
/// policy alone would not (p95 at most 1.5× the probe-off run's plus 5 ms). Each flow sends
/// below half the `Ĉ` it measured alone and sees a standing queue, so all of them run
/// trials, and the neighbours make room for a trial's push, so the readings come out as low
/// as a starved flow's; before the local peers' veto the guard locked on and the buffer
/// stayed full (60 ms against 16, 36 and 19 ms without the probe). The veto (the agent's
/// MOCC flows fill the link and this one has half their mean throughput or more) keeps the
/// guard off (algs/src/mocc.rs, "Fairness", "Crowds").
#[test]
fn same_preference_crowds_keep_the_policys_queue() {
    for (n, rate, w) in [
        (6, 50, "[0.4, 0.5, 0.1]"),
        (8, 40, "[0.6, 0.3, 0.1]"),
        (10, 30, "[0.3, 0.3, 0.4]"),
    ] {
        let mut text =
            format!("duration_s = 40\nseed = 4\n[link]\nrate_mbps = {rate}\nbuffer_bdp = 1.5\n");
        for i in 0..n {
            let start = 0.5 * f64::from(i);
            text += &format!("[[flow]]\nalg = \"mocc\"\nrtt_ms = 40\nstart_s = {start}\nw = {w}\n");
        }
        let on = queue_p95_window(&run(&text, "cubic"), 15.0, 40.0);
        let mut off = algs_config();
        off.mocc.share_probe_every_mis = 0;
        let off = queue_p95_window(&run_with(&text, "cubic", off), 15.0, 40.0);
        println!(
            "{n} MOCC flows {w} on {rate} Mbit/s: p95 queue over 15-40 s {on:.1} ms, {off:.1} ms without the share probe"
        );
        assert!(
            on <= 1.5 * off + 5.0,
            "{n} x {w}: p95 {on} ms vs {off} ms without the probe"
        );
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
