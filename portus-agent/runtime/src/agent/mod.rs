//! Starting and stopping the portus run loop with every algorithm registered.
//!
//! [`inline`]: the same agent without a run loop, answering in-process ([`Agent::inline`]).

pub mod inline;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccp_algs::learned::WithPolicy;
use ccp_algs::netstats::NetworkStats;
use ccp_algs::{AlgsConfig, Preference, Registry};
use portus::ipc::{BackendBuilder, Ipc};
use portus::{CCPHandle, RunBuilder};
use tracing::info;

use crate::adapter::{with_slots, AgentCore, DefaultAlg, Slot};
use crate::flows::flowlog::FlowLog;
use crate::flows::portfolio::AutoSelect;
use crate::flows::prefs::{PrefConfig, PrefRule, PrefStore};
use crate::flows::{FlowRecord, FlowTables, TableSizes};
use crate::ipc::guard::{GuardStats, Guarded};
use crate::policy::{ModelContract, ModelStore};

/// What `--alg auto` runs when the portfolio cannot choose (no runnable entry).
pub const AUTO_FALLBACK: &str = "cubic";

/// Errors that are the user's to fix (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown algorithm {name:?}; available: {available} (datapath names ccp_<alg> map to the same){why}")]
    UnknownAlg {
        name: String,
        available: String,
        /// Why a learned algorithm by that name is not available, if it is one.
        why: String,
    },
    #[error(transparent)]
    Program(#[from] crate::programs::ProgramError),
    /// Shown as "models: <why>" (the cause is this error's source, so `{:#}` names it once).
    #[error("models")]
    Models(#[from] crate::policy::PolicyLoadError),
    #[error("config file {path}: {msg}")]
    ConfigFile { path: PathBuf, msg: String },
    /// A bad preference portfolio table (`<models>/portfolio.json`).
    #[error(transparent)]
    Portfolio(#[from] crate::flows::portfolio::PortfolioError),
    /// A knob outside its range (algorithm options given in code).
    #[error("config: {0}")]
    Knob(#[from] ccp_algs::config::KnobError),
}

/// Largest `--config` file read (bytes).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// What an agent runs: algorithms, defaults, logging.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Algorithm for flows that name none or an unavailable one.
    pub default_alg: String,
    /// Preference for flows that carry none (`--w`).
    pub default_w: Preference,
    /// `[[preference]]` rules (see [`crate::flows::prefs`]).
    pub preferences: Vec<PrefRule>,
    /// How long a per-socket preference waits for its flow.
    pub pending_ttl: std::time::Duration,
    /// Most per-socket preferences stored.
    pub max_pref_entries: usize,
    /// Every algorithm's knobs.
    pub algs: AlgsConfig,
    /// JSON-lines flow log.
    pub flow_log: Option<PathBuf>,
    /// Directory of ONNX models (`<alg>.onnx` + `<alg>.json`) for the learned algorithms;
    /// a learned algorithm runs only if its model loads.
    pub models: Option<PathBuf>,
    /// Where flows that read in-network statistics (Owl) get them: the simulator's bottleneck
    /// in `--sim` runs (`crate::simrun`); `None`: nowhere, their features stay masked.
    pub network_stats: Option<Arc<dyn NetworkStats>>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        Self {
            default_alg: "cubic".into(),
            default_w: Preference::default(),
            preferences: Vec::new(),
            pending_ttl: crate::flows::prefs::DEFAULT_PENDING_TTL,
            max_pref_entries: crate::flows::prefs::DEFAULT_MAX_ENTRIES,
            algs: AlgsConfig::default(),
            flow_log: None,
            models: None,
            network_stats: None,
        }
    }
}

/// Read `[algs.<name>]` tables from a TOML file (a regular file of at most
/// [`MAX_CONFIG_BYTES`]) and check every knob's range.
pub fn load_config(path: &std::path::Path) -> Result<AlgsConfig, ConfigError> {
    load_agent_config(path).map(|c| c.algs)
}

/// Read the whole config file: `[algs.<name>]` knobs, `[control]` and `[[preference]]`
/// rules (see [`agent_config_from_toml`]).
pub fn load_agent_config(path: &std::path::Path) -> Result<AgentConfig, ConfigError> {
    let text =
        crate::sources::files::read_regular_to_string(path, MAX_CONFIG_BYTES).map_err(|e| {
            ConfigError::ConfigFile {
                path: path.into(),
                msg: format!("cannot read it: {e}"),
            }
        })?;
    agent_config_from_toml(&text).map_err(|msg| ConfigError::ConfigFile {
        path: path.into(),
        msg,
    })
}

/// Parse `[algs.<name>]` tables and check every knob's range; the error names the
/// offending key (and, for a value out of range, the range). The file's other sections
/// (`[control]`, `[[preference]]`) are checked too.
pub fn algs_from_toml(text: &str) -> Result<AlgsConfig, String> {
    agent_config_from_toml(text).map(|c| c.algs)
}

/// The config file's `[control]` section: the control socket and its limits.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlConfig {
    /// Control socket path (`--control` overrides it).
    pub socket: Option<PathBuf>,
    /// A group whose members may use the control socket (gid), besides root, the agent's
    /// user and holders of CAP_NET_ADMIN.
    pub group: Option<u32>,
    /// How long a per-socket preference waits for its flow.
    pub pending_ttl: Duration,
    /// Most per-socket preferences stored at once.
    pub max_entries: usize,
    /// Most control connections at once.
    pub max_connections: usize,
}

impl Default for ControlConfig {
    fn default() -> Self {
        Self {
            socket: None,
            group: None,
            pending_ttl: crate::flows::prefs::DEFAULT_PENDING_TTL,
            max_entries: crate::flows::prefs::DEFAULT_MAX_ENTRIES,
            max_connections: crate::control::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Everything the config file says.
#[derive(Debug, Clone, Default)]
pub struct AgentConfig {
    pub algs: AlgsConfig,
    pub control: ControlConfig,
    /// `[[preference]]` rules, in file order.
    pub preferences: Vec<PrefRule>,
    /// `[netstats]`: the in-network statistics poller (`url` absent: none, unless
    /// `--netstats-url`).
    pub netstats: crate::sources::netstats::NetStatsConfig,
}

/// A gid by group name (or a number).
pub fn group_id(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Some(n);
    }
    let c = std::ffi::CString::new(name).ok()?;
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives it and `out` is only read
    // as a flag.
    let rc =
        unsafe { libc::getgrnam_r(c.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut out) };
    (rc == 0 && !out.is_null()).then_some(grp.gr_gid)
}

/// Parse and check the config file (see `docs/agent.md`, "Config file"). Every error names
/// the section and key, and says what to write instead.
pub fn agent_config_from_toml(text: &str) -> Result<AgentConfig, String> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Num {
        Int(i64),
        Text(String),
    }
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum W {
        Text(String),
        List(Vec<f64>),
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct Control {
        socket: Option<PathBuf>,
        group: Option<Num>,
        pending_ttl_s: Option<f64>,
        max_entries: Option<i64>,
        max_connections: Option<i64>,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct NetStatsSection {
        url: Option<String>,
        period_ms: Option<u64>,
        timeout_ms: Option<u64>,
        stale_after_ms: Option<u64>,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Rule {
        name: Option<String>,
        w: Option<W>,
        dst_port: Option<Num>,
        src_port: Option<Num>,
        dst_subnet: Option<String>,
        src_subnet: Option<String>,
        uid: Option<toml::Value>,
        cgroup: Option<toml::Value>,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        algs: AlgsConfig,
        #[serde(default)]
        control: Control,
        #[serde(default)]
        preference: Vec<Rule>,
        #[serde(default)]
        netstats: NetStatsSection,
    }
    let f = toml::from_str::<File>(text).map_err(|e| {
        format!(
            "{e}(expected tables like [algs.cubic] with the fields of CubicConfig, a [control] \
             table, a [netstats] table and [[preference]] rules: see docs/agent.md)"
        )
    })?;
    f.algs.validate().map_err(|e| e.to_string())?;
    let mut control = ControlConfig {
        socket: f.control.socket,
        ..Default::default()
    };
    if let Some(g) = f.control.group {
        let name = match g {
            Num::Int(n) => n.to_string(),
            Num::Text(t) => t,
        };
        control.group = Some(group_id(&name).ok_or_else(|| {
            format!("[control] group = {name:?}: no such group (create it, or give a gid)")
        })?);
    }
    if let Some(t) = f.control.pending_ttl_s {
        if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
            return Err(format!(
                "[control] pending_ttl_s = {t}: give seconds in (0, 86400]"
            ));
        }
        control.pending_ttl = Duration::from_secs_f64(t);
    }
    let count = |key: &str, v: Option<i64>, max: i64, dflt: usize| -> Result<usize, String> {
        match v {
            None => Ok(dflt),
            Some(n) if (1..=max).contains(&n) => Ok(n as usize),
            Some(n) => Err(format!("[control] {key} = {n}: give 1 to {max}")),
        }
    };
    control.max_entries = count(
        "max_entries",
        f.control.max_entries,
        65_536,
        control.max_entries,
    )?;
    control.max_connections = count(
        "max_connections",
        f.control.max_connections,
        1024,
        control.max_connections,
    )?;
    let mut preferences = Vec::with_capacity(f.preference.len());
    for (i, r) in f.preference.into_iter().enumerate() {
        let at = match &r.name {
            Some(n) => format!("[[preference]] #{} ({n:?})", i + 1),
            None => format!("[[preference]] #{}", i + 1),
        };
        if r.uid.is_some() || r.cgroup.is_some() {
            return Err(format!(
                "{at}: uid/cgroup rules need the socket's owner, which no datapath reports (the \
                 kernel's CREATE carries addresses and ports only): match by dst_port, src_port, \
                 dst_subnet or src_subnet, or set the socket's preference through the control \
                 socket (ccp-agent ctl set-pref, ccp_train.pref.set_preference)"
            ));
        }
        let w = match r.w {
            None => return Err(format!("{at}: missing w = [thr, lat, loss]")),
            Some(W::Text(t)) => t.parse::<Preference>(),
            Some(W::List(v)) => Preference::from_slice(&v),
        }
        .map_err(|e| format!("{at}: w: {e}"))?;
        let port =
            |key: &str, v: Option<Num>| -> Result<Option<crate::flows::prefs::PortRange>, String> {
                v.map(|v| match v {
                    Num::Int(n) => n.to_string().parse(),
                    Num::Text(t) => t.parse(),
                })
                .transpose()
                .map_err(|e| format!("{at}: {key}: {e} (write 5201 or \"5000-5100\")"))
            };
        let subnet = |key: &str,
                      v: Option<String>|
         -> Result<Option<crate::flows::prefs::Subnet4>, String> {
            v.map(|t| t.parse())
                .transpose()
                .map_err(|e| format!("{at}: {key}: {e}"))
        };
        let rule = PrefRule {
            name: r.name,
            w,
            dst_port: port("dst_port", r.dst_port)?,
            src_port: port("src_port", r.src_port)?,
            dst_subnet: subnet("dst_subnet", r.dst_subnet)?,
            src_subnet: subnet("src_subnet", r.src_subnet)?,
        };
        if rule.dst_port.is_none()
            && rule.src_port.is_none()
            && rule.dst_subnet.is_none()
            && rule.src_subnet.is_none()
        {
            return Err(format!(
                "{at}: a rule needs at least one of dst_port, src_port, dst_subnet, src_subnet \
                 (for every flow, use --w)"
            ));
        }
        preferences.push(rule);
    }
    let n = f.netstats;
    let mut netstats = crate::sources::netstats::NetStatsConfig {
        url: n
            .url
            .map(|u| u.parse())
            .transpose()
            .map_err(|e| format!("[netstats] url: {e}"))?,
        ..Default::default()
    };
    for (v, d) in [
        (n.period_ms, &mut netstats.period),
        (n.timeout_ms, &mut netstats.timeout),
        (n.stale_after_ms, &mut netstats.stale_after),
    ] {
        if let Some(ms) = v {
            *d = Duration::from_millis(ms);
        }
    }
    netstats.check()?;
    Ok(AgentConfig {
        algs: f.algs,
        control,
        preferences,
        netstats,
    })
}

/// A registry, its model store, and why each learned algorithm left out is unavailable.
pub type BuiltRegistry = (
    Registry,
    Option<Arc<ModelStore>>,
    Vec<(&'static str, String)>,
);

/// The registry an agent with these options hosts: the built-in algorithms, plus every
/// learned algorithm whose model loads from `opts.models` and whose card records the
/// dynamics the algorithm has with `opts.algs` (a model trained under other dynamics is an
/// error naming the knob). Returns the model store (for
/// reloads) and, per learned algorithm left out, why.
pub fn build_registry(opts: &AgentOptions) -> Result<BuiltRegistry, ConfigError> {
    opts.algs.validate()?;
    let mut registry = Registry::from_config(&opts.algs);
    let learned = ccp_algs::registry::learned(&opts.algs);
    let Some(dir) = &opts.models else {
        let why = learned
            .iter()
            .map(|a| (a.name(), "no --models directory given".to_string()))
            .collect();
        return Ok((registry, None, why));
    };
    if learned.is_empty() {
        return Ok((registry, None, Vec::new()));
    }
    // each model is checked against its algorithm as configured: the spec, and the
    // dynamics the configured knobs give (`--config [algs.<alg>]`)
    let contracts: Vec<_> = learned
        .iter()
        .map(|a| ModelContract::of(a.as_ref()))
        .collect();
    let store = Arc::new(ModelStore::load(dir, &contracts)?);
    let available = store.available();
    for alg in learned {
        if available.contains(&alg.name()) {
            registry.register(Arc::new(WithPolicy::new(alg, store.clone())));
        }
    }
    let why = store.unavailable();
    Ok((registry, Some(store), why))
}

/// Validated, ready-to-run agent state.
pub struct Agent {
    core: Arc<AgentCore>,
    models: Option<Arc<ModelStore>>,
    pub stats: Arc<GuardStats>,
    pub programs: Vec<(&'static str, usize)>,
}

impl Agent {
    pub fn new(opts: &AgentOptions) -> Result<Self, ConfigError> {
        let (registry, models, unavailable) = build_registry(opts)?;
        let mut agent = Self::with_registry(opts, registry).map_err(|e| match e {
            ConfigError::UnknownAlg {
                name,
                available,
                why: _,
            } => {
                let why = unavailable
                    .iter()
                    .find(|(a, _)| *a == ccp_algs::registry::strip_prefix(&name))
                    .map(|(a, r)| {
                        format!("; {a} is a learned algorithm without a usable model: {r}")
                    })
                    .unwrap_or_default();
                ConfigError::UnknownAlg {
                    name,
                    available,
                    why,
                }
            }
            other => other,
        })?;
        agent.models = models;
        Ok(agent)
    }

    /// An agent hosting exactly `registry` (e.g. with learned algorithms whose flows the
    /// training bindings drive).
    pub fn with_registry(opts: &AgentOptions, registry: Registry) -> Result<Self, ConfigError> {
        opts.algs.validate()?;
        let programs = crate::programs::validate(&registry)?;
        // `--alg auto`: flows naming no algorithm are chosen by the portfolio too; when it
        // cannot choose (no runnable entry) they run the fallback
        let for_default = opts.default_alg == ccp_algs::AUTO;
        let default_name = if for_default {
            AUTO_FALLBACK
        } else {
            opts.default_alg.as_str()
        };
        let auto = Arc::new(AutoSelect::open(
            opts.models
                .as_ref()
                .map(|m| m.join(crate::flows::portfolio::FILE)),
            opts.default_w,
            for_default,
            registry.names().iter().map(|s| s.to_string()).collect(),
        )?);
        let default_alg =
            registry
                .get(default_name)
                .cloned()
                .ok_or_else(|| ConfigError::UnknownAlg {
                    name: opts.default_alg.clone(),
                    available: registry.names().join(", "),
                    why: String::new(),
                })?;
        let flow_log = match &opts.flow_log {
            Some(p) => Some(Arc::new(Mutex::new(
                FlowLog::open(p, Duration::from_millis(100)).map_err(|e| {
                    ConfigError::ConfigFile {
                        path: p.clone(),
                        msg: format!("cannot create the flow log: {e}"),
                    }
                })?,
            ))),
            None => None,
        };
        let prefs = PrefStore::new(PrefConfig {
            default_w: opts.default_w,
            rules: opts.preferences.clone(),
            pending_ttl: opts.pending_ttl,
            max_entries: opts.max_pref_entries,
        });
        let core = Arc::new(AgentCore {
            registry,
            default_alg,
            tables: Arc::new(FlowTables::with_prefs(prefs)),
            flow_log,
            auto,
            network_stats: opts.network_stats.clone(),
        });
        Ok(Self {
            core,
            models: None,
            stats: Arc::new(GuardStats::default()),
            programs,
        })
    }

    /// Read the preference portfolio table again (SIGHUP); a bad new table keeps the old
    /// one. `Ok(false)`: there is no table file.
    pub fn reload_portfolio(&self) -> Result<bool, crate::flows::portfolio::PortfolioError> {
        self.core.auto.reload()
    }

    /// The algorithm a `ccp_auto` flow with preference `w` (None: the default) gets now.
    pub fn choose_auto(&self, w: Option<Preference>) -> Option<String> {
        self.core
            .auto
            .choose(w, &self.core.available())
            .map(|c| c.alg)
    }

    /// The model store, when learned algorithms were loaded (reload it on SIGHUP).
    pub fn models(&self) -> Option<&Arc<ModelStore>> {
        self.models.as_ref()
    }

    pub fn default_alg(&self) -> &'static str {
        self.core.default_alg.name()
    }

    pub fn registry(&self) -> &Registry {
        &self.core.registry
    }

    /// The same agent as a synchronous in-process datapath peer (no portus run loop).
    pub fn inline(&self) -> anyhow::Result<crate::agent::inline::InlineAgent> {
        crate::agent::inline::InlineAgent::new(self.core.clone(), self.stats.clone())
    }

    /// Records of the live flows and of the last [`crate::flows::CLOSED_KEPT`] closed ones,
    /// by socket id.
    pub fn records(&self) -> Vec<FlowRecord> {
        self.core.tables.records()
    }

    /// The flow tables (records, preferences, decision counters).
    pub fn tables(&self) -> &Arc<FlowTables> {
        &self.core.tables
    }

    /// What the control plane reads and changes.
    pub fn control_shared(&self, proc_ccp: Option<PathBuf>) -> crate::control::Shared {
        crate::control::Shared {
            tables: self.core.tables.clone(),
            guard: self.stats.clone(),
            models: self.models.clone(),
            proc_ccp,
            netstats: None,
        }
    }

    /// Sizes of the agent's flow tables.
    pub fn table_sizes(&self) -> TableSizes {
        self.core.tables.sizes()
    }

    /// Start the portus run loop on its own thread over `ipc`.
    pub fn spawn<I: Ipc>(&self, ipc: I) -> anyhow::Result<RunningAgent> {
        let running = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let guarded = Guarded::new(
            ipc,
            self.stats.clone(),
            self.core.tables.clone(),
            self.core.available(),
            stop.clone(),
        )
        .with_auto(self.core.auto.clone());
        let core = &self.core;
        let builder =
            RunBuilder::new(BackendBuilder { sock: guarded }).default_alg(DefaultAlg::new(core));
        // one adapter per line of the registry: Slot::<0> .. Slot::<{ALGORITHMS.len() - 1}>
        let handle = ccp_algs::registered_names!(with_slots; builder, core)
            .with_stop_handle(running.clone())
            .spawn_thread()
            .run()
            .map_err(|e| anyhow::anyhow!("starting the portus run loop: {e:?}"))?;
        info!(ipc = %I::name(), default = self.default_alg(), algs = ?self.core.registry.names(), "agent running");
        Ok(RunningAgent {
            handle: Some(handle),
            running,
            stop,
            tables: self.core.tables.clone(),
        })
    }
}

/// A running portus loop.
pub struct RunningAgent {
    handle: Option<CCPHandle>,
    running: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tables: Arc<FlowTables>,
}

impl RunningAgent {
    /// Has the run loop ended by itself (IPC closed, or an error)?
    pub fn is_finished(&self) -> bool {
        self.handle
            .as_ref()
            .is_none_or(|h| h.join_handle.is_finished())
    }

    /// Ask the loop to stop; it notices within its receive timeout (1 s), or at once if
    /// `wake` makes its socket return.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.running.store(false, Ordering::SeqCst);
    }

    /// Stop and wait for the loop; returns its result.
    pub fn stop(mut self, wake: impl FnOnce()) -> anyhow::Result<()> {
        self.request_stop();
        wake();
        match self.handle.take() {
            Some(h) => h.wait().map_err(|e| anyhow::anyhow!("agent loop: {e:?}")),
            None => Ok(()),
        }
    }

    /// Wait for the loop to end by itself.
    pub fn wait(mut self) -> anyhow::Result<()> {
        match self.handle.take() {
            Some(h) => h.wait().map_err(|e| anyhow::anyhow!("agent loop: {e:?}")),
            None => Ok(()),
        }
    }

    /// Records of the live flows and of the last [`crate::flows::CLOSED_KEPT`] closed ones,
    /// by socket id.
    pub fn records(&self) -> Vec<FlowRecord> {
        self.tables.records()
    }

    /// Sizes of the agent's flow tables.
    pub fn table_sizes(&self) -> TableSizes {
        self.tables.sizes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_netstats_section_is_read_and_checked() {
        let c = agent_config_from_toml("").unwrap();
        assert_eq!(
            c.netstats,
            crate::sources::netstats::NetStatsConfig::default()
        );
        let c = agent_config_from_toml(
            "[netstats]\nurl = \"http://10.0.0.1:9465/netstats\"\nperiod_ms = 2000\ntimeout_ms = 300\nstale_after_ms = 5000\n",
        )
        .unwrap();
        let n = c.netstats;
        assert_eq!(
            n.url.map(|u| u.to_string()).as_deref(),
            Some("http://10.0.0.1:9465/netstats")
        );
        assert_eq!(
            (n.period, n.timeout, n.stale_after),
            (
                Duration::from_millis(2000),
                Duration::from_millis(300),
                Duration::from_millis(5000)
            )
        );
        for (bad, says) in [
            (
                "url = \"https://x/\"",
                "[netstats] url: https://x/: https is not supported",
            ),
            ("timeout_ms = 1000", "[netstats] timeout_ms = 1000"),
            ("stale_after_ms = 10", "[netstats] stale_after_ms = 10"),
            ("period = 3", "unknown field `period`"),
        ] {
            let e = agent_config_from_toml(&format!("[netstats]\n{bad}\n")).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
