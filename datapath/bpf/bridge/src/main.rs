//! `ccp-bpf-bridge`: connects the BPF datapath (loaded and pinned by `ccp-bpf load`) to a
//! `ccp-agent --ipc unix`. See the library's documentation and `datapath/bpf/README.md`.

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use ccp_bpf_bridge::record::{self, Decision, Record};
use ccp_bpf_bridge::{Bridge, DecisionSink};
use clap::Parser;
use libbpf_rs::{MapCore, MapFlags, MapHandle, RingBufferBuilder};
use tracing::{info, warn};

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
    #[arg(long, default_value = "/sys/fs/bpf/ccp")]
    pins: PathBuf,
}

struct MapSink(MapHandle);

impl DecisionSink for MapSink {
    fn write(&mut self, flow: u32, d: &Decision) -> anyhow::Result<()> {
        let Some(v) = d.to_bytes() else {
            bail!("decision out of range");
        };
        self.0.update(&flow.to_le_bytes(), &v, MapFlags::ANY)?;
        Ok(())
    }
    fn remove(&mut self, flow: u32) {
        // the datapath deletes it on close too: a missing entry is fine
        let _ = self.0.delete(&flow.to_le_bytes());
    }
}

fn open(pins: &std::path::Path, name: &str) -> anyhow::Result<MapHandle> {
    let p = pins.join(name);
    MapHandle::from_pinned_path(&p).with_context(|| {
        format!(
            "{} (is the BPF datapath loaded? ccp-bpf load; root only)",
            p.display()
        )
    })
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let stats = open(&cli.pins, "stats")?;
    let v = stats
        .lookup(&0u32.to_le_bytes(), MapFlags::ANY)?
        .context("the stats map has no entry 0")?;
    match record::stats_abi(&v) {
        Some(record::ABI) => {}
        other => bail!(
            "the loaded BPF datapath has ABI {other:?}, this bridge speaks {}",
            record::ABI
        ),
    }
    let reports = open(&cli.pins, "reports")?;
    let decisions = open(&cli.pins, "decisions")?;
    let ipc = ccp_sim::UnixIpc::new(&cli.name, &cli.agent)
        .context("binding the bridge's socket under /tmp/ccp")?
        .with_agent_wait(Duration::from_millis(100));
    let mut bridge = Bridge::new(ipc, MapSink(decisions))?;

    let queue: Rc<RefCell<Vec<Vec<u8>>>> = Rc::new(RefCell::new(Vec::new()));
    let q = queue.clone();
    let mut rb = RingBufferBuilder::new();
    rb.add(&reports, move |data: &[u8]| {
        q.borrow_mut().push(data.to_vec());
        0
    })?;
    let rb = rb.build()?;

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    info!(agent = %cli.agent, pins = %cli.pins.display(), "bridging the BPF datapath");
    bridge.flush();
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = rb.poll(Duration::from_millis(2)) {
            // EINTR from a signal: the loop checks the flag
            if !stop.load(Ordering::Relaxed) {
                warn!(error = %e, "ring buffer poll");
            }
        }
        let batch = std::mem::take(&mut *queue.borrow_mut());
        for raw in batch {
            match Record::parse(&raw) {
                Ok(r) => bridge.on_record(&r),
                Err(e) => {
                    bridge.stats.bad_records += 1;
                    warn!(error = %e, "record refused");
                }
            }
        }
        bridge.flush();
        bridge.pump_agent(Duration::from_micros(200))?;
        bridge.flush();
    }
    info!(stats = ?bridge.stats, flows = bridge.flows(), "stopping");
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
