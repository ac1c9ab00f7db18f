//! The control plane: a unix control socket (per-socket preferences, flows, counters) and a
//! Prometheus text endpoint, served by a current-thread tokio runtime on a thread of its
//! own beside portus's run loop.
//!
//! The decision path never waits on this side: what the control plane changes (a flow's
//! preference) is written into the flow's [`crate::flows::prefs::PrefCell`] and read by the flow's
//! next decision with one atomic load; what it reads (records, counters) it copies under the
//! flow tables' lock, which every holder keeps for a map operation at most.
//!
//! **Protocol** (control socket, `SOCK_STREAM`): one JSON object per line in each direction,
//! one reply per request, in order. Requests (`op`):
//!
//! ```text
//! {"op":"set-pref","local":"10.0.1.1:40000","remote":"10.0.2.2:5201","w":[0.1,0.8,0.1]}
//!     -> {"ok":true,"state":"applied","sids":[3]}  or  {"ok":true,"state":"pending","expires_in_s":60.0}
//! {"op":"clear-pref","local":"...","remote":"..."}   -> {"ok":true,"removed":true}
//! {"op":"flows"}   -> {"ok":true,"flows":[{"sid":3,"alg":"mocc","w":[..],"w_source":"socket","src":..,..}]}
//!     (`w` is the preference of the flow's last decision; `w_next`/`w_next_source`, when
//!     present, the one its next decision takes)
//! {"op":"prefs"}   -> {"ok":true,"prefs":[{"local":..,"remote":..,"w":[..],"flows":1,"expires_in_s":null}]}
//! {"op":"stats"}   -> {"ok":true,"metrics":{"ccp_decisions_total":1234,...}}
//! {"op":"ping"}    -> {"ok":true,"version":"0.1.0"}
//! ```
//!
//! `w` is `[thr, lat, loss]` or `"thr,lat,loss"` (each in [0,1], summing to 1). Errors are
//! `{"ok":false,"code":CODE,"error":TEXT}` with `CODE` one of `bad_json`, `bad_request`,
//! `unknown_op`, `bad_address`, `bad_w`, `full`, `not_permitted`, `too_large`,
//! `too_many_connections`; a bad request never ends the connection, except a line over
//! [`MAX_LINE`] bytes (the rest cannot be framed).
//!
//! **Who may connect.** The socket file is `0660`, owned by the agent's user and, with
//! `[control] group`, that group. Each connection's peer credentials (`SO_PEERCRED`) must
//! show uid 0, the agent's own uid, the configured group (primary or supplementary), or
//! `CAP_NET_ADMIN` in the peer's effective set (read from `/proc/<pid>/status`); others get
//! one `not_permitted` reply and are closed. Bounds: [`MAX_LINE`] bytes a request,
//! `max_connections` at once, [`IDLE_TIMEOUT`] without a request closes a connection, and
//! so does a reply not read within [`WRITE_TIMEOUT`] (a client that sends requests and never
//! reads would otherwise hold its slot and its replies for good); a `flows` reply lists at
//! most [`MAX_FLOWS_LISTED`] flows (`"offset": N` pages on; `total` and `truncated` say how
//! many there are), so a client costs a bounded amount of memory.
//!
//! **Metrics** (`--metrics ADDR`): `GET /metrics` answers [`crate::control::metrics::render`]; a
//! loopback address only, unless the operator allows others explicitly
//! (`--metrics-allow-remote`): the counters name flows and models.

pub mod metrics;

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccp_algs::Preference;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tracing::{debug, info, warn};

use crate::flows::prefs::{PrefError, SocketPair};
use crate::flows::FlowTables;
use crate::ipc::guard::GuardStats;
use crate::policy::ModelStore;

/// Default path of the control socket.
pub const DEFAULT_SOCKET: &str = "/run/ccp/control.sock";
/// Longest request line (bytes, without the newline).
pub const MAX_LINE: usize = 4096;
/// A connection without a request for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on control connections at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;
/// A reply the client has not taken within this long closes the connection.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Most flows one `flows` reply lists.
pub const MAX_FLOWS_LISTED: usize = 2048;
/// Metrics connections at once. When they are all open, the oldest one that has not sent
/// its whole request head yet is closed for a new one (slow-loris).
pub const MAX_METRICS_CONNECTIONS: usize = 256;
/// Longest an HTTP request head may be.
const MAX_HTTP_HEAD: usize = 8192;
/// Longest the whole request head may take (not per byte: a byte now and then does not
/// keep a connection).
pub const HTTP_HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest the reply may take to go out.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// Linux's CAP_NET_ADMIN bit.
const CAP_NET_ADMIN: u32 = 12;

/// What the control plane reads and changes.
#[derive(Clone)]
pub struct Shared {
    pub tables: Arc<FlowTables>,
    pub guard: Arc<GuardStats>,
    pub models: Option<Arc<ModelStore>>,
    /// `/proc/net/ccp` (read at each scrape when it exists); `None`: not read.
    pub proc_ccp: Option<PathBuf>,
    /// The in-network statistics poller's table and counters, when one runs.
    pub netstats: Option<Arc<crate::sources::netstats::PolledStats>>,
}

impl Shared {
    /// The metrics text.
    pub fn metrics(&self) -> String {
        crate::control::metrics::render(&crate::control::metrics::Sources {
            tables: &self.tables,
            guard: &self.guard,
            models: self.models.as_deref(),
            proc_ccp: self.proc_ccp.as_deref(),
            netstats: self.netstats.as_deref(),
        })
    }
}

/// Who may use the control socket besides root and the agent's own user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AuthPolicy {
    /// The agent's effective uid.
    pub agent_uid: u32,
    /// Members of this group (primary or supplementary).
    pub group: Option<u32>,
}

impl AuthPolicy {
    /// This process's effective uid, and `group`.
    pub fn for_this_process(group: Option<u32>) -> Self {
        // SAFETY: geteuid has no preconditions and cannot fail
        let agent_uid = unsafe { libc::geteuid() };
        Self { agent_uid, group }
    }
}

/// A connecting process's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
}

/// Why a peer may connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Root,
    AgentUser,
    Group,
    NetAdmin,
}

/// `Groups:` and `CapEff:` of a `/proc/<pid>/status` text.
fn groups_and_caps(status: &str) -> (Vec<u32>, u64) {
    let mut groups = Vec::new();
    let mut caps = 0;
    for l in status.lines() {
        if let Some(g) = l.strip_prefix("Groups:") {
            groups = g
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
        } else if let Some(c) = l.strip_prefix("CapEff:") {
            caps = u64::from_str_radix(c.trim(), 16).unwrap_or(0);
        }
    }
    (groups, caps)
}

/// May `peer` use the control socket? `status` reads `/proc/<pid>/status` (only consulted
/// when uid and primary group do not decide).
pub fn authorize(
    peer: &Peer,
    policy: &AuthPolicy,
    status: impl FnOnce(i32) -> Option<String>,
) -> Result<Access, String> {
    if peer.uid == 0 {
        return Ok(Access::Root);
    }
    if peer.uid == policy.agent_uid {
        return Ok(Access::AgentUser);
    }
    if policy.group == Some(peer.gid) {
        return Ok(Access::Group);
    }
    let (groups, caps) = peer
        .pid
        .filter(|p| *p > 0)
        .and_then(status)
        .map(|s| groups_and_caps(&s))
        .unwrap_or_default();
    if policy.group.is_some_and(|g| groups.contains(&g)) {
        return Ok(Access::Group);
    }
    if caps & (1 << CAP_NET_ADMIN) != 0 {
        return Ok(Access::NetAdmin);
    }
    Err(format!(
        "permission denied: uid {} is not root, not the agent's user{}, and lacks CAP_NET_ADMIN",
        peer.uid,
        match policy.group {
            Some(g) => format!(", not in group {g}"),
            None => " (no [control] group is configured)".into(),
        }
    ))
}

fn err(code: &str, msg: impl std::fmt::Display) -> Value {
    json!({"ok": false, "code": code, "error": msg.to_string()})
}

fn parse_w(v: Option<&Value>) -> Result<Preference, Value> {
    let bad = |m: String| err("bad_w", m);
    match v {
        None => Err(bad(
            "missing \"w\": give [thr, lat, loss] or \"thr,lat,loss\"".into(),
        )),
        Some(Value::String(s)) => s.parse::<Preference>().map_err(|e| bad(e.to_string())),
        Some(Value::Array(a)) => {
            let mut v = Vec::with_capacity(3);
            for x in a {
                match x.as_f64() {
                    Some(f) => v.push(f),
                    None => return Err(bad(format!("w: {x} is not a number"))),
                }
            }
            Preference::from_slice(&v).map_err(|e| bad(e.to_string()))
        }
        Some(other) => Err(bad(format!(
            "w is {other}: give [thr, lat, loss] or \"thr,lat,loss\""
        ))),
    }
}

fn parse_addr(req: &Value, key: &str) -> Result<SocketAddr, Value> {
    match req.get(key) {
        Some(Value::String(s)) => s.parse::<SocketAddr>().map_err(|_| {
            err(
                "bad_address",
                format!("{key}: {s:?} is not an address with a port (\"10.0.1.1:40000\" or \"[fd00::1]:40000\")"),
            )
        }),
        Some(other) => Err(err("bad_address", format!("{key} is {other}: give a string like \"10.0.1.1:40000\""))),
        None => Err(err("bad_request", format!("missing {key:?} (the socket's {key} address, \"ip:port\")"))),
    }
}

fn parse_pair(req: &Value) -> Result<SocketPair, Value> {
    Ok(SocketPair {
        local: parse_addr(req, "local")?,
        remote: parse_addr(req, "remote")?,
    })
}

/// Keys each op accepts (besides `op`).
fn allowed_keys(op: &str) -> &'static [&'static str] {
    match op {
        "set-pref" => &["local", "remote", "w"],
        "clear-pref" => &["local", "remote"],
        "flows" => &["offset"],
        _ => &[],
    }
}

fn flows_json(tables: &FlowTables, offset: usize) -> Value {
    let (page, total) = tables.live_records_page(offset, MAX_FLOWS_LISTED);
    let listed = page.len();
    let flows: Vec<Value> = page
        .into_iter()
        .map(|(k, r)| {
            let (src, dst) = match r.addr {
                Some(a) if a.is_v6() => (
                    format!("[v6]:{}", a.src_port),
                    format!("[v6]:{}", a.dst_port),
                ),
                Some(a) => (
                    format!("{}:{}", a.src_ip, a.src_port),
                    format!("{}:{}", a.dst_ip, a.dst_port),
                ),
                None => (String::new(), String::new()),
            };
            let m = &r.metrics;
            let mut v = json!({"datapath": k.peer, "sid": r.sid, "requested": r.requested,
                "alg": r.alg, "w": r.w.as_array(), "w_source": r.w_source.to_string(),
                "src": src, "dst": dst, "reports": m.reports, "srtt_us": m.srtt_us,
                "min_rtt_us": m.min_rtt_us, "cwnd_bytes": m.cwnd_bytes, "rate_bps": m.rate_bps,
                "loss_events": m.loss_events});
            // a change the flow takes at its next decision
            if let Some(next) = tables.prefs.current(k) {
                if next.w != r.w || next.source != r.w_source {
                    if let Some(o) = v.as_object_mut() {
                        o.insert("w_next".into(), json!(next.w.as_array()));
                        o.insert("w_next_source".into(), json!(next.source.to_string()));
                    }
                }
            }
            v
        })
        .collect();
    json!({"ok": true, "flows": flows, "offset": offset, "total": total,
        "truncated": offset.saturating_add(listed) < total})
}

/// Metrics text → `{"name{labels}": value}` (for `stats`).
fn metrics_json(text: &str) -> Value {
    let mut m = serde_json::Map::new();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some((k, v)) = l.rsplit_once(' ') {
            if let Ok(v) = v.parse::<f64>() {
                m.insert(k.to_string(), json!(v));
            }
        }
    }
    json!({"ok": true, "metrics": m})
}

/// Answer one request line (the protocol of the module docs). Never panics on any input.
pub fn handle_line(shared: &Shared, line: &str) -> Value {
    let req: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return err("bad_json", format!("not a JSON object: {e}")),
    };
    let Some(obj) = req.as_object() else {
        return err("bad_json", "a request is one JSON object per line");
    };
    let Some(op) = obj.get("op").and_then(Value::as_str) else {
        return err(
            "bad_request",
            "missing \"op\" (set-pref, clear-pref, flows, prefs, stats, ping)",
        );
    };
    if let Some(k) = obj
        .keys()
        .find(|k| *k != "op" && !allowed_keys(op).contains(&k.as_str()))
    {
        return err("bad_request", format!("{op}: unknown field {k:?}"));
    }
    let prefs = &shared.tables.prefs;
    match op {
        "set-pref" => {
            let pair = match parse_pair(&req) {
                Ok(p) => p,
                Err(e) => return e,
            };
            let w = match parse_w(req.get("w")) {
                Ok(w) => w,
                Err(e) => return e,
            };
            match prefs.set(pair, w) {
                Ok(out) => {
                    info!(local = %pair.local, remote = %pair.remote, w = %w, outcome = ?out, "preference set");
                    let mut v = serde_json::to_value(&out).unwrap_or(Value::Null);
                    if let Some(o) = v.as_object_mut() {
                        o.insert("ok".into(), json!(true));
                        o.insert("w".into(), json!(w.as_array()));
                    }
                    v
                }
                Err(e @ PrefError::Addr(_)) => err("bad_address", e),
                Err(e @ PrefError::Full { .. }) => err("full", e),
            }
        }
        "clear-pref" => {
            let pair = match parse_pair(&req) {
                Ok(p) => p,
                Err(e) => return e,
            };
            match prefs.clear(pair) {
                Ok(removed) => json!({"ok": true, "removed": removed}),
                Err(e) => err("bad_address", e),
            }
        }
        "flows" => match req
            .get("offset")
            .map(|v| v.as_u64().and_then(|n| usize::try_from(n).ok()))
        {
            None => flows_json(&shared.tables, 0),
            Some(Some(n)) => flows_json(&shared.tables, n),
            Some(None) => err(
                "bad_request",
                "flows: \"offset\" is a count of flows (0, 1, ...)",
            ),
        },
        "prefs" => json!({"ok": true, "prefs": prefs.entries(),
            "pending_ttl_s": prefs.pending_ttl().as_secs_f64()}),
        "stats" => metrics_json(&shared.metrics()),
        "ping" => json!({"ok": true, "version": env!("CARGO_PKG_VERSION")}),
        other => err(
            "unknown_op",
            format!("unknown op {other:?}: use set-pref, clear-pref, flows, prefs, stats or ping"),
        ),
    }
}

/// Why the control plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control socket {path} is in use by another live process (another ccp-agent?): stop it, or give another --control")]
    InUse { path: PathBuf },
    #[error("control socket {path} exists and is not a socket: refusing to replace it")]
    NotASocket { path: PathBuf },
    #[error("--metrics {addr}: not a loopback address; the metrics name flows and models, so serving them beyond this host needs --metrics-allow-remote")]
    RemoteMetrics { addr: SocketAddr },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
}

fn io_err(
    what: &'static str,
    path: impl std::fmt::Display,
) -> impl FnOnce(io::Error) -> ControlError {
    let path = path.to_string();
    move |source| ControlError::Io { what, path, source }
}

/// Bind the control socket at `path` (see the module docs): the directory is created
/// (0755) if missing, a stale socket nobody holds is replaced, the file gets mode 0660 and
/// `group`.
pub fn bind_control(path: &Path, group: Option<u32>) -> Result<UnixListener, ControlError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(io_err("cannot create", dir.display()))?;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(ControlError::InUse { path: path.into() });
            }
            std::fs::remove_file(path)
                .map_err(io_err("cannot remove the stale", path.display()))?;
        }
        Ok(_) => return Err(ControlError::NotASocket { path: path.into() }),
        Err(_) => {}
    }
    let l = UnixListener::bind(path).map_err(io_err("cannot bind", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(io_err("cannot set the mode of", path.display()))?;
    if let Some(g) = group {
        std::os::unix::fs::chown(path, None, Some(g))
            .map_err(io_err("cannot give the configured group", path.display()))?;
    }
    Ok(l)
}

/// Bind the metrics endpoint; a non-loopback address only with `allow_remote`.
pub fn bind_metrics(addr: SocketAddr, allow_remote: bool) -> Result<TcpListener, ControlError> {
    if !addr.ip().is_loopback() && !allow_remote {
        return Err(ControlError::RemoteMetrics { addr });
    }
    TcpListener::bind(addr).map_err(io_err("cannot listen on", addr))
}

/// Largest saved-preferences file read at start.
const MAX_STATE_BYTES: u64 = 4 << 20;

/// The file per-socket preferences are saved in, beside the control socket
/// (`/run/ccp/control.sock.prefs.json`): a restarted agent takes them back.
pub fn state_file(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(".prefs.json");
    PathBuf::from(s)
}

/// Take back the per-socket preferences an earlier agent saved at `path` (a missing file
/// is none; a bad one is logged and ignored). Returns how many.
pub fn load_state(path: &Path, prefs: &crate::flows::prefs::PrefStore) -> usize {
    let text = match crate::sources::files::read_regular_to_string(path, MAX_STATE_BYTES) {
        Ok(t) => t,
        Err(crate::sources::files::ReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
            return 0
        }
        Err(e) => {
            warn!(path = %path.display(), error = %e, "saved preferences not read");
            return 0;
        }
    };
    let v: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            warn!(path = %path.display(), error = %e, "saved preferences are not JSON: ignored");
            return 0;
        }
    };
    let saved: Vec<(SocketPair, Preference)> = v["prefs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let pair = parse_pair(e).ok()?;
            let w = parse_w(e.get("w")).ok()?;
            Some((pair, w))
        })
        .collect();
    let n = prefs.restore(&saved);
    info!(path = %path.display(), restored = n, "saved per-socket preferences taken back");
    n
}

/// Save the per-socket preferences to `path` (mode 0600, written whole then renamed).
pub fn save_state(path: &Path, prefs: &crate::flows::prefs::PrefStore) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let entries: Vec<Value> = prefs
        .snapshot()
        .into_iter()
        .map(|(p, w)| json!({"local": p.local.to_string(), "remote": p.remote.to_string(), "w": w.as_array()}))
        .collect();
    let text = serde_json::to_string(&json!({"version": 1, "prefs": entries}))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// What to serve.
pub struct ControlOptions {
    /// A bound control socket ([`bind_control`]) and its path (removed at stop).
    pub control: Option<(UnixListener, PathBuf)>,
    pub auth: AuthPolicy,
    pub max_connections: usize,
    /// A bound metrics listener ([`bind_metrics`]).
    pub metrics: Option<TcpListener>,
    /// Where the per-socket preferences are saved when they change ([`save_state`]).
    pub state_file: Option<PathBuf>,
}

/// The running control plane; [`ControlPlane::stop`] (or drop) ends it.
pub struct ControlPlane {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    socket: Option<PathBuf>,
}

impl ControlPlane {
    /// Serve `opts` on a new thread.
    pub fn spawn(shared: Shared, opts: ControlOptions) -> io::Result<Self> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let socket = opts.control.as_ref().map(|(_, p)| p.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("ccp-control".into())
            .spawn(move || rt.block_on(serve(shared, opts, rx)))?;
        Ok(Self {
            stop: Some(tx),
            thread: Some(thread),
            socket,
        })
    }

    /// Stop serving and wait for the thread; removes the control socket file.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(p) = self.socket.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Decrements a connection count when a connection ends.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        let n = count.fetch_add(1, Ordering::AcqRel);
        if n >= max {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self(count.clone()))
    }

    /// A slot over the cap, for a connection whose predecessor is closing.
    fn force(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn serve(shared: Shared, opts: ControlOptions, mut stop: tokio::sync::oneshot::Receiver<()>) {
    let control = opts.control.and_then(|(l, p)| {
        l.set_nonblocking(true).ok()?;
        match tokio::net::UnixListener::from_std(l) {
            Ok(l) => Some((l, p)),
            Err(e) => {
                warn!(error = %e, "control socket: cannot serve");
                None
            }
        }
    });
    let metrics = opts.metrics.and_then(|l| {
        l.set_nonblocking(true).ok()?;
        match tokio::net::TcpListener::from_std(l) {
            Ok(l) => Some(l),
            Err(e) => {
                warn!(error = %e, "metrics: cannot serve");
                None
            }
        }
    });
    let conns = Arc::new(AtomicUsize::new(0));
    let mconns = Arc::new(AtomicUsize::new(0));
    let waiting = WaitingList::default();
    let mut sweep = tokio::time::interval(Duration::from_millis(500));
    let mut saved = shared.tables.prefs.changes();
    let save = |saved: &mut u64| {
        let now = shared.tables.prefs.changes();
        if let (Some(p), true) = (&opts.state_file, now != *saved) {
            match save_state(p, &shared.tables.prefs) {
                Ok(()) => *saved = now,
                Err(e) => {
                    warn!(path = %p.display(), error = %e, "cannot save the per-socket preferences")
                }
            }
        }
    };
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = sweep.tick() => {
                let gone = shared.tables.prefs.sweep();
                if gone > 0 {
                    debug!(gone, "expired per-socket preferences");
                }
                save(&mut saved);
            }
            r = accept_unix(control.as_ref().map(|(l, _)| l)) => {
                match r {
                    Ok((s, _)) => {
                        let slot = Slot::take(&conns, opts.max_connections);
                        tokio::spawn(control_conn(shared.clone(), opts.auth, s, slot, opts.max_connections));
                    }
                    Err(e) => {
                        warn!(error = %e, "control socket: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            r = accept_tcp(metrics.as_ref()) => {
                match r {
                    Ok((s, _)) => {
                        let slot = Slot::take(&mconns, MAX_METRICS_CONNECTIONS).or_else(|| {
                            // all taken: the oldest connection still without a whole
                            // request yields its slot (it frees it as it ends)
                            let oldest = waiting
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .q
                                .pop_front();
                            oldest.map(|(_, n)| {
                                n.notify_one();
                                Slot::force(&mconns)
                            })
                        });
                        if let Some(slot) = slot {
                            tokio::spawn(metrics_conn(shared.clone(), s, slot, waiting.clone()));
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "metrics: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    }
    save(&mut saved);
}

/// The next connection, or never without a listener.
async fn accept_unix(
    l: Option<&tokio::net::UnixListener>,
) -> io::Result<(tokio::net::UnixStream, tokio::net::unix::SocketAddr)> {
    match l {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

async fn accept_tcp(
    l: Option<&tokio::net::TcpListener>,
) -> io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match l {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// Write one reply line within [`WRITE_TIMEOUT`] (a client that does not read loses its
/// connection, not the agent its slot).
async fn write_line(w: &mut (impl AsyncWriteExt + Unpin), v: &Value) -> io::Result<()> {
    match tokio::time::timeout(WRITE_TIMEOUT, write_line_now(w, v)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client did not read its reply",
        )),
    }
}

async fn write_line_now(w: &mut (impl AsyncWriteExt + Unpin), v: &Value) -> io::Result<()> {
    // one reply, one line: a flow's name with U+2028 must not split it for the client
    let mut s = crate::flows::flowlog::escape_line_separators(
        serde_json::to_string(v).unwrap_or_else(|_| "{\"ok\":false}".into()),
    );
    s.push('\n');
    w.write_all(s.as_bytes()).await
}

async fn control_conn(
    shared: Shared,
    auth: AuthPolicy,
    s: tokio::net::UnixStream,
    slot: Option<Slot>,
    max: usize,
) {
    let (r, mut w) = s.into_split();
    let Some(_slot) = slot else {
        let _ = write_line(
            &mut w,
            &err(
                "too_many_connections",
                format!("{max} control connections are open already: try again later"),
            ),
        )
        .await;
        return;
    };
    let peer = match r.as_ref().peer_cred() {
        Ok(c) => Peer {
            uid: c.uid(),
            gid: c.gid(),
            pid: c.pid(),
        },
        Err(e) => {
            let _ = write_line(
                &mut w,
                &err(
                    "not_permitted",
                    format!("cannot read the peer's credentials: {e}"),
                ),
            )
            .await;
            return;
        }
    };
    let access = authorize(&peer, &auth, |pid| {
        std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
    });
    match access {
        Ok(a) => debug!(uid = peer.uid, pid = ?peer.pid, access = ?a, "control connection"),
        Err(e) => {
            warn!(uid = peer.uid, pid = ?peer.pid, "control connection refused");
            let _ = write_line(&mut w, &err("not_permitted", e)).await;
            return;
        }
    }
    let mut reader = tokio::io::BufReader::new(r);
    let mut buf = Vec::with_capacity(256);
    loop {
        buf.clear();
        let read = tokio::time::timeout(
            IDLE_TIMEOUT,
            (&mut reader)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut buf),
        )
        .await;
        let n = match read {
            Ok(Ok(n)) => n,
            Ok(Err(_)) | Err(_) => return,
        };
        if n == 0 {
            return;
        }
        let ends = buf.last() == Some(&b'\n');
        if !ends && buf.len() > MAX_LINE {
            let _ = write_line(
                &mut w,
                &err(
                    "too_large",
                    format!("a request line is at most {MAX_LINE} bytes"),
                ),
            )
            .await;
            return;
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let reply = handle_line(&shared, line);
        if write_line(&mut w, &reply).await.is_err() {
            return;
        }
        if !ends {
            return; // EOF without a newline: that was the last request
        }
    }
}

/// Metrics connections still reading their request head, oldest first: when every slot is
/// taken, the oldest of them is closed for a new connection (a scraper sends its head at
/// once; a slow-loris never finishes it).
#[derive(Default)]
struct Waiting {
    next: u64,
    q: VecDeque<(u64, Arc<tokio::sync::Notify>)>,
}

type WaitingList = Arc<std::sync::Mutex<Waiting>>;

/// Does `head` end a request head, given that `head[..before]` did not?
fn head_complete(head: &[u8], before: usize) -> bool {
    // only the new bytes (and 3 before them) can complete it: no rescans
    let from = before.saturating_sub(3);
    let tail = &head[from..];
    tail.windows(4).any(|w| w == b"\r\n\r\n") || tail.windows(2).any(|w| w == b"\n\n")
}

async fn metrics_conn(
    shared: Shared,
    mut s: tokio::net::TcpStream,
    _slot: Slot,
    waiting: WaitingList,
) {
    let (id, preempt) = {
        let mut w = waiting.lock().unwrap_or_else(|e| e.into_inner());
        w.next += 1;
        let n = Arc::new(tokio::sync::Notify::new());
        let id = w.next;
        w.q.push_back((id, n.clone()));
        (id, n)
    };
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read = tokio::select! {
        r = tokio::time::timeout(HTTP_HEAD_TIMEOUT, async {
            loop {
                let n = s.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<bool, io::Error>(false);
                }
                let before = head.len();
                head.extend_from_slice(&buf[..n]);
                if head_complete(&head, before) {
                    return Ok(true);
                }
                if head.len() > MAX_HTTP_HEAD {
                    return Ok(false);
                }
            }
        }) => matches!(r, Ok(Ok(true))),
        // a newer connection needed the slot
        _ = preempt.notified() => false,
    };
    waiting
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .q
        .retain(|(i, _)| *i != id);
    if !read {
        return;
    }
    let first = head.split(|c| *c == b'\n').next().unwrap_or_default();
    let first = String::from_utf8_lossy(first);
    let mut parts = first.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            shared.metrics(),
        ),
        ("GET", "/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "ccp-agent: metrics at /metrics\n".to_string(),
        ),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: try /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_string(),
        ),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(HTTP_TIMEOUT, s.write_all(resp.as_bytes())).await;
    let _ = s.shutdown().await;
}

/// Why a control request could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to the agent's control socket {path}: {source}{hint}")]
    Connect {
        path: PathBuf,
        source: io::Error,
        hint: &'static str,
    },
    #[error("control socket {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("control socket {path}: the agent closed the connection without a reply")]
    NoReply { path: PathBuf },
    #[error("control socket {path}: the reply is not JSON: {detail}")]
    BadReply { path: PathBuf, detail: String },
}

/// Send one request to the control socket at `path` and read its reply (a blocking client:
/// `ccp-agent ctl`, tests).
pub fn request(path: &Path, req: &Value, timeout: Duration) -> Result<Value, ClientError> {
    let s = UnixStream::connect(path).map_err(|source| {
        let hint = match source.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
                " (is ccp-agent running with this --control path?)"
            }
            io::ErrorKind::PermissionDenied => {
                " (the control socket is for root, CAP_NET_ADMIN or the agent's [control] group)"
            }
            _ => "",
        };
        ClientError::Connect {
            path: path.into(),
            source,
            hint,
        }
    })?;
    let io = |source| ClientError::Io {
        path: path.into(),
        source,
    };
    s.set_read_timeout(Some(timeout)).map_err(io)?;
    s.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut line = serde_json::to_string(req).unwrap_or_default();
    line.push('\n');
    // The agent refuses a peer it does not permit (and a connection over its limit) at once:
    // it writes one error line and closes, so the request's write may fail with EPIPE or
    // ECONNRESET. The reply already sent is the answer; read it before calling the write's
    // error the failure.
    let wrote = (&s).write_all(line.as_bytes());
    let mut reply = String::new();
    let read = BufReader::new(&s).take(64 << 20).read_line(&mut reply);
    match (wrote, read) {
        (Err(e), _) if reply.trim().is_empty() => return Err(io(e)),
        (_, Err(e)) if reply.trim().is_empty() => return Err(io(e)),
        _ => {}
    }
    if reply.trim().is_empty() {
        return Err(ClientError::NoReply { path: path.into() });
    }
    serde_json::from_str(&reply).map_err(|e| ClientError::BadReply {
        path: path.into(),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::prefs::{FlowAddr, PrefSource};
    use crate::flows::FlowRecord;

    fn shared() -> Shared {
        Shared {
            tables: Arc::new(FlowTables::default()),
            guard: Arc::new(GuardStats::default()),
            models: None,
            proc_ccp: None,
            netstats: None,
        }
    }

    fn code(v: &Value) -> &str {
        v["code"].as_str().unwrap_or("")
    }

    #[test]
    fn a_flows_reply_is_bounded_and_pages_on() {
        // issue 42 item 5: a `flows` reply for 20 k flows cost a client 65 MB
        let s = shared();
        let n = MAX_FLOWS_LISTED + 500;
        for sid in 0..n as u32 {
            let r = FlowRecord {
                sid,
                requested: "ccp_reno".into(),
                alg: "reno",
                w: Preference::default(),
                w_source: PrefSource::Default,
                addr: None,
                choice: None,
                class: None,
                switches: Vec::new(),
                closed: false,
                metrics: Default::default(),
            };
            s.tables
                .open(crate::flows::key::FlowKey { peer: 1, sid }, 0, r);
        }
        let v = handle_line(&s, r#"{"op":"flows"}"#);
        assert_eq!(v["flows"].as_array().map(Vec::len), Some(MAX_FLOWS_LISTED));
        assert_eq!(
            (v["total"].as_u64(), v["truncated"].as_bool()),
            (Some(n as u64), Some(true))
        );
        let v = handle_line(
            &s,
            &format!(r#"{{"op":"flows","offset":{MAX_FLOWS_LISTED}}}"#),
        );
        assert_eq!(v["flows"].as_array().map(Vec::len), Some(500));
        assert_eq!(v["flows"][0]["sid"].as_u64(), Some(MAX_FLOWS_LISTED as u64));
        assert_eq!(v["truncated"].as_bool(), Some(false));
        for bad in [
            r#"{"op":"flows","offset":-1}"#,
            r#"{"op":"flows","offset":"x"}"#,
        ] {
            assert_eq!(code(&handle_line(&s, bad)), "bad_request", "{bad}");
        }
    }

    #[test]
    fn every_bad_request_gets_a_clear_error_reply() {
        let s = shared();
        for (line, want) in [
            ("", "bad_json"),
            ("{", "bad_json"),
            ("[1,2]", "bad_json"),
            ("\"x\"", "bad_json"),
            ("{}", "bad_request"),
            ("{\"op\":7}", "bad_request"),
            ("{\"op\":\"dance\"}", "unknown_op"),
            ("{\"op\":\"flows\",\"x\":1}", "bad_request"),
            ("{\"op\":\"set-pref\",\"remote\":\"10.0.0.2:80\",\"w\":[1,0,0]}", "bad_request"),
            ("{\"op\":\"set-pref\",\"local\":\"10.0.0.1\",\"remote\":\"10.0.0.2:80\",\"w\":[1,0,0]}", "bad_address"),
            ("{\"op\":\"set-pref\",\"local\":5,\"remote\":\"10.0.0.2:80\",\"w\":[1,0,0]}", "bad_address"),
            ("{\"op\":\"set-pref\",\"local\":\"10.0.0.1:0\",\"remote\":\"10.0.0.2:80\",\"w\":[1,0,0]}", "bad_address"),
            ("{\"op\":\"set-pref\",\"local\":\"10.0.0.1:1\",\"remote\":\"[::2]:80\",\"w\":[1,0,0]}", "bad_address"),
            ("{\"op\":\"set-pref\",\"local\":\"10.0.0.1:1\",\"remote\":\"10.0.0.2:80\"}", "bad_w"),
            ("{\"op\":\"set-pref\",\"local\":\"10.0.0.1:1\",\"remote\":\"10.0.0.2:80\",\"w\":[0.5,0.5,0.5]}", "bad_w"),
            ("{\"op\":\"set-pref\",\"local\":\"10.0.0.1:1\",\"remote\":\"10.0.0.2:80\",\"w\":[0.5,0.5]}", "bad_w"),
            ("{\"op\":\"set-pref\",\"local\":\"10.0.0.1:1\",\"remote\":\"10.0.0.2:80\",\"w\":[\"a\",0,1]}", "bad_w"),
            ("{\"op\":\"set-pref\",\"local\":\"10.0.0.1:1\",\"remote\":\"10.0.0.2:80\",\"w\":\"nan,0,1\"}", "bad_w"),
            ("{\"op\":\"set-pref\",\"local\":\"10.0.0.1:1\",\"remote\":\"10.0.0.2:80\",\"w\":{}}", "bad_w"),
            ("{\"op\":\"set-pref\",\"local\":\"10.0.0.1:1\",\"remote\":\"10.0.0.2:80\",\"w\":[1e400,0,0]}", "bad_json"),
        ] {
            let v = handle_line(&s, line);
            assert_eq!(v["ok"], json!(false), "{line}: {v}");
            assert_eq!(code(&v), want, "{line}: {v}");
            assert!(!v["error"].as_str().unwrap_or("").is_empty(), "{line}: {v}");
        }
        assert_eq!(s.tables.prefs.entries().len(), 0);
    }

    #[test]
    fn set_list_clear_round_trip() {
        let s = shared();
        let v = handle_line(
            &s,
            r#"{"op":"set-pref","local":"10.0.1.1:40000","remote":"10.0.2.2:5201","w":"0.1,0.8,0.1"}"#,
        );
        assert_eq!(v["ok"], json!(true), "{v}");
        assert_eq!(v["state"], json!("pending"));
        let a = FlowAddr {
            src_ip: "10.0.1.1".parse().unwrap(),
            src_port: 40000,
            dst_ip: "10.0.2.2".parse().unwrap(),
            dst_port: 5201,
        };
        assert_eq!(
            s.tables.prefs.resolve(Some(&a), None).source,
            PrefSource::Socket
        );
        let v = handle_line(&s, r#"{"op":"prefs"}"#);
        assert_eq!(v["prefs"][0]["w"], json!([0.1, 0.8, 0.1]), "{v}");
        let v = handle_line(
            &s,
            r#"{"op":"clear-pref","local":"10.0.1.1:40000","remote":"10.0.2.2:5201"}"#,
        );
        assert_eq!(v, json!({"ok": true, "removed": true}));
        assert_eq!(
            handle_line(&s, r#"{"op":"flows"}"#),
            json!({"ok": true, "flows": [], "offset": 0, "total": 0, "truncated": false})
        );
        let v = handle_line(&s, r#"{"op":"stats"}"#);
        assert_eq!(
            v["metrics"]["ccp_pref_requests_total{outcome=\"set\"}"],
            json!(1.0),
            "{v}"
        );
        assert_eq!(handle_line(&s, r#"{"op":"ping"}"#)["ok"], json!(true));
    }

    #[test]
    fn only_root_the_agents_user_the_group_or_net_admin_may_connect() {
        let pol = AuthPolicy {
            agent_uid: 1000,
            group: Some(500),
        };
        let peer = |uid, gid| Peer {
            uid,
            gid,
            pid: Some(42),
        };
        let none = |_| None;
        assert_eq!(authorize(&peer(0, 0), &pol, none), Ok(Access::Root));
        assert_eq!(authorize(&peer(1000, 1), &pol, none), Ok(Access::AgentUser));
        assert_eq!(authorize(&peer(7, 500), &pol, none), Ok(Access::Group));
        let st = |g: &str, c: &str| format!("Name:\tx\nGroups:\t{g}\nCapEff:\t{c}\n");
        assert_eq!(
            authorize(&peer(7, 7), &pol, |_| Some(st(
                "4 500 600",
                "0000000000000000"
            ))),
            Ok(Access::Group)
        );
        assert_eq!(
            authorize(&peer(7, 7), &pol, |_| Some(st("", "0000000000001000"))),
            Ok(Access::NetAdmin)
        );
        let e = authorize(&peer(7, 7), &pol, |_| {
            Some(st("4", "00000000a80425fb" /* no bit 12 */))
        })
        .unwrap_err();
        assert!(
            e.contains("uid 7") && e.contains("group 500") && e.contains("CAP_NET_ADMIN"),
            "{e}"
        );
        let e = authorize(&peer(7, 7), &AuthPolicy::default(), none).unwrap_err();
        assert!(e.contains("no [control] group"), "{e}");
        // no pid (or 0): only uid and primary group count
        let p = Peer {
            uid: 7,
            gid: 7,
            pid: None,
        };
        assert!(authorize(&p, &pol, |_| Some(st("500", "ffffffffffffffff"))).is_err());
    }

    #[test]
    fn metrics_refuse_non_loopback_unless_allowed() {
        let e = bind_metrics("0.0.0.0:0".parse().unwrap(), false).unwrap_err();
        assert!(e.to_string().contains("--metrics-allow-remote"), "{e}");
        assert!(bind_metrics("127.0.0.1:0".parse().unwrap(), false).is_ok());
    }

    /// The agent refuses a peer with one reply line and closes without reading the request;
    /// the client's write then fails (EPIPE). The client reports the agent's reply, not the
    /// broken pipe. A request larger than the socket's buffer makes the order certain: the
    /// write blocks until the agent has replied and closed.
    #[test]
    fn a_refusal_sent_before_the_request_was_read_is_the_answer() {
        let dir = std::env::temp_dir().join(format!("ccp-ctl-refuse-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let refusal = err("not_permitted", "uid 65534 is not permitted");
            c.write_all(format!("{refusal}\n").as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            drop(c);
        });
        let big = json!({"op": "ping", "pad": "x".repeat(4 << 20)});
        let r = request(&path, &big, Duration::from_secs(10)).expect("the refusal as the reply");
        server.join().unwrap();
        assert_eq!(code(&r), "not_permitted", "{r}");
        // with nothing sent back, the write's error is the failure
        let listener = std::os::unix::net::UnixListener::bind(dir.join("b.sock")).unwrap();
        let server = std::thread::spawn(move || drop(listener.accept().unwrap()));
        let e = request(&dir.join("b.sock"), &big, Duration::from_secs(10)).unwrap_err();
        server.join().unwrap();
        assert!(
            matches!(e, ClientError::Io { .. } | ClientError::NoReply { .. }),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
