//! `ccp-sim`: run a scenario as a separate datapath process against `ccp-agent --ipc unix`.
//!
//! ```text
//! ccp-agent --ipc unix &
//! ccp-sim --scenario datapath/sim/scenarios/one-flow.toml --ipc unix --json
//! ```
//!
//! Exit codes: 0 success, 1 the run failed (agent missing or silent, IPC error),
//! 2 bad input (arguments or scenario).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ccp_sim::{Scenario, SimOptions, SimResults, Simulator, UnixIpc};
use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IpcArg {
    /// Unix datagram sockets under /tmp/ccp/ (portus's unix backend).
    Unix,
}

/// Packet-level dumbbell simulator whose senders are libccp datapaths.
#[derive(Debug, Parser)]
#[command(name = "ccp-sim", version)]
struct Cli {
    /// Scenario file (TOML; see datapath/sim/scenarios/).
    #[arg(long)]
    scenario: PathBuf,
    /// Transport to the agent.
    #[arg(long, value_enum, default_value = "unix")]
    ipc: IpcArg,
    /// This datapath's socket name: binds /tmp/ccp/<NAME> [default: ccp-sim-<pid>].
    #[arg(long, value_name = "SIMSOCK")]
    name: Option<String>,
    /// The agent's socket name: sends to /tmp/ccp/<AGENTSOCK>.
    #[arg(long, value_name = "AGENTSOCK", default_value = "portus")]
    agent: String,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Write the per-flow time series as CSV.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Seconds to wait for the agent's socket to appear before the first message.
    #[arg(long, default_value_t = 10.0)]
    agent_wait_s: f64,
    /// Seconds to wait for each agent answer.
    #[arg(long, default_value_t = 10.0)]
    agent_timeout_s: f64,
    /// Name shown for flows that use the agent's default algorithm.
    #[arg(long, default_value = "default")]
    default_alg: String,
    /// Time-series resolution (ms).
    #[arg(long, default_value_t = 100.0)]
    series_ms: f64,
}

fn bad_input(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("ccp-sim: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let scenario = match Scenario::from_file(&cli.scenario) {
        Ok(s) => s,
        Err(e) => return bad_input(e),
    };
    if !(cli.agent_timeout_s.is_finite() && cli.agent_timeout_s > 0.0) {
        return bad_input("--agent-timeout-s must be a positive number of seconds");
    }
    if !(cli.agent_wait_s.is_finite() && cli.agent_wait_s >= 0.0) {
        return bad_input("--agent-wait-s must be a number of seconds >= 0");
    }
    if !(cli.series_ms.is_finite() && cli.series_ms > 0.0) {
        return bad_input("--series-ms must be a positive number of milliseconds");
    }
    let opts = SimOptions {
        agent_timeout: Duration::from_secs_f64(cli.agent_timeout_s),
        default_alg: cli.default_alg.clone(),
        series_interval: Duration::from_secs_f64(cli.series_ms / 1e3),
        datapath_id: std::process::id(),
        // statistics reach only an in-process agent (`ccp-agent --sim`)
        network_stats: None,
    };
    if scenario.netstats.is_some() {
        eprintln!(
            "warning: the scenario's [netstats] reach only an agent in this process \
             (ccp-agent --sim); a separate agent sees none, so Owl's in-network features stay \
             masked"
        );
    }
    let mut sim = match Simulator::new(&scenario, opts) {
        Ok(s) => s,
        Err(e) => return bad_input(e),
    };
    let name = cli
        .name
        .clone()
        .unwrap_or_else(|| format!("ccp-sim-{}", std::process::id()));
    let IpcArg::Unix = cli.ipc;
    let mut ipc = match UnixIpc::new(&name, &cli.agent) {
        Ok(i) => i.with_agent_wait(Duration::from_secs_f64(cli.agent_wait_s)),
        Err(e) => return bad_input(format!("cannot open the unix socket: {e}")),
    };
    let results = match sim.run(&mut ipc) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ccp-sim: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(path) = &cli.csv {
        if let Err(e) = results.write_csv(path) {
            eprintln!("ccp-sim: writing {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if cli.json {
        match serde_json::to_string_pretty(&results) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("ccp-sim: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        print_table(&results);
    }
    ExitCode::SUCCESS
}

fn print_table(r: &SimResults) {
    println!(
        "{:>4} {:>10} {:>7} {:>8} {:>10} {:>6} {:>8} {:>8} {:>8} {:>8} {:>6}",
        "flow",
        "alg",
        "rtt_ms",
        "start_s",
        "thr_mbps",
        "util",
        "rtt_p50",
        "rtt_p95",
        "qd_p95",
        "loss",
        "rto"
    );
    for f in &r.flows {
        println!(
            "{:>4} {:>10} {:>7.1} {:>8.1} {:>10.2} {:>6.3} {:>8.1} {:>8.1} {:>8.1} {:>8.4} {:>6}",
            f.id,
            f.alg_label,
            f.rtt_base_ms,
            f.start_s,
            f.throughput_mbps,
            f.utilization,
            f.rtt_p50_ms,
            f.rtt_p95_ms,
            f.queue_delay_p95_ms,
            f.loss_rate,
            f.timeouts
        );
    }
    println!(
        "utilization {:.3}  jain {}  queue_delay_p95 {:.1} ms  buffer {} pkts",
        r.utilization,
        r.jain.map_or("-".to_string(), |j| format!("{j:.3}")),
        r.queue_delay_p95_ms,
        r.buffer_pkts
    );
    println!(
        "{} packets in {:.2} s ({:.2} M/s); {} reports, {} agent messages, {} rejected",
        r.sim_packets,
        r.wall_s,
        r.packets_per_wall_s / 1e6,
        r.reports,
        r.messages_from_agent,
        r.rejected_messages
    );
}
