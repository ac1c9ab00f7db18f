//! `ccp-agent`: the CCP agent binary. See `ccp-agent --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use ccp_algs::Preference;
use ccp_runtime::simrun::{self, IpcKind, RunOptions};
use ccp_runtime::{Agent, AgentOptions, ConfigError};
use clap::{Parser, ValueEnum};
use tracing::{error, info};

/// IPC between agent and datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IpcArg {
    /// Generic netlink family `ccp` (needs CAP_NET_ADMIN): the ccp-kernel module.
    Netlink,
    /// Character device /dev/ccpkp.
    Char,
    /// Unix datagram sockets under /tmp/ccp/ (a user-space datapath, e.g. `ccp-sim`).
    Unix,
    /// In-process channel to the portus run loop: only with --sim.
    Chan,
    /// In-process and synchronous, no portus run loop (what training uses): only with --sim.
    Inline,
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
        unloaded (exit code 1); SIGUSR1 prints the IPC counters as one JSON line on stderr. With --sim SCENARIO it runs the scenario on the built-in \
        simulated datapath and prints per-flow and aggregate results.\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 bad input (flags, files, weights)."
)]
struct Cli {
    /// Algorithm for flows that name none (`ccp`) or one this agent does not run.
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

    /// List the algorithms this agent runs and their fold programs' sizes, then exit.
    #[arg(long)]
    list: bool,
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
    let cli = Cli::parse();
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
    let algs = match &cli.config {
        Some(p) => ccp_runtime::agent::load_config(p)?,
        None => Default::default(),
    };
    let opts = AgentOptions {
        default_alg: cli.alg.clone(),
        default_w: cli.w,
        algs,
        flow_log: cli.flow_log.clone(),
        models: Some(cli.models.clone()),
        network_stats: None,
    };
    let agent = Agent::new(&opts)?;
    if cli.list {
        println!("default: {}", agent.default_alg());
        println!("algorithms: {}", agent.registry().names().join(", "));
        for (program, n) in &agent.programs {
            println!("{program}: {n} instructions");
        }
        return Ok(());
    }
    match &cli.sim {
        Some(path) => run_sim(&cli, path, opts),
        None => serve(&cli, &agent),
    }
}

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
    if cli.json {
        let v = simrun::summary_json(&run);
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", simrun::summary_table(&run));
    }
    Ok(())
}

fn serve(cli: &Cli, agent: &Agent) -> Result<(), Failure> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1])
        .map_err(|e| Failure::Runtime(anyhow::anyhow!("cannot install signal handlers: {e}")))?;
    let ipc = cli.ipc.unwrap_or(IpcArg::Netlink);
    let running = match ipc {
        IpcArg::Netlink => {
            let s = ccp_runtime::netlink::KernelSocket::open(agent.stats.clone()).map_err(|e| {
                Failure::Runtime(anyhow::anyhow!("cannot serve the kernel datapath: {e}"))
            })?;
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
            let s = ccp_runtime::unix::UnixSocket::bind(&cli.unix_name).map_err(|e| match e {
                ccp_runtime::unix::BindError::BadName { .. } => Failure::Usage(e.into()),
                other => Failure::Runtime(anyhow::Error::from(other).context("cannot serve")),
            })?;
            agent.spawn(s)
        }
        IpcArg::Chan | IpcArg::Inline => {
            return Err(Failure::Usage(anyhow::anyhow!(
                "--ipc {ipc:?} is in-process and needs --sim SCENARIO"
            )))
        }
    }
    .map_err(Failure::Runtime)?;
    info!(ipc = ?ipc, "serving; SIGINT/SIGTERM to stop");
    // wait for a signal, or for the loop to end by itself
    'serve: loop {
        for sig in signals.pending() {
            if sig == SIGUSR1 {
                // one write(2), so that a reader never sees half a line
                let line = format!("ccp-agent stats: {}\n", agent.stats.snapshot());
                let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
            } else if sig == SIGHUP {
                match agent.models() {
                    Some(store) => {
                        for outcome in store.reload() {
                            info!(%outcome, "model reload");
                        }
                    }
                    None => info!("SIGHUP: no learned models to reload"),
                }
            } else {
                break 'serve;
            }
        }
        if running.is_finished() {
            let r = running.wait();
            error!(result = ?r, "agent loop ended");
            return r.map_err(Failure::Runtime);
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
    running.stop(|| ()).map_err(Failure::Runtime)?;
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
