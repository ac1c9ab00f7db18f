//! A small safe wrapper around the libccp C datapath that `build.rs` compiles.
//!
//! All `unsafe` of the crate lives here. The invariants it relies on:
//!
//! 1. **Stable addresses.** The `ccp_datapath` struct, the connection table, the shared
//!    outbox and every per-connection [`ConnCtl`] are heap allocations made with
//!    `Box::into_raw` and freed only in [`Datapath::connection_free`] / `Drop`. libccp keeps
//!    raw pointers to all of them (`conn->datapath`, `conn->impl`, `dp->impl`,
//!    `dp->ccp_active_connections`), so they never move while the datapath lives.
//! 2. **Zeroed table.** The connection table is allocated zeroed (`index == 0` marks a free
//!    slot in `ccp_connection_start`); the libccp crate's wrapper mallocs it uninitialised.
//! 3. **Shared access only from callbacks.** The C callbacks touch Rust state only through
//!    `Cell`/`RefCell` behind shared references; Rust code never holds a `&mut` to these
//!    allocations, so a callback running inside a `ccp_*` call aliases nothing mutable.
//! 4. **One thread.** `Datapath` is `!Send` (raw pointers): every `ccp_*` call and every
//!    callback happens on the thread that owns it. The datapath clock is a thread-local that
//!    each method sets from the datapath's own simulated time right before calling into C, so
//!    several datapaths may live on one thread and several threads may each run their own.
//! 5. **Validated input.** Agent messages pass [`crate::proto::validate_agent_msg`] and are
//!    copied into a zero-padded scratch buffer of libccp's biggest message size before
//!    `ccp_read_msg` sees them (libccp reads the header before checking sizes).
//! 6. **No unwinding into C.** The callbacks cannot panic: they only copy bytes and set
//!    cells (`RefCell::borrow_mut` cannot fail: no callback re-enters another).

use std::cell::{Cell, RefCell};
use std::os::raw::{c_char, c_int};

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all
)]
#[doc(hidden)]
pub mod ffi {
    include!(concat!(env!("OUT_DIR"), "/libccp_bindings.rs"));
}

/// Per-ACK measurement primitives (`struct ccp_primitives`).
pub type Primitives = ffi::ccp_primitives;

/// Connection table size.
pub const MAX_CONNECTIONS: usize = 1024;
/// Program table size: libccp's off-by-one leaves 9 usable (docs/upstream-defects.md, defect 3).
pub(crate) const MAX_PROGRAMS: usize = 10;
/// Fallback timeout. It can never fire here: `send_msg` always succeeds, and libccp arms the
/// fallback only after a failed send.
const FTO_US: u64 = 60_000_000;

thread_local! {
    /// The simulated clock (ns) seen by libccp's `now`/`since_usecs`/`after_usecs`.
    static NOW_NS: Cell<u64> = const { Cell::new(0) };
}

/// What libccp's `set_cwnd`/`set_rate_abs` last asked for on one connection.
#[derive(Debug, Default)]
struct ConnCtl {
    cwnd: Cell<u32>,
    rate: Cell<u32>,
}

/// Datapath-wide state the callbacks reach through `dp->impl`.
#[derive(Default)]
struct Shared {
    outbox: RefCell<Vec<Vec<u8>>>,
    log_lines: Cell<u64>,
}

/// The simulated clock (ns) of the session this thread runs: the time of the report an agent
/// in the same thread is handling now (lockstep: the agent answers within the event that
/// produced the report). 0 before any session ran here.
pub fn sim_clock_ns() -> u64 {
    NOW_NS.with(Cell::get)
}

extern "C" fn ccpsim_now() -> u64 {
    NOW_NS.with(Cell::get)
}

extern "C" fn ccpsim_since_usecs(then: u64) -> u64 {
    NOW_NS.with(Cell::get).saturating_sub(then) / 1000
}

extern "C" fn ccpsim_after_usecs(usecs: u64) -> u64 {
    NOW_NS
        .with(Cell::get)
        .saturating_add(usecs.saturating_mul(1000))
}

extern "C" fn ccpsim_set_cwnd(conn: *mut ffi::ccp_connection, cwnd: u32) {
    // SAFETY: libccp passes a connection of our table whose `impl_` we set to a live
    // `ConnCtl` (invariants 1, 3); a null pointer is ignored.
    unsafe {
        if let Some(c) = conn.as_ref() {
            if let Some(ctl) = (c.impl_ as *const ConnCtl).as_ref() {
                ctl.cwnd.set(cwnd);
            }
        }
    }
}

extern "C" fn ccpsim_set_rate_abs(conn: *mut ffi::ccp_connection, rate: u32) {
    // SAFETY: as in `ccpsim_set_cwnd`.
    unsafe {
        if let Some(c) = conn.as_ref() {
            if let Some(ctl) = (c.impl_ as *const ConnCtl).as_ref() {
                ctl.rate.set(rate);
            }
        }
    }
}

extern "C" fn ccpsim_send_msg(dp: *mut ffi::ccp_datapath, msg: *mut c_char, size: c_int) -> c_int {
    // SAFETY: `dp` is our datapath whose `impl_` points at its live `Shared` (invariant 1);
    // libccp passes a buffer of `size` initialised bytes.
    unsafe {
        let Some(d) = dp.as_ref() else { return -1 };
        let Some(shared) = (d.impl_ as *const Shared).as_ref() else {
            return -1;
        };
        if msg.is_null() || size < 0 {
            return -1;
        }
        let bytes = std::slice::from_raw_parts(msg as *const u8, size as usize);
        shared.outbox.borrow_mut().push(bytes.to_vec());
    }
    0
}

extern "C" fn ccpsim_log(
    dp: *mut ffi::ccp_datapath,
    level: ffi::ccp_log_level,
    msg: *const c_char,
    size: c_int,
) {
    // SAFETY: as in `ccpsim_send_msg`; `msg` holds `size` bytes (snprintf output, <= 79).
    let text = unsafe {
        if let Some(shared) = dp
            .as_ref()
            .and_then(|d| (d.impl_ as *const Shared).as_ref())
        {
            shared.log_lines.set(shared.log_lines.get() + 1);
        }
        if msg.is_null() || size <= 0 {
            return;
        }
        let n = (size as usize).min(79);
        String::from_utf8_lossy(std::slice::from_raw_parts(msg as *const u8, n)).into_owned()
    };
    if level >= ffi::ccp_log_level_ERROR {
        tracing::warn!(target: "libccp", "{}", text.trim_end());
    } else {
        tracing::debug!(target: "libccp", "{}", text.trim_end());
    }
}

/// Why a libccp call failed (a negative libccp return code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LibccpError(pub i32);

/// One libccp datapath: a program table, a connection table and an outbox of messages for
/// the agent. `!Send`: it must stay on the thread that created it.
pub struct Datapath {
    dp: *mut ffi::ccp_datapath,
    conns: *mut [ffi::ccp_connection],
    shared: *mut Shared,
    /// `ctls[sid - 1]`: the live `ConnCtl` of connection `sid`, or null.
    ctls: Vec<*mut ConnCtl>,
    scratch: Box<[u8]>,
    now_ns: u64,
}

impl Datapath {
    /// Allocate and `ccp_init` a datapath at simulated time `now_ns`. The READY message is
    /// left in the outbox.
    pub fn new(id: u32, now_ns: u64) -> Result<Self, LibccpError> {
        let conns: Box<[ffi::ccp_connection]> = (0..MAX_CONNECTIONS)
            .map(|_| ffi::ccp_connection::default()) // all-zero (bindgen's Default)
            .collect();
        let conns = Box::into_raw(conns);
        let shared = Box::into_raw(Box::<Shared>::default());
        let dp = Box::into_raw(Box::new(ffi::ccp_datapath {
            set_cwnd: Some(ccpsim_set_cwnd),
            set_rate_abs: Some(ccpsim_set_rate_abs),
            send_msg: Some(ccpsim_send_msg),
            log: Some(ccpsim_log),
            time_zero: 0,
            now: Some(ccpsim_now),
            since_usecs: Some(ccpsim_since_usecs),
            after_usecs: Some(ccpsim_after_usecs),
            max_connections: MAX_CONNECTIONS,
            ccp_active_connections: conns as *mut ffi::ccp_connection,
            fto_us: FTO_US,
            last_msg_sent: 0,
            _in_fallback: false,
            max_programs: MAX_PROGRAMS,
            programs: std::ptr::null_mut(),
            impl_: shared as *mut std::os::raw::c_void,
        }));
        let me = Datapath {
            dp,
            conns,
            shared,
            ctls: vec![std::ptr::null_mut(); MAX_CONNECTIONS],
            scratch: vec![0u8; crate::proto::BIGGEST_MSG + 64].into_boxed_slice(),
            now_ns,
        };
        me.enter();
        // SAFETY: `dp` is fully initialised with valid callbacks and a zeroed table of
        // `max_connections` entries (invariants 1, 2); ccp_init callocs the program table.
        let ret = unsafe { ffi::ccp_init(me.dp, id) };
        if ret < 0 {
            // ccp_init failed before allocating programs; Drop frees what we allocated.
            return Err(LibccpError(ret));
        }
        Ok(me)
    }

    /// Set the datapath clock (ns of simulated time). Must not go backwards.
    pub fn set_now(&mut self, now_ns: u64) {
        debug_assert!(now_ns >= self.now_ns, "simulated time went backwards");
        self.now_ns = now_ns;
    }

    fn enter(&self) {
        NOW_NS.with(|c| c.set(self.now_ns));
    }

    fn conn_ptr(&self, sid: u16) -> Option<*mut ffi::ccp_connection> {
        let i = (sid as usize).checked_sub(1)?;
        if i >= MAX_CONNECTIONS || self.ctls[i].is_null() {
            return None;
        }
        // SAFETY: `i` is in bounds of the table (invariant 1).
        Some(unsafe { (self.conns as *mut ffi::ccp_connection).add(i) })
    }

    /// Start a connection: libccp puts a CREATE (carrying `cong_alg`, at most 63 bytes) into
    /// the outbox. Returns the socket id, or `None` when the table is full.
    pub fn connection_start(&mut self, init_cwnd: u32, mss: u32, cong_alg: &str) -> Option<u16> {
        let mut info = ffi::ccp_datapath_info {
            init_cwnd,
            mss,
            ..Default::default()
        };
        let name = cong_alg.as_bytes();
        let n = name.len().min(info.congAlg.len() - 1);
        for (d, s) in info.congAlg.iter_mut().zip(&name[..n]) {
            *d = *s as c_char;
        }
        let ctl = Box::into_raw(Box::new(ConnCtl {
            cwnd: Cell::new(init_cwnd),
            rate: Cell::new(0),
        }));
        self.enter();
        // SAFETY: `dp` is initialised (invariant 1); `info` is copied by libccp; `ctl` stays
        // alive until connection_free or Drop.
        let conn = unsafe {
            ffi::ccp_connection_start(self.dp, ctl as *mut std::os::raw::c_void, &mut info)
        };
        // SAFETY: a non-null result points into our table.
        let sid = unsafe { conn.as_ref() }.map(|c| c.index);
        match sid {
            Some(sid) if sid >= 1 && (sid as usize) <= MAX_CONNECTIONS => {
                self.ctls[sid as usize - 1] = ctl;
                Some(sid)
            }
            _ => {
                // SAFETY: libccp did not keep `ctl` (no connection was made).
                drop(unsafe { Box::from_raw(ctl) });
                None
            }
        }
    }

    /// Load `prims` into connection `sid` and run `ccp_invoke`. Returns libccp's code.
    pub fn invoke(&mut self, sid: u16, prims: &Primitives) -> i32 {
        let Some(conn) = self.conn_ptr(sid) else {
            return ffi::LIBCCP_UNKNOWN_CONNECTION;
        };
        self.enter();
        // SAFETY: `conn` is a live connection of our table (invariant 1); the callbacks
        // touch only `Cell`s (invariant 3).
        unsafe {
            (*conn).prims = *prims;
            ffi::ccp_invoke(conn)
        }
    }

    /// The cwnd (bytes) libccp last set on `sid` (initially the CREATE's init_cwnd).
    pub fn cwnd(&self, sid: u16) -> u32 {
        self.ctl(sid).map_or(0, |c| c.cwnd.get())
    }

    /// The pacing rate (bytes/s) libccp last set on `sid`, 0 if never.
    pub fn rate(&self, sid: u16) -> u32 {
        self.ctl(sid).map_or(0, |c| c.rate.get())
    }

    fn ctl(&self, sid: u16) -> Option<&ConnCtl> {
        let p = *self.ctls.get((sid as usize).checked_sub(1)?)?;
        // SAFETY: non-null entries are live boxes (invariant 1), read through `&` only.
        unsafe { p.as_ref() }
    }

    /// Hand one agent message to `ccp_read_msg`. Messages that fail validation are not
    /// passed on: `Err` carries the reason. `Ok` carries libccp's return code (negative:
    /// libccp rejected it, e.g. an unknown socket id).
    pub fn read_msg(&mut self, msg: &[u8]) -> Result<i32, &'static str> {
        crate::proto::validate_agent_msg(msg)?;
        let n = msg.len();
        if n > self.scratch.len() {
            return Err("message longer than the receive buffer");
        }
        self.scratch[..n].copy_from_slice(msg);
        self.scratch[n..].fill(0);
        self.enter();
        // SAFETY: the scratch buffer holds the validated message, zero-padded to libccp's
        // biggest message size (invariant 5); `dp` is initialised.
        let ret = unsafe {
            ffi::ccp_read_msg(
                self.dp,
                self.scratch.as_mut_ptr() as *mut c_char,
                self.scratch.len() as c_int,
            )
        };
        Ok(ret)
    }

    /// Free connection `sid` (libccp sends a close, a MEASURE with no fields).
    pub fn connection_free(&mut self, sid: u16) {
        if self.conn_ptr(sid).is_none() {
            return;
        }
        self.enter();
        // SAFETY: `sid` is live; libccp frees its private state and marks the slot free.
        unsafe { ffi::ccp_connection_free(self.dp, sid) };
        let i = sid as usize - 1;
        // SAFETY: the slot is free, libccp no longer uses `impl_`; the box was ours.
        drop(unsafe { Box::from_raw(self.ctls[i]) });
        self.ctls[i] = std::ptr::null_mut();
    }

    /// Take every message libccp sent since the last call, in order.
    pub fn take_outbox(&mut self) -> Vec<Vec<u8>> {
        // SAFETY: `shared` is live (invariant 1); no callback runs now.
        unsafe { std::mem::take(&mut *(*self.shared).outbox.borrow_mut()) }
    }

    /// How many lines libccp logged (warnings and errors).
    pub fn log_lines(&self) -> u64 {
        // SAFETY: `shared` is live (invariant 1).
        unsafe { (*self.shared).log_lines.get() }
    }
}

impl Drop for Datapath {
    fn drop(&mut self) {
        for sid in 1..=MAX_CONNECTIONS as u16 {
            if !self.ctls[sid as usize - 1].is_null() {
                self.connection_free(sid);
            }
        }
        self.enter();
        // SAFETY: all connections are freed; `ccp_free` frees the program table (calloc'd
        // by ccp_init, or null, which free() accepts). Then our own allocations go, in
        // reverse order of use.
        unsafe {
            ffi::ccp_free(self.dp);
            drop(Box::from_raw(self.dp));
            drop(Box::from_raw(self.conns));
            drop(Box::from_raw(self.shared));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto;

    #[test]
    fn init_sends_ready_and_create_carries_name() {
        let mut dp = Datapath::new(7, 0).unwrap();
        let out = dp.take_outbox();
        assert_eq!(out.len(), 1);
        let h = proto::header(&out[0]).unwrap();
        assert_eq!((h.typ, h.len), (proto::READY, 12));
        let sid = dp
            .connection_start(15000, 1500, "cubic;w=0.4,0.5,0.1")
            .unwrap();
        assert_eq!(sid, 1);
        let out = dp.take_outbox();
        assert_eq!(out.len(), 1);
        let h = proto::header(&out[0]).unwrap();
        assert_eq!((h.typ, h.sid), (proto::CREATE, 1));
        let name = &out[0][8 + 24..8 + 24 + 64];
        let end = name.iter().position(|&b| b == 0).unwrap();
        assert_eq!(&name[..end], b"cubic;w=0.4,0.5,0.1");
        assert_eq!(dp.cwnd(sid), 15000);
        // a second datapath on the same thread gets its own, zeroed table
        let mut dp2 = Datapath::new(8, 0).unwrap();
        assert_eq!(dp2.connection_start(1500, 1500, "ccp"), Some(1));
        dp.connection_free(sid);
        let out = dp.take_outbox();
        assert_eq!(proto::measure_num_fields(&out[0]), Some(0));
        assert_eq!(dp.connection_start(1500, 1500, "ccp"), Some(1));
    }

    #[test]
    fn invoke_without_program_is_harmless_and_unknown_sid_rejected() {
        let mut dp = Datapath::new(1, 1_000).unwrap();
        let sid = dp.connection_start(15000, 1500, "ccp").unwrap();
        dp.take_outbox();
        let prims = Primitives {
            snd_cwnd: 15000,
            ..Default::default()
        };
        dp.set_now(2_000_000);
        assert!(dp.invoke(sid, &prims) < 0); // no program yet
        assert!(dp.take_outbox().is_empty());
        assert_eq!(dp.invoke(99, &prims), ffi::LIBCCP_UNKNOWN_CONNECTION);
        // an UPDATE_FIELDS for an unknown connection is refused by libccp
        let mut m = Vec::new();
        m.extend_from_slice(&proto::UPDATE_FIELDS.to_le_bytes());
        m.extend_from_slice(&12u16.to_le_bytes());
        m.extend_from_slice(&42u32.to_le_bytes());
        m.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(dp.read_msg(&m), Ok(ffi::LIBCCP_UNKNOWN_CONNECTION));
        assert!(dp.read_msg(&m[..5]).is_err());
    }
}
