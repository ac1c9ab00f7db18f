//! `ccp-agent --sim`: the agent and the simulated datapath in one process.
//!
//! The portus loop runs on its own thread exactly as it does against the kernel; the
//! simulator runs on the calling thread and talks to it over portus's in-process channel
//! (`IpcKind::Chan`) or over unix datagram sockets (`IpcKind::Unix`, the same transport a
//! separate `ccp-sim` process uses). Agent and simulator proceed in lockstep (see the
//! adapter), so a seeded scenario gives identical results over either transport. Messages
//! that need no answer (a flow's close) may still be on their way when the simulation
//! ends: the run waits until the agent has taken on every one ([`GuardStats::wait_datagrams`])
//! before it reads the agent's records, so they show exactly the closes the datapath sent.
//! A scenario with `[netstats]` gets a cell that the simulator's bottleneck publishes its
//! in-network statistics to and the agent reads them from (every transport here is in this
//! process).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccp_algs::netstats::{NetStatsCell, NetworkStats};

use ccp_sim::{ChanIpc, Scenario, SimOptions, SimResults, Simulator, UnixIpc};
use serde_json::json;

use crate::agent::{Agent, AgentOptions};
use crate::flows::FlowRecord;
use crate::ipc::guard::GuardStats;

/// The longest a run waits for the agent to read the simulator's last messages.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Wait until the agent has taken on every message the simulation sent (see the module docs).
fn drain(stats: &GuardStats, res: &Result<SimResults, ccp_sim::SimError>) {
    if let Ok(r) = res {
        if !stats.wait_datagrams(r.messages_to_agent, DRAIN_LIMIT) {
            tracing::warn!(
                sent = r.messages_to_agent,
                read = stats.datagrams.load(Ordering::Relaxed),
                "the agent did not read the simulator's last messages in time"
            );
        }
    }
}

/// Transport between the in-process agent and the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IpcKind {
    #[default]
    Chan,
    Unix,
    /// No portus run loop: the agent answers synchronously on the simulator's thread.
    Inline,
}

/// How to run a scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub agent: AgentOptions,
    pub ipc: IpcKind,
    /// How long the simulator waits for one agent answer.
    pub agent_timeout: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            agent: AgentOptions::default(),
            ipc: IpcKind::Chan,
            agent_timeout: Duration::from_secs(10),
        }
    }
}

/// A finished simulation: the datapath's measurements and the agent's view of each flow.
#[derive(Debug, Clone)]
pub struct SimRun {
    pub results: SimResults,
    /// Algorithm that ran each scenario flow, in the simulator's flow order.
    pub flow_algs: Vec<&'static str>,
    /// Preference of each scenario flow: its own, else the agent's default (`--w`).
    pub flow_ws: Vec<[f64; 3]>,
    /// The agent's records, by socket id.
    pub records: Vec<FlowRecord>,
    /// Datapath messages the agent's guard accepted and rejected.
    pub accepted: u64,
    pub rejected: u64,
}

static RUN_ID: AtomicU64 = AtomicU64::new(0);

/// Run `scenario` with an in-process agent.
pub fn run_sim(scenario: &Scenario, opts: &RunOptions) -> anyhow::Result<SimRun> {
    let (agent_opts, cell) = with_network_stats(scenario, &opts.agent);
    run_with_agent(scenario, opts, Agent::new(&agent_opts)?, cell)
}

/// Run `scenario` with an agent hosting exactly `registry` (tests, training evaluation).
pub fn run_sim_with_registry(
    scenario: &Scenario,
    opts: &RunOptions,
    registry: ccp_algs::Registry,
) -> anyhow::Result<SimRun> {
    let (agent_opts, cell) = with_network_stats(scenario, &opts.agent);
    run_with_agent(
        scenario,
        opts,
        Agent::with_registry(&agent_opts, registry)?,
        cell,
    )
}

/// The agent's options for `scenario`: when its network exports statistics (`[netstats]`),
/// the agent reads them from the cell the simulator publishes to (returned too).
fn with_network_stats(
    scenario: &Scenario,
    agent: &AgentOptions,
) -> (AgentOptions, Option<Arc<NetStatsCell>>) {
    let mut agent = agent.clone();
    let cell = scenario.netstats.map(|_| Arc::new(NetStatsCell::new()));
    if let Some(c) = &cell {
        agent.network_stats = Some(c.clone() as Arc<dyn NetworkStats>);
    }
    (agent, cell)
}

fn run_with_agent(
    scenario: &Scenario,
    opts: &RunOptions,
    agent: Agent,
    network_stats: Option<Arc<NetStatsCell>>,
) -> anyhow::Result<SimRun> {
    let sim_opts = SimOptions {
        agent_timeout: opts.agent_timeout,
        default_alg: agent.default_alg().to_owned(),
        network_stats,
        ..Default::default()
    };
    let mut sim = Simulator::new(scenario, sim_opts)?;
    let (results, records) = match opts.ipc {
        IpcKind::Chan => {
            let (to_agent, agent_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
            let (agent_tx, from_agent) = crossbeam_channel::unbounded::<Vec<u8>>();
            let sock = crate::ipc::chan::ChanSocket::new(agent_tx, agent_rx);
            let running = agent.spawn(sock)?;
            let mut ipc = ChanIpc::new(to_agent.clone(), from_agent);
            let res = sim.run(&mut ipc);
            drain(&agent.stats, &res);
            let records = running.records();
            // a junk message wakes the loop so it sees the stop flag at once
            running.stop(|| {
                let _ = to_agent.send(vec![0xff]);
            })?;
            (res?, records)
        }
        IpcKind::Inline => {
            let mut ipc = agent.inline()?;
            let res = sim.run(&mut ipc)?;
            (res, agent.records())
        }
        IpcKind::Unix => {
            let id = RUN_ID.fetch_add(1, Ordering::Relaxed);
            let agent_name = format!("agent-{}-{id}", std::process::id());
            let sim_name = format!("sim-{}-{id}", std::process::id());
            let sock = portus::ipc::unix::Socket::<portus::ipc::Blocking>::new(&agent_name)
                .map_err(|e| anyhow::anyhow!("binding /tmp/ccp/{agent_name}: {e:?}"))?;
            let running = agent.spawn(sock)?;
            let mut ipc = UnixIpc::new(&sim_name, &agent_name)?;
            let res = sim.run(&mut ipc);
            drain(&agent.stats, &res);
            let records = running.records();
            running.stop(|| {
                if let Ok(s) = std::os::unix::net::UnixDatagram::unbound() {
                    let _ = s.send_to(&[0xff], format!("/tmp/ccp/{agent_name}"));
                }
            })?;
            let _ = std::fs::remove_file(format!("/tmp/ccp/{agent_name}"));
            drop(ipc);
            let _ = std::fs::remove_file(format!("/tmp/ccp/{sim_name}"));
            (res?, records)
        }
    };
    let registry = agent.registry();
    let default = agent.default_alg();
    let flow_algs = results
        .flows
        .iter()
        .enumerate()
        .map(|(i, f)| match f.alg.as_deref() {
            // the portfolio's choice: the agent's record of the flow (the algorithm it ran
            // last, after any switch), else the same call the agent made at its CREATE
            Some(a) if ccp_algs::registry::strip_prefix(a) == ccp_algs::AUTO => {
                match record_of(&records, &results.flows, i) {
                    Some(r) => r.alg,
                    None => agent
                        .choose_auto(
                            f.w.and_then(|w| ccp_algs::Preference::new(w[0], w[1], w[2]).ok()),
                        )
                        .and_then(|c| registry.get(&c))
                        .map(|a| a.name())
                        .unwrap_or(default),
                }
            }
            Some(a) => registry.get(a).map(|a| a.name()).unwrap_or(default),
            None => default,
        })
        .collect();
    let default_w = opts.agent.default_w.as_array();
    let flow_ws = results
        .flows
        .iter()
        .map(|f| f.w.unwrap_or(default_w))
        .collect();
    Ok(SimRun {
        results,
        flow_algs,
        flow_ws,
        records,
        accepted: agent.stats.accepted.load(Ordering::Relaxed),
        rejected: agent.stats.rejected(),
    })
}

/// The agent's record of scenario flow `i`. libccp reuses a socket id once its flow has
/// closed, so flows that take turns share one: the k-th flow (by start) of an id is the k-th
/// record of it (records keep their closing order). None if the counts differ (records
/// beyond [`crate::flows::CLOSED_KEPT`] are gone).
pub fn record_of<'a>(
    records: &'a [FlowRecord],
    flows: &[ccp_sim::FlowResult],
    i: usize,
) -> Option<&'a FlowRecord> {
    let f = flows.get(i)?;
    if f.sid == 0 {
        return None;
    }
    let same = |g: &&ccp_sim::FlowResult| g.sid == f.sid;
    let k = flows
        .iter()
        .filter(same)
        .filter(|g| g.start_s < f.start_s)
        .count();
    let mine: Vec<&FlowRecord> = records.iter().filter(|r| r.sid == f.sid).collect();
    (mine.len() == flows.iter().filter(same).count())
        .then(|| mine.get(k).copied())
        .flatten()
}

/// The `--json` object: per-flow and aggregate figures.
pub fn summary_json(run: &SimRun) -> serde_json::Value {
    let r = &run.results;
    let flows: Vec<_> = r
        .flows
        .iter()
        .zip(&run.flow_algs)
        .zip(&run.flow_ws)
        .enumerate()
        .map(|(i, ((f, alg), w))| {
            let rec = record_of(&run.records, &r.flows, i);
            json!({
                "id": f.id,
                "alg": alg,
                "w": w,
                "rtt_base_ms": f.rtt_base_ms,
                "start_s": f.start_s,
                "stop_s": f.stop_s,
                "throughput_mbps": f.throughput_mbps,
                "utilization": f.utilization,
                "rtt_p50_ms": f.rtt_p50_ms,
                "rtt_p95_ms": f.rtt_p95_ms,
                "rtt_mean_ms": f.rtt_mean_ms,
                "queue_delay_p50_ms": f.queue_delay_p50_ms,
                "queue_delay_p95_ms": f.queue_delay_p95_ms,
                "queue_delay_mean_ms": f.queue_delay_mean_ms,
                "loss_rate": f.loss_rate,
                "packets_sent": f.packets_sent,
                "retransmits": f.retransmits,
                "timeouts": f.timeouts,
                "delivered_bytes": f.delivered_bytes,
                "receiver_limited": f.receiver_limited,
                // `ccp_auto` flows: the path class and each switch of algorithm
                "class": rec.and_then(|r| r.class.as_ref()),
                "switches": rec.map_or(&[][..], |r| &r.switches[..]),
            })
        })
        .collect();
    json!({
        "flows": flows,
        "utilization": r.utilization,
        "jain": r.jain,
        "queue_delay_p95_ms": r.queue_delay_p95_ms,
        "duration_s": r.duration_s,
        "seed": r.seed,
        "buffer_pkts": r.buffer_pkts,
        "sim_packets": r.sim_packets,
        "wall_s": r.wall_s,
        "agent": {"messages_accepted": run.accepted, "messages_rejected": run.rejected},
    })
}

/// Scenario flow `i`'s algorithm as tables and plots show it: its name, or for a flow the
/// portfolio chose `auto→<first choice>`, then `→<alg>` for each switch.
pub fn alg_label(run: &SimRun, i: usize) -> String {
    let alg = run.flow_algs.get(i).copied().unwrap_or("?");
    let Some(f) = run.results.flows.get(i) else {
        return alg.to_string();
    };
    match f.alg.as_deref().map(ccp_algs::registry::strip_prefix) {
        Some(a) if a == ccp_algs::AUTO => {
            match record_of(&run.records, &run.results.flows, i).filter(|r| !r.switches.is_empty())
            {
                Some(r) => std::iter::once(r.switches[0].from)
                    .chain(r.switches.iter().map(|s| s.to))
                    .fold(a.to_string(), |s, x| format!("{s}→{x}")),
                None => format!("{a}→{alg}"),
            }
        }
        _ => alg.to_string(),
    }
}

/// The default human-readable output: one row per flow and a summary line. A flow's `alg`
/// reads `auto→<alg>` when the portfolio chose it by the flow's preference; a `*` marks an
/// algorithm or a preference the flow took from the agent's `--alg` / `--w` (its scenario
/// entry names none).
pub fn summary_table(run: &SimRun) -> String {
    use std::fmt::Write as _;
    let r = &run.results;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>4} {:<16} {:<15} {:>8} {:>6} {:>9} {:>9} {:>10} {:>7}",
        "flow", "alg", "w thr,lat,loss", "Mbit/s", "util", "rtt p50", "rtt p95", "qdel p95", "loss"
    );
    let (mut starred, mut auto) = (false, false);
    for (i, ((f, alg), w)) in r
        .flows
        .iter()
        .zip(&run.flow_algs)
        .zip(&run.flow_ws)
        .enumerate()
    {
        let alg = match f.alg.as_deref().map(ccp_algs::registry::strip_prefix) {
            Some(a) if a == ccp_algs::AUTO => {
                auto = true;
                alg_label(run, i)
            }
            Some(_) => (*alg).to_string(),
            None => format!("{alg}*"),
        };
        let w = format!(
            "{:.2},{:.2},{:.2}{}",
            w[0],
            w[1],
            w[2],
            if f.w.is_none() { "*" } else { "" }
        );
        starred |= f.alg.is_none() || f.w.is_none();
        let _ = writeln!(
            s,
            "{:>4} {:<16} {:<15} {:>8.2} {:>6.3} {:>7.1}ms {:>7.1}ms {:>8.1}ms {:>7.4}",
            f.id,
            alg,
            w,
            f.throughput_mbps,
            f.utilization,
            f.rtt_p50_ms,
            f.rtt_p95_ms,
            f.queue_delay_p95_ms,
            f.loss_rate
        );
    }
    let jain = r.jain.map(|j| format!(", Jain {j:.3}")).unwrap_or_default();
    let _ = writeln!(
        s,
        "link utilization {:.3}{jain}, queueing delay p95 {:.1} ms ({} packets simulated in {:.2} s)",
        r.utilization, r.queue_delay_p95_ms, r.sim_packets, r.wall_s
    );
    let mut legend = Vec::new();
    if starred {
        legend.push("*: the agent's --alg / --w (the scenario gives the flow none)");
    }
    if auto {
        legend.push("auto→X: the portfolio's choice for the flow's w (→Y: switched to Y once its path's class was known)");
    }
    if !legend.is_empty() {
        let _ = writeln!(s, "{}", legend.join("; "));
    }
    s
}
