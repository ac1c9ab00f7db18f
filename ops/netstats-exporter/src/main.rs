//! `ccp-netstats-exporter`: see `ccp-netstats-exporter --help` and the library's header.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccp_netstats_exporter::{
    parse_link, parse_path, rtnl::Rtnl, Exporter, ExporterConfig, LinkSpec, PathSpec,
    DEFAULT_LISTEN, URL_PATH,
};
use clap::Parser;
use tracing::info;

#[derive(Debug, Parser)]
#[command(
    name = "ccp-netstats-exporter",
    version,
    about = "Serve this router's in-network statistics (PNC, PNA) for the CCP agent's poller (ccp-agent --netstats-url)",
    long_about = "Serve this Linux router's in-network statistics for Owl: every period it reads \
        the interface counters (RTM_GETLINK stats64) and root qdisc statistics (RTM_GETQDISC) \
        of each --link over rtnetlink and serves, at GET /netstats, per path:\n\n  \
        PNC = max over the links of |P_in − P_out| per second, P_in − P_out = drops + queue growth (eq. 4)\n  \
        PNA = min over the links of (C − tx rate) / C, C the --link capacity (eq. 5)\n\n\
        The links are the router's egress ports: give the interfaces the flows leave through. \
        Point agents at it with `ccp-agent --netstats-url http://ADDR/netstats`.\n\n\
        Exit codes: 0 stopped by SIGINT/SIGTERM, 1 runtime failure (no rtnetlink, address in \
        use), 2 bad flags."
)]
struct Cli {
    /// An egress port and its capacity in tc's bit units, e.g. eth1=100mbit (repeat for each
    /// port).
    #[arg(long = "link", value_name = "IF=RATE", value_parser = parse_link, required = true)]
    links: Vec<LinkSpec>,

    /// A destination the statistics are for and the links it crosses: default, an address or
    /// a prefix, optionally =IF,IF (e.g. 10.0.2.0/24=eth1) [default: one default path over
    /// every link].
    #[arg(long = "path", value_name = "DST[=IF,..]", value_parser = parse_path)]
    paths: Vec<PathSpec>,

    /// Address to serve on (loopback by default; give the router's address on the hosts'
    /// side for agents on other machines).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,

    /// Sampling period (ms).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    period_ms: u64,

    /// The share of the flows' path this router stands for (Owl's "known share"), in [0, 1].
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    known_share: f64,

    /// Print the first sample's JSON on stdout and exit (after two readings one period
    /// apart).
    #[arg(long)]
    once: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CCP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cfg = ExporterConfig {
        links: cli.links,
        paths: cli.paths,
        period: Duration::from_millis(cli.period_ms),
        known_share: cli.known_share,
        listen: cli.listen,
    };
    let mut nl = match Rtnl::open() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("ccp-netstats-exporter: cannot open an rtnetlink socket: {e}");
            return ExitCode::from(1);
        }
    };
    let have = match nl.counters() {
        Ok(c) => c.into_keys().collect::<Vec<_>>(),
        Err(e) => {
            eprintln!(
                "ccp-netstats-exporter: cannot read the interface counters over rtnetlink: {e}"
            );
            return ExitCode::from(1);
        }
    };
    if let Err(e) = cfg.check(&have) {
        eprintln!("ccp-netstats-exporter: error: {e}");
        return ExitCode::from(2);
    }
    let period = cfg.period;
    let exporter = match Exporter::spawn(cfg, move || nl.counters()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("ccp-netstats-exporter: cannot serve on {}: {e}", cli.listen);
            return ExitCode::from(1);
        }
    };
    if cli.once {
        let deadline = std::time::Instant::now() + 3 * period + Duration::from_secs(2);
        while std::time::Instant::now() < deadline {
            if let Some(v) = exporter.latest_json() {
                println!("{v}");
                exporter.stop();
                return ExitCode::SUCCESS;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("ccp-netstats-exporter: no sample within three periods (see the warnings above)");
        return ExitCode::from(1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            eprintln!("ccp-netstats-exporter: cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    }
    info!(addr = %exporter.addr, path = URL_PATH, period_ms = period.as_millis() as u64, "serving in-network statistics");
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    info!("stopping");
    exporter.stop();
    ExitCode::SUCCESS
}
