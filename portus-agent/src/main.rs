//! `ccp-agent`: the CCP agent binary. See `ccp-agent --help`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ccp_algs::netstats::NetworkStats;
use ccp_algs::Preference;
use ccp_runtime::agent::AgentConfig;
use ccp_runtime::control::{self, AuthPolicy, ControlOptions, ControlPlane};
#[cfg(feature = "sim")]
use ccp_runtime::simrun::{self, IpcKind, RunOptions};
use ccp_runtime::sources::netstats::PolledStats;
use ccp_runtime::{Agent, AgentOptions, ConfigError};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use tracing::{error, info, warn};

#[cfg(feature = "bpf")]
mod bpf;
#[cfg(feature = "sim")]
mod plot;

/// IPC between agent and datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IpcArg {
    /// Generic netlink family `ccp` (needs CAP_NET_ADMIN): the ccp-kernel module.
    Netlink,
    /// Character device /dev/ccpkp.
    Char,
    /// Unix datagram sockets under /tmp/ccp/ (a user-space datapath, e.g. `ccp-sim`).
    Unix,
    /// The BPF datapath (datapath/bpf, loaded by `ccp-bpf load`; no kernel module): its
    /// pinned ring buffer and decision map (--bpf-pins), libccp for its flows in this
    /// process (feature `bpf`, on by default). Without --ipc: chosen when the ccp-kernel
    /// module is not loaded and the pins exist.
    Bpf,
    /// In-process channel to the portus run loop: only with --sim.
    Chan,
    /// In-process and synchronous, no portus run loop (what training uses): only with --sim.
    Inline,
}

/// What `--list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ListFormat {
    /// The algorithms this agent runs (and the learned ones without a model), with their
    /// fold programs' sizes.
    Text,
    /// The kernel module's name table from the registry: `datapath/kernel/ccp_algs.h`.
    CHeader,
}

#[derive(Debug, Parser)]
#[command(
    name = "ccp-agent",
    version,
    about = "CCP agent hosting Reno, Cubic, BBR and the learned algorithms (Jury, Owl, MOCC, Iris, Nuwa-RL) on portus",
    long_about = "CCP agent hosting every registered congestion-control algorithm at once.\n\n\
        A flow is dispatched by the congestion-control name its datapath announces: \
        `ccp_<alg>` or `<alg>` runs <alg>; `ccp`, an unknown or an unavailable name runs --alg.\n\n\
        Without --sim it serves a real datapath (default: the ccp-kernel module over generic \
        netlink, as root or with CAP_NET_ADMIN) until SIGINT/SIGTERM, or until the module is \
        unloaded (exit code 1); SIGHUP reloads the models, the portfolio and the config's \
        [[preference]] rules; SIGUSR1 prints the IPC counters (and, with --ipc bpf, the bridge's) as one JSON line on stderr. It \
        serves a control socket (--control) and, if asked, a metrics endpoint (--metrics). \
        With --sim SCENARIO it runs the scenario on the built-in (feature `sim`, on by default) \
        simulated datapath and prints per-flow and aggregate results.\n\n\
        `ccp-agent ctl ...` talks to a running agent's control socket.\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 bad input (flags, files, weights).",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// Algorithm for flows that name none (`ccp`) or one this agent does not run. `auto`:
    /// flows naming none are chosen by their preference from <models>/portfolio.json like
    /// `ccp_auto` flows (cubic when it cannot choose).
    #[arg(long, value_name = "NAME", default_value = "cubic")]
    alg: String,

    /// Default preference <throughput,latency,loss>: three numbers in [0,1] summing to 1.
    #[arg(long, value_name = "THR,LAT,LOSS", default_value = "0.4,0.5,0.1", value_parser = parse_w, allow_hyphen_values = true)]
    w: Preference,

    /// IPC to the datapath [default: netlink; chan with --sim].
    #[arg(long, value_enum)]
    ipc: Option<IpcArg>,

    /// Run this scenario (TOML) on the simulated datapath instead of serving a real one.
    #[arg(long, value_name = "SCENARIO")]
    sim: Option<PathBuf>,

    /// With --sim: print one JSON object instead of a table.
    #[arg(long, requires = "sim")]
    json: bool,

    /// With --sim: write the per-flow time series (every 100 ms) to this CSV file.
    #[arg(long, value_name = "FILE", requires = "sim")]
    csv: Option<PathBuf>,

    /// With --sim: draw every flow's throughput, queueing delay, congestion window and pacing
    /// rate over time into this SVG file.
    #[arg(long, value_name = "FILE", requires = "sim")]
    plot: Option<PathBuf>,

    /// TOML file with algorithm knobs, e.g. `[algs.cubic]\nbeta = 0.7`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Write one JSON line per flow event (create, periodic report, close) to this file.
    #[arg(long, value_name = "FILE")]
    flow_log: Option<PathBuf>,

    /// Directory of ONNX models (<alg>.onnx + <alg>.json model card) for the learned
    /// algorithms; a learned algorithm runs only if its model loads and matches its card.
    /// SIGHUP reloads it (a bad new file keeps the old model).
    #[arg(long, value_name = "DIR", default_value = "models")]
    models: PathBuf,

    /// With --ipc unix: the agent's socket name under /tmp/ccp/: 1 to 64 letters, digits,
    /// '.', '_' or '-', not starting with '.'. A socket another live process holds is
    /// refused (exit 1); a stale one is replaced.
    #[arg(long, value_name = "NAME", default_value = "portus")]
    unix_name: String,

    /// With --ipc bpf: where `ccp-bpf load` pinned the BPF datapath's maps.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/bpf/ccp")]
    bpf_pins: PathBuf,

    /// With --ipc netlink, unix or bpf: spin at most this many µs before a receive blocks,
    /// while reports keep coming (an idle agent never spins); 0 never spins. At most 2000.
    #[arg(long, value_name = "US", default_value_t = 200)]
    spin_max_us: u64,

    /// List the algorithms this agent runs and their fold programs' sizes, then exit.
    #[arg(long)]
    list: bool,

    /// With --list: `text`, or `c-header`: every congestion-control name of the registry as
    /// the kernel module's name table (`datapath/kernel/ccp_algs.h`; needs no models).
    #[arg(long, value_enum, default_value = "text", requires = "list")]
    format: ListFormat,

    /// Serve the control socket (per-socket preferences, flows, counters) at this path
    /// [default: [control] socket of --config, else /run/ccp/control.sock]. A default path
    /// another agent holds only disables it (with a warning); a path given here is an error.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["no_control", "sim"])]
    control: Option<PathBuf>,

    /// Serve no control socket.
    #[arg(long, conflicts_with = "sim")]
    no_control: bool,

    /// Serve Prometheus metrics (GET /metrics) on this address, e.g. 127.0.0.1:9464 (off by
    /// default; loopback only unless --metrics-allow-remote).
    #[arg(long, value_name = "ADDR", conflicts_with = "sim")]
    metrics: Option<SocketAddr>,

    /// Allow --metrics on a non-loopback address (the metrics name flows and models).
    #[arg(long, requires = "metrics")]
    metrics_allow_remote: bool,

    /// Poll in-network statistics (PNC, PNA; read by Owl) from this HTTP/JSON endpoint,
    /// e.g. http://10.0.0.1:9465/netstats served by ccp-netstats-exporter [default:
    /// [netstats] url of --config; none: the features stay masked]. Period, timeout and
    /// staleness: [netstats] period_ms, timeout_ms, stale_after_ms.
    #[arg(long, value_name = "URL", conflicts_with = "sim", value_parser = parse_url)]
    netstats_url: Option<ccp_runtime::sources::netstats::HttpUrl>,

    /// Which of the defaulted flags the command line gave (not a flag).
    #[arg(skip)]
    given: Given,
}

/// Flags with a default that the command line gave explicitly: a scenario that overrides
/// one of them says so (`override_notes`).
#[derive(Debug, Clone, Copy, Default)]
#[cfg_attr(not(feature = "sim"), allow(dead_code))] // read by --sim only
struct Given {
    alg: bool,
    w: bool,
}

impl Given {
    fn from_matches(m: &clap::ArgMatches) -> Self {
        let given = |id: &str| m.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
        Given {
            alg: given("alg"),
            w: given("w"),
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Talk to a running agent's control socket.
    Ctl(CtlArgs),
}

#[derive(Debug, clap::Args)]
struct CtlArgs {
    /// The agent's control socket.
    #[arg(long, value_name = "PATH", default_value = control::DEFAULT_SOCKET, global = true)]
    control: PathBuf,

    /// Print the agent's JSON reply as it came.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    op: CtlOp,
}

#[derive(Debug, Subcommand)]
enum CtlOp {
    /// Set a socket's preference (also mid-flow; before the flow exists it waits for it).
    SetPref {
        /// The socket's own address, ip:port ([v6]:port for IPv6).
        #[arg(long, value_name = "ADDR")]
        local: SocketAddr,
        /// The socket's peer, ip:port.
        #[arg(long, value_name = "ADDR")]
        remote: SocketAddr,
        /// <throughput,latency,loss>: three numbers in [0,1] summing to 1.
        #[arg(long, value_name = "THR,LAT,LOSS", value_parser = parse_w, allow_hyphen_values = true)]
        w: Preference,
    },
    /// Remove a socket's preference (its flows go back to rules, suffix or --w).
    ClearPref {
        #[arg(long, value_name = "ADDR")]
        local: SocketAddr,
        #[arg(long, value_name = "ADDR")]
        remote: SocketAddr,
    },
    /// The live flows: algorithm, w and where it came from, addresses, RTT.
    Flows,
    /// The per-socket preferences stored (pending ones with their time left).
    Prefs,
    /// The agent's counters (the metrics, without comments).
    Stats,
    /// Is the agent there?
    Ping,
}

fn parse_url(s: &str) -> Result<ccp_runtime::sources::netstats::HttpUrl, String> {
    s.parse()
}

fn parse_w(s: &str) -> Result<Preference, String> {
    s.parse::<Preference>().map_err(|e| e.to_string())
}

/// Failures, split by who must act: the user (exit 2) or nobody in particular (exit 1).
enum Failure {
    Usage(anyhow::Error),
    Runtime(anyhow::Error),
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Self {
        Failure::Usage(e.into())
    }
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    cli.given = Given::from_matches(&matches);
    if let Some(Command::Ctl(c)) = &cli.command {
        return ctl(c);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CCP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // colour codes only for a terminal: a log file gets plain text
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => {
            eprintln!("ccp-agent: error: {e:#}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("ccp-agent: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    if cli.list && cli.format == ListFormat::CHeader {
        // the registry's names, whatever this agent's models and config
        return out(&kernel_names_header(&ccp_algs::registry::datapath_names()));
    }
    let config = match &cli.config {
        Some(p) => ccp_runtime::agent::load_agent_config(p)?,
        None => AgentConfig::default(),
    };
    // the poller runs beside a real datapath only (--sim has the bottleneck's own cell)
    let netstats_url = cli
        .netstats_url
        .clone()
        .or_else(|| config.netstats.url.clone())
        .filter(|_| cli.sim.is_none() && !cli.list);
    if cli.sim.is_some() && config.netstats.url.is_some() {
        warn!("[netstats] url is not polled with --sim: the scenario's [netstats] serves its bottleneck");
    }
    let poller = match netstats_url {
        Some(url) => {
            info!(url = %url, period_ms = config.netstats.period.as_millis() as u64, "polling in-network statistics");
            Some(
                ccp_runtime::sources::netstats::NetStatsPoller::spawn(url, &config.netstats)
                    .map_err(|e| {
                        Failure::Runtime(anyhow::anyhow!("cannot start the statistics poller: {e}"))
                    })?,
            )
        }
        None => None,
    };
    let opts = AgentOptions {
        default_alg: cli.alg.clone(),
        default_w: cli.w,
        preferences: config.preferences.clone(),
        pending_ttl: config.control.pending_ttl,
        max_pref_entries: config.control.max_entries,
        algs: config.algs.clone(),
        flow_log: cli.flow_log.clone(),
        models: Some(cli.models.clone()),
        network_stats: poller.as_ref().map(|p| p.source() as Arc<dyn NetworkStats>),
    };
    let agent = Agent::new(&opts)?;
    if cli.list {
        let mut text = format!(
            "default: {}\nalgorithms: {}\n",
            agent.default_alg(),
            agent.registry().names().join(", ")
        );
        let without: Vec<&str> = ccp_algs::registry::learned_names()
            .iter()
            .copied()
            .filter(|n| agent.registry().get(n).is_none())
            .collect();
        if !without.is_empty() {
            text.push_str(&format!(
                "learned, without a model: {}\n",
                without.join(", ")
            ));
        }
        for (program, n) in &agent.programs {
            text.push_str(&format!("{program}: {n} instructions\n"));
        }
        return out(&text);
    }
    match &cli.sim {
        Some(path) => run_sim(&cli, path, opts),
        None => {
            let r = serve(&cli, &config, &agent, poller.as_ref().map(|p| p.source()));
            if let Some(p) = poller {
                p.stop();
            }
            r
        }
    }
}

/// `datapath/kernel/ccp_algs.h`: the congestion-control names the kernel module registers
/// Print `text` to stdout. A reader that went away (`ccp-agent --list | head`) ends the
/// output: a closed pipe is not an error (`println!` panicked on it).
fn out(text: &str) -> Result<(), Failure> {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::Runtime(anyhow::anyhow!("writing to stdout: {e}"))),
    }
}

/// (`names`: [`ccp_algs::registry::datapath_names`]) as an X-macro.
fn kernel_names_header(names: &[String]) -> String {
    use std::fmt::Write as _;
    let mut h = String::from(
        "/* SPDX-License-Identifier: GPL-2.0 */\n\
         /*\n \
         * The congestion-control names ccp-kernel.ko registers, from the agent's\n \
         * registry (algs/src/registry.rs): \"ccp\" (the agent's default, --alg),\n \
         * \"ccp_<alg>\" for every algorithm of the registry in its order, and\n \
         * \"ccp_auto\" (the agent chooses by the flow's preference).\n \
         *\n \
         * Generated: do not edit.  After a change to the registry, run\n \
         *   cargo run -p ccp-agent -- --list --format c-header > datapath/kernel/ccp_algs.h\n \
         * (portus-agent/tests/registry.rs fails while this file and the registry disagree).\n \
         */\n\
         #ifndef CCP_ALGS_H\n\
         #define CCP_ALGS_H\n\
         \n\
         /* X(name) once per name */\n\
         #define CCPK_ALGORITHMS(X)\t\\\n",
    );
    for (i, n) in names.iter().enumerate() {
        let more = if i + 1 < names.len() { "\t\\" } else { "" };
        let _ = writeln!(h, "\tX(\"{n}\"){more}");
    }
    h.push_str("\n#endif /* CCP_ALGS_H */\n");
    h
}

/// `--sim` in a build without the simulator (`--no-default-features`).
#[cfg(not(feature = "sim"))]
fn run_sim(_cli: &Cli, path: &std::path::Path, _agent: AgentOptions) -> Result<(), Failure> {
    Err(Failure::Usage(anyhow::anyhow!(
        "--sim {}: this ccp-agent was built without the simulator (feature `sim`); \
         `cargo build --release -p ccp-agent` builds one with it",
        path.display()
    )))
}

#[cfg(feature = "sim")]
fn run_sim(cli: &Cli, path: &std::path::Path, agent: AgentOptions) -> Result<(), Failure> {
    let ipc = match cli.ipc.unwrap_or(IpcArg::Chan) {
        IpcArg::Chan => IpcKind::Chan,
        IpcArg::Inline => IpcKind::Inline,
        IpcArg::Unix => IpcKind::Unix,
        other => {
            return Err(Failure::Usage(anyhow::anyhow!(
            "--ipc {other:?} cannot drive the simulated datapath: use --ipc chan (default) or unix"
        )))
        }
    };
    let scenario = ccp_sim::Scenario::from_file(path)
        .map_err(|e| Failure::Usage(anyhow::anyhow!("scenario {}: {e}", path.display())))?;
    for note in override_notes(cli, &scenario, path) {
        eprintln!("ccp-agent: note: {note}");
    }
    let opts = RunOptions {
        agent,
        ipc,
        ..Default::default()
    };
    let run = simrun::run_sim(&scenario, &opts).map_err(Failure::Runtime)?;
    if let Some(csv) = &cli.csv {
        run.results
            .write_csv(csv)
            .map_err(|e| Failure::Runtime(anyhow::anyhow!("writing {}: {e}", csv.display())))?;
    }
    if let Some(file) = &cli.plot {
        let labels: Vec<String> = run
            .results
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| format!("{} {}", f.id, simrun::alg_label(&run, i)))
            .collect();
        let title = format!(
            "{}: {} flows, {} s simulated",
            path.display(),
            run.results.flows.len(),
            run.results.duration_s
        );
        let svg = plot::svg(
            &run.results.series,
            run.results.series_interval_s,
            &labels,
            &title,
        );
        std::fs::write(file, svg)
            .map_err(|e| Failure::Runtime(anyhow::anyhow!("writing {}: {e}", file.display())))?;
    }
    if cli.json {
        let v = simrun::summary_json(&run);
        out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        ))?;
    } else {
        out(&simrun::summary_table(&run))?;
    }
    Ok(())
}

/// What the scenario overrides of the flags the command line gave: `--alg` runs only the
/// flows that name no algorithm, `--w` reaches only the flows that give no preference.
#[cfg(feature = "sim")]
fn override_notes(cli: &Cli, scenario: &ccp_sim::Scenario, path: &std::path::Path) -> Vec<String> {
    let mut notes = Vec::new();
    let sc = path.display();
    let (alg_own, alg_default): (Vec<usize>, Vec<usize>) =
        (0..scenario.flows.len()).partition(|&i| scenario.flows[i].alg.is_some());
    if cli.given.alg && !alg_own.is_empty() {
        notes.push(if alg_default.is_empty() {
            format!(
                "--alg {} applies to no flow: every flow of {sc} names its algorithm (`alg`)",
                cli.alg
            )
        } else {
            format!(
                "--alg {} runs {}; {} of {sc} name their own algorithm",
                cli.alg,
                flow_list(&alg_default),
                flow_list(&alg_own)
            )
        });
    }
    let (w_own, w_default): (Vec<usize>, Vec<usize>) =
        (0..scenario.flows.len()).partition(|&i| scenario.flows[i].w.is_some());
    if cli.given.w && !w_own.is_empty() {
        let w = cli.w.as_array();
        let w = format!("{},{},{}", w[0], w[1], w[2]);
        notes.push(if w_default.is_empty() {
            format!("--w {w} applies to no flow: every flow of {sc} gives its own preference (`w`)")
        } else {
            format!(
                "--w {w} applies to {}; {} of {sc} give their own preference",
                flow_list(&w_default),
                flow_list(&w_own)
            )
        });
    }
    notes
}

/// `flow 3`, `flows 0-2, 5`.
#[cfg(feature = "sim")]
fn flow_list(ids: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &i in ids {
        match runs.last_mut() {
            Some((_, b)) if *b + 1 == i => *b = i,
            _ => runs.push((i, i)),
        }
    }
    let runs: Vec<String> = runs
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else if a + 1 == b {
                format!("{a}, {b}")
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    let noun = if ids.len() == 1 { "flow" } else { "flows" };
    format!("{noun} {}", runs.join(", "))
}

/// Bind the control socket and the metrics endpoint and start the control plane (`None`:
/// nothing to serve).
fn start_control(
    cli: &Cli,
    config: &AgentConfig,
    agent: &Agent,
    netstats: Option<Arc<PolledStats>>,
) -> Result<Option<ControlPlane>, Failure> {
    let metrics = match cli.metrics {
        Some(addr) => Some(
            control::bind_metrics(addr, cli.metrics_allow_remote).map_err(|e| match e {
                control::ControlError::RemoteMetrics { .. } => Failure::Usage(e.into()),
                other => Failure::Runtime(other.into()),
            })?,
        ),
        None => None,
    };
    let sock = if cli.no_control {
        None
    } else {
        let explicit = cli.control.clone().or(config.control.socket.clone());
        let path = explicit
            .clone()
            .unwrap_or_else(|| PathBuf::from(control::DEFAULT_SOCKET));
        match control::bind_control(&path, config.control.group) {
            Ok(l) => {
                info!(path = %path.display(), "control socket");
                Some((l, path))
            }
            Err(e) if explicit.is_none() => {
                warn!(error = %e, "no control socket (give --control PATH, or --no-control)");
                None
            }
            Err(e) => return Err(Failure::Runtime(e.into())),
        }
    };
    if sock.is_none() && metrics.is_none() {
        return Ok(None);
    }
    // per-socket preferences an earlier agent saved beside the socket come back pending
    let state_file = sock.as_ref().map(|(_, p)| control::state_file(p));
    if let Some(f) = &state_file {
        control::load_state(f, &agent.tables().prefs);
    }
    // read at each scrape (ccp_kernel_present says whether it was there)
    let mut shared =
        agent.control_shared(Some(PathBuf::from(ccp_runtime::control::metrics::PROC_CCP)));
    shared.netstats = netstats;
    let opts = ControlOptions {
        control: sock,
        auth: AuthPolicy::for_this_process(config.control.group),
        max_connections: config.control.max_connections,
        metrics,
        state_file,
    };
    ControlPlane::spawn(shared, opts)
        .map(Some)
        .map_err(|e| Failure::Runtime(anyhow::anyhow!("cannot start the control plane: {e}")))
}

/// SIGHUP: the models, the preference portfolio table, and the config file's
/// `[[preference]]` rules (a bad file keeps what is in force).
fn reload(cli: &Cli, agent: &Agent) {
    match agent.models() {
        Some(store) => {
            for outcome in store.reload() {
                info!(%outcome, "model reload");
            }
        }
        None => info!("SIGHUP: no learned models to reload"),
    }
    match agent.reload_portfolio() {
        Ok(true) => info!("SIGHUP: preference portfolio re-read"),
        Ok(false) => info!("SIGHUP: no preference portfolio table"),
        Err(e) => {
            warn!(error = %e, "SIGHUP: portfolio table refused, keeping the old one")
        }
    }
    if let Some(p) = &cli.config {
        match ccp_runtime::agent::load_agent_config(p) {
            Ok(c) => {
                let n = c.preferences.len();
                let changed = agent.tables().prefs.set_rules(c.preferences);
                info!(
                    rules = n,
                    flows_changed = changed,
                    "preference rules reloaded"
                );
            }
            Err(e) => error!(error = %e, "SIGHUP: config not reloaded, the rules in force stay"),
        }
    }
}

/// The BPF datapath's bridge thread, when serving it (`--ipc bpf`).
#[cfg(feature = "bpf")]
type Bridge = Option<bpf::BpfBridge>;
#[cfg(not(feature = "bpf"))]
type Bridge = Option<std::convert::Infallible>;

/// Whether the bridge's thread ended (it runs until stopped: an error).
fn bridge_finished(b: &Bridge) -> bool {
    #[cfg(feature = "bpf")]
    return b.as_ref().is_some_and(|b| b.is_finished());
    #[cfg(not(feature = "bpf"))]
    return b.is_some();
}

/// Stop the agent's loop and the bridge's thread: the bridge is told first, so that it takes
/// the agent's end closing for the stop it is.
fn stop_all(running: ccp_runtime::RunningAgent, b: &mut Bridge) -> Result<(), Failure> {
    #[cfg(feature = "bpf")]
    if let Some(b) = b.as_ref() {
        b.request_stop();
    }
    let r = running.stop(|| ()).map_err(Failure::Runtime);
    stop_bridge(b)?;
    r
}

/// Stop the bridge's thread and say how it ended.
fn stop_bridge(b: &mut Bridge) -> Result<(), Failure> {
    #[cfg(feature = "bpf")]
    if let Some(b) = b.take() {
        b.stop().map_err(|e| {
            error!(error = %e, "BPF bridge");
            Failure::Runtime(e)
        })?;
    }
    #[cfg(not(feature = "bpf"))]
    let _ = b;
    Ok(())
}

/// `--ipc` not given: the kernel module over netlink, or the BPF datapath when the module is
/// not loaded and the BPF datapath's pins are there.
fn default_ipc(cli: &Cli) -> IpcArg {
    #[cfg(feature = "bpf")]
    if bpf::detected(&cli.bpf_pins) {
        info!(pins = %cli.bpf_pins.display(), "no ccp-kernel module, a loaded BPF datapath: --ipc bpf");
        return IpcArg::Bpf;
    }
    #[cfg(not(feature = "bpf"))]
    let _ = cli;
    IpcArg::Netlink
}

fn serve(
    cli: &Cli,
    config: &AgentConfig,
    agent: &Agent,
    netstats: Option<Arc<PolledStats>>,
) -> Result<(), Failure> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1])
        .map_err(|e| Failure::Runtime(anyhow::anyhow!("cannot install signal handlers: {e}")))?;
    let ipc = cli.ipc.unwrap_or_else(|| default_ipc(cli));
    let spin = || {
        ccp_runtime::ipc::spin::Spin::new(std::time::Duration::from_micros(cli.spin_max_us))
            .map_err(|e| Failure::Usage(e.into()))
    };
    let mut spin_stats = None;
    let mut bridge: Bridge = None;
    let running = match ipc {
        IpcArg::Netlink => {
            let mut s = ccp_runtime::ipc::netlink::KernelSocket::open(agent.stats.clone()).map_err(|e| {
                Failure::Runtime(anyhow::anyhow!("cannot serve the kernel datapath: {e}"))
            })?;
            s.set_spin(spin()?);
            spin_stats = Some(s.spin_stats());
            agent.spawn(s)
        }
        IpcArg::Char => {
            let s = portus::ipc::kp::Socket::<portus::ipc::Blocking>::new().map_err(|e| {
                Failure::Runtime(anyhow::anyhow!(
                    "cannot open /dev/ccpkp ({e:?}): load a char-device CCP datapath or use --ipc netlink"
                ))
            })?;
            agent.spawn(s)
        }
        IpcArg::Unix => {
            let mut s = ccp_runtime::ipc::unix::UnixSocket::bind(&cli.unix_name).map_err(|e| match e {
                ccp_runtime::ipc::unix::BindError::BadName { .. } => Failure::Usage(e.into()),
                other => Failure::Runtime(anyhow::Error::from(other).context("cannot serve")),
            })?;
            s.set_spin(spin()?);
            spin_stats = Some(s.spin_stats());
            agent.spawn(s)
        }
        #[cfg(feature = "bpf")]
        IpcArg::Bpf => {
            let s = spin()?;
            spin_stats = Some(s.stats());
            let (running, b) = bpf::start(agent, &cli.bpf_pins, s).map_err(|e| {
                Failure::Runtime(e.context("cannot serve the BPF datapath"))
            })?;
            bridge = Some(b);
            Ok(running)
        }
        #[cfg(not(feature = "bpf"))]
        IpcArg::Bpf => {
            return Err(Failure::Usage(anyhow::anyhow!(
                "--ipc bpf: this agent was built without the feature `bpf` (cargo build \
                 --release -p ccp-agent --features bpf)"
            )))
        }
        IpcArg::Chan | IpcArg::Inline => {
            return Err(Failure::Usage(anyhow::anyhow!(
                "--ipc {ipc:?} is in-process and needs --sim SCENARIO"
            )))
        }
    }
    .map_err(Failure::Runtime)?;
    let plane = match start_control(cli, config, agent, netstats) {
        Ok(p) => p,
        Err(e) => {
            stop_all(running, &mut bridge)?;
            return Err(e);
        }
    };
    info!(ipc = ?ipc, "serving; SIGINT/SIGTERM to stop");
    // wait for a signal, or for the loop to end by itself
    'serve: loop {
        for sig in signals.pending() {
            if sig == SIGUSR1 {
                // one write(2), so that a reader never sees half a line
                let mut stats = agent.stats.snapshot();
                if let (Some(s), Some(obj)) = (spin_stats.as_ref(), stats.as_object_mut()) {
                    // the CPU the receive spin spent, beside what it bought
                    let (ms, hits, misses) = s.snapshot();
                    obj.insert(
                        "spin_ms".into(),
                        serde_json::json!((ms * 10.0).round() / 10.0),
                    );
                    obj.insert("spin_hits".into(), hits.into());
                    obj.insert("spin_misses".into(), misses.into());
                }
                #[cfg(feature = "bpf")]
                if let (Some(b), Some(obj)) = (bridge.as_ref(), stats.as_object_mut()) {
                    // what the BPF bridge did with the datapath's reports (stale, refused...)
                    if let Ok(v) = serde_json::to_value(b.stats()) {
                        obj.insert("bridge".into(), v);
                    }
                }
                let line = format!("ccp-agent stats: {stats}\n");
                let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
            } else if sig == SIGHUP {
                reload(cli, agent);
            } else {
                break 'serve;
            }
        }
        if running.is_finished() {
            let r = running.wait();
            error!(result = ?r, "agent loop ended");
            stop_bridge(&mut bridge)?;
            return r.map_err(Failure::Runtime);
        }
        if bridge_finished(&bridge) {
            stop_all(running, &mut bridge)?;
            return Err(Failure::Runtime(anyhow::anyhow!(
                "the BPF bridge ended: exiting; the flows run the in-BPF Cubic until an agent serves them again"
            )));
        }
        if agent
            .stats
            .datapath_gone
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            running.stop(|| ()).map_err(Failure::Runtime)?;
            return Err(Failure::Runtime(anyhow::anyhow!(
                "the ccp-kernel datapath was unloaded (its generic netlink family is gone): exiting; start the agent again after loading the module"
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    info!("stopping");
    if let Some(p) = plane {
        p.stop();
    }
    stop_all(running, &mut bridge)?;
    let stats = &agent.stats;
    info!(
        accepted = stats.accepted.load(std::sync::atomic::Ordering::Relaxed),
        rejected = stats.rejected(),
        not_from_kernel = stats
            .not_from_kernel
            .load(std::sync::atomic::Ordering::Relaxed),
        "stopped"
    );
    Ok(())
}

/// `ccp-agent ctl ...`: one request, the reply printed. Exit 0 on success, 1 when the agent
/// cannot be reached or refuses, 2 when it calls the request bad.
fn ctl(c: &CtlArgs) -> ExitCode {
    let req = match &c.op {
        CtlOp::SetPref { local, remote, w } => json!({"op": "set-pref",
            "local": local.to_string(), "remote": remote.to_string(), "w": w.as_array()}),
        CtlOp::ClearPref { local, remote } => json!({"op": "clear-pref",
            "local": local.to_string(), "remote": remote.to_string()}),
        CtlOp::Flows => json!({"op": "flows"}),
        CtlOp::Prefs => json!({"op": "prefs"}),
        CtlOp::Stats => json!({"op": "stats"}),
        CtlOp::Ping => json!({"op": "ping"}),
    };
    let reply = match control::request(&c.control, &req, Duration::from_secs(10)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ccp-agent ctl: {e}");
            return ExitCode::from(1);
        }
    };
    if reply.get("ok") != Some(&Value::Bool(true)) {
        let code = reply.get("code").and_then(Value::as_str).unwrap_or("error");
        let msg = reply.get("error").and_then(Value::as_str).unwrap_or("?");
        eprintln!("ccp-agent ctl: the agent says ({code}): {msg}");
        return ExitCode::from(
            if code == "not_permitted" || code == "too_many_connections" {
                1
            } else {
                2
            },
        );
    }
    if c.json {
        println!("{reply}");
        return ExitCode::SUCCESS;
    }
    print!("{}", ctl_text(&c.op, &reply));
    ExitCode::SUCCESS
}

fn f3(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| format!("{:.2}", x.as_f64().unwrap_or(f64::NAN)))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// A reply as text for people.
fn ctl_text(op: &CtlOp, r: &Value) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let s = |v: &Value| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string())
    };
    match op {
        CtlOp::SetPref { .. } => match r["state"].as_str() {
            Some("applied") => {
                let _ = writeln!(
                    o,
                    "applied to live flow(s) {}: w {}",
                    r["sids"],
                    f3(&r["w"])
                );
            }
            _ => {
                let _ = writeln!(
                    o,
                    "pending: no such flow yet; it waits {} s for one (w {})",
                    r["expires_in_s"],
                    f3(&r["w"])
                );
            }
        },
        CtlOp::ClearPref { .. } => {
            let _ = writeln!(
                o,
                "{}",
                if r["removed"] == json!(true) {
                    "removed"
                } else {
                    "there was none"
                }
            );
        }
        CtlOp::Flows => {
            let _ = writeln!(
                o,
                "{:>5} {:<7} {:<16} {:<14} {:<22} {:<22} {:>8} {:>9}",
                "sid", "alg", "w", "from", "src", "dst", "reports", "srtt ms"
            );
            for f in r["flows"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    o,
                    "{:>5} {:<7} {:<16} {:<14} {:<22} {:<22} {:>8} {:>9.1}",
                    s(&f["sid"]),
                    s(&f["alg"]),
                    f3(&f["w"]),
                    s(&f["w_source"]),
                    s(&f["src"]),
                    s(&f["dst"]),
                    s(&f["reports"]),
                    f["srtt_us"].as_f64().unwrap_or(0.0) / 1e3
                );
            }
            if r["truncated"].as_bool() == Some(true) {
                let listed = r["flows"].as_array().map_or(0, Vec::len);
                let _ = writeln!(
                    o,
                    "({listed} of {} flows listed; `--json` and {{\"op\":\"flows\",\"offset\":N}} on the control socket page on)",
                    s(&r["total"])
                );
            }
        }
        CtlOp::Prefs => {
            let _ = writeln!(
                o,
                "{:<24} {:<24} {:<16} {:>5} {:>10}",
                "local", "remote", "w", "flows", "expires s"
            );
            for e in r["prefs"].as_array().into_iter().flatten() {
                let exp = e["expires_in_s"]
                    .as_f64()
                    .map(|x| format!("{x:.1}"))
                    .unwrap_or_else(|| "-".into());
                let _ = writeln!(
                    o,
                    "{:<24} {:<24} {:<16} {:>5} {:>10}",
                    s(&e["local"]),
                    s(&e["remote"]),
                    f3(&e["w"]),
                    s(&e["flows"]),
                    exp
                );
            }
        }
        CtlOp::Stats => {
            if let Some(m) = r["metrics"].as_object() {
                for (k, v) in m {
                    let _ = writeln!(o, "{k} {v}");
                }
            }
        }
        CtlOp::Ping => {
            let _ = writeln!(o, "ccp-agent {} is up", s(&r["version"]));
        }
    }
    o
}
