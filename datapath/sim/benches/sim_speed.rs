//! Simulated packets per wall-clock second, with the agent's runtime (`ccp-runtime`: portus
//! + Cubic) over in-process channels. `cargo bench -p ccp-sim --bench sim_speed` prints the figures.
//!
//! The run loop is single-threaded; the agent thread is mostly idle (one report per
//! ~half RTT per flow), so the figure is the simulator's own speed, libccp's fold-program
//! interpreter included.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use ccp_sim::Scenario;

const ONE_FLOW: &str = r#"
duration_s = 30
seed = 1
[link]
rate_mbps = 50
buffer_bdp = 1.0
[[flow]]
alg = "cubic"
rtt_ms = 40
"#;

/// Issue 45's case: the figure the simulator's speed is judged by.
const ONE_FLOW_200: &str = r#"
duration_s = 120
seed = 1
[link]
rate_mbps = 200
buffer_bdp = 1.0
[[flow]]
alg = "cubic"
rtt_ms = 40
"#;

const THREE_FLOWS: &str = r#"
duration_s = 30
seed = 1
[link]
rate_mbps = 100
buffer_bdp = 1.0
[[flow]]
alg = "cubic"
rtt_ms = 40
count = 3
"#;

/// A throughput log averaging 1 Gbit/s: 800 and 1200 Mbit/s, a second each.
const GIGABIT_LOG: &str = "0 800\n1 1200\n";

const ONE_FLOW_LOG: &str = r#"
duration_s = 10
seed = 1
[link]
trace = "gigabit.tput"
buffer_bdp = 1.0
[[flow]]
alg = "cubic"
rtt_ms = 40
"#;

fn bench(name: &str, text: &str, reps: usize) {
    let dir = std::env::temp_dir().join(format!("ccp-sim-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("gigabit.tput"), GIGABIT_LOG).expect("write the log");
    let sc = Scenario::from_toml_str(text, &dir).expect("scenario");
    let mut best = 0.0f64;
    let mut best_sim_only = 0.0f64;
    let mut pkts = 0;
    let mut util = 0.0;
    for _ in 0..reps {
        let t = Instant::now();
        let (r, _) = common::run_with(&sc, "cubic", None);
        let wall = t.elapsed().as_secs_f64();
        best = best.max(r.packets_per_wall_s);
        best_sim_only = best_sim_only.max(r.sim_packets as f64 / (r.wall_s - r.agent_wait_s));
        pkts = r.sim_packets;
        util = r.utilization;
        println!(
            "  {name}: {} packets in {:.3} s run ({:.3} s incl. agent start/stop; {:.3} s \
             waiting for {} agent answers): {:.2} M packets/s",
            r.sim_packets,
            r.wall_s,
            wall,
            r.agent_wait_s,
            r.reports + r.creates,
            r.packets_per_wall_s / 1e6
        );
    }
    println!(
        "{name}: best {:.2} M simulated packets per wall-clock second ({pkts} packets, \
         utilization {util:.3}); {:.2} M/s not counting the wait for agent answers",
        best / 1e6,
        best_sim_only / 1e6
    );
}

fn main() {
    // `cargo test --benches` runs this with --bench absent: keep that quick
    let quick = !std::env::args().any(|a| a == "--bench");
    let reps = if quick { 1 } else { 5 };
    bench(
        "200 Mbit/s, 1 Cubic flow, 40 ms, 120 s",
        ONE_FLOW_200,
        reps.min(3),
    );
    bench("50 Mbit/s, 1 Cubic flow, 40 ms, 30 s", ONE_FLOW, reps);
    bench("100 Mbit/s, 3 Cubic flows, 40 ms, 30 s", THREE_FLOWS, reps);
    bench(
        "1 Gbit/s throughput log (800/1200 Mbit/s), 1 Cubic flow, 40 ms, 10 s",
        ONE_FLOW_LOG,
        reps,
    );
}
