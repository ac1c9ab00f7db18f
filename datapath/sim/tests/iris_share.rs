//! Iris beside one Cubic flow (issue 48): the share Iris keeps for each queue-load target `B`
//! and target rule, against what it costs alone (p95 queueing). The figures of
//! `docs/algorithms/iris.md`, "Beside Cubic": `cargo test -p ccp-sim --release --features
//! ccp-runtime/sim --test iris_share -- --ignored --nocapture`.

use std::sync::Arc;

use ccp_algs::cubic::Cubic;
use ccp_algs::iris::{Iris, IrisConfig, IrisTarget};
use ccp_algs::Registry;
use ccp_runtime::simrun::{run_sim_with_registry, RunOptions};
use ccp_sim::Scenario;

/// One run: `(Iris's Mbit/s, Cubic's Mbit/s or 0, Iris's loss, Cubic's loss, Iris's p95
/// queueing ms)`.
fn run(config: &IrisConfig, toml: &str) -> (f64, f64, f64, f64, f64) {
    let sc = Scenario::from_toml_str(toml, ".").expect("a valid scenario");
    let mut r = Registry::new();
    r.register(Arc::new(Iris {
        config: config.clone(),
    }));
    r.register(Arc::new(Cubic::default()));
    let opts = RunOptions {
        agent: ccp_runtime::AgentOptions {
            default_alg: "iris".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let run = run_sim_with_registry(&sc, &opts, r).expect("the simulation runs");
    let f = &run.results.flows;
    let (iris, cubic) = match f.len() {
        1 => (&f[0], None),
        _ => (&f[1], Some(&f[0])),
    };
    (
        iris.throughput_mbps,
        cubic.map_or(0.0, |c| c.throughput_mbps),
        iris.loss_rate,
        cubic.map_or(0.0, |c| c.loss_rate),
        iris.queue_delay_p95_ms,
    )
}

/// Issue 48's case: 40 Mbit/s, 50 ms, Cubic from the start and Iris 5 s later, 60 s; and
/// Iris alone on the same link with a 1-BDP buffer, 30 s.
#[test]
#[ignore]
fn iris_share_table() {
    let mut rows: Vec<(String, IrisConfig)> = [10.0, 20.0, 40.0, 80.0]
        .iter()
        .map(|&b| {
            (
                format!("min, B = {b}"),
                IrisConfig {
                    queue_target_pkts: b,
                    ..Default::default()
                },
            )
        })
        .collect();
    for w in [10.0, 100.0] {
        rows.push((
            format!("min over {w} s, B = 10"),
            IrisConfig {
                min_window_s: w,
                ..Default::default()
            },
        ));
    }
    rows.push((
        "median, B = 10".into(),
        IrisConfig {
            target: IrisTarget::Median,
            ..Default::default()
        },
    ));
    for (name, config) in rows {
        let mut line = format!("{name:24}");
        for bdp in [0.5, 1.0, 2.0, 4.0] {
            let toml = format!(
                "duration_s = 60\nseed = 1\n[link]\nrate_mbps = 40\nbuffer_bdp = {bdp}\n\
                 [[flow]]\nalg = \"cubic\"\nrtt_ms = 50\n\
                 [[flow]]\nalg = \"iris\"\nrtt_ms = 50\nstart_s = 5\n"
            );
            let (i, c, il, cl, _) = run(&config, &toml);
            line += &format!(
                " | {:.2} ({:.1} %, {:.1} %)",
                i / (i + c),
                100.0 * il,
                100.0 * cl
            );
        }
        let alone = "duration_s = 30\nseed = 1\n[link]\nrate_mbps = 40\nbuffer_bdp = 1\n\
                     [[flow]]\nalg = \"iris\"\nrtt_ms = 50\n";
        let (i, _, _, _, q) = run(&config, alone);
        line += &format!(" | {:.3} / {q:.1} ms", i / 40.0);
        println!("{line}");
    }
}
