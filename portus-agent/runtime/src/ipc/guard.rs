//! The IPC guard: every datapath message is validated before portus parses it.
//!
//! portus 0.9 ends its run loop on any message it cannot parse, panics on a CREATE shorter
//! than 32 bytes or a congAlg without a terminating NUL, hits `unreachable!()` on an INSTALL
//! and `unimplemented!()` on an UPDATE_FIELDS arriving at the agent, and its channel backend
//! panics on a message longer than its 1024-byte buffer (docs/upstream-defects.md, defect 12). So the
//! agent never hands portus a raw socket: [`Guarded`] wraps any portus [`Ipc`], reads into
//! its own 64 KiB buffer, and passes on only well-formed messages of the three types a
//! datapath may send (CREATE, MEASURE, READY). Everything else is dropped, counted by reason
//! in [`GuardStats`], and logged at most a few times per second.
//!
//! CREATE fields are checked before any controller sees them: `mss` must lie in
//! `[1, MAX_MSS]` and ports in `[0, 65535]` (else the CREATE is refused, `bad_create`); the
//! name must be NUL-terminated UTF-8 without control characters (else `bad_name`); the
//! initial window is clamped to `[1 MSS, MAX_INIT_CWND_BYTES]` (a value below one MSS is a
//! packet count, as before) and the clamp counted (`clamped_create`).
//!
//! The guard also reads the flow's request out of CREATE: its addresses and ports, an
//! optional `;w=a,b,c` suffix (the simulator's way to carry a per-flow preference), and from
//! them the flow's preference, resolved here once ([`crate::flows::prefs`]: per-socket entry, rule,
//! suffix, `--w`); then the congAlg name is rewritten to the registry name portus dispatches
//! on (`ccp_cubic` → `cubic`; `ccp`, unknown or unavailable → empty, i.e. the default
//! algorithm). The request is recorded in the [`FlowTables`] for the algorithm adapter to
//! pick up.
//!
//! Bounds. Live flows are tracked per datapath: at most [`MAX_FLOWS_PER_DATAPATH`] (libccp's
//! table) and [`MAX_FLOWS`] in all; a CREATE beyond is refused (`too_many_flows`), and a
//! report for a flow the datapath never created is ignored (`unknown_flow`). At most
//! [`MAX_DATAPATHS`] datapaths are tracked (to admit a new one, a dropped one without flows
//! is forgotten first, else the least recently heard one without flows for
//! [`FLOW_GRACE`]; `too_many_datapaths` otherwise).
//!
//! Liveness (issue 42): on unix sockets the guard asks every [`LIVENESS_EVERY`] whether
//! each datapath's socket is still there ([`crate::ipc::unix::peer_gone`]: a connect,
//! nothing sent, ~6 µs). A pass asks [`LIVENESS_BATCH`] datapaths per received datagram
//! (all the rest while none waits), so that no report waits behind 64 connects (0.4 ms).
//! When a new datapath or flow meets a cap, it asks at once until it finds one gone; such
//! an urgent search runs at most every [`LIVENESS_MIN_GAP`], a gap that doubles (up to
//! [`LIVENESS_EVERY`]) each time a search finds none. A vanished datapath is forgotten
//! (`vanished_datapaths`): its slot is free at once, its flows leave the caps at once and
//! portus closes them, and answers portus still sends it are discarded without a syscall
//! (`send_dropped`) until something at that path speaks again. Before, a datapath that
//! exited was noticed
//! only when the agent next sent to it, which a flow without reports never makes it do: 64
//! such datapaths locked every later one out.
//!
//! Sends never end or freeze the agent: a failed send is counted (`send_failed`), logged at
//! most every half second and reported to portus as done. On unix sockets (many datapaths,
//! each a path) a datapath whose send failed (gone, or not reading within the socket's send
//! timeout, or not reading its answers for that long: [`crate::ipc::unix`]) is dropped: its
//! flows are closed, answers to it are discarded without a syscall (`send_dropped`), and its
//! messages are ignored (`from_dead_peer`) for [`DEAD_BACKOFF`], doubling up to
//! [`DEAD_BACKOFF_MAX`]; its next message after that brings it back (programs reinstalled).
//!
//! A dropped or vanished datapath's flows are closed [`CLOSES_PER_TURN`] at a time (the
//! guard hands portus closes from it), after any report that waits, taking turns with other
//! datagrams, all at once while none waits: a READY from it made portus drop them all in
//! one go, a stall of milliseconds per hundred flows for every other datapath (seen by
//! `ops/hostile_soak.sh`).

use std::any::Any;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccp_algs::registry::strip_prefix;
use ccp_algs::Preference;
use portus::ipc::Ipc;
use tracing::warn;

use crate::flows::key::FlowKey;
use crate::flows::portfolio::AutoSelect;
use crate::flows::prefs::{FlowAddr, PrefStore};
use crate::flows::{FlowRequest, FlowTables, MAX_FLOWS, MAX_FLOWS_PER_DATAPATH};
use crate::log_limit::LogLimit;

/// Message types (portus `serialize`): datapath → agent.
pub const CREATE: u16 = 0;
pub const MEASURE: u16 = 1;
pub const READY: u16 = 5;
/// Agent → datapath (never valid inbound).
pub const INSTALL: u16 = 2;
pub const UPDATE_FIELDS: u16 = 3;
pub const CHANGE_PROG: u16 = 4;

pub const HDR_LEN: usize = 8;
/// CREATE: header, six u32 (init_cwnd, mss, src_ip, src_port, dst_ip, dst_port), 64-byte name.
pub const CREATE_LEN: usize = HDR_LEN + 6 * 4 + 64;
/// MEASURE: header, program uid, field count, then u64 fields.
pub const MEASURE_MIN_LEN: usize = HDR_LEN + 8;
pub const READY_LEN: usize = HDR_LEN + 4;
/// libccp reports at most this many fields.
pub const MAX_FIELDS: usize = 16;
/// portus's receive buffer; a longer datagram would be truncated or panic its chan backend.
pub const PORTUS_BUF: usize = 1024;

/// Largest MSS a CREATE may carry (a TCP MSS is a 16-bit value); 0 is refused too.
pub const MAX_MSS: u32 = 65_535;
/// Largest port a CREATE may carry.
pub const MAX_PORT: u32 = 65_535;
/// A CREATE's initial window is clamped to at most this many bytes (1 GiB).
pub const MAX_INIT_CWND_BYTES: u32 = 1 << 30;
/// Datapaths tracked at once.
pub const MAX_DATAPATHS: usize = 64;
/// How long a dropped datapath's messages are ignored after its first failed send.
pub const DEAD_BACKOFF: Duration = Duration::from_secs(1);
/// The longest such pause (it doubles with each failure).
pub const DEAD_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A datapath keeps its slot this long after its last flow closed (see `admit`).
pub const FLOW_GRACE: Duration = Duration::from_secs(10);
/// How often the guard asks whether its datapaths are still there (unix sockets).
pub const LIVENESS_EVERY: Duration = Duration::from_millis(500);
/// The shortest gap between two urgent searches for a vanished datapath (a cap was met).
pub const LIVENESS_MIN_GAP: Duration = Duration::from_millis(50);
/// Datapaths asked whether they are there per received datagram, during a pass.
pub const LIVENESS_BATCH: usize = 8;
/// A close (a MEASURE without fields) is this long.
const CLOSE_LEN: usize = MEASURE_MIN_LEN;
/// Closes of a dropped or vanished datapath's flows handed to portus at a time.
pub const CLOSES_PER_TURN: usize = 16;
/// Most vanished datapaths remembered (to discard portus's answers to them).
const MAX_GONE: usize = 4 * MAX_DATAPATHS;

/// Byte offsets in a CREATE.
const CREATE_INIT_CWND: usize = HDR_LEN;
const CREATE_MSS: usize = HDR_LEN + 4;
const CREATE_SRC_IP: usize = HDR_LEN + 8;
const CREATE_SRC_PORT: usize = HDR_LEN + 12;
const CREATE_DST_IP: usize = HDR_LEN + 16;
const CREATE_DST_PORT: usize = HDR_LEN + 20;
const CREATE_NAME: usize = HDR_LEN + 24;

/// Why a message was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Shorter than a header, or shorter than its header's length field.
    Truncated,
    /// Longer than portus's 1024-byte buffer.
    Oversized,
    /// Header length field does not match the type's layout.
    BadLength,
    /// A type a datapath never sends.
    BadType,
    /// CREATE with a name that is not NUL-terminated UTF-8, or holds control characters.
    BadName,
    /// MEASURE with more fields than libccp allows, or a count that disagrees with the length.
    BadFields,
    /// CREATE with an MSS outside `[1, MAX_MSS]` or a port above 65535.
    BadCreate,
    /// CREATE beyond the live-flow caps.
    TooManyFlows,
    /// A message from a datapath beyond [`MAX_DATAPATHS`].
    TooManyDatapaths,
}

/// Counters of what the guard saw. Shared with the rest of the agent (metrics, tests).
#[derive(Debug, Default)]
pub struct GuardStats {
    /// Datagrams read from datapaths and taken on (valid or not), each handled before the
    /// next is read; not one that arrived while the agent was stopping.
    /// ([`GuardStats::wait_datagrams`]).
    pub datagrams: AtomicU64,
    /// Messages passed on to the agent (a datagram may hold several).
    pub accepted: AtomicU64,
    pub truncated: AtomicU64,
    pub oversized: AtomicU64,
    pub bad_length: AtomicU64,
    pub bad_type: AtomicU64,
    pub bad_name: AtomicU64,
    pub bad_fields: AtomicU64,
    /// CREATE refused for its fields (MSS, ports).
    pub bad_create: AtomicU64,
    /// CREATE refused at the live-flow caps.
    pub too_many_flows: AtomicU64,
    /// Messages refused from datapaths beyond [`MAX_DATAPATHS`].
    pub too_many_datapaths: AtomicU64,
    /// CREATE whose initial window was clamped (flow kept).
    pub clamped_create: AtomicU64,
    /// CREATE whose `;w=` suffix was not a valid preference (flow kept, default `w` used).
    pub bad_preference: AtomicU64,
    /// Reports (and closes) for flows the datapath never created: ignored, as portus would.
    pub unknown_flow: AtomicU64,
    /// Sends that failed (the datapath was gone or not reading).
    pub send_failed: AtomicU64,
    /// Answers to a dropped datapath, discarded without trying.
    pub send_dropped: AtomicU64,
    /// Messages from a dropped datapath, ignored during its pause.
    pub from_dead_peer: AtomicU64,
    /// Datapaths dropped after a failed send.
    pub dropped_datapaths: AtomicU64,
    /// Datapaths forgotten because their socket was gone (found without sending to them).
    pub vanished_datapaths: AtomicU64,
    /// Netlink datagrams not sent by the kernel (another process's), dropped unread
    /// ([`crate::ipc::netlink`]).
    pub not_from_kernel: AtomicU64,
    /// Datagrams from the kernel that were not one whole netlink message of the `ccp`
    /// family carrying one CCP message (or another message the agent expects), dropped.
    pub bad_netlink: AtomicU64,
    /// Error answers from the kernel to messages the agent sent (the datapath refused one).
    pub kernel_errors: AtomicU64,
    /// Receives that found the socket's buffer had overflowed: datapath messages were lost.
    pub rx_overruns: AtomicU64,
    /// Set when the kernel announced that the `ccp` family is gone (module unloaded); the
    /// socket hears nothing more and the agent should exit.
    pub datapath_gone: AtomicBool,
    /// Gauge: live flows now, over all datapaths.
    pub live_flows: AtomicU64,
    /// Gauge: datapaths tracked now.
    pub datapaths: AtomicU64,
}

impl GuardStats {
    /// Wait (at most `limit`) until `n` datagrams have been read; `false` on timeout. A
    /// datapath that sent `n` datagrams and then calls this knows that the agent has taken
    /// on its last one, so stopping the agent now still handles it (the run loop stops at
    /// its next read).
    pub fn wait_datagrams(&self, n: u64, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.datagrams.load(Ordering::SeqCst) < n {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// Count one message dropped for `r`.
    pub fn count(&self, r: Reject) {
        let c = match r {
            Reject::Truncated => &self.truncated,
            Reject::Oversized => &self.oversized,
            Reject::BadLength => &self.bad_length,
            Reject::BadType => &self.bad_type,
            Reject::BadName => &self.bad_name,
            Reject::BadFields => &self.bad_fields,
            Reject::BadCreate => &self.bad_create,
            Reject::TooManyFlows => &self.too_many_flows,
            Reject::TooManyDatapaths => &self.too_many_datapaths,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Every counter and gauge, as one JSON object (the agent prints it on SIGUSR1).
    pub fn snapshot(&self) -> serde_json::Value {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "datagrams": g(&self.datagrams),
            "accepted": g(&self.accepted),
            "rejected": self.rejected(),
            "truncated": g(&self.truncated),
            "oversized": g(&self.oversized),
            "bad_length": g(&self.bad_length),
            "bad_type": g(&self.bad_type),
            "bad_name": g(&self.bad_name),
            "bad_fields": g(&self.bad_fields),
            "bad_create": g(&self.bad_create),
            "too_many_flows": g(&self.too_many_flows),
            "too_many_datapaths": g(&self.too_many_datapaths),
            "clamped_create": g(&self.clamped_create),
            "bad_preference": g(&self.bad_preference),
            "unknown_flow": g(&self.unknown_flow),
            "send_failed": g(&self.send_failed),
            "send_dropped": g(&self.send_dropped),
            "from_dead_peer": g(&self.from_dead_peer),
            "dropped_datapaths": g(&self.dropped_datapaths),
            "vanished_datapaths": g(&self.vanished_datapaths),
            "not_from_kernel": g(&self.not_from_kernel),
            "bad_netlink": g(&self.bad_netlink),
            "kernel_errors": g(&self.kernel_errors),
            "rx_overruns": g(&self.rx_overruns),
            "datapath_gone": self.datapath_gone.load(Ordering::Relaxed),
            "live_flows": g(&self.live_flows),
            "datapaths": g(&self.datapaths),
        })
    }

    /// Messages dropped for any reason (malformed, refused fields, over a cap).
    pub fn rejected(&self) -> u64 {
        [
            &self.truncated,
            &self.oversized,
            &self.bad_length,
            &self.bad_type,
            &self.bad_name,
            &self.bad_fields,
            &self.bad_create,
            &self.too_many_flows,
            &self.too_many_datapaths,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }
}

/// Rate limit of the guard's (and the adapters') per-message warnings.
pub const LOG_EVERY: Duration = Duration::from_millis(500);

static LOG_UNAVAILABLE: LogLimit = LogLimit::new(LOG_EVERY);
static LOG_BAD_PREFERENCE: LogLimit = LogLimit::new(LOG_EVERY);
static LOG_NO_CHOICE: LogLimit = LogLimit::new(LOG_EVERY);

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Split a requested congAlg name into (algorithm part, optional preference text).
pub fn split_request(name: &str) -> (&str, Option<&str>) {
    match name.split_once(';') {
        Some((alg, rest)) => (alg, rest.strip_prefix("w=")),
        None => (name, None),
    }
}

/// A flow's MSS and initial window (bytes) as a controller may see them: MSS within
/// `[1, MAX_MSS]`; an initial window below one MSS is a packet count (libccp's CREATE
/// carries bytes, the kernel's is `snd_cwnd·mss`), and the result lies in
/// `[mss, MAX_INIT_CWND_BYTES]`.
pub fn flow_params(mss: u32, init_cwnd: u32) -> (u32, u32) {
    let (mss, bytes, _) = flow_params_clamped(mss, init_cwnd);
    (mss, bytes)
}

/// [`flow_params`], and whether a value had to be clamped.
fn flow_params_clamped(mss: u32, init_cwnd: u32) -> (u32, u32, bool) {
    let m = mss.clamp(1, MAX_MSS);
    let bytes = if init_cwnd < m {
        init_cwnd.max(1).saturating_mul(m)
    } else {
        init_cwnd
    };
    let b = bytes.clamp(m, MAX_INIT_CWND_BYTES);
    (m, b, m != mss || b != bytes)
}

/// Validate one message at the start of `buf`; on success return its length.
pub fn check_message(buf: &[u8]) -> Result<usize, Reject> {
    if buf.len() < HDR_LEN {
        return Err(Reject::Truncated);
    }
    let typ = u16_at(buf, 0);
    let len = usize::from(u16_at(buf, 2));
    if len < HDR_LEN {
        return Err(Reject::BadLength);
    }
    if len > PORTUS_BUF {
        return Err(Reject::Oversized);
    }
    if len > buf.len() {
        return Err(Reject::Truncated);
    }
    let msg = &buf[..len];
    match typ {
        CREATE => {
            if len != CREATE_LEN {
                return Err(Reject::BadLength);
            }
            let name = &msg[CREATE_NAME..];
            let end = name.iter().position(|&c| c == 0).ok_or(Reject::BadName)?;
            let name = std::str::from_utf8(&name[..end]).map_err(|_| Reject::BadName)?;
            if name.chars().any(char::is_control) {
                return Err(Reject::BadName);
            }
            let mss = u32_at(msg, CREATE_MSS);
            if mss == 0 || mss > MAX_MSS {
                return Err(Reject::BadCreate);
            }
            if u32_at(msg, CREATE_SRC_PORT) > MAX_PORT || u32_at(msg, CREATE_DST_PORT) > MAX_PORT {
                return Err(Reject::BadCreate);
            }
        }
        MEASURE => {
            if len < MEASURE_MIN_LEN || !(len - MEASURE_MIN_LEN).is_multiple_of(8) {
                return Err(Reject::BadLength);
            }
            let n = u32_at(msg, HDR_LEN + 4) as usize;
            if n > MAX_FIELDS || MEASURE_MIN_LEN + 8 * n != len {
                return Err(Reject::BadFields);
            }
        }
        READY => {
            if len != READY_LEN {
                return Err(Reject::BadLength);
            }
        }
        _ => return Err(Reject::BadType),
    }
    Ok(len)
}

/// The addresses and ports of a validated CREATE (libccp: IPv4 in host order).
pub fn create_addr(msg: &[u8]) -> FlowAddr {
    FlowAddr {
        src_ip: u32_at(msg, CREATE_SRC_IP).into(),
        src_port: u32_at(msg, CREATE_SRC_PORT) as u16,
        dst_ip: u32_at(msg, CREATE_DST_IP).into(),
        dst_port: u32_at(msg, CREATE_DST_PORT) as u16,
    }
}

/// Normalize a validated CREATE in place and return the flow's request: the flow's
/// preference is resolved (`prefs`: per-socket entry, rule, `;w=` suffix, default; see
/// [`crate::flows::prefs`]), the name becomes the registry name portus dispatches on
/// (`ccp_cubic;w=…` → `cubic`; `ccp_auto` → the portfolio's choice for the resolved
/// preference (`auto`); `ccp`, unknown or unavailable → empty, i.e. the default), and
/// the initial window is clamped (see [`flow_params`]; counted in `clamped_create`). The
/// caller records the request.
pub fn normalize_create(
    msg: &mut [u8],
    available: &[String],
    auto: &AutoSelect,
    stats: &GuardStats,
    prefs: &PrefStore,
) -> FlowRequest {
    let sid = u32_at(msg, 4);
    let init_cwnd = u32_at(msg, CREATE_INIT_CWND);
    let (_, init_bytes, clamped) = flow_params_clamped(u32_at(msg, CREATE_MSS), init_cwnd);
    if clamped {
        stats.clamped_create.fetch_add(1, Ordering::Relaxed);
    }
    msg[CREATE_INIT_CWND..CREATE_INIT_CWND + 4].copy_from_slice(&init_bytes.to_le_bytes());
    let name_field = &msg[CREATE_NAME..CREATE_LEN];
    let end = name_field.iter().position(|&c| c == 0).unwrap_or(0);
    let requested = String::from_utf8_lossy(&name_field[..end]).into_owned();
    let (alg_part, w_text) = split_request(&requested);
    let preference = w_text.and_then(|t| match t.parse::<Preference>() {
        Ok(w) => Some(w),
        Err(e) => {
            stats.bad_preference.fetch_add(1, Ordering::Relaxed);
            if let Some(held) = LOG_BAD_PREFERENCE.allow() {
                warn!(sid, requested = ?requested, error = %e, held_back = held,
                    "bad preference in flow request, using the default");
            }
            None
        }
    });
    // The flow's preference: decided here, once, before its algorithm (`ccp_auto` chooses
    // the algorithm from it just below).
    let addr = create_addr(msg);
    let resolved = prefs.resolve(Some(&addr), preference);
    let wanted = strip_prefix(alg_part);
    // `ccp_auto` (and `ccp` under `--alg auto`): the portfolio chooses from the resolved
    // preference
    let choice = if wanted == ccp_algs::AUTO || (wanted.is_empty() && auto.for_default) {
        let c = auto.choose(Some(resolved.w), available);
        if c.is_none() {
            if let Some(held) = LOG_NO_CHOICE.allow() {
                warn!(sid, requested = ?requested, held_back = held,
                    "no portfolio table (or none of its algorithms runs here): using the default");
            }
        }
        c
    } else {
        None
    };
    let alg = if let Some(c) = &choice {
        c.alg.clone()
    } else if wanted == ccp_algs::AUTO {
        String::new()
    } else if available.iter().any(|a| a == wanted) {
        wanted.to_owned()
    } else {
        if !wanted.is_empty() {
            if let Some(held) = LOG_UNAVAILABLE.allow() {
                warn!(sid, requested = ?requested, held_back = held,
                    "algorithm not available in this agent, using the default");
            }
        }
        String::new()
    };
    let name_field = &mut msg[CREATE_NAME..CREATE_LEN];
    name_field.fill(0);
    name_field[..alg.len()].copy_from_slice(alg.as_bytes());
    FlowRequest {
        requested,
        alg,
        preference,
        addr: Some(addr),
        resolved: Some(resolved),
        choice,
    }
}

/// What the guard knows of one datapath.
#[derive(Debug)]
struct Peer {
    /// Number in the flow tables' keys.
    id: u32,
    /// Socket ids of its live flows (as portus has them).
    live: HashSet<u32>,
    /// Dropped after a failed send: its messages are ignored until then.
    dead_until: Option<Instant>,
    /// The next pause after a failure.
    backoff: Duration,
    /// When it came back after its last drop.
    revived: Option<Instant>,
    last_heard: Instant,
    /// When it last had a live flow (its slot is kept for [`FLOW_GRACE`] after).
    last_flow: Option<Instant>,
}

struct State<A> {
    buf: Vec<u8>,
    last_log: Option<Instant>,
    suppressed: u64,
    peers: HashMap<A, Peer>,
    next_peer: u32,
    live_total: usize,
    /// Flows of dropped or vanished datapaths that portus still holds, (datapath, its
    /// number, socket id): closed a batch at a time between real datagrams.
    closing: VecDeque<(A, u32, u32)>,
    /// How many of `closing` each datapath has.
    closing_count: HashMap<A, usize>,
    /// The last thing handed to portus was a batch of those closes.
    close_turn: bool,
    /// Vanished datapaths: portus's answers to them are discarded.
    gone: HashSet<A>,
    /// When the last liveness pass started, and the datapaths it has still to ask.
    last_pass: Option<Instant>,
    to_ask: VecDeque<A>,
    /// The last urgent search, and the gap before the next one may run.
    last_urgent: Option<Instant>,
    urgent_gap: Duration,
}

/// A portus [`Ipc`] that validates and normalizes every inbound message, bounds the flows
/// and datapaths it passes on, and survives failed sends (see the module docs).
pub struct Guarded<I: Ipc> {
    inner: I,
    state: RefCell<State<I::Addr>>,
    stats: Arc<GuardStats>,
    tables: Arc<FlowTables>,
    /// Registry names of the algorithms this agent can run.
    available: Vec<String>,
    /// Set when the agent should stop; a recv then returns at once.
    stop: Arc<AtomicBool>,
    /// Drop a datapath whose send failed (unix sockets).
    drop_dead_peers: bool,
    /// The preference portfolio `ccp_auto` flows are chosen from.
    auto: Arc<AutoSelect>,
}

// The RefCell is only touched from the one portus thread that owns the socket.
unsafe impl<I: Ipc> Send for Guarded<I> {}

static LOG_SEND: LogLimit = LogLimit::new(LOG_EVERY);

impl<I: Ipc> Guarded<I> {
    pub fn new(
        inner: I,
        stats: Arc<GuardStats>,
        tables: Arc<FlowTables>,
        available: Vec<String>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let drop_dead_peers = I::name() == "unix";
        Self {
            inner,
            state: RefCell::new(State {
                buf: vec![0u8; 64 * 1024],
                last_log: None,
                suppressed: 0,
                peers: HashMap::new(),
                next_peer: 1,
                live_total: 0,
                closing: VecDeque::new(),
                closing_count: HashMap::new(),
                close_turn: false,
                gone: HashSet::new(),
                last_pass: None,
                to_ask: VecDeque::new(),
                last_urgent: None,
                urgent_gap: LIVENESS_MIN_GAP,
            }),
            stats,
            tables,
            available,
            stop,
            drop_dead_peers,
            auto: Arc::new(AutoSelect::none(Preference::default())),
        }
    }

    /// Choose `ccp_auto` flows from this portfolio (none by default: they run the default).
    pub fn with_auto(mut self, auto: Arc<AutoSelect>) -> Self {
        self.auto = auto;
        self
    }

    fn log_reject(&self, st: &mut State<I::Addr>, r: Reject, bytes: &[u8]) {
        self.stats.count(r);
        let now = Instant::now();
        if st
            .last_log
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
        {
            let head: Vec<u8> = bytes.iter().take(16).copied().collect();
            warn!(reason = ?r, len = bytes.len(), head = ?head, suppressed = st.suppressed,
                "dropped datapath message");
            st.last_log = Some(now);
            st.suppressed = 0;
        } else {
            st.suppressed += 1;
        }
    }

    fn gauges(&self, st: &State<I::Addr>) {
        self.stats
            .live_flows
            .store(st.live_total as u64, Ordering::Relaxed);
        self.stats
            .datapaths
            .store(st.peers.len() as u64, Ordering::Relaxed);
    }

    /// Liveness (unix sockets; see the module docs): start a pass every [`LIVENESS_EVERY`],
    /// ask [`LIVENESS_BATCH`] datapaths of it (the rest while no datagram waits), and when
    /// `urgent` (a cap was met) search until one is gone. The vanished ones are forgotten.
    fn sweep(&self, st: &mut State<I::Addr>, urgent: bool) {
        if !self.drop_dead_peers {
            return;
        }
        let now = Instant::now();
        let pass_due = st
            .last_pass
            .is_none_or(|t| now.saturating_duration_since(t) >= LIVENESS_EVERY);
        if st.to_ask.is_empty() && pass_due {
            st.last_pass = Some(now);
            self.drop_stuck(st);
            st.to_ask = st.peers.keys().cloned().collect();
        }
        let urgent = urgent
            && st
                .last_urgent
                .is_none_or(|t| now.saturating_duration_since(t) >= st.urgent_gap);
        let mut found = 0usize;
        if urgent {
            st.last_urgent = Some(now);
            if st.to_ask.is_empty() {
                st.to_ask = st.peers.keys().cloned().collect();
            }
            while found == 0 {
                let Some(a) = st.to_ask.pop_front() else {
                    break;
                };
                found += usize::from(self.ask(st, a));
            }
            // a search that finds none waits longer before the next one
            st.urgent_gap = if found > 0 {
                LIVENESS_MIN_GAP
            } else {
                (st.urgent_gap * 2).min(LIVENESS_EVERY)
            };
        } else {
            let mut asked = 0;
            while let Some(a) = st.to_ask.pop_front() {
                found += usize::from(self.ask(st, a));
                asked += 1;
                if asked % LIVENESS_BATCH == 0 && self.datagram_waiting() {
                    break;
                }
            }
        }
        if found > 0 {
            self.gauges(st);
        }
    }

    /// Datapaths that do not read what they were sent (their answers waited too long) are
    /// dropped.
    fn drop_stuck(&self, st: &mut State<I::Addr>) {
        let Some(unix) = (&self.inner as &dyn Any).downcast_ref::<crate::ipc::unix::UnixSocket>()
        else {
            return;
        };
        for path in unix.take_stuck() {
            if let Some(a) = (&path as &dyn Any).downcast_ref::<I::Addr>() {
                if st.peers.get(a).is_some_and(|p| p.dead_until.is_none()) {
                    if let Some(held) = LOG_SEND.allow() {
                        warn!(to = ?a, held_back = held,
                            "datapath not reading its answers: dropping it");
                    }
                }
                self.drop_peer(st, a);
            }
        }
        self.gauges(st);
    }

    /// Ask whether the datapath at `a` is still there; forget it if it is gone (`true`).
    fn ask(&self, st: &mut State<I::Addr>, a: I::Addr) -> bool {
        if !st.peers.contains_key(&a) || !addr_gone(&a) {
            return false;
        }
        let Some(p) = st.peers.remove(&a) else {
            return false;
        };
        self.stats
            .vanished_datapaths
            .fetch_add(1, Ordering::Relaxed);
        // off the caps now; portus closes them a batch at a time
        Self::close_all(st, &a, p.id, p.live);
        if st.gone.len() >= MAX_GONE {
            st.gone.clear();
        }
        st.gone.insert(a);
        true
    }

    /// Drop a datapath that failed a send or does not read: its messages are ignored for its
    /// backoff, answers to it discarded, its flows evicted.
    fn drop_peer(&self, st: &mut State<I::Addr>, to: &I::Addr) {
        let Some(p) = st.peers.get_mut(to) else {
            return;
        };
        if p.dead_until.is_some() {
            return;
        }
        p.dead_until = Some(Instant::now() + p.backoff);
        p.backoff = (p.backoff * 2).min(DEAD_BACKOFF_MAX);
        let (id, live) = (p.id, std::mem::take(&mut p.live));
        self.stats.dropped_datapaths.fetch_add(1, Ordering::Relaxed);
        Self::close_all(st, to, id, live);
    }

    /// Take `live` (the flows of datapath `id` at `a`) off the caps and queue their closes.
    /// They go to portus [`CLOSES_PER_TURN`] at a time, between real datagrams: a READY made
    /// portus drop them all at once, a stall of milliseconds per hundred flows for every
    /// other datapath.
    fn close_all(st: &mut State<I::Addr>, a: &I::Addr, id: u32, live: HashSet<u32>) {
        if live.is_empty() {
            return;
        }
        st.live_total -= live.len();
        *st.closing_count.entry(a.clone()).or_insert(0) += live.len();
        st.closing
            .extend(live.into_iter().map(|sid| (a.clone(), id, sid)));
    }

    /// Is a datagram waiting (unix sockets; `true` for others: take turns)?
    fn datagram_waiting(&self) -> bool {
        (&self.inner as &dyn Any)
            .downcast_ref::<crate::ipc::unix::UnixSocket>()
            .is_none_or(|u| u.readable_now())
    }

    /// Is a report waiting (unix sockets; `false` for others)?
    fn report_waiting(&self) -> bool {
        (&self.inner as &dyn Any)
            .downcast_ref::<crate::ipc::unix::UnixSocket>()
            .is_some_and(|u| u.report_waiting())
    }

    /// Make room for a new datapath: forget one without live flows that is not in good
    /// standing: a dropped one first, else the least recently heard one whose last flow
    /// ended [`FLOW_GRACE`] ago or that never had one. A datapath between two flows keeps its
    /// slot: under a flood of new datapaths it was forgotten the moment its flow closed and
    /// refused (`too_many_datapaths`) at its next CREATE.
    fn admit(st: &mut State<I::Addr>) -> bool {
        if st.peers.len() < MAX_DATAPATHS {
            return true;
        }
        let now = Instant::now();
        let victim = st
            .peers
            .iter()
            .filter(|(_, p)| {
                p.live.is_empty()
                    && (p.dead_until.is_some()
                        || p.last_flow
                            .is_none_or(|t| now.saturating_duration_since(t) >= FLOW_GRACE))
            })
            .min_by_key(|(_, p)| (p.dead_until.is_none(), p.last_heard))
            .map(|(a, _)| a.clone());
        match victim {
            Some(a) => {
                st.peers.remove(&a);
                true
            }
            None => false,
        }
    }
}

/// Is the datapath at `a` gone? Only unix datapaths (a socket path) can be asked.
fn addr_gone<A: 'static>(a: &A) -> bool {
    (a as &dyn Any)
        .downcast_ref::<PathBuf>()
        .is_some_and(|p| crate::ipc::unix::peer_gone(p))
}

/// A flow's close as a datapath sends it: a MEASURE without fields.
fn close_msg(sid: u32) -> [u8; CLOSE_LEN] {
    let mut m = [0u8; CLOSE_LEN];
    m[0..2].copy_from_slice(&MEASURE.to_le_bytes());
    m[2..4].copy_from_slice(&(CLOSE_LEN as u16).to_le_bytes());
    m[4..8].copy_from_slice(&sid.to_le_bytes());
    m
}

/// A READY message (what the guard hands portus to make it drop a datapath's flows).
fn ready_msg() -> [u8; READY_LEN] {
    let mut m = [0u8; READY_LEN];
    m[0..2].copy_from_slice(&READY.to_le_bytes());
    m[2..4].copy_from_slice(&(READY_LEN as u16).to_le_bytes());
    m
}

impl<I: Ipc> Ipc for Guarded<I> {
    type Addr = I::Addr;

    fn name() -> String {
        I::name()
    }

    fn send(&self, msg: &[u8], to: &Self::Addr) -> portus::Result<()> {
        let mut st = self.state.borrow_mut();
        if self.drop_dead_peers
            && (st.gone.contains(to) || st.peers.get(to).is_some_and(|p| p.dead_until.is_some()))
        {
            self.stats.send_dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        match self.inner.send(msg, to) {
            Ok(()) => {
                if let Some(p) = st.peers.get_mut(to) {
                    // healthy for a while since its last drop: the next pause starts short
                    if p.revived.is_some_and(|t| t.elapsed() >= DEAD_BACKOFF_MAX) {
                        p.revived = None;
                        p.backoff = DEAD_BACKOFF;
                    }
                }
                Ok(())
            }
            Err(e) => {
                self.stats.send_failed.fetch_add(1, Ordering::Relaxed);
                let dropping = self.drop_dead_peers && st.peers.contains_key(to);
                if let Some(held) = LOG_SEND.allow() {
                    warn!(to = ?to, error = ?e, held_back = held, dropping_datapath = dropping,
                        "send to datapath failed");
                }
                if dropping {
                    self.drop_peer(&mut st, to);
                }
                // portus ends its run loop on a failed send while installing programs
                // (docs/upstream-defects.md, defect 12): the failure stops here
                Ok(())
            }
        }
    }

    fn recv(&self, out: &mut [u8]) -> portus::Result<(usize, Self::Addr)> {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Err(portus::Error("agent stopping".into()));
            }
            let mut st = self.state.borrow_mut();
            let st = &mut *st;
            self.sweep(st, false);
            // a dropped or vanished datapath's flows: closed a batch at a time after waiting
            // reports, taking turns with other datagrams (all at once while none waits)
            if !st.closing.is_empty()
                && (!st.close_turn || !self.datagram_waiting())
                && !self.report_waiting()
            {
                if let Some((addr, id)) = st.closing.front().map(|(a, id, _)| (a.clone(), *id)) {
                    let mut kept = 0usize;
                    let mut n = 0usize;
                    while n < CLOSES_PER_TURN && kept + CLOSE_LEN <= out.len() {
                        match st.closing.front() {
                            Some((a, _, sid)) if *a == addr => {
                                out[kept..kept + CLOSE_LEN].copy_from_slice(&close_msg(*sid));
                                kept += CLOSE_LEN;
                                n += 1;
                                st.closing.pop_front();
                            }
                            _ => break,
                        }
                    }
                    if let Some(c) = st.closing_count.get_mut(&addr) {
                        *c = c.saturating_sub(n);
                        if *c == 0 {
                            st.closing_count.remove(&addr);
                            // the last one: a READY after it makes portus replace the
                            // datapath's flow map, which keeps the capacity of all the flows
                            // it held (60 KB per 200 flows, per vanished datapath); its
                            // answers (programs) to it are discarded
                            if kept + READY_LEN <= out.len() {
                                out[kept..kept + READY_LEN].copy_from_slice(&ready_msg());
                                kept += READY_LEN;
                            }
                        }
                    }
                    st.close_turn = true;
                    if kept > 0 {
                        self.tables.set_current_peer(id);
                        return Ok((kept, addr));
                    }
                }
            }
            st.close_turn = false;
            let (n, addr) = self.inner.recv(&mut st.buf)?;
            if self.stop.load(Ordering::SeqCst) {
                // whatever woke us (possibly a wake-up datagram) is not for portus any more
                return Err(portus::Error("agent stopping".into()));
            }
            let n = n.min(st.buf.len());
            if n == 0 {
                continue;
            }
            self.stats.datagrams.fetch_add(1, Ordering::SeqCst);
            let now = Instant::now();
            // something speaks at a vanished datapath's path: a new datapath
            st.gone.remove(&addr);
            if !st.peers.contains_key(&addr) {
                if !Self::admit(st) {
                    // full: the vanished ones may be among them (checked now, not later)
                    self.sweep(st, true);
                }
                if !Self::admit(st) {
                    let staged = std::mem::take(&mut st.buf);
                    self.log_reject(st, Reject::TooManyDatapaths, &staged[..n]);
                    st.buf = staged;
                    continue;
                }
                let id = st.next_peer;
                st.next_peer = st.next_peer.wrapping_add(1).max(1);
                st.peers.insert(
                    addr.clone(),
                    Peer {
                        id,
                        live: HashSet::new(),
                        dead_until: None,
                        backoff: DEAD_BACKOFF,
                        revived: None,
                        last_heard: now,
                        last_flow: None,
                    },
                );
            }
            let Some(peer) = st.peers.get_mut(&addr) else {
                continue;
            };
            peer.last_heard = now;
            if !peer.live.is_empty() {
                peer.last_flow = Some(now);
            }
            let mut kept = 0usize;
            let mut fresh = false;
            if let Some(until) = peer.dead_until {
                if now < until {
                    self.stats.from_dead_peer.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // back after its pause: portus reinstalls its programs first
                peer.dead_until = None;
                peer.revived = Some(now);
                fresh = true;
            }
            if st.closing_count.remove(&addr).is_some() {
                // it speaks again before its old flows are all closed: the READY below
                // makes portus drop the rest at once (rare: a restart at the same path)
                st.closing.retain(|(a, _, _)| *a != addr);
                fresh = true;
            }
            if fresh && (u16_at(&st.buf, 0) != READY || n < 2) {
                out[..READY_LEN].copy_from_slice(&ready_msg());
                kept = READY_LEN;
            }
            let peer_id = peer.id;
            self.tables.set_current_peer(peer_id);
            // validate every message in the datagram; keep the valid ones, in order
            let mut at = 0usize;
            let mut staged = std::mem::take(&mut st.buf);
            while at < n {
                let len = match check_message(&staged[at..n]) {
                    Ok(len) => len,
                    Err(r) => {
                        // the rest of the datagram cannot be framed reliably: drop it
                        self.log_reject(st, r, &staged[at..n]);
                        break;
                    }
                };
                let msg_at = at;
                at += len;
                if kept + len > out.len() {
                    self.log_reject(st, Reject::Oversized, &staged[msg_at..msg_at + len]);
                    continue;
                }
                let typ = u16_at(&staged, msg_at);
                let sid = u32_at(&staged, msg_at + 4);
                let (known, flows) = match st.peers.get(&addr) {
                    Some(p) => (p.live.contains(&sid), p.live.len()),
                    None => break,
                };
                match typ {
                    READY => {
                        // portus drops every flow of this datapath
                        if let Some(p) = st.peers.get_mut(&addr) {
                            st.live_total -= p.live.len();
                            p.live.clear();
                        }
                    }
                    CREATE => {
                        if !known && st.live_total >= MAX_FLOWS {
                            // the flows of vanished datapaths may hold the cap
                            self.sweep(st, true);
                        }
                        if !known && (flows >= MAX_FLOWS_PER_DATAPATH || st.live_total >= MAX_FLOWS)
                        {
                            self.log_reject(
                                st,
                                Reject::TooManyFlows,
                                &staged[msg_at..msg_at + len],
                            );
                            continue;
                        }
                        if let Some(p) = st.peers.get_mut(&addr) {
                            if p.live.insert(sid) {
                                st.live_total += 1;
                            }
                            p.last_flow = Some(now);
                        }
                        let req = normalize_create(
                            &mut staged[msg_at..msg_at + len],
                            &self.available,
                            &self.auto,
                            &self.stats,
                            &self.tables.prefs,
                        );
                        self.tables.set_request(FlowKey { peer: peer_id, sid }, req);
                    }
                    _ => {
                        // MEASURE: portus ignores reports of flows it does not know
                        if !known {
                            self.stats.unknown_flow.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        if u32_at(&staged, msg_at + HDR_LEN + 4) == 0 {
                            if let Some(p) = st.peers.get_mut(&addr) {
                                if p.live.remove(&sid) {
                                    st.live_total -= 1;
                                }
                            }
                        }
                    }
                }
                out[kept..kept + len].copy_from_slice(&staged[msg_at..msg_at + len]);
                kept += len;
                self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            }
            st.buf = staged;
            self.gauges(st);
            if kept > 0 {
                return Ok((kept, addr));
            }
        }
    }

    fn close(&mut self) -> portus::Result<()> {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(sid: u32, name: &str) -> Vec<u8> {
        let mut m = vec![0u8; CREATE_LEN];
        m[0..2].copy_from_slice(&CREATE.to_le_bytes());
        m[2..4].copy_from_slice(&(CREATE_LEN as u16).to_le_bytes());
        m[4..8].copy_from_slice(&sid.to_le_bytes());
        m[CREATE_MSS..CREATE_MSS + 4].copy_from_slice(&1448u32.to_le_bytes());
        m[HDR_LEN + 24..HDR_LEN + 24 + name.len()].copy_from_slice(name.as_bytes());
        m
    }

    fn measure(sid: u32, n: u32, declared_len: u16) -> Vec<u8> {
        let mut m = vec![0u8; MEASURE_MIN_LEN + 8 * n as usize];
        m[0..2].copy_from_slice(&MEASURE.to_le_bytes());
        m[2..4].copy_from_slice(&declared_len.to_le_bytes());
        m[4..8].copy_from_slice(&sid.to_le_bytes());
        m[12..16].copy_from_slice(&n.to_le_bytes());
        m
    }

    /// A guard over a unix socket in a directory of its own, and datapath sockets there.
    struct UnixRig {
        dir: PathBuf,
        guard: Guarded<crate::ipc::unix::UnixSocket>,
        stats: Arc<GuardStats>,
    }

    impl UnixRig {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("ccp-guard-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let sock = crate::ipc::unix::UnixSocket::bind_in(&dir, "agent").unwrap();
            let stats = Arc::new(GuardStats::default());
            let guard = Guarded::new(
                sock,
                stats.clone(),
                Arc::new(FlowTables::default()),
                vec!["reno".into()],
                Arc::new(AtomicBool::new(false)),
            );
            Self { dir, guard, stats }
        }

        fn peer(&self, name: &str) -> std::os::unix::net::UnixDatagram {
            let s = std::os::unix::net::UnixDatagram::bind(self.dir.join(name)).unwrap();
            s.connect(self.dir.join("agent")).unwrap();
            s
        }

        /// The next datagram portus gets: its first message's type, and its sender's name.
        fn recv(&self) -> (u16, String) {
            let mut out = vec![0u8; 64 * 1024];
            let (n, from) = self.guard.recv(&mut out).unwrap();
            assert!(n >= HDR_LEN);
            let name = from.file_name().unwrap().to_string_lossy().into_owned();
            (u16_at(&out, 0), name)
        }

        fn vanished(&self) -> u64 {
            self.stats.vanished_datapaths.load(Ordering::Relaxed)
        }
    }

    impl Drop for UnixRig {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Issue 42 (seen by ops/hostile_soak.sh): a liveness check asked all 64 datapaths at
    /// once (a socket and a connect each, 0.4 ms) while reports waited. A pass asks
    /// LIVENESS_BATCH per datagram while datagrams wait, and the rest when none does.
    #[test]
    fn a_liveness_pass_asks_a_batch_at_a_time_while_datagrams_wait() {
        let rig = UnixRig::new("batch");
        let live = rig.peer("live");
        let ghosts: Vec<_> = (0..20).map(|i| rig.peer(&format!("ghost{i}"))).collect();
        // (one at a time: a unix socket queues at most net.unix.max_dgram_qlen, 10)
        live.send(&ready_msg()).unwrap();
        assert_eq!(rig.recv().0, READY);
        for g in &ghosts {
            g.send(&ready_msg()).unwrap();
            assert_eq!(rig.recv().0, READY);
        }
        drop(ghosts); // closed: a connect to them is refused
        std::thread::sleep(LIVENESS_EVERY + Duration::from_millis(20));
        live.send(&ready_msg()).unwrap();
        live.send(&ready_msg()).unwrap();
        assert_eq!(rig.recv(), (READY, "live".into()));
        let first = rig.vanished();
        assert!(
            (LIVENESS_BATCH as u64 - 1..=LIVENESS_BATCH as u64).contains(&first),
            "{first} of 20 vanished datapaths found in one turn"
        );
        assert_eq!(rig.recv(), (READY, "live".into()));
        assert!(rig.vanished() <= 2 * LIVENESS_BATCH as u64);
        // nothing waits: the pass ends in this receive (which then times out)
        let mut out = vec![0u8; 1024];
        assert!(rig.guard.recv(&mut out).is_err());
        assert_eq!(rig.vanished(), 20);
    }

    /// Issue 42: a vanished datapath's closes were handed to portus in turn with real
    /// datagrams, so a healthy datapath's waiting report came after a batch of them. Closes
    /// go after waiting reports.
    #[test]
    fn a_vanished_datapaths_closes_go_after_waiting_reports() {
        let rig = UnixRig::new("closes");
        let healthy = rig.peer("healthy");
        let ghost = rig.peer("ghost");
        // (one at a time: a unix socket queues at most net.unix.max_dgram_qlen, 10)
        for m in [ready_msg().to_vec(), create(1, "ccp_reno")] {
            healthy.send(&m).unwrap();
            rig.recv();
        }
        ghost.send(&ready_msg()).unwrap();
        rig.recv();
        for sid in 1..=40 {
            ghost.send(&create(sid, "ccp_reno")).unwrap();
            rig.recv();
        }
        drop(ghost);
        std::thread::sleep(LIVENESS_EVERY + Duration::from_millis(20));
        let n = 2;
        healthy
            .send(&measure(1, n, (MEASURE_MIN_LEN + 8 * n as usize) as u16))
            .unwrap();
        // the ghost is found gone in this receive: its 40 closes wait for the report
        assert_eq!(rig.recv(), (MEASURE, "healthy".into()));
        assert_eq!(rig.vanished(), 1);
        assert_eq!(rig.recv(), (MEASURE, "ghost".into()), "a batch of closes");
    }

    #[test]
    fn accepts_well_formed_messages() {
        assert_eq!(check_message(&create(1, "ccp_cubic")), Ok(CREATE_LEN));
        let m = measure(1, 3, (MEASURE_MIN_LEN + 24) as u16);
        assert_eq!(check_message(&m), Ok(m.len()));
        let mut r = vec![0u8; READY_LEN];
        r[0..2].copy_from_slice(&READY.to_le_bytes());
        r[2..4].copy_from_slice(&(READY_LEN as u16).to_le_bytes());
        assert_eq!(check_message(&r), Ok(READY_LEN));
    }

    #[test]
    fn rejects_malformed_messages_by_reason() {
        assert_eq!(check_message(&[0, 0, 8]), Err(Reject::Truncated));
        let c = create(1, "cubic");
        assert_eq!(check_message(&c[..40]), Err(Reject::Truncated));
        let mut no_nul = create(1, "");
        no_nul[HDR_LEN + 24..].fill(b'a');
        assert_eq!(check_message(&no_nul), Err(Reject::BadName));
        let mut bad_utf8 = create(1, "");
        bad_utf8[HDR_LEN + 24] = 0xff;
        assert_eq!(check_message(&bad_utf8), Err(Reject::BadName));
        // a measure claiming 17 fields
        let m = measure(1, 17, (MEASURE_MIN_LEN + 17 * 8) as u16);
        assert_eq!(check_message(&m), Err(Reject::BadFields));
        // a measure whose count disagrees with its length
        let mut m = measure(1, 2, (MEASURE_MIN_LEN + 16) as u16);
        m[12] = 1;
        assert_eq!(check_message(&m), Err(Reject::BadFields));
        // agent-bound types coming from a datapath
        for t in [INSTALL, UPDATE_FIELDS, CHANGE_PROG, 99] {
            let mut m = measure(1, 0, MEASURE_MIN_LEN as u16);
            m[0..2].copy_from_slice(&t.to_le_bytes());
            assert_eq!(check_message(&m), Err(Reject::BadType));
        }
        let mut big = vec![0u8; 2000];
        big[0..2].copy_from_slice(&MEASURE.to_le_bytes());
        big[2..4].copy_from_slice(&2000u16.to_le_bytes());
        assert_eq!(check_message(&big), Err(Reject::Oversized));
        let mut zero = create(1, "x");
        zero[2..4].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(check_message(&zero), Err(Reject::BadLength));
    }

    #[test]
    fn split_request_reads_preference_suffix() {
        assert_eq!(split_request("mocc"), ("mocc", None));
        assert_eq!(
            split_request("ccp_mocc;w=0.4,0.5,0.1"),
            ("ccp_mocc", Some("0.4,0.5,0.1"))
        );
        assert_eq!(split_request("ccp;junk"), ("ccp", None));
    }

    fn with_fields(init: u32, mss: u32, sport: u32, dport: u32) -> Vec<u8> {
        let mut m = create(1, "ccp_cubic");
        m[CREATE_INIT_CWND..CREATE_INIT_CWND + 4].copy_from_slice(&init.to_le_bytes());
        m[CREATE_MSS..CREATE_MSS + 4].copy_from_slice(&mss.to_le_bytes());
        m[CREATE_SRC_PORT..CREATE_SRC_PORT + 4].copy_from_slice(&sport.to_le_bytes());
        m[CREATE_DST_PORT..CREATE_DST_PORT + 4].copy_from_slice(&dport.to_le_bytes());
        m
    }

    #[test]
    fn create_fields_are_refused_outside_their_ranges() {
        for mss in [0, MAX_MSS + 1, 1 << 31, u32::MAX] {
            let m = with_fields(14480, mss, 1, 2);
            assert_eq!(check_message(&m), Err(Reject::BadCreate), "mss {mss}");
        }
        for (s, d) in [(65536, 80), (80, 65536), (u32::MAX, 0)] {
            let m = with_fields(14480, 1448, s, d);
            assert_eq!(check_message(&m), Err(Reject::BadCreate), "ports {s} {d}");
        }
        for mss in [1, 1448, MAX_MSS] {
            let m = with_fields(u32::MAX, mss, 65535, 0);
            assert_eq!(check_message(&m), Ok(CREATE_LEN), "mss {mss}");
        }
        for name in ["a\nb", "x\r", "\u{1b}[2J", "tab\there", "\u{85}"] {
            assert_eq!(
                check_message(&create(1, name)),
                Err(Reject::BadName),
                "{name:?}"
            );
        }
    }

    #[test]
    fn initial_windows_are_clamped_to_the_documented_range() {
        assert_eq!(flow_params(1448, 14480), (1448, 14480));
        // below one MSS: a packet count
        assert_eq!(flow_params(1448, 10), (1448, 14480));
        assert_eq!(flow_params(1448, 0), (1448, 1448));
        assert_eq!(flow_params(1448, u32::MAX), (1448, MAX_INIT_CWND_BYTES));
        assert_eq!(
            flow_params(MAX_MSS, MAX_MSS - 1),
            (MAX_MSS, MAX_INIT_CWND_BYTES)
        );
        assert_eq!(flow_params(0, 0), (1, 1));
        assert_eq!(flow_params(u32::MAX, 5), (MAX_MSS, 5 * MAX_MSS));
        let stats = GuardStats::default();
        let mut m = with_fields(u32::MAX, 1448, 0, 0);
        let prefs = PrefStore::default();
        let none = AutoSelect::none(Preference::default());
        let req = normalize_create(&mut m, &["cubic".to_string()], &none, &stats, &prefs);
        assert_eq!(req.alg, "cubic");
        assert_eq!(u32_at(&m, CREATE_INIT_CWND), MAX_INIT_CWND_BYTES);
        assert_eq!(stats.clamped_create.load(Ordering::Relaxed), 1);
        let mut m = with_fields(10, 1448, 0, 0);
        normalize_create(&mut m, &[], &none, &stats, &prefs);
        assert_eq!(u32_at(&m, CREATE_INIT_CWND), 14480);
        assert_eq!(stats.clamped_create.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn ccp_auto_chooses_from_the_resolved_preference() {
        use crate::flows::prefs::{PrefConfig, SocketPair};
        let path = std::env::temp_dir().join(format!("ccp-guard-pf-{}.json", std::process::id()));
        std::fs::write(
            &path,
            r#"{"version": 1, "default_class": "all", "classes": {"all": [
                {"alg": "bbr", "w": null, "o": [0.95, 0.55, 0.97]},
                {"alg": "mocc", "w": [0.1, 0.8, 0.1], "o": [0.40, 0.97, 1.0]}]}}"#,
        )
        .unwrap();
        let thr = Preference::new(0.8, 0.1, 0.1).unwrap();
        let auto = AutoSelect::open(
            Some(path.clone()),
            thr,
            false,
            vec!["bbr".into(), "mocc".into()],
        )
        .unwrap();
        let _ = std::fs::remove_file(&path);
        let prefs = PrefStore::new(PrefConfig {
            default_w: thr,
            ..Default::default()
        });
        let stats = GuardStats::default();
        let available = ["bbr".to_string(), "mocc".to_string()];
        let create_auto = || {
            let mut m = create(1, "ccp_auto");
            m[CREATE_SRC_IP..CREATE_SRC_IP + 4].copy_from_slice(&0x0a00_0101u32.to_le_bytes());
            m[CREATE_SRC_PORT..CREATE_SRC_PORT + 4].copy_from_slice(&40000u32.to_le_bytes());
            m[CREATE_DST_IP..CREATE_DST_IP + 4].copy_from_slice(&0x0a00_0202u32.to_le_bytes());
            m[CREATE_DST_PORT..CREATE_DST_PORT + 4].copy_from_slice(&5201u32.to_le_bytes());
            m
        };
        // the default w is throughput-heavy: bbr
        let req = normalize_create(&mut create_auto(), &available, &auto, &stats, &prefs);
        assert_eq!(req.alg, "bbr");
        // the socket's own entry, set before it connected, makes it latency-heavy: mocc
        let pair = SocketPair {
            local: "10.0.1.1:40000".parse().unwrap(),
            remote: "10.0.2.2:5201".parse().unwrap(),
        };
        prefs
            .set(pair, Preference::new(0.1, 0.8, 0.1).unwrap())
            .unwrap();
        let mut m = create_auto();
        let req = normalize_create(&mut m, &available, &auto, &stats, &prefs);
        assert_eq!(req.alg, "mocc");
        assert_eq!(
            req.resolved.map(|r| r.source),
            Some(crate::flows::prefs::PrefSource::Socket)
        );
        assert_eq!(&m[CREATE_NAME..CREATE_NAME + 5], b"mocc\0");
    }
}
