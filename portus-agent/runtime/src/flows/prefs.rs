//! Per-flow preferences: where a flow's `w = <throughput, latency, loss>` comes from, and how
//! it changes while the flow runs.
//!
//! **Resolution at CREATE** ([`PrefStore::resolve`], called once per CREATE by
//! [`crate::ipc::guard::normalize_create`]), first match wins:
//!
//! 1. an explicit **per-socket** entry set through the control socket (`ctl set-pref`, the
//!    Python helper), keyed by the flow's addresses and ports ([`PrefKey`]);
//! 2. the first **`[[preference]]` rule** of the config file (file order) that matches the
//!    flow's ports and addresses ([`PrefRule`]);
//! 3. the **`;w=a,b,c` suffix** of the CREATE's congestion-control name (the simulator's
//!    per-flow preference);
//! 4. the agent's **`--w`**.
//!
//! An operator's action on one socket outranks the operator's policy for many, and both
//! outrank what a datapath put in the name (a simulator convenience) and the agent-wide
//! default.
//!
//! **Addresses.** libccp's CREATE carries IPv4 addresses and ports; for an IPv6 socket the
//! kernel sends address 0 (see `ops/vm/README.md`, test `ipv6_flow`). So an IPv6 flow is
//! keyed by its ports alone ([`PrefKey::ips`] is `None`), and rules with a subnet never match
//! it. Network namespaces are not told apart either: two flows with the same addresses and
//! ports in different namespaces share one entry.
//!
//! **Pending entries.** A preference set before its flow exists waits for it for the store's
//! TTL ([`DEFAULT_PENDING_TTL`]); an entry bound to a live flow stays while the flow lives
//! and becomes pending again when its last flow closes (so a flow re-announced by the
//! datapath, e.g. after the agent reinstalled its programs, keeps it), then expires. At most
//! `max_entries` entries exist.
//!
//! **Mid-flow changes.** Every live flow has a [`PrefCell`]; a change (a new entry, a cleared
//! one, new rules on SIGHUP) is written there under a short lock and published with a
//! version counter. The flow's driver reads the version (one atomic load) at each decision
//! and takes the new `w` at the next one; the decision path never waits on the control
//! plane for longer than copying one `w`.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use ccp_algs::Preference;

use crate::flows::key::FlowKey;

/// How long a preference set for a socket that has no flow (yet, or any more) is kept.
pub const DEFAULT_PENDING_TTL: Duration = Duration::from_secs(60);
/// Most per-socket entries (pending or bound) kept at once.
pub const DEFAULT_MAX_ENTRIES: usize = 4096;

/// A flow's addresses and ports as its datapath's CREATE carried them (IPv4; `0.0.0.0` for
/// an IPv6 socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct FlowAddr {
    /// The local end (the socket's own address).
    pub src_ip: Ipv4Addr,
    pub src_port: u16,
    /// The remote end.
    pub dst_ip: Ipv4Addr,
    pub dst_port: u16,
}

impl FlowAddr {
    /// An IPv6 socket: the CREATE's addresses are placeholders (both 0).
    pub fn is_v6(&self) -> bool {
        self.src_ip.is_unspecified() && self.dst_ip.is_unspecified()
    }

    /// The key per-socket entries are looked up by.
    pub fn key(&self) -> PrefKey {
        PrefKey {
            ips: (!self.is_v6()).then_some((self.src_ip, self.dst_ip)),
            local_port: self.src_port,
            remote_port: self.dst_port,
        }
    }
}

impl fmt::Display for FlowAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_v6() {
            write!(f, "[v6]:{} -> [v6]:{}", self.src_port, self.dst_port)
        } else {
            write!(
                f,
                "{}:{} -> {}:{}",
                self.src_ip, self.src_port, self.dst_ip, self.dst_port
            )
        }
    }
}

/// What per-socket entries are keyed by: IPv4 addresses and ports, or ports alone for IPv6
/// (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefKey {
    /// (local, remote) IPv4 addresses; `None`: an IPv6 socket.
    pub ips: Option<(Ipv4Addr, Ipv4Addr)>,
    pub local_port: u16,
    pub remote_port: u16,
}

/// Why a socket named through the control socket cannot be keyed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    #[error("{which} address {addr}: port 0 is not a connected socket's port")]
    PortZero {
        which: &'static str,
        addr: SocketAddr,
    },
    #[error("{which} address {addr} is unspecified: give the connected socket's own address")]
    Unspecified {
        which: &'static str,
        addr: SocketAddr,
    },
    #[error("local {local} and remote {remote} are of different address families")]
    MixedFamilies {
        local: SocketAddr,
        remote: SocketAddr,
    },
}

/// A connected socket as the control socket names it: its own (local) address and its
/// peer's (remote) address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SocketPair {
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

/// `::ffff:a.b.c.d` → `a.b.c.d` (a dual-stack socket talking IPv4 is an IPv4 flow).
fn unmap(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => a,
        },
        v4 => v4,
    }
}

impl SocketPair {
    /// Validate and key: ports non-zero, addresses specified, one family (IPv4-mapped IPv6
    /// counts as IPv4).
    pub fn key(&self) -> Result<PrefKey, AddrError> {
        let (local, remote) = (unmap(self.local), unmap(self.remote));
        for (which, a) in [("local", local), ("remote", remote)] {
            if a.port() == 0 {
                return Err(AddrError::PortZero { which, addr: a });
            }
            if a.ip().is_unspecified() {
                return Err(AddrError::Unspecified { which, addr: a });
            }
        }
        match (local.ip(), remote.ip()) {
            (IpAddr::V4(l), IpAddr::V4(r)) => Ok(PrefKey {
                ips: Some((l, r)),
                local_port: local.port(),
                remote_port: remote.port(),
            }),
            (IpAddr::V6(_), IpAddr::V6(_)) => Ok(PrefKey {
                ips: None,
                local_port: local.port(),
                remote_port: remote.port(),
            }),
            _ => Err(AddrError::MixedFamilies { local, remote }),
        }
    }
}

/// An inclusive port range (`5201` or `"5000-5100"` in the config file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    pub fn contains(&self, p: u16) -> bool {
        (self.lo..=self.hi).contains(&p)
    }
}

impl std::str::FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let port = |t: &str| {
            t.trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{t:?} is not a port in 1..=65535"))
        };
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => {
                let p = port(s)?;
                (p, p)
            }
        };
        if lo > hi {
            return Err(format!("port range {s:?} is empty (write low-high)"));
        }
        Ok(Self { lo, hi })
    }
}

/// An IPv4 subnet (`"10.0.2.0/24"`, or one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet4 {
    pub net: Ipv4Addr,
    pub prefix: u8,
}

impl Subnet4 {
    fn mask(&self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        }
    }

    pub fn contains(&self, a: Ipv4Addr) -> bool {
        u32::from(a) & self.mask() == u32::from(self.net) & self.mask()
    }
}

impl std::str::FromStr for Subnet4 {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net = match addr.parse::<IpAddr>() {
            Ok(IpAddr::V4(net)) => net,
            Ok(IpAddr::V6(_)) => {
                return Err(format!(
                    "{s:?} is an IPv6 subnet: the kernel datapath reports IPv4 addresses only (an \
                     IPv6 flow's are 0), so match IPv6 flows by port, or set them per socket \
                     through the control socket"
                ))
            }
            Err(_) => return Err(format!("{s:?} is not an IPv4 subnet like \"10.0.2.0/24\"")),
        };
        let prefix = match prefix {
            None => 32,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= 32)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0..=32"))?,
        };
        Ok(Self { net, prefix })
    }
}

/// A `[[preference]]` rule: the flows it matches get `w` unless they have a per-socket entry.
/// Every condition given must hold; a rule without any is refused at load.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefRule {
    /// Shown in `ctl flows` and the flow log (`rule:<name>`; `rule:#<n>` without one).
    pub name: Option<String>,
    pub w: Preference,
    /// The remote port.
    pub dst_port: Option<PortRange>,
    /// The local port.
    pub src_port: Option<PortRange>,
    /// The remote address (IPv4 flows only).
    pub dst_subnet: Option<Subnet4>,
    /// The local address (IPv4 flows only).
    pub src_subnet: Option<Subnet4>,
}

impl PrefRule {
    pub fn matches(&self, a: &FlowAddr) -> bool {
        let v6 = a.is_v6();
        self.dst_port.is_none_or(|r| r.contains(a.dst_port))
            && self.src_port.is_none_or(|r| r.contains(a.src_port))
            && self.dst_subnet.is_none_or(|s| !v6 && s.contains(a.dst_ip))
            && self.src_subnet.is_none_or(|s| !v6 && s.contains(a.src_ip))
    }
}

/// Where a flow's `w` came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefSource {
    /// A per-socket entry (control socket).
    Socket,
    /// The `index`-th `[[preference]]` rule (0-based, file order).
    Rule {
        index: usize,
        name: Option<Arc<str>>,
    },
    /// The CREATE's `;w=` suffix.
    Request,
    /// The agent's `--w`.
    Default,
}

impl fmt::Display for PrefSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefSource::Socket => f.write_str("socket"),
            PrefSource::Rule {
                name: Some(n),
                index: _,
            } => write!(f, "rule:{n}"),
            PrefSource::Rule { index, name: None } => write!(f, "rule:#{}", index + 1),
            PrefSource::Request => f.write_str("request"),
            PrefSource::Default => f.write_str("default"),
        }
    }
}

impl serde::Serialize for PrefSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A flow's preference and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub w: Preference,
    pub source: PrefSource,
}

/// A live flow's current preference, shared by its driver (reads) and the store (writes).
#[derive(Debug)]
pub struct PrefCell {
    version: AtomicU64,
    state: Mutex<Resolved>,
}

impl PrefCell {
    fn new(r: Resolved) -> Self {
        Self {
            version: AtomicU64::new(0),
            state: Mutex::new(r),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Resolved> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current preference.
    pub fn get(&self) -> Resolved {
        self.lock().clone()
    }

    /// The preference if it changed since version `*seen` (which is updated): one atomic
    /// load when nothing changed.
    pub fn changed(&self, seen: &mut u64) -> Option<Resolved> {
        let v = self.version.load(Ordering::Acquire);
        if v == *seen {
            return None;
        }
        let r = self.lock().clone();
        *seen = v;
        Some(r)
    }

    /// The version a new reader starts from.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Publish `r`; `true` if it differs from what was there.
    fn set(&self, r: Resolved) -> bool {
        let mut st = self.lock();
        if *st == r {
            return false;
        }
        *st = r;
        self.version.fetch_add(1, Ordering::AcqRel);
        true
    }
}

/// Why a per-socket preference was not stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefError {
    #[error(transparent)]
    Addr(#[from] AddrError),
    #[error("{max} per-socket preferences are stored already: clear some (ctl clear-pref) or wait for pending ones to expire")]
    Full { max: usize },
}

/// What `set` did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SetOutcome {
    /// Live flows with these (datapath, socket id) took it; their next decision uses it.
    Applied { sids: Vec<u32> },
    /// No such flow yet: it waits this long for one.
    Pending { expires_in_s: f64 },
}

/// One per-socket entry, for `ctl prefs`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EntryView {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub w: [f64; 3],
    /// Live flows using it.
    pub flows: usize,
    /// Seconds left while pending (no live flow); `None` while bound.
    pub expires_in_s: Option<f64>,
}

/// Counters of the store (metrics, `ctl stats`).
#[derive(Debug, Default)]
pub struct PrefStats {
    /// Per-socket preferences set (control socket).
    pub set: AtomicU64,
    /// ... of which refused (bad address, table full).
    pub refused: AtomicU64,
    /// Per-socket preferences cleared.
    pub cleared: AtomicU64,
    /// Pending entries that expired without a flow.
    pub expired: AtomicU64,
    /// New flows by the source of their `w`.
    pub from_socket: AtomicU64,
    pub from_rule: AtomicU64,
    pub from_request: AtomicU64,
    pub from_default: AtomicU64,
    /// Live flows whose `w` changed (control socket, rule reload).
    pub changed_mid_flow: AtomicU64,
    /// Gauge: per-socket entries now (pending or bound).
    pub entries: AtomicU64,
}

#[derive(Debug)]
struct Entry {
    pair: SocketPair,
    w: Preference,
    /// Live flows bound to it.
    flows: usize,
    /// When it last had no live flow (it expires `ttl` later); `None` while bound.
    idle_since: Option<Instant>,
}

#[derive(Debug)]
struct Live {
    gen: u64,
    addr: Option<FlowAddr>,
    /// The CREATE's `;w=` suffix (for re-resolving).
    suffix: Option<Preference>,
    cell: Arc<PrefCell>,
    /// Bound to the per-socket entry of its key.
    bound: bool,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<PrefKey, Entry>,
    live: HashMap<FlowKey, Live>,
}

/// How the store is set up (from `--w` and the config file).
#[derive(Debug, Clone)]
pub struct PrefConfig {
    pub default_w: Preference,
    pub rules: Vec<PrefRule>,
    pub pending_ttl: Duration,
    pub max_entries: usize,
}

impl Default for PrefConfig {
    fn default() -> Self {
        Self {
            default_w: Preference::default(),
            rules: Vec::new(),
            pending_ttl: DEFAULT_PENDING_TTL,
            max_entries: DEFAULT_MAX_ENTRIES,
        }
    }
}

/// Rules with their display sources, swapped whole on reload.
#[derive(Debug, Default)]
struct Rules {
    rules: Vec<PrefRule>,
    names: Vec<Option<Arc<str>>>,
}

impl Rules {
    fn new(rules: Vec<PrefRule>) -> Self {
        let names = rules
            .iter()
            .map(|r| r.name.as_deref().map(Arc::from))
            .collect();
        Self { rules, names }
    }
}

/// Per-socket entries, rules and the live flows' preference cells (see the module docs).
#[derive(Debug)]
pub struct PrefStore {
    default_w: Preference,
    rules: ArcSwap<Rules>,
    ttl: Duration,
    max_entries: usize,
    inner: Mutex<Inner>,
    /// Bumped by every change to the per-socket entries (for saving them).
    changes: AtomicU64,
    pub stats: PrefStats,
}

impl Default for PrefStore {
    fn default() -> Self {
        Self::new(PrefConfig::default())
    }
}

impl PrefStore {
    pub fn new(c: PrefConfig) -> Self {
        Self {
            default_w: c.default_w,
            rules: ArcSwap::from_pointee(Rules::new(c.rules)),
            ttl: c.pending_ttl,
            max_entries: c.max_entries,
            inner: Mutex::new(Inner::default()),
            changes: AtomicU64::new(0),
            stats: PrefStats::default(),
        }
    }

    /// A number that changes whenever the per-socket entries do.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
    }

    /// The per-socket entries in force (not expired), to save across restarts.
    pub fn snapshot(&self) -> Vec<(SocketPair, Preference)> {
        let now = Instant::now();
        let inner = self.lock();
        let mut v: Vec<_> = inner
            .entries
            .values()
            .filter(|e| !self.expired(e, now))
            .map(|e| (e.pair, e.w))
            .collect();
        v.sort_by_key(|(p, _)| (p.local, p.remote));
        v
    }

    /// Entries saved by an earlier agent: each waits for its flow (a re-announced one) as a
    /// pending entry does. Entries that exist already, bad sockets and those beyond
    /// `max_entries` are left out; returns how many were taken.
    pub fn restore(&self, saved: &[(SocketPair, Preference)]) -> usize {
        let now = Instant::now();
        let mut inner = self.lock();
        let mut n = 0;
        for (pair, w) in saved {
            let Ok(key) = pair.key() else { continue };
            if inner.entries.contains_key(&key) || inner.entries.len() >= self.max_entries {
                continue;
            }
            inner.entries.insert(
                key,
                Entry {
                    pair: *pair,
                    w: *w,
                    flows: 0,
                    idle_since: Some(now),
                },
            );
            n += 1;
        }
        self.stats
            .entries
            .store(inner.entries.len() as u64, Ordering::Relaxed);
        n
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn default_w(&self) -> Preference {
        self.default_w
    }

    pub fn pending_ttl(&self) -> Duration {
        self.ttl
    }

    /// The rules in force.
    pub fn rules(&self) -> Vec<PrefRule> {
        self.rules.load().rules.clone()
    }

    /// Rules, suffix, default: resolution steps 2 to 4 (see the module docs).
    fn resolve_without_socket(
        &self,
        addr: Option<&FlowAddr>,
        suffix: Option<Preference>,
    ) -> Resolved {
        let rules = self.rules.load();
        if let Some(a) = addr {
            if let Some((index, r)) = rules.rules.iter().enumerate().find(|(_, r)| r.matches(a)) {
                return Resolved {
                    w: r.w,
                    source: PrefSource::Rule {
                        index,
                        name: rules.names.get(index).cloned().flatten(),
                    },
                };
            }
        }
        match suffix {
            Some(w) => Resolved {
                w,
                source: PrefSource::Request,
            },
            None => Resolved {
                w: self.default_w,
                source: PrefSource::Default,
            },
        }
    }

    /// A live entry for `key` (not expired).
    fn entry_w(&self, inner: &Inner, key: &PrefKey, now: Instant) -> Option<Preference> {
        inner
            .entries
            .get(key)
            .filter(|e| !self.expired(e, now))
            .map(|e| e.w)
    }

    fn expired(&self, e: &Entry, now: Instant) -> bool {
        e.idle_since
            .is_some_and(|t| now.saturating_duration_since(t) >= self.ttl)
    }

    /// **The** place a new flow's preference is decided (see the module docs for the order):
    /// the guard calls it once per CREATE, before the algorithm is chosen, with the
    /// CREATE's addresses and `;w=` suffix.
    pub fn resolve(&self, addr: Option<&FlowAddr>, suffix: Option<Preference>) -> Resolved {
        if let Some(a) = addr {
            let inner = self.lock();
            if let Some(w) = self.entry_w(&inner, &a.key(), Instant::now()) {
                return Resolved {
                    w,
                    source: PrefSource::Socket,
                };
            }
        }
        self.resolve_without_socket(addr, suffix)
    }

    /// A new flow (`key`, request generation `gen`) starts with `resolved` (from
    /// [`PrefStore::resolve`]); returns its cell. A per-socket entry set since the CREATE
    /// wins. A live flow with the same key and another generation is replaced.
    pub fn attach(
        &self,
        key: FlowKey,
        gen: u64,
        addr: Option<FlowAddr>,
        suffix: Option<Preference>,
        mut resolved: Resolved,
    ) -> Arc<PrefCell> {
        let now = Instant::now();
        let mut inner = self.lock();
        if let Some(old) = inner.live.remove(&key) {
            Self::unbind(&mut inner, &old, now);
        }
        let pkey = addr.map(|a| a.key());
        let mut bound = false;
        if let Some(k) = &pkey {
            if let Some(w) = self.entry_w(&inner, k, now) {
                resolved = Resolved {
                    w,
                    source: PrefSource::Socket,
                };
            }
            if resolved.source == PrefSource::Socket {
                if let Some(e) = inner.entries.get_mut(k) {
                    e.flows += 1;
                    e.idle_since = None;
                    bound = true;
                }
            }
        }
        if resolved.source == PrefSource::Socket && !bound {
            // its entry was cleared (or expired) since the CREATE
            resolved = self.resolve_without_socket(addr.as_ref(), suffix);
        }
        let counter = match resolved.source {
            PrefSource::Socket => &self.stats.from_socket,
            PrefSource::Rule { .. } => &self.stats.from_rule,
            PrefSource::Request => &self.stats.from_request,
            PrefSource::Default => &self.stats.from_default,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let cell = Arc::new(PrefCell::new(resolved));
        inner.live.insert(
            key,
            Live {
                gen,
                addr,
                suffix,
                cell: cell.clone(),
                bound,
            },
        );
        cell
    }

    fn unbind(inner: &mut Inner, old: &Live, now: Instant) {
        if !old.bound {
            return;
        }
        if let Some(e) = old.addr.and_then(|a| inner.entries.get_mut(&a.key())) {
            e.flows = e.flows.saturating_sub(1);
            if e.flows == 0 {
                e.idle_since = Some(now);
            }
        }
    }

    /// The flow `key` of generation `gen` ended: its entry (if any) starts to expire.
    pub fn detach(&self, key: FlowKey, gen: u64) {
        let mut inner = self.lock();
        if inner.live.get(&key).is_some_and(|l| l.gen == gen) {
            if let Some(old) = inner.live.remove(&key) {
                Self::unbind(&mut inner, &old, Instant::now());
            }
        }
    }

    /// Drop expired entries; returns how many went.
    pub fn sweep(&self) -> usize {
        let now = Instant::now();
        let mut inner = self.lock();
        let before = inner.entries.len();
        let ttl = self.ttl;
        inner.entries.retain(|_, e| {
            e.idle_since
                .is_none_or(|t| now.saturating_duration_since(t) < ttl)
        });
        let gone = before - inner.entries.len();
        if gone > 0 {
            self.changed();
        }
        self.stats.expired.fetch_add(gone as u64, Ordering::Relaxed);
        self.stats
            .entries
            .store(inner.entries.len() as u64, Ordering::Relaxed);
        gone
    }

    /// Set socket `pair`'s preference: live flows of that socket take it at their next
    /// decision; without one it waits ([`SetOutcome::Pending`]).
    pub fn set(&self, pair: SocketPair, w: Preference) -> Result<SetOutcome, PrefError> {
        let r = self.set_inner(pair, w);
        let c = if r.is_ok() {
            &self.stats.set
        } else {
            &self.stats.refused
        };
        c.fetch_add(1, Ordering::Relaxed);
        r
    }

    fn set_inner(&self, pair: SocketPair, w: Preference) -> Result<SetOutcome, PrefError> {
        let key = pair.key()?;
        self.sweep();
        let now = Instant::now();
        let mut inner = self.lock();
        if !inner.entries.contains_key(&key) && inner.entries.len() >= self.max_entries {
            return Err(PrefError::Full {
                max: self.max_entries,
            });
        }
        let mut sids = Vec::new();
        let mut flows = inner.entries.get(&key).map_or(0, |e| e.flows);
        for (fk, live) in inner.live.iter_mut() {
            if live.addr.map(|a| a.key()) != Some(key) {
                continue;
            }
            if !live.bound {
                live.bound = true;
                flows += 1;
            }
            if live.cell.set(Resolved {
                w,
                source: PrefSource::Socket,
            }) {
                self.stats.changed_mid_flow.fetch_add(1, Ordering::Relaxed);
            }
            sids.push(fk.sid);
        }
        sids.sort_unstable();
        inner.entries.insert(
            key,
            Entry {
                pair,
                w,
                flows,
                idle_since: (flows == 0).then_some(now),
            },
        );
        self.stats
            .entries
            .store(inner.entries.len() as u64, Ordering::Relaxed);
        self.changed();
        Ok(if sids.is_empty() {
            SetOutcome::Pending {
                expires_in_s: self.ttl.as_secs_f64(),
            }
        } else {
            SetOutcome::Applied { sids }
        })
    }

    /// Remove socket `pair`'s entry; its live flows go back to rules, suffix or default.
    /// Returns whether there was one.
    pub fn clear(&self, pair: SocketPair) -> Result<bool, AddrError> {
        let key = pair.key()?;
        let mut inner = self.lock();
        let had = inner.entries.remove(&key).is_some();
        let mut redo = Vec::new();
        for live in inner.live.values_mut() {
            if live.addr.map(|a| a.key()) == Some(key) {
                live.bound = false;
                redo.push((live.addr, live.suffix, live.cell.clone()));
            }
        }
        self.stats
            .entries
            .store(inner.entries.len() as u64, Ordering::Relaxed);
        drop(inner);
        for (addr, suffix, cell) in redo {
            if cell.set(self.resolve_without_socket(addr.as_ref(), suffix)) {
                self.stats.changed_mid_flow.fetch_add(1, Ordering::Relaxed);
            }
        }
        if had {
            self.changed();
            self.stats.cleared.fetch_add(1, Ordering::Relaxed);
        }
        Ok(had)
    }

    /// Replace the rules (SIGHUP); live flows without a per-socket entry are resolved again
    /// and take the result at their next decision. Returns how many changed.
    pub fn set_rules(&self, rules: Vec<PrefRule>) -> usize {
        self.rules.store(Arc::new(Rules::new(rules)));
        let redo: Vec<_> = self
            .lock()
            .live
            .values()
            .filter(|l| !l.bound)
            .map(|l| (l.addr, l.suffix, l.cell.clone()))
            .collect();
        let mut changed = 0;
        for (addr, suffix, cell) in redo {
            if cell.set(self.resolve_without_socket(addr.as_ref(), suffix)) {
                changed += 1;
            }
        }
        self.stats
            .changed_mid_flow
            .fetch_add(changed as u64, Ordering::Relaxed);
        changed
    }

    /// Every per-socket entry (pending and bound), for `ctl prefs`.
    pub fn entries(&self) -> Vec<EntryView> {
        let now = Instant::now();
        let inner = self.lock();
        let mut v: Vec<EntryView> = inner
            .entries
            .values()
            .filter(|e| !self.expired(e, now))
            .map(|e| EntryView {
                local: e.pair.local,
                remote: e.pair.remote,
                w: e.w.as_array(),
                flows: e.flows,
                expires_in_s: e.idle_since.map(|t| {
                    self.ttl
                        .saturating_sub(now.saturating_duration_since(t))
                        .as_secs_f64()
                }),
            })
            .collect();
        v.sort_by_key(|e| (e.local, e.remote));
        v
    }

    /// The current preference of live flow `key`.
    pub fn current(&self, key: FlowKey) -> Option<Resolved> {
        self.lock().live.get(&key).map(|l| l.cell.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(a: f64, b: f64, c: f64) -> Preference {
        Preference::new(a, b, c).unwrap()
    }

    fn addr(s: &str, sp: u16, d: &str, dp: u16) -> FlowAddr {
        FlowAddr {
            src_ip: s.parse().unwrap(),
            src_port: sp,
            dst_ip: d.parse().unwrap(),
            dst_port: dp,
        }
    }

    fn pair(l: &str, r: &str) -> SocketPair {
        SocketPair {
            local: l.parse().unwrap(),
            remote: r.parse().unwrap(),
        }
    }

    fn rule(name: &str, wv: Preference) -> PrefRule {
        PrefRule {
            name: Some(name.into()),
            w: wv,
            dst_port: None,
            src_port: None,
            dst_subnet: None,
            src_subnet: None,
        }
    }

    const K1: FlowKey = FlowKey { peer: 1, sid: 1 };

    #[test]
    fn rules_match_on_every_condition_given_and_the_first_match_wins() {
        let mut bulk = rule("bulk", w(0.8, 0.1, 0.1));
        bulk.dst_port = Some("5000-5100".parse().unwrap());
        bulk.dst_subnet = Some("10.0.2.0/24".parse().unwrap());
        let mut any5201 = rule("p5201", w(0.1, 0.8, 0.1));
        any5201.dst_port = Some("5201".parse().unwrap());
        let mut local = rule("local", w(0.2, 0.2, 0.6));
        local.src_subnet = Some("10.0.1.1".parse().unwrap());
        local.src_port = Some("1-65535".parse().unwrap());
        let s = PrefStore::new(PrefConfig {
            rules: vec![bulk, any5201, local],
            ..Default::default()
        });
        let src = |a: FlowAddr| s.resolve(Some(&a), None).source.to_string();
        assert_eq!(src(addr("10.0.1.1", 40000, "10.0.2.2", 5050)), "rule:bulk");
        // 5201 is in bulk's range but 10.0.3.2 is not in its subnet
        assert_eq!(src(addr("10.0.1.1", 40000, "10.0.3.2", 5201)), "rule:p5201");
        // in bulk's subnet but not its port range
        assert_eq!(src(addr("10.0.1.1", 40000, "10.0.2.2", 5201)), "rule:p5201");
        assert_eq!(src(addr("10.0.1.1", 40000, "10.0.3.2", 80)), "rule:local");
        assert_eq!(src(addr("10.0.1.9", 40000, "10.0.3.2", 80)), "default");
        // IPv6 (addresses 0): port rules match, subnet rules never do
        assert_eq!(src(addr("0.0.0.0", 40000, "0.0.0.0", 5201)), "rule:p5201");
        assert_eq!(src(addr("0.0.0.0", 40000, "0.0.0.0", 5050)), "default");
    }

    #[test]
    fn precedence_is_socket_then_rule_then_suffix_then_default() {
        let mut r = rule("r", w(0.1, 0.8, 0.1));
        r.dst_port = Some("5201".parse().unwrap());
        let d = w(0.4, 0.5, 0.1);
        let s = PrefStore::new(PrefConfig {
            default_w: d,
            rules: vec![r],
            ..Default::default()
        });
        let sfx = Some(w(0.3, 0.3, 0.4));
        let a = addr("10.0.1.1", 40000, "10.0.2.2", 5201);
        let other = addr("10.0.1.1", 40000, "10.0.2.2", 80);
        assert_eq!(
            s.resolve(None, None),
            Resolved {
                w: d,
                source: PrefSource::Default
            }
        );
        assert_eq!(s.resolve(Some(&other), sfx).source, PrefSource::Request);
        assert_eq!(s.resolve(Some(&a), sfx).w, w(0.1, 0.8, 0.1));
        s.set(pair("10.0.1.1:40000", "10.0.2.2:5201"), w(0.9, 0.05, 0.05))
            .unwrap();
        assert_eq!(
            s.resolve(Some(&a), sfx),
            Resolved {
                w: w(0.9, 0.05, 0.05),
                source: PrefSource::Socket
            }
        );
        // another socket of the same host is not affected
        let b = addr("10.0.1.1", 40001, "10.0.2.2", 5201);
        assert_eq!(s.resolve(Some(&b), sfx).source.to_string(), "rule:r");
    }

    #[test]
    fn a_preference_set_before_the_flow_waits_for_it_then_binds() {
        let s = PrefStore::default();
        let p = pair("10.0.1.1:40000", "10.0.2.2:5201");
        let out = s.set(p, w(0.8, 0.1, 0.1)).unwrap();
        assert!(matches!(out, SetOutcome::Pending { .. }), "{out:?}");
        let a = addr("10.0.1.1", 40000, "10.0.2.2", 5201);
        let r = s.resolve(Some(&a), None);
        assert_eq!(r.source, PrefSource::Socket);
        let cell = s.attach(K1, 7, Some(a), None, r);
        assert_eq!(cell.get().w, w(0.8, 0.1, 0.1));
        let e = s.entries();
        assert_eq!((e.len(), e[0].flows, e[0].expires_in_s), (1, 1, None));
        // while bound it does not expire
        assert_eq!(s.sweep(), 0);
        // the flow ends: it starts to expire
        s.detach(K1, 7);
        assert_eq!(s.entries()[0].flows, 0);
        assert!(s.entries()[0].expires_in_s.is_some());
    }

    #[test]
    fn stale_pending_entries_expire() {
        let s = PrefStore::new(PrefConfig {
            pending_ttl: Duration::from_millis(50),
            ..Default::default()
        });
        s.set(pair("10.0.1.1:40000", "10.0.2.2:5201"), w(0.8, 0.1, 0.1))
            .unwrap();
        assert_eq!(s.entries().len(), 1);
        std::thread::sleep(Duration::from_millis(80));
        // expired: no longer resolves, no longer listed, swept away
        let a = addr("10.0.1.1", 40000, "10.0.2.2", 5201);
        assert_eq!(s.resolve(Some(&a), None).source, PrefSource::Default);
        assert!(s.entries().is_empty());
        assert_eq!(s.sweep(), 1);
        assert_eq!(s.stats.expired.load(Ordering::Relaxed), 1);
        // and a flow that comes late does not get it
        let cell = s.attach(K1, 1, Some(a), None, s.resolve(Some(&a), None));
        assert_eq!(cell.get().source, PrefSource::Default);
    }

    #[test]
    fn a_change_reaches_a_live_flow_through_its_cell_once() {
        let s = PrefStore::default();
        let a = addr("10.0.1.1", 40000, "10.0.2.2", 5201);
        let cell = s.attach(K1, 1, Some(a), None, s.resolve(Some(&a), None));
        let mut seen = cell.version();
        assert_eq!(cell.changed(&mut seen), None);
        let out = s
            .set(pair("10.0.1.1:40000", "10.0.2.2:5201"), w(0.1, 0.8, 0.1))
            .unwrap();
        assert_eq!(out, SetOutcome::Applied { sids: vec![1] });
        let got = cell.changed(&mut seen).expect("changed");
        assert_eq!((got.w, got.source), (w(0.1, 0.8, 0.1), PrefSource::Socket));
        assert_eq!(cell.changed(&mut seen), None, "seen once");
        // the same value again is no change
        s.set(pair("10.0.1.1:40000", "10.0.2.2:5201"), w(0.1, 0.8, 0.1))
            .unwrap();
        assert_eq!(cell.changed(&mut seen), None);
        // cleared: back to the default, and the entry is gone
        assert_eq!(s.clear(pair("10.0.1.1:40000", "10.0.2.2:5201")), Ok(true));
        assert_eq!(cell.changed(&mut seen).unwrap().source, PrefSource::Default);
        assert!(s.entries().is_empty());
        assert_eq!(s.stats.changed_mid_flow.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_set_between_create_and_attach_is_not_lost() {
        let s = PrefStore::default();
        let a = addr("10.0.1.1", 40000, "10.0.2.2", 5201);
        let r = s.resolve(Some(&a), None);
        s.set(pair("10.0.1.1:40000", "10.0.2.2:5201"), w(0.1, 0.8, 0.1))
            .unwrap();
        let cell = s.attach(K1, 1, Some(a), None, r);
        assert_eq!(cell.get().source, PrefSource::Socket);
        assert_eq!(s.entries()[0].flows, 1);
    }

    #[test]
    fn a_re_created_flow_keeps_its_entry() {
        let s = PrefStore::new(PrefConfig {
            pending_ttl: Duration::from_secs(3600),
            ..Default::default()
        });
        let a = addr("10.0.1.1", 40000, "10.0.2.2", 5201);
        s.set(pair("10.0.1.1:40000", "10.0.2.2:5201"), w(0.1, 0.8, 0.1))
            .unwrap();
        s.attach(K1, 1, Some(a), None, s.resolve(Some(&a), None));
        // a second CREATE for the same socket id replaces the flow; the old one's close
        // (generation 1) comes after and must not unbind the new one
        let c2 = s.attach(K1, 2, Some(a), None, s.resolve(Some(&a), None));
        s.detach(K1, 1);
        assert_eq!(c2.get().source, PrefSource::Socket);
        assert_eq!(s.entries()[0].flows, 1);
    }

    #[test]
    fn rule_reload_re_resolves_flows_without_a_socket_entry() {
        let s = PrefStore::default();
        let a = addr("10.0.1.1", 40000, "10.0.2.2", 5201);
        let b = addr("10.0.1.1", 40001, "10.0.2.2", 5201);
        let ca = s.attach(K1, 1, Some(a), None, s.resolve(Some(&a), None));
        let kb = FlowKey { peer: 1, sid: 2 };
        s.set(pair("10.0.1.1:40001", "10.0.2.2:5201"), w(0.9, 0.05, 0.05))
            .unwrap();
        let cb = s.attach(kb, 2, Some(b), None, s.resolve(Some(&b), None));
        let mut r = rule("lat", w(0.1, 0.8, 0.1));
        r.dst_port = Some("5201".parse().unwrap());
        assert_eq!(s.set_rules(vec![r]), 1);
        assert_eq!(ca.get().source.to_string(), "rule:lat");
        assert_eq!(cb.get().source, PrefSource::Socket);
        assert_eq!(s.current(kb).unwrap().w, w(0.9, 0.05, 0.05));
    }

    #[test]
    fn bad_sockets_and_a_full_table_are_refused() {
        let s = PrefStore::new(PrefConfig {
            max_entries: 2,
            ..Default::default()
        });
        let ww = w(0.4, 0.5, 0.1);
        assert!(matches!(
            s.set(pair("10.0.1.1:0", "10.0.2.2:5201"), ww),
            Err(PrefError::Addr(AddrError::PortZero { .. }))
        ));
        assert!(matches!(
            s.set(pair("0.0.0.0:1", "10.0.2.2:5201"), ww),
            Err(PrefError::Addr(AddrError::Unspecified { .. }))
        ));
        assert!(matches!(
            s.set(pair("10.0.1.1:1", "[fd00::2]:5201"), ww),
            Err(PrefError::Addr(AddrError::MixedFamilies { .. }))
        ));
        s.set(pair("10.0.1.1:1", "10.0.2.2:5201"), ww).unwrap();
        // an IPv4-mapped IPv6 socket is the IPv4 socket
        s.set(pair("[::ffff:10.0.1.1]:1", "[::ffff:10.0.2.2]:5201"), ww)
            .unwrap();
        assert_eq!(s.entries().len(), 1);
        s.set(pair("[fd00:1::1]:2", "[fd00:2::2]:5201"), ww)
            .unwrap();
        assert_eq!(
            s.set(pair("10.0.1.1:3", "10.0.2.2:5201"), ww),
            Err(PrefError::Full { max: 2 })
        );
        // replacing an existing one is fine when full
        s.set(pair("10.0.1.1:1", "10.0.2.2:5201"), w(1.0, 0.0, 0.0))
            .unwrap();
        assert_eq!(s.stats.refused.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn saved_entries_come_back_pending_and_bounded() {
        let s = PrefStore::default();
        let c0 = s.changes();
        s.set(pair("10.0.1.1:1", "10.0.2.2:5201"), w(0.1, 0.8, 0.1))
            .unwrap();
        s.set(pair("[fd00:1::1]:2", "[fd00:2::2]:5201"), w(0.8, 0.1, 0.1))
            .unwrap();
        assert!(s.changes() > c0);
        let saved = s.snapshot();
        assert_eq!(saved.len(), 2);
        let t = PrefStore::new(PrefConfig {
            max_entries: 1,
            ..Default::default()
        });
        assert_eq!(t.restore(&saved), 1);
        assert_eq!(t.entries().len(), 1);
        assert!(t.entries()[0].expires_in_s.is_some(), "pending");
        let u = PrefStore::default();
        assert_eq!(u.restore(&saved), 2);
        assert_eq!(u.restore(&saved), 0, "already there");
        let v6 = addr("0.0.0.0", 2, "0.0.0.0", 5201);
        assert_eq!(u.resolve(Some(&v6), None).w, w(0.8, 0.1, 0.1));
    }

    #[test]
    fn ipv6_sockets_are_keyed_by_ports() {
        let s = PrefStore::default();
        s.set(
            pair("[fd00:1::1]:40000", "[fd00:2::2]:5201"),
            w(0.1, 0.8, 0.1),
        )
        .unwrap();
        let v6 = addr("0.0.0.0", 40000, "0.0.0.0", 5201);
        assert_eq!(s.resolve(Some(&v6), None).source, PrefSource::Socket);
        // an IPv4 flow with the same ports is another socket
        let v4 = addr("10.0.1.1", 40000, "10.0.2.2", 5201);
        assert_eq!(s.resolve(Some(&v4), None).source, PrefSource::Default);
    }

    #[test]
    fn config_values_parse_or_say_why_not() {
        assert_eq!("80".parse::<PortRange>(), Ok(PortRange { lo: 80, hi: 80 }));
        assert!("0".parse::<PortRange>().is_err());
        assert!("90-80".parse::<PortRange>().unwrap_err().contains("empty"));
        assert!("x".parse::<PortRange>().is_err());
        let s: Subnet4 = "10.0.2.0/24".parse().unwrap();
        assert!(s.contains("10.0.2.77".parse().unwrap()));
        assert!(!s.contains("10.0.3.1".parse().unwrap()));
        let all: Subnet4 = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Subnet4>().is_err());
        assert!("fd00::/64"
            .parse::<Subnet4>()
            .unwrap_err()
            .contains("IPv4 addresses only"));
    }
}
