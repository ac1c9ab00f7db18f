//! `ccp-bpf-bridge`: connects the BPF datapath (loaded and pinned by `ccp-bpf load`) to a
//! `ccp-agent --ipc unix`. See the library's documentation and `datapath/bpf/README.md`.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ccp_bpf_bridge::serve::{self, AgentReady, Pins};
use clap::Parser;
use tracing::info;

#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// The agent's unix socket name under /tmp/ccp/ (`ccp-agent --ipc unix --unix-name`).
    #[arg(long, default_value = "portus")]
    agent: String,
    /// This bridge's own socket name under /tmp/ccp/.
    #[arg(long, default_value = "ccp-bpf")]
    name: String,
    /// Where `ccp-bpf load` pinned the maps.
    #[arg(long, default_value = serve::DEFAULT_PINS)]
    pins: PathBuf,
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let pins = Pins::open(&cli.pins)?;
    let ipc = ccp_libccp::UnixIpc::new(&cli.name, &cli.agent)
        .context("binding the bridge's socket under /tmp/ccp")?
        .with_agent_wait(Duration::from_millis(100));
    let fd = ipc.as_raw_fd();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    info!(agent = %cli.agent, pins = %cli.pins.display(), "agent over unix sockets");
    let published = std::sync::Mutex::default(); // the counters are logged at exit
    serve::serve(&pins, ipc, AgentReady::Socket(fd), &stop, &published)?;
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccp-bpf-bridge: {e:#}");
            ExitCode::FAILURE
        }
    }
}
