//! `--ipc bpf`: the agent on the BPF datapath (`datapath/bpf`, loaded by `ccp-bpf load`; no
//! kernel module), in one process.
//!
//! The portus loop runs on its own thread as for every datapath, over an in-process channel
//! ([`ChanSocket`], spinning as `--spin-max-us` says). A second thread hosts libccp for the BPF
//! flows (`ccp_bpf_bridge::serve`): it sleeps on the datapath's ring buffer and on an eventfd
//! that the channel writes after each of the agent's messages, runs each report through the
//! flow's fold program, hands the agent what libccp sends, and writes the agent's windows and
//! rates into the datapath's decision map. The same thread as the standalone
//! `ccp-bpf-bridge`, without the unix sockets between it and the agent.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use ccp_bpf_bridge::serve::{self, AgentReady, Pins, Wake};
use ccp_bpf_bridge::BridgeStats;
use ccp_runtime::agent::RunningAgent;
use ccp_runtime::ipc::chan::ChanSocket;
use ccp_runtime::ipc::spin::Spin;
use ccp_runtime::Agent;

/// Most messages from the datapath waiting for the agent: a stalled agent stalls the bridge's
/// thread, reports then wait in the ring (dropped, and counted, when it is full) and the
/// flows fall back to the in-BPF Cubic. The agent's messages to the bridge are not bounded
/// here: it sends only in answer to the datapath's, which are.
pub const TO_AGENT_QUEUE: usize = 16 * 1024;
/// How long stopping waits for the bridge's thread.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// The bridge's thread.
pub struct BpfBridge {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<anyhow::Result<BridgeStats>>>,
    published: Arc<Mutex<BridgeStats>>,
}

impl BpfBridge {
    /// The bridge's counters as of its last wake-up (for the SIGUSR1 line).
    pub fn stats(&self) -> BridgeStats {
        self.published.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Whether the thread has ended (an error: it runs until stopped).
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Ask the thread to stop (it ends within `serve::IDLE_WAKE`).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stop the thread and return how it ended.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.request_stop();
        let Some(h) = self.handle.take() else {
            return Ok(());
        };
        // it wakes at least every serve::IDLE_WAKE; one blocked on a stalled agent does not
        let deadline = Instant::now() + STOP_WAIT;
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !h.is_finished() {
            anyhow::bail!("the BPF bridge's thread did not stop within {STOP_WAIT:?}");
        }
        match h.join() {
            Ok(r) => r.map(|stats| tracing::info!(?stats, "BPF bridge stopped")),
            Err(_) => anyhow::bail!("the BPF bridge's thread panicked"),
        }
    }
}

/// Open the datapath's pins under `pins`, then start the agent's loop and the bridge.
pub fn start(agent: &Agent, pins: &Path, spin: Spin) -> anyhow::Result<(RunningAgent, BpfBridge)> {
    let maps = Pins::open(pins)?;
    let wake = Arc::new(Wake::new().context("eventfd for the agent's messages")?);
    let (to_agent, agent_rx) = crossbeam_channel::bounded::<Vec<u8>>(TO_AGENT_QUEUE);
    let (agent_tx, from_agent) = crossbeam_channel::unbounded::<Vec<u8>>();
    let w = wake.clone();
    let sock =
        ChanSocket::with_spin(agent_tx, agent_rx, spin).with_notify(Box::new(move || w.wake()));
    let running = agent.spawn(sock)?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let published = Arc::new(Mutex::new(BridgeStats::default()));
    let p = published.clone();
    let handle = std::thread::Builder::new()
        .name("ccp-bpf-bridge".into())
        .spawn(move || {
            let ipc = ccp_libccp::ChanIpc::new(to_agent, from_agent);
            serve::serve(&maps, ipc, AgentReady::Event(&wake), &s, &p)
        })
        .context("starting the BPF bridge's thread")?;
    Ok((
        running,
        BpfBridge {
            stop,
            handle: Some(handle),
            published,
        },
    ))
}

/// `--ipc` not given: the BPF datapath when the kernel module is not loaded and the
/// datapath's pins are there, else netlink (the module).
pub fn detected(pins: &Path) -> bool {
    !Path::new("/sys/module/ccp_kernel").exists() && Pins::present(pins)
}
