//! Scenario files: a dumbbell with one bottleneck and the flows that cross it.
//!
//! ```toml
//! duration_s = 30
//! seed = 1
//! [link]
//! rate_mbps = 50          # or: trace = "traces/ATT-LTE-driving-2016.down" (mahimahi)
//! buffer_bdp = 1.0        # or: buffer_pkts = 500 (default: 1 BDP)
//! loss = 0.0              # random loss probability per packet
//! # rate_schedule = [{ at_s = 10, rate_mbps = 25 }]   # with rate_mbps: capacity steps
//! # trace_scale = 2.0                                  # with trace: capacity multiplier
//! [[flow]]
//! alg = "cubic"           # optional: the agent's default when absent
//! w = [0.4, 0.5, 0.1]     # optional preference <throughput, latency, loss>
//! rtt_ms = 40
//! start_s = 0.0           # default 0
//! stop_s = 30.0           # optional: runs to the end
//! count = 1               # optional: identical flows
//! # receiver = "nuwa"     # optional, with alg = "nuwa": Nuwa's law at the receiver, the
//! #                       # advertised window from the one-way delay (docs/algorithms/nuwa.md);
//! #                       # "nuwa_kalman": the same on a Kalman-filtered one-way delay
//! [netstats]              # optional: the bottleneck exports in-network statistics (Owl)
//! period_s = 1.0          # sampling period (default 1 s)
//! known_share = 1.0       # share of the path the statistics cover, (0, 1] (default 1)
//! ```
//!
//! Every key is checked (`deny_unknown_fields`): a typo is an error, not a silent default.
//! Every problem is a [`ScenarioError`] whose message names the field and the fix.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ccp_algs::registry::{ALGORITHMS, DATAPATH_PREFIX};

pub use crate::trace::MAX_RATE_MBPS;
use crate::trace::{load_trace, RateLog, TraceError, TraceFile};
use ccp_algs::Preference;
use serde::Deserialize;

/// Bytes per packet on the bottleneck (and the flows' MSS): one mahimahi delivery
/// opportunity carries exactly one packet.
pub const PACKET_BYTES: u32 = 1500;
/// Longest congAlg string libccp carries in a CREATE (64 bytes with the NUL).
pub const MAX_CONG_ALG_LEN: usize = 63;
/// libccp's connection table holds 1024 connections.
pub const MAX_FLOWS: usize = 1000;
/// Most packets the link may carry over a scenario (its highest capacity × `duration_s`).
pub const MAX_LINK_PACKETS: f64 = 1e9;
/// Largest drop-tail buffer (packets), given or from `buffer_bdp`.
pub const MAX_BUFFER_PKTS: u64 = 10_000_000;

/// Largest scenario file read (bytes): scenarios are a few lines; traces are files of their own.
pub const MAX_SCENARIO_BYTES: u64 = 1 << 20;

/// Why a scenario was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario file {path}: {source} (check the path)")]
    Read {
        path: PathBuf,
        #[source]
        source: ccp_files::ReadError,
    },
    #[error(
        "scenario is not valid: {0} (see datapath/sim/scenarios/one-flow.toml for the format)"
    )]
    Parse(String),
    #[error("scenario field `{field}`: {message}")]
    Field { field: String, message: String },
    #[error("trace file {path} (link.trace): {message}")]
    Trace { path: PathBuf, message: String },
}

impl From<TraceError> for ScenarioError {
    fn from(e: TraceError) -> Self {
        ScenarioError::Trace {
            path: e.path,
            message: e.message,
        }
    }
}

fn field_err(field: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Field {
        field: field.into(),
        message: message.into(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    duration_s: f64,
    #[serde(default = "default_seed")]
    seed: u64,
    link: RawLink,
    #[serde(default)]
    flow: Vec<RawFlow>,
    netstats: Option<RawNetStats>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetStats {
    #[serde(default = "default_netstats_period")]
    period_s: f64,
    #[serde(default = "default_known_share")]
    known_share: f64,
}

fn default_netstats_period() -> f64 {
    1.0
}

fn default_known_share() -> f64 {
    1.0
}

fn default_seed() -> u64 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    rate_mbps: Option<f64>,
    trace: Option<String>,
    trace_scale: Option<f64>,
    rate_schedule: Option<Vec<RawStep>>,
    buffer_bdp: Option<f64>,
    buffer_pkts: Option<i64>,
    #[serde(default)]
    loss: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    at_s: f64,
    rate_mbps: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFlow {
    alg: Option<String>,
    w: Option<Vec<f64>>,
    rtt_ms: f64,
    #[serde(default)]
    start_s: f64,
    stop_s: Option<f64>,
    #[serde(default = "default_count")]
    count: i64,
    receiver: Option<String>,
}

fn default_count() -> i64 {
    1
}

/// The bottleneck's capacity over time.
#[derive(Debug, Clone, PartialEq)]
pub enum Capacity {
    /// A constant rate, possibly stepping at given times: `(at_s, rate_mbps)`, sorted, the
    /// first at 0.
    Rate { steps: Vec<(f64, f64)> },
    /// A mahimahi trace: delivery opportunities (ms, non-decreasing) repeating with period
    /// equal to the last timestamp; each opportunity carries `scale` packets on average.
    Trace {
        path: PathBuf,
        opportunities_ms: Arc<[u64]>,
        scale: f64,
    },
    /// A throughput log (`time_s rate_mbps`): a piecewise-constant rate repeating with the
    /// log's period, each rate times `scale` (`src/trace.rs`).
    Log {
        path: PathBuf,
        log: Arc<RateLog>,
        scale: f64,
    },
}

impl Capacity {
    /// Mean capacity (bits/s): the first rate for a schedule (its initial capacity), the
    /// trace's long-run mean for a trace.
    pub fn mean_bps(&self) -> f64 {
        match self {
            Capacity::Rate { steps } => steps.first().map_or(0.0, |s| s.1 * 1e6),
            Capacity::Trace {
                opportunities_ms,
                scale,
                ..
            } => {
                let period_ms = *opportunities_ms.last().unwrap_or(&1) as f64;
                opportunities_ms.len() as f64 * scale * f64::from(PACKET_BYTES) * 8.0 * 1000.0
                    / period_ms
            }
            Capacity::Log { log, scale, .. } => log.mean_mbps() * scale * 1e6,
        }
    }

    /// The capacity of a trace file of either format (mahimahi or a throughput log), times
    /// `scale`.
    pub fn from_trace(path: PathBuf, scale: f64) -> Result<Self, ScenarioError> {
        Ok(match load_trace(&path)? {
            TraceFile::Mahimahi(opportunities_ms) => Capacity::Trace {
                path,
                opportunities_ms,
                scale,
            },
            TraceFile::Log(log) => Capacity::Log { path, log, scale },
        })
    }

    /// The trace file a trace or log link reads; `None` for a rate link.
    pub fn trace_path(&self) -> Option<&Path> {
        match self {
            Capacity::Rate { .. } => None,
            Capacity::Trace { path, .. } | Capacity::Log { path, .. } => Some(path),
        }
    }
}

/// Drop-tail buffer size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Buffer {
    Packets(u64),
    /// Multiples of the BDP (smallest flow RTT × mean capacity).
    Bdp(f64),
}

/// The bottleneck link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSpec {
    pub capacity: Capacity,
    pub buffer: Buffer,
    /// Random loss probability per packet, in `[0, 1)`.
    pub loss: f64,
}

/// One flow (a `count = n` entry becomes n of these).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSpec {
    /// Requested algorithm as written (`cubic`, `ccp_cubic`); `None`: the agent's default.
    pub alg: Option<String>,
    /// Preference vector, if the scenario gives one.
    pub w: Option<Preference>,
    /// Base (propagation) round-trip time, ms.
    pub rtt_ms: f64,
    pub start_s: f64,
    /// `None`: runs until the end.
    pub stop_s: Option<f64>,
    /// A law at the receiver that limits the sender through the advertised window; `None`:
    /// no receive window (the receiver takes whatever arrives).
    pub receiver: Option<ReceiverKind>,
}

/// What runs at a flow's receiver (`receiver = "..."`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiverKind {
    /// Nuwa-RL's law on the advertised window, from the relative one-way delay
    /// ([`ccp_algs::nuwa::ReceiverLaw`]); its gain, target and ρ are the registers the agent
    /// writes into the flow's Nuwa program.
    Nuwa,
    /// The same law steering a Kalman-filtered one-way queueing delay (the paper's extended
    /// version; [`ccp_algs::nuwa::core::kalman_step`] with `KALMAN_Q_US`, `KALMAN_R_US`).
    NuwaKalman,
}

impl ReceiverKind {
    /// The names a scenario may give, in the order of the variants.
    pub const NAMES: [&'static str; 2] = ["nuwa", "nuwa_kalman"];
    /// Every variant, in the order of [`Self::NAMES`].
    pub const ALL: [ReceiverKind; 2] = [ReceiverKind::Nuwa, ReceiverKind::NuwaKalman];

    /// The algorithm whose program this receiver reads (its flows must run it).
    pub fn alg(self) -> &'static str {
        match self {
            ReceiverKind::Nuwa | ReceiverKind::NuwaKalman => "nuwa",
        }
    }

    /// The name a scenario gives it.
    pub fn name(self) -> &'static str {
        match self {
            ReceiverKind::Nuwa => Self::NAMES[0],
            ReceiverKind::NuwaKalman => Self::NAMES[1],
        }
    }

    fn parse(field: &str, name: &str, alg: Option<&str>) -> Result<Self, ScenarioError> {
        let kind = match name {
            "nuwa" => ReceiverKind::Nuwa,
            "nuwa_kalman" => ReceiverKind::NuwaKalman,
            _ => {
                return Err(field_err(
                    field,
                    format!(
                        "unknown receiver {name:?}: use one of {} or leave `receiver` out (no \
                         receive window)",
                        Self::NAMES.join(", ")
                    ),
                ))
            }
        };
        kind.check_alg(field, alg)?;
        Ok(kind)
    }

    /// Every receiver-side law takes its gain and target from the flow's Nuwa program.
    fn check_alg(self, field: &str, alg: Option<&str>) -> Result<(), ScenarioError> {
        let alg = alg.map(|a| a.strip_prefix(DATAPATH_PREFIX).unwrap_or(a));
        if alg == Some(self.alg()) {
            return Ok(());
        }
        Err(field_err(
            field,
            format!(
                "receiver = {:?} needs alg = \"nuwa\" (is {alg:?}): the receiver takes its \
                 gain and target from the flow's Nuwa program",
                self.name()
            ),
        ))
    }
}

impl FlowSpec {
    /// The string the flow's CREATE carries in libccp's congAlg field:
    /// `<alg>` or `ccp`, plus `;w=<thr>,<lat>,<loss>` when the flow has a preference.
    pub fn cong_alg(&self) -> String {
        let mut s = self.alg.clone().unwrap_or_else(|| "ccp".to_string());
        if let Some(w) = &self.w {
            s.push_str(&format!(";w={},{},{}", w.thr(), w.lat(), w.loss()));
        }
        s
    }
}

/// In-network statistics the bottleneck exports (`[netstats]`, Owl's PNC and PNA): once
/// per period, PNC = |packets in − packets out| of the bottleneck switch over the period
/// and PNA = (capacity − bytes out) / capacity, for every flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetStatsSpec {
    /// Sampling period (s); the paper's measurement agent samples every second.
    pub period_s: f64,
    /// Share of the path the statistics cover, `(0, 1]`: the flows' paths are their
    /// sender, the bottleneck and their receiver, and the bottleneck is always known.
    pub known_share: f64,
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub duration_s: f64,
    pub seed: u64,
    pub link: LinkSpec,
    pub flows: Vec<FlowSpec>,
    /// `None`: the network exports no statistics (Owl's in-network features are masked).
    pub netstats: Option<NetStatsSpec>,
}

impl Scenario {
    /// Read and validate a scenario file; relative trace paths resolve against its folder.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScenarioError> {
        let path = path.as_ref();
        // a regular file, its size checked before reading: a FIFO hung, /dev/zero ate memory
        let text =
            ccp_files::read_regular_to_string(path, MAX_SCENARIO_BYTES).map_err(|source| {
                ScenarioError::Read {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        Self::from_toml_str(&text, base)
    }

    /// Parse and validate scenario TOML; relative trace paths resolve against `base_dir`.
    pub fn from_toml_str(text: &str, base_dir: impl AsRef<Path>) -> Result<Self, ScenarioError> {
        let raw: RawScenario =
            toml::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string().trim().into()))?;
        build(raw, base_dir.as_ref())
    }

    /// Smallest base RTT of any flow (s).
    pub fn min_rtt_s(&self) -> f64 {
        self.flows
            .iter()
            .map(|f| f.rtt_ms / 1e3)
            .fold(f64::INFINITY, f64::min)
    }

    /// Buffer size in packets (a BDP buffer: smallest RTT × mean capacity, at least 1).
    pub fn buffer_packets(&self) -> u64 {
        match self.link.buffer {
            Buffer::Packets(n) => n,
            Buffer::Bdp(k) => {
                let bdp_bytes = self.min_rtt_s() * self.link.capacity.mean_bps() / 8.0;
                ((k * bdp_bytes / f64::from(PACKET_BYTES)).round() as u64).max(1)
            }
        }
    }

    /// Check invariants again (for scenarios built or edited in code).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        check_duration(self.duration_s)?;
        if self.flows.is_empty() {
            return Err(field_err(
                "flow",
                "no flows: add at least one [[flow]] table",
            ));
        }
        if self.flows.len() > MAX_FLOWS {
            return Err(field_err(
                "flow",
                format!(
                    "{} flows, more than the {MAX_FLOWS} the datapath holds: lower `count`",
                    self.flows.len()
                ),
            ));
        }
        check_loss(self.link.loss)?;
        match &self.link.capacity {
            Capacity::Rate { steps } => {
                if steps.is_empty() || steps[0].0 != 0.0 {
                    return Err(field_err(
                        "link.rate_schedule",
                        "the schedule must start at 0 s",
                    ));
                }
                for (i, w) in steps.windows(2).enumerate() {
                    if w[1].0 <= w[0].0 {
                        return Err(field_err(
                            format!("link.rate_schedule[{i}].at_s"),
                            "steps must be in increasing at_s order",
                        ));
                    }
                }
                for (_, r) in steps {
                    check_rate("link.rate_mbps", *r)?;
                }
            }
            Capacity::Trace {
                opportunities_ms,
                scale,
                path,
            } => {
                check_scale(*scale)?;
                if opportunities_ms.is_empty()
                    || *opportunities_ms.last().unwrap_or(&0) == 0
                    || opportunities_ms.windows(2).any(|w| w[1] < w[0])
                {
                    return Err(ScenarioError::Trace {
                        path: path.clone(),
                        message: "the trace must be non-empty, non-decreasing and last > 0 ms"
                            .into(),
                    });
                }
            }
            Capacity::Log { scale, .. } => check_scale(*scale)?,
        }
        match self.link.buffer {
            Buffer::Packets(0) => {
                return Err(field_err("link.buffer_pkts", "must be at least 1 packet"))
            }
            Buffer::Bdp(k) if !(k.is_finite() && k > 0.0) => {
                return Err(field_err(
                    "link.buffer_bdp",
                    format!("is {k}: use a positive number of BDPs (e.g. buffer_bdp = 1.0)"),
                ))
            }
            _ => {}
        }
        for (i, f) in self.flows.iter().enumerate() {
            check_flow(i, f, self.duration_s)?;
        }
        if let Some(n) = &self.netstats {
            check_netstats(n)?;
        }
        self.check_size()
    }

    /// What the simulator would have to carry: the link's packets over the run and the
    /// buffer, both bounded.
    fn check_size(&self) -> Result<(), ScenarioError> {
        let (field, peak_bps) = match &self.link.capacity {
            Capacity::Rate { steps } => (
                "link.rate_mbps",
                steps.iter().map(|s| s.1 * 1e6).fold(0.0, f64::max),
            ),
            Capacity::Trace { path, .. } => {
                let mean = self.link.capacity.mean_bps();
                if !(mean.is_finite() && mean <= MAX_RATE_MBPS * 1e6) {
                    return Err(ScenarioError::Trace {
                        path: path.clone(),
                        message: format!(
                            "its mean capacity (times trace_scale) is {:.0} Mbit/s, above \
                             {MAX_RATE_MBPS} Mbit/s: too many opportunities per ms",
                            mean / 1e6
                        ),
                    });
                }
                ("link.trace", mean)
            }
            Capacity::Log { log, scale, .. } => ("link.trace", log.peak_mbps() * scale * 1e6),
        };
        let packets = peak_bps * self.duration_s / (8.0 * f64::from(PACKET_BYTES));
        if packets.is_nan() || packets > MAX_LINK_PACKETS {
            return Err(field_err(
                field,
                format!(
                    "the link carries {packets:.3e} packets in duration_s = {} s, more than \
                     the simulator's {MAX_LINK_PACKETS:.0e}: shorten duration_s or lower the \
                     capacity",
                    self.duration_s
                ),
            ));
        }
        let (bfield, bpkts) = match self.link.buffer {
            Buffer::Packets(n) => ("link.buffer_pkts", n as f64),
            Buffer::Bdp(k) => (
                "link.buffer_bdp",
                k * self.min_rtt_s() * self.link.capacity.mean_bps()
                    / (8.0 * f64::from(PACKET_BYTES)),
            ),
        };
        if bpkts.is_nan() || bpkts > MAX_BUFFER_PKTS as f64 {
            return Err(field_err(
                bfield,
                format!(
                    "gives a buffer of {bpkts:.3e} packets, more than {MAX_BUFFER_PKTS}: use a \
                     smaller buffer"
                ),
            ));
        }
        Ok(())
    }
}

fn check_duration(d: f64) -> Result<(), ScenarioError> {
    if !(d.is_finite() && d > 0.0 && d <= 1e6) {
        return Err(field_err(
            "duration_s",
            format!("is {d}: use a positive number of seconds (e.g. duration_s = 30)"),
        ));
    }
    Ok(())
}

fn check_loss(p: f64) -> Result<(), ScenarioError> {
    if !(p.is_finite() && (0.0..1.0).contains(&p)) {
        return Err(field_err(
            "link.loss",
            format!("is {p}: use a probability in [0, 1) (e.g. loss = 0.01 for 1%)"),
        ));
    }
    Ok(())
}

fn check_rate(field: &str, r: f64) -> Result<(), ScenarioError> {
    if !(r.is_finite() && r > 0.0 && r <= 1e6) {
        return Err(field_err(
            field,
            format!("is {r}: use a positive rate in Mbit/s (e.g. rate_mbps = 50)"),
        ));
    }
    Ok(())
}

fn check_scale(s: f64) -> Result<(), ScenarioError> {
    if !(s.is_finite() && (0.01..=1e4).contains(&s)) {
        return Err(field_err(
            "link.trace_scale",
            format!("is {s}: use a capacity multiplier between 0.01 and 10000 (e.g. 2.0)"),
        ));
    }
    Ok(())
}

fn check_netstats(n: &NetStatsSpec) -> Result<(), ScenarioError> {
    if !(n.period_s.is_finite() && (0.01..=3600.0).contains(&n.period_s)) {
        return Err(field_err(
            "netstats.period_s",
            format!(
                "is {}: use a sampling period in seconds between 0.01 and 3600 (e.g. 1.0)",
                n.period_s
            ),
        ));
    }
    if !(n.known_share.is_finite() && n.known_share > 0.0 && n.known_share <= 1.0) {
        return Err(field_err(
            "netstats.known_share",
            format!(
                "is {}: use the share of the path the statistics cover, in (0, 1] (e.g. 0.2); \
                 leave [netstats] out for a network that exports none",
                n.known_share
            ),
        ));
    }
    Ok(())
}

fn check_alg(field: &str, alg: &str) -> Result<(), ScenarioError> {
    let name = alg.strip_prefix(DATAPATH_PREFIX).unwrap_or(alg);
    if alg == "ccp" || name == ccp_algs::AUTO || ALGORITHMS.contains(&name) {
        return Ok(());
    }
    Err(field_err(
        field,
        format!(
            "unknown algorithm {alg:?}: use one of {} (optionally prefixed `ccp_`), `auto` (chosen by the flow's \
             preference from the agent's portfolio table), or leave `alg` out for the \
             agent's default",
            ALGORITHMS.join(", ")
        ),
    ))
}

/// A name a datapath can announce: 1–15 bytes of `[a-z0-9_]` (the kernel's
/// `TCP_CA_NAME_MAX` is 16 with the NUL). Scenarios built in code are checked only for this:
/// which names an agent serves is the agent's registry's business (an algorithm registered
/// at run time, e.g. in a test, has no line in [`ALGORITHMS`]); files are checked against
/// the portfolio's names when they are read ([`check_alg`]), to catch typos.
fn check_datapath_name(field: &str, alg: &str) -> Result<(), ScenarioError> {
    let ok = (1..=15).contains(&alg.len())
        && alg
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(field_err(
            field,
            format!("{alg:?} is not a datapath algorithm name: use 1-15 of [a-z0-9_]"),
        ))
    }
}

fn check_flow(i: usize, f: &FlowSpec, duration_s: f64) -> Result<(), ScenarioError> {
    let field = |k: &str| format!("flow[{i}].{k}");
    if let Some(a) = &f.alg {
        check_datapath_name(&field("alg"), a)?;
    }
    if let Some(r) = f.receiver {
        r.check_alg(&field("receiver"), f.alg.as_deref())?;
    }
    if !(f.rtt_ms.is_finite() && f.rtt_ms > 0.0 && f.rtt_ms <= 100_000.0) {
        return Err(field_err(
            field("rtt_ms"),
            format!(
                "is {}: use a positive round-trip time in ms (e.g. rtt_ms = 40)",
                f.rtt_ms
            ),
        ));
    }
    if !(f.start_s.is_finite() && f.start_s >= 0.0) {
        return Err(field_err(
            field("start_s"),
            format!("is {}: use a start time >= 0 s", f.start_s),
        ));
    }
    if f.start_s >= duration_s {
        return Err(field_err(
            field("start_s"),
            format!(
                "is {} but the scenario lasts {duration_s} s: start the flow before the end",
                f.start_s
            ),
        ));
    }
    if let Some(stop) = f.stop_s {
        if !stop.is_finite() || stop <= f.start_s {
            return Err(field_err(
                field("stop_s"),
                format!(
                    "is {stop}, not after start_s = {}: stop the flow after it starts, or \
                     leave stop_s out",
                    f.start_s
                ),
            ));
        }
    }
    let cong = f.cong_alg();
    if cong.len() > MAX_CONG_ALG_LEN {
        return Err(field_err(
            field("w"),
            format!(
                "the CREATE name {cong:?} is {} bytes, libccp carries at most \
                 {MAX_CONG_ALG_LEN}: round the weights (e.g. w = [0.4, 0.5, 0.1])",
                cong.len()
            ),
        ));
    }
    Ok(())
}

fn build(raw: RawScenario, base: &Path) -> Result<Scenario, ScenarioError> {
    check_duration(raw.duration_s)?;
    let l = raw.link;
    check_loss(l.loss)?;
    let capacity = match (l.rate_mbps, &l.trace) {
        (Some(_), Some(_)) => {
            return Err(field_err(
                "link",
                "gives both `rate_mbps` and `trace`: keep exactly one",
            ))
        }
        (None, None) => {
            return Err(field_err(
                "link",
                "gives neither `rate_mbps` nor `trace`: add one (e.g. rate_mbps = 50)",
            ))
        }
        (Some(rate), None) => {
            check_rate("link.rate_mbps", rate)?;
            if l.trace_scale.is_some() {
                return Err(field_err(
                    "link.trace_scale",
                    "only applies to a `trace` link: remove it or use `trace`",
                ));
            }
            let mut steps = vec![(0.0, rate)];
            for (i, s) in l.rate_schedule.iter().flatten().enumerate() {
                let f = format!("link.rate_schedule[{i}]");
                check_rate(&format!("{f}.rate_mbps"), s.rate_mbps)?;
                let last = steps.last().map_or(0.0, |x| x.0);
                if !(s.at_s.is_finite() && s.at_s > last) {
                    return Err(field_err(
                        format!("{f}.at_s"),
                        format!(
                            "is {}: steps need increasing times after 0 s (the initial rate \
                             is rate_mbps)",
                            s.at_s
                        ),
                    ));
                }
                steps.push((s.at_s, s.rate_mbps));
            }
            Capacity::Rate { steps }
        }
        (None, Some(t)) => {
            if l.rate_schedule.is_some() {
                return Err(field_err(
                    "link.rate_schedule",
                    "only applies to a `rate_mbps` link: remove it or use rate_mbps",
                ));
            }
            let scale = l.trace_scale.unwrap_or(1.0);
            check_scale(scale)?;
            Capacity::from_trace(base.join(t), scale)?
        }
    };
    let buffer = match (l.buffer_bdp, l.buffer_pkts) {
        (Some(_), Some(_)) => {
            return Err(field_err(
                "link",
                "gives both `buffer_bdp` and `buffer_pkts`: keep one",
            ))
        }
        (Some(k), None) => Buffer::Bdp(k),
        (None, Some(n)) => {
            if n < 1 {
                return Err(field_err(
                    "link.buffer_pkts",
                    format!("is {n}: use at least 1 packet (e.g. buffer_pkts = 500)"),
                ));
            }
            Buffer::Packets(n as u64)
        }
        (None, None) => Buffer::Bdp(1.0),
    };
    if raw.flow.is_empty() {
        return Err(field_err(
            "flow",
            "no flows: add at least one [[flow]] table",
        ));
    }
    let mut flows = Vec::new();
    for (i, f) in raw.flow.into_iter().enumerate() {
        if f.count < 1 {
            return Err(field_err(
                format!("flow[{i}].count"),
                format!("is {}: use at least 1 (or leave it out)", f.count),
            ));
        }
        let w = match &f.w {
            None => None,
            Some(v) => Some(
                Preference::from_slice(v)
                    .map_err(|e| field_err(format!("flow[{i}].w"), e.to_string()))?,
            ),
        };
        if let Some(a) = &f.alg {
            check_alg(&format!("flow[{i}].alg"), a)?;
        }
        if f.count as usize > MAX_FLOWS {
            return Err(field_err(
                format!("flow[{i}].count"),
                format!("is {}: at most {MAX_FLOWS} flows in all", f.count),
            ));
        }
        let receiver = match &f.receiver {
            None => None,
            Some(r) => Some(ReceiverKind::parse(
                &format!("flow[{i}].receiver"),
                r,
                f.alg.as_deref(),
            )?),
        };
        for _ in 0..f.count {
            flows.push(FlowSpec {
                alg: f.alg.clone(),
                w,
                rtt_ms: f.rtt_ms,
                start_s: f.start_s,
                stop_s: f.stop_s,
                receiver,
            });
        }
    }
    let sc = Scenario {
        duration_s: raw.duration_s,
        seed: raw.seed,
        link: LinkSpec {
            capacity,
            buffer,
            loss: l.loss,
        },
        flows,
        netstats: raw.netstats.map(|n| NetStatsSpec {
            period_s: n.period_s,
            known_share: n.known_share,
        }),
    };
    // flow indices in messages refer to expanded flows; report them by [[flow]] entry
    // where that differs is not worth the complexity: count = 1 is the common case.
    sc.validate()?;
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{parse_trace, MAX_TRACE_MS};

    const GOOD: &str = r#"
duration_s = 30
seed = 7
[link]
rate_mbps = 50
buffer_bdp = 1.0
[[flow]]
alg = "cubic"
w = [0.4, 0.5, 0.1]
rtt_ms = 40
[[flow]]
rtt_ms = 20
start_s = 5
stop_s = 25
count = 2
"#;

    #[test]
    fn parses_and_expands() {
        let s = Scenario::from_toml_str(GOOD, ".").unwrap();
        assert_eq!(s.seed, 7);
        assert_eq!(s.flows.len(), 3);
        assert_eq!(s.flows[0].cong_alg(), "cubic;w=0.4,0.5,0.1");
        assert_eq!(s.flows[1].cong_alg(), "ccp");
        // BDP from the smallest RTT: 50 Mbit/s * 20 ms = 125000 B = 83.3 packets
        assert_eq!(s.buffer_packets(), 83);
        assert_eq!(s.netstats, None);
    }

    #[test]
    fn netstats_table_defaults_and_ranges() {
        let s = Scenario::from_toml_str(&format!("{GOOD}[netstats]\n"), ".").unwrap();
        assert_eq!(
            s.netstats,
            Some(NetStatsSpec {
                period_s: 1.0,
                known_share: 1.0
            })
        );
        let s = Scenario::from_toml_str(
            &format!("{GOOD}[netstats]\nperiod_s = 0.5\nknown_share = 0.2\n"),
            ".",
        )
        .unwrap();
        assert_eq!(
            s.netstats.map(|n| (n.period_s, n.known_share)),
            Some((0.5, 0.2))
        );
        for (body, field) in [
            ("period_s = 0", "netstats.period_s"),
            ("known_share = 0", "netstats.known_share"),
            ("known_share = 1.5", "netstats.known_share"),
        ] {
            let e =
                Scenario::from_toml_str(&format!("{GOOD}[netstats]\n{body}\n"), ".").unwrap_err();
            assert!(
                matches!(&e, ScenarioError::Field { field: f, .. } if f == field),
                "{body}: {e}"
            );
        }
        let e =
            Scenario::from_toml_str(&format!("{GOOD}[netstats]\nperiod = 1\n"), ".").unwrap_err();
        assert!(e.to_string().contains("period"), "{e}");
    }

    #[test]
    fn files_name_portfolio_algorithms_code_any_datapath_name() {
        let typo = GOOD.replace("\"cubic\"", "\"cubc\"");
        let e = Scenario::from_toml_str(&typo, ".").unwrap_err().to_string();
        assert!(e.contains("unknown algorithm \"cubc\""), "{e}");
        // a scenario built in code may name an algorithm registered at run time
        let mut s = Scenario::from_toml_str(GOOD, ".").unwrap();
        s.flows[0].alg = Some("toy".into());
        assert!(s.validate().is_ok());
        for bad in ["", "Toy", "a;b", "sixteen_chars_xx"] {
            s.flows[0].alg = Some(bad.into());
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains("not a datapath algorithm name"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_nuwa_receiver_needs_a_nuwa_flow() {
        let one = |extra: &str| {
            format!("duration_s = 5\n[link]\nrate_mbps = 10\n[[flow]]\nrtt_ms = 40\n{extra}\n")
        };
        for (alg, rx, kind) in [
            ("nuwa", "nuwa", ReceiverKind::Nuwa),
            ("ccp_nuwa", "nuwa", ReceiverKind::Nuwa),
            ("nuwa", "nuwa_kalman", ReceiverKind::NuwaKalman),
        ] {
            let s = Scenario::from_toml_str(
                &one(&format!("alg = \"{alg}\"\nreceiver = \"{rx}\"")),
                ".",
            )
            .unwrap();
            assert_eq!(s.flows[0].receiver, Some(kind));
            assert_eq!(kind.name(), rx);
        }
        assert_eq!(
            Scenario::from_toml_str(&one("alg = \"nuwa\""), ".")
                .unwrap()
                .flows[0]
                .receiver,
            None
        );
        for (extra, says) in [
            (
                "alg = \"nuwa\"\nreceiver = \"vegas\"",
                "unknown receiver \"vegas\"",
            ),
            (
                "alg = \"cubic\"\nreceiver = \"nuwa\"",
                "needs alg = \"nuwa\"",
            ),
            ("receiver = \"nuwa\"", "needs alg = \"nuwa\""),
        ] {
            let e = Scenario::from_toml_str(&one(extra), ".").unwrap_err();
            assert!(
                matches!(&e, ScenarioError::Field { field, message }
                    if field == "flow[0].receiver" && message.contains(says)),
                "{extra}: {e}"
            );
        }
        // built in code: checked the same way
        let mut s =
            Scenario::from_toml_str(&one("alg = \"nuwa\"\nreceiver = \"nuwa\""), ".").unwrap();
        s.flows[0].alg = Some("reno".into());
        assert!(s.validate().unwrap_err().to_string().contains("needs alg"));
    }

    #[test]
    fn a_broken_log_names_the_file_the_line_and_the_problem() {
        let dir = std::env::temp_dir().join(format!("ccp-scenario-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let one = |name: &str, body: &str| {
            std::fs::write(dir.join(name), body).unwrap();
            let t = format!("duration_s = 5\n[link]\ntrace = \"{name}\"\n[[flow]]\nrtt_ms = 10\n");
            Scenario::from_toml_str(&t, &dir)
        };
        let s = one("ok.tput", "0 50\n1 0\n2 100\n").unwrap();
        assert!(matches!(&s.link.capacity, Capacity::Log { .. }));
        // 50 for 1 s, 0 for 1 s, 100 for 1 s (median gap): 50 Mbit/s; BDP at 10 ms
        assert!((s.link.capacity.mean_bps() - 50e6).abs() < 1.0);
        assert_eq!(s.buffer_packets(), 42);
        for (name, body, says) in [
            ("neg.log", "0 1\n1 -3\n", "line 2"),
            ("nan.log", "0 1\n1 nan\n", "line 2"),
            ("unsorted.log", "0 1\n5 1\n4 1\n", "line 3"),
            ("zero.tput", "0 0\n1 0\n", "every rate is 0"),
            ("empty.tput", "", "empty"),
            ("odd.trace", "0,1\n", "unknown trace format"),
        ] {
            let e = one(name, body).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, ScenarioError::Trace { .. }), "{msg}");
            assert!(msg.contains(name) && msg.contains(says), "{name}: {msg}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn trace_parsing() {
        assert_eq!(&*parse_trace("1\n").unwrap(), &[1]);
        assert_eq!(&*parse_trace("0\n0\n 3 \n\n5\n").unwrap(), &[0, 0, 3, 5]);
        assert!(parse_trace("").unwrap_err().contains("empty"));
        assert!(parse_trace("0\n0\n").unwrap_err().contains("0 ms"));
        assert!(parse_trace("5\n3\n").unwrap_err().contains("line 2"));
        assert!(parse_trace("1\nx\n").unwrap_err().contains("line 2"));
        let c = Capacity::Trace {
            path: "x".into(),
            opportunities_ms: parse_trace("1").unwrap(),
            scale: 1.0,
        };
        assert!((c.mean_bps() - 12e6).abs() < 1.0);
    }

    fn field_of(text: &str) -> String {
        match Scenario::from_toml_str(text, ".") {
            Err(ScenarioError::Field { field, .. }) => field,
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn names_the_bad_field() {
        let base = "duration_s = 10\n[link]\nrate_mbps = 10\n[[flow]]\nrtt_ms = 10\n";
        assert!(Scenario::from_toml_str(base, ".").is_ok());
        assert_eq!(
            field_of(&base.replace("rate_mbps = 10", "rate_mbps = -1")),
            "link.rate_mbps"
        );
        assert_eq!(
            field_of(&base.replace("rtt_ms = 10", "rtt_ms = 0")),
            "flow[0].rtt_ms"
        );
        assert_eq!(
            field_of(&format!("{base}start_s = 3\nstop_s = 2\n")),
            "flow[0].stop_s"
        );
        assert_eq!(field_of(&format!("{base}count = 0\n")), "flow[0].count");
        assert_eq!(field_of(&format!("{base}alg = \"vegas\"\n")), "flow[0].alg");
        assert_eq!(field_of(&format!("{base}w = [1, 1, 1]\n")), "flow[0].w");
        assert_eq!(
            field_of(&base.replace("rate_mbps = 10", "rate_mbps = 10\nloss = 1.0")),
            "link.loss"
        );
        assert_eq!(
            field_of(&base.replace("rate_mbps = 10", "rate_mbps = 10\ntrace = \"x\"")),
            "link"
        );
        assert_eq!(field_of(&base.replace("rate_mbps = 10", "")), "link");
        assert!(Scenario::from_toml_str(&format!("{base}alg = \"ccp_reno\"\n"), ".").is_ok());
        // unknown key
        let e = Scenario::from_toml_str(&base.replace("rate_mbps", "rat_mbps"), ".").unwrap_err();
        assert!(matches!(e, ScenarioError::Parse(_)), "{e}");
        assert!(e.to_string().contains("rat_mbps"), "{e}");
    }

    #[test]
    fn absurd_traces_and_sizes_are_refused() {
        // timestamps past a day (they overflowed the ns clock: utilization 51.0)
        let e = parse_trace("1\n2\n18446744073709\n").unwrap_err();
        assert!(e.contains("line 3") && e.contains("one day"), "{e}");
        assert!(parse_trace(&format!("{MAX_TRACE_MS}\n")).is_ok());
        let base = "duration_s = 10\n[link]\nrate_mbps = 10\n[[flow]]\nrtt_ms = 10\n";
        // rate x duration
        let big = base
            .replace("rate_mbps = 10", "rate_mbps = 1000000")
            .replace("duration_s = 10", "duration_s = 100000");
        assert_eq!(field_of(&big), "link.rate_mbps");
        let sched = base.replace(
            "rate_mbps = 10",
            "rate_mbps = 10\nrate_schedule = [{ at_s = 1, rate_mbps = 1000000 }]",
        );
        let sched = sched.replace("duration_s = 10", "duration_s = 100000");
        assert_eq!(field_of(&sched), "link.rate_mbps");
        // buffers
        let b = base.replace("rate_mbps = 10", "rate_mbps = 10\nbuffer_pkts = 100000000");
        assert_eq!(field_of(&b), "link.buffer_pkts");
        let b = base
            .replace("rate_mbps = 10", "rate_mbps = 100000\nbuffer_bdp = 1000")
            .replace("rtt_ms = 10", "rtt_ms = 10000");
        assert_eq!(field_of(&b), "link.buffer_bdp");
        // a trace's mean capacity: many opportunities in one ms
        let dir = std::env::temp_dir().join(format!("ccp-sc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("dense.trace"), "0\n".repeat(200_000) + "1\n").unwrap();
        let t = "duration_s = 1\n[link]\ntrace = \"dense.trace\"\ntrace_scale = 100\n[[flow]]\nrtt_ms = 10\n";
        let e = Scenario::from_toml_str(t, &dir).unwrap_err();
        assert!(matches!(e, ScenarioError::Trace { .. }), "{e}");
        assert!(e.to_string().contains("Mbit/s"), "{e}");
        // not a regular file: refused at once (a FIFO used to block)
        let fifo = dir.join("fifo.trace");
        let _ = std::fs::remove_file(&fifo);
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        let e = load_trace(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
