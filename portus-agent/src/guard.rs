//! The IPC guard: every datapath message is validated before portus parses it.
//!
//! portus 0.9 ends its run loop on any message it cannot parse, panics on a CREATE shorter
//! than 32 bytes or a congAlg without a terminating NUL, hits `unreachable!()` on an INSTALL
//! and `unimplemented!()` on an UPDATE_FIELDS arriving at the agent, and its channel backend
//! panics on a message longer than its 1024-byte buffer (ccp-stack.md, defect 12). So the
//! agent never hands portus a raw socket: [`Guarded`] wraps any portus [`Ipc`], reads into
//! its own 64 KiB buffer, and passes on only well-formed messages of the three types a
//! datapath may send (CREATE, MEASURE, READY). Everything else is dropped, counted by reason
//! in [`GuardStats`], and logged at most a few times per second.
//!
//! The guard also reads the flow's request out of CREATE: the congAlg name is rewritten to
//! the registry name portus dispatches on (`ccp_cubic` → `cubic`; `ccp`, unknown or
//! unavailable → empty, i.e. the default algorithm), and an optional `;w=a,b,c` suffix (the
//! simulator's way to carry a per-flow preference) is recorded in [`FlowRequests`] by socket
//! id for the algorithm adapter to pick up.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccp_algs::registry::strip_prefix;
use ccp_algs::Preference;
use portus::ipc::Ipc;
use tracing::warn;

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
    /// CREATE with a name that is not NUL-terminated UTF-8.
    BadName,
    /// MEASURE with more fields than libccp allows, or a count that disagrees with the length.
    BadFields,
}

/// Counters of what the guard saw. Shared with the rest of the agent (metrics, tests).
#[derive(Debug, Default)]
pub struct GuardStats {
    pub accepted: AtomicU64,
    pub truncated: AtomicU64,
    pub oversized: AtomicU64,
    pub bad_length: AtomicU64,
    pub bad_type: AtomicU64,
    pub bad_name: AtomicU64,
    pub bad_fields: AtomicU64,
    /// CREATE whose `;w=` suffix was not a valid preference (flow kept, default `w` used).
    pub bad_preference: AtomicU64,
}

impl GuardStats {
    fn count(&self, r: Reject) {
        let c = match r {
            Reject::Truncated => &self.truncated,
            Reject::Oversized => &self.oversized,
            Reject::BadLength => &self.bad_length,
            Reject::BadType => &self.bad_type,
            Reject::BadName => &self.bad_name,
            Reject::BadFields => &self.bad_fields,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Messages dropped for any reason.
    pub fn rejected(&self) -> u64 {
        [
            &self.truncated,
            &self.oversized,
            &self.bad_length,
            &self.bad_type,
            &self.bad_name,
            &self.bad_fields,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }
}

/// What a datapath asked for when it created a flow.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRequest {
    /// The congAlg name as the datapath sent it (`ccp_cubic;w=…`).
    pub requested: String,
    /// The registry name portus will dispatch on; empty = the default algorithm.
    pub alg: String,
    /// The flow's own preference, if it carried one.
    pub preference: Option<Preference>,
}

/// Requests by socket id, written by the guard and read by the algorithm adapter on the same
/// (portus) thread. Socket ids are unique per datapath; one agent serves one datapath.
pub type FlowRequests = Arc<Mutex<HashMap<u32, FlowRequest>>>;

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
            let name = &msg[HDR_LEN + 24..];
            let end = name.iter().position(|&c| c == 0).ok_or(Reject::BadName)?;
            std::str::from_utf8(&name[..end]).map_err(|_| Reject::BadName)?;
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

/// Rewrite a validated CREATE's name in place to the registry name portus dispatches on
/// (`ccp_cubic;w=…` → `cubic`; `ccp`, unknown or unavailable → empty, i.e. the default) and
/// record the flow's request, preference included.
pub fn normalize_create(
    msg: &mut [u8],
    available: &[String],
    requests: &FlowRequests,
    stats: &GuardStats,
) -> FlowRequest {
    let sid = u32_at(msg, 4);
    let name_field = &mut msg[HDR_LEN + 24..CREATE_LEN];
    let end = name_field.iter().position(|&c| c == 0).unwrap_or(0);
    let requested = String::from_utf8_lossy(&name_field[..end]).into_owned();
    let (alg_part, w_text) = split_request(&requested);
    let wanted = strip_prefix(alg_part);
    let alg = if available.iter().any(|a| a == wanted) {
        wanted.to_owned()
    } else {
        if !wanted.is_empty() {
            warn!(sid, requested = %requested, "algorithm not available in this agent, using the default");
        }
        String::new()
    };
    let preference = w_text.and_then(|t| match t.parse::<Preference>() {
        Ok(w) => Some(w),
        Err(e) => {
            stats.bad_preference.fetch_add(1, Ordering::Relaxed);
            warn!(sid, requested = %requested, error = %e, "bad preference in flow request, using the default");
            None
        }
    });
    name_field.fill(0);
    name_field[..alg.len()].copy_from_slice(alg.as_bytes());
    let req = FlowRequest {
        requested,
        alg,
        preference,
    };
    if let Ok(mut m) = requests.lock() {
        m.insert(sid, req.clone());
    }
    req
}

/// Rate limit for rejection logs.
const LOG_EVERY: Duration = Duration::from_millis(500);

struct Inner {
    buf: Vec<u8>,
    last_log: Option<Instant>,
    suppressed: u64,
}

/// A portus [`Ipc`] that validates and normalizes every inbound message.
pub struct Guarded<I: Ipc> {
    inner: I,
    state: RefCell<Inner>,
    stats: Arc<GuardStats>,
    requests: FlowRequests,
    /// Registry names of the algorithms this agent can run.
    available: Vec<String>,
    /// Set when the agent should stop; a recv then returns at once.
    stop: Arc<AtomicBool>,
}

// The RefCell is only touched from the one portus thread that owns the socket.
unsafe impl<I: Ipc> Send for Guarded<I> {}

impl<I: Ipc> Guarded<I> {
    pub fn new(
        inner: I,
        stats: Arc<GuardStats>,
        requests: FlowRequests,
        available: Vec<String>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Self {
            inner,
            state: RefCell::new(Inner {
                buf: vec![0u8; 64 * 1024],
                last_log: None,
                suppressed: 0,
            }),
            stats,
            requests,
            available,
            stop,
        }
    }

    fn log_reject(&self, st: &mut Inner, r: Reject, bytes: &[u8]) {
        self.stats.count(r);
        let now = Instant::now();
        if st
            .last_log
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
        {
            let head: Vec<u8> = bytes.iter().take(16).copied().collect();
            warn!(reason = ?r, len = bytes.len(), head = ?head, suppressed = st.suppressed,
                "dropped malformed datapath message");
            st.last_log = Some(now);
            st.suppressed = 0;
        } else {
            st.suppressed += 1;
        }
    }
}

impl<I: Ipc> Ipc for Guarded<I> {
    type Addr = I::Addr;

    fn name() -> String {
        I::name()
    }

    fn send(&self, msg: &[u8], to: &Self::Addr) -> portus::Result<()> {
        self.inner.send(msg, to)
    }

    fn recv(&self, out: &mut [u8]) -> portus::Result<(usize, Self::Addr)> {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Err(portus::Error("agent stopping".into()));
            }
            let mut st = self.state.borrow_mut();
            let st = &mut *st;
            let (n, addr) = self.inner.recv(&mut st.buf)?;
            if self.stop.load(Ordering::SeqCst) {
                // whatever woke us (possibly a wake-up datagram) is not for portus any more
                return Err(portus::Error("agent stopping".into()));
            }
            let n = n.min(st.buf.len());
            // validate every message in the datagram; keep the valid ones, in order
            let mut kept = 0usize;
            let mut at = 0usize;
            let mut staged = std::mem::take(&mut st.buf);
            while at < n {
                match check_message(&staged[at..n]) {
                    Ok(len) => {
                        if kept + len > out.len() {
                            self.log_reject(st, Reject::Oversized, &staged[at..at + len]);
                        } else {
                            if u16_at(&staged, at) == CREATE {
                                normalize_create(
                                    &mut staged[at..at + len],
                                    &self.available,
                                    &self.requests,
                                    &self.stats,
                                );
                            }
                            out[kept..kept + len].copy_from_slice(&staged[at..at + len]);
                            kept += len;
                            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
                        }
                        at += len;
                    }
                    Err(r) => {
                        // the rest of the datagram cannot be framed reliably: drop it
                        self.log_reject(st, r, &staged[at..n]);
                        break;
                    }
                }
            }
            st.buf = std::mem::take(&mut staged);
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
}
