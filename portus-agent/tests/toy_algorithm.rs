//! The claim of `docs/adding-an-algorithm.md`, on the agent's side: a learned algorithm that
//! is one folder (`algs/src/toy/`) and one line of the registry reaches `ccp-agent --list`,
//! the agent's portus adapters and the kernel module's name table, with nothing else
//! changed. Only with the test-only feature `toy` (`ops/toy_algorithm.sh` runs it:
//! `cargo test -p ccp-agent --features toy --test toy_algorithm`).
#![cfg(feature = "toy")]

use std::path::PathBuf;
use std::process::{Command, Output};

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(args)
        .output()
        .expect("run ccp-agent")
}

fn stdout(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_toy_is_registered_learned_and_last() {
    use ccp_algs::registry::{self, ALGORITHMS};
    assert_eq!(ALGORITHMS.last(), Some(&"toy"));
    assert!(registry::is_learned("ccp_toy"));
    assert_eq!(registry::learned_names().last(), Some(&"toy"));
    assert!(registry::defaults("toy").is_some());
    assert!(registry::datapath_names().contains(&"ccp_toy".to_string()));
}

#[test]
fn list_names_the_toy() {
    let empty = std::env::temp_dir().join(format!("ccp-toy-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let out = stdout(&agent(&["--list", "--models", empty.to_str().unwrap()]));
    std::fs::remove_dir_all(&empty).ok();
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("learned, without a model: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.split(", ").any(|n| n == "toy"), "{out}");
    // its knobs are a table of --config like any algorithm's
    let cfg = std::env::temp_dir().join(format!("ccp-toy-{}.toml", std::process::id()));
    std::fs::write(&cfg, "[algs.toy]\ngain = 2.0\n").unwrap();
    let o = agent(&["--list", "--config", cfg.to_str().unwrap()]);
    std::fs::remove_file(&cfg).ok();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("algs.toy.gain = 2"), "{e}");
}

/// The kernel's name table written from this build has exactly one more name, `ccp_toy`,
/// before `ccp_auto`: regenerating `datapath/kernel/ccp_algs.h` is all the kernel needs.
#[test]
fn the_kernel_name_table_gains_the_toy() {
    let generated = stdout(&agent(&["--list", "--format", "c-header"]));
    let shipped = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../datapath/kernel/ccp_algs.h"),
    )
    .expect("ccp_algs.h");
    let want = shipped.replace(
        "\tX(\"ccp_auto\")",
        "\tX(\"ccp_toy\")\t\\\n\tX(\"ccp_auto\")",
    );
    assert_ne!(want, shipped);
    assert_eq!(generated, want);
}

/// A grower: the policy always answers `a = 1` (the window grows by half each interval).
struct Grow;

impl ccp_algs::policy::PolicySource for Grow {
    fn policy(&self, _alg: &str) -> Option<Box<dyn ccp_algs::Policy>> {
        Some(Box::new(ccp_algs::policy::ConstantPolicy {
            obs_dim: 1,
            act_dim: 1,
            value: 1.0,
        }))
    }
}

/// With a policy, a `ccp_toy` flow runs the toy through the portus loop: portus found an
/// adapter for its name (a flow without one would have run the default, cubic).
#[test]
fn the_agent_runs_a_ccp_toy_flow_through_portus() {
    use std::sync::Arc;

    use ccp_algs::learned::{LearnedAlgorithm, WithPolicy};
    use ccp_algs::toy::{Toy, ToyConfig};
    use ccp_algs::FromConfig;
    use ccp_runtime::simrun::{run_sim_with_registry, IpcKind, RunOptions};

    let toy: Arc<dyn LearnedAlgorithm> = Arc::new(Toy::from_config(&ToyConfig::default()));
    let mut registry = ccp_algs::Registry::builtin();
    registry.register(Arc::new(WithPolicy::new(toy, Arc::new(Grow))));
    // a scenario file may name it as the kernel does: the simulator checks names against the
    // registry
    let scenario = ccp_sim::Scenario::from_toml_str(
        "duration_s = 4\nseed = 3\n[link]\nrate_mbps = 20\nbuffer_bdp = 2.0\n\
         [[flow]]\nalg = \"ccp_toy\"\nrtt_ms = 40\n",
        std::path::Path::new("."),
    )
    .expect("scenario");
    let opts = RunOptions {
        ipc: IpcKind::Chan,
        ..Default::default()
    };
    let run = run_sim_with_registry(&scenario, &opts, registry).expect("run");
    assert_eq!(run.flow_algs, ["toy"]);
    let rec = run.records.first().expect("a record");
    assert_eq!((rec.requested.as_str(), rec.alg), ("ccp_toy", "toy"));
    assert!(rec.metrics.reports > 50, "{:?}", rec.metrics);
    let thr = run.results.flows[0].throughput_mbps;
    assert!(thr > 15.0, "an always-growing toy fills the link: {thr}");
}
