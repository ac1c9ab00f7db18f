//! The event loop: bulk senders driven by libccp, one bottleneck, ACK clocking.
//!
//! `mod.rs` holds the public types ([`SimOptions`], [`SimError`], [`Simulator`], [`Session`])
//! and the constants the sender shares; `events.rs` the event heap, `flow.rs` the per-flow
//! sender state, `world.rs` the world, its event loop and the agent exchange, `sender.rs`
//! sending, ACKs, timeouts and invoking the datapath, `stats.rs` sampling, in-network
//! statistics and the results.

mod events;
mod flow;
mod sender;
mod stats;
mod world;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ccp_algs::netstats::NetStatsCell;

use crate::results::SimResults;
use crate::scenario::{Scenario, ScenarioError, PACKET_BYTES};
use ccp_libccp::ipc::DatapathIpc;
use ccp_libccp::Datapath;

use world::{IpcHolder, World};

/// Bytes per packet, and the flows' MSS.
const MSS: u32 = PACKET_BYTES;
/// Initial window: 10 segments (RFC 6928, Linux).
const INIT_CWND: u32 = 10 * MSS;
/// `Flow.bytes_pending` of a bulk sender: always plenty.
const BYTES_PENDING: u32 = 1 << 30;
const MS: u64 = 1_000_000;
const RTO_INIT: u64 = 1_000 * MS;
const RTO_MIN: u64 = 200 * MS;
const RTO_MAX: u64 = 60_000 * MS;
/// A transmission is declared lost once this many later transmissions were delivered.
const DUP_THRESH: usize = 3;

/// Run options that are not part of the scenario.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// How long to wait (wall clock) for the agent's answer to a CREATE or a report.
    pub agent_timeout: Duration,
    /// The name results show for flows that use the agent's default algorithm.
    pub default_alg: String,
    /// Time-series resolution (simulated time).
    pub series_interval: Duration,
    /// The id this datapath announces in its READY message.
    pub datapath_id: u32,
    /// Where the bottleneck publishes its in-network statistics when the scenario has
    /// `[netstats]` (the agent reads the same cell: `AgentOptions::network_stats`); cleared
    /// when a run starts. `None`: published nowhere, as for a separate agent process.
    pub network_stats: Option<Arc<NetStatsCell>>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            agent_timeout: Duration::from_secs(10),
            default_alg: "default".into(),
            series_interval: Duration::from_millis(100),
            datapath_id: 0,
            network_stats: None,
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("bad simulator option: {0}")]
    Options(String),
    #[error(
        "the agent did not answer the {msg} of socket id {sid} within {waited:?}: is the agent \
         running on the same IPC, and does it answer every CREATE with one CHANGE_PROG and \
         every report with one UPDATE_FIELDS? (raise SimOptions::agent_timeout if it is slow)"
    )]
    AgentTimeout {
        sid: u32,
        msg: &'static str,
        waited: Duration,
    },
    #[error("IPC {context} failed: {source}")]
    Ipc {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("libccp {call} failed with code {code}")]
    Libccp { call: &'static str, code: i32 },
}

/// A packet-level simulation of one scenario. Create with [`Simulator::new`], run against an
/// agent with [`Simulator::run`] (repeatable: each run starts from scratch).
#[derive(Debug, Clone)]
pub struct Simulator {
    scenario: Scenario,
    opts: SimOptions,
}

impl Simulator {
    pub fn new(scenario: &Scenario, opts: SimOptions) -> Result<Self, SimError> {
        scenario.validate()?;
        if opts.series_interval.is_zero() {
            return Err(SimError::Options(
                "series_interval must be > 0 (e.g. 100 ms)".into(),
            ));
        }
        if opts.agent_timeout.is_zero() {
            return Err(SimError::Options(
                "agent_timeout must be > 0 (e.g. 10 s)".into(),
            ));
        }
        Ok(Simulator {
            scenario: scenario.clone(),
            opts,
        })
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Start a run that the caller advances step by step ([`Session::advance`]); the
    /// session owns its IPC. Used by training environments, which pause the world at
    /// decision points.
    pub fn session(&self, ipc: Box<dyn DatapathIpc>) -> Result<Session, SimError> {
        let wall = Instant::now();
        let dp = Datapath::new(self.opts.datapath_id, 0).map_err(|e| SimError::Libccp {
            call: "ccp_init",
            code: e.0,
        })?;
        let mut world = World::new(&self.scenario, &self.opts, dp, ipc);
        world.yield_on_report = true;
        world.exchange()?; // READY
        Ok(Session {
            world: Some(world),
            wall,
            finished: false,
        })
    }

    /// Run the scenario with the agent at the other end of `ipc`. Blocks until the simulated
    /// duration has elapsed; the agent must answer in lockstep (see the crate docs).
    pub fn run(&mut self, ipc: &mut dyn DatapathIpc) -> Result<SimResults, SimError> {
        let wall = Instant::now();
        let dp = Datapath::new(self.opts.datapath_id, 0).map_err(|e| SimError::Libccp {
            call: "ccp_init",
            code: e.0,
        })?;
        let mut w = World::new(&self.scenario, &self.opts, dp, ipc);
        w.exchange()?; // READY
        w.run()?;
        Ok(w.results(wall.elapsed().as_secs_f64()))
    }
}

/// A run advanced by its caller: `advance` until a pause condition, act on the agent side
/// while the world stands still, `advance` again; `finish` for the results.
pub struct Session {
    world: Option<World<Box<dyn DatapathIpc>>>,
    wall: Instant,
    finished: bool,
}

impl Session {
    /// Process events until `pause` returns `true` (it is asked after every event, with the
    /// session's IPC) or the scenario ends. Messages the agent queued since the last call are
    /// applied first. Returns `true` once the scenario has ended.
    pub fn advance(
        &mut self,
        pause: &mut dyn FnMut(&mut dyn DatapathIpc) -> bool,
    ) -> Result<bool, SimError> {
        let Some(w) = self.world.as_mut() else {
            return Ok(true);
        };
        if self.finished {
            return Ok(true);
        }
        w.drain_agent()?;
        self.finished = w.run_until(pause)?;
        Ok(self.finished)
    }

    /// Simulated time (s).
    pub fn now_s(&self) -> f64 {
        self.world.as_ref().map_or(0.0, |w| w.now as f64 / 1e9)
    }

    /// The session's IPC (the agent side, e.g. to queue updates between steps).
    pub fn ipc(&mut self) -> Option<&mut dyn DatapathIpc> {
        self.world.as_mut().map(|w| w.ipc.ipc())
    }

    /// The results of what was simulated so far (the whole scenario once `advance` returned
    /// `true`). A session can be finished once.
    pub fn finish(&mut self) -> Option<SimResults> {
        let w = self.world.take()?;
        Some(w.results(self.wall.elapsed().as_secs_f64()))
    }
}
