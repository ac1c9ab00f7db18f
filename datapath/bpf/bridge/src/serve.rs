//! The bridge's loop over the pinned maps of a loaded BPF datapath (`ccp-bpf load`).
//!
//! One thread sleeps in `poll(2)` on two descriptors: the ring buffer's epoll descriptor
//! (readable when the BPF programs have put records there) and the agent's (readable when the
//! agent has sent something: the standalone bridge's unix socket, or the [`Wake`] eventfd that
//! the agent's in-process channel writes after each message, `ccp-agent --ipc bpf`). Nothing
//! polls on a timer: an idle bridge wakes only every [`IDLE_WAKE`] (to see a stop request and
//! retry a lost agent).
//!
//! Each wake-up: every record in the ring (checked, then [`Bridge::on_record`]), what libccp
//! queued sent to the agent, every message the agent has sent handled, what that queued sent.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use ccp_libccp::DatapathIpc;
use libbpf_rs::{MapCore, MapFlags, MapHandle, RingBufferBuilder};
use tracing::{info, warn};

use crate::record::{self, Decision, Record};
use crate::{Bridge, BridgeStats, DecisionSink};

/// Where `ccp-bpf load` pins the maps.
pub const DEFAULT_PINS: &str = "/sys/fs/bpf/ccp";
/// Longest sleep without records or agent messages.
pub const IDLE_WAKE: Duration = Duration::from_millis(100);

/// The three maps of a loaded datapath, opened from their pins.
pub struct Pins {
    reports: MapHandle,
    decisions: MapHandle,
}

fn open(pins: &Path, name: &str) -> anyhow::Result<MapHandle> {
    let p = pins.join(name);
    MapHandle::from_pinned_path(&p).with_context(|| {
        format!(
            "{}: is the BPF datapath loaded (`ccp-bpf load`, datapath/bpf/README.md)? \
             Its pins are root's only",
            p.display()
        )
    })
}

impl Pins {
    /// Open the pins under `dir`, refusing a datapath of another ABI.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let stats = open(dir, "stats")?;
        let key = 0u32.to_le_bytes();
        // per CPU since ABI 4, `abi` the same in each copy; one shared entry before (read
        // only to name its ABI below)
        let v = if stats.map_type().is_percpu() {
            stats
                .lookup_percpu(&key, MapFlags::ANY)?
                .and_then(|per| per.into_iter().next())
        } else {
            stats.lookup(&key, MapFlags::ANY)?
        }
        .context("the stats map has no entry 0")?;
        match record::stats_abi(&v) {
            Some(record::ABI) => {}
            other => bail!(
                "the loaded BPF datapath has ABI {other:?}, this agent speaks {}: \
                 load the datapath built from the same tree (ccp-bpf unload; ccp-bpf load)",
                record::ABI
            ),
        }
        Ok(Pins {
            reports: open(dir, "reports")?,
            decisions: open(dir, "decisions")?,
        })
    }

    /// Whether `dir` looks like a loaded datapath's pins (for detection; not a check).
    pub fn present(dir: &Path) -> bool {
        dir.join("reports").exists() && dir.join("decisions").exists()
    }
}

/// Decisions into the pinned hash map "decisions".
struct MapSink<'a>(&'a MapHandle);

impl DecisionSink for MapSink<'_> {
    fn write(&mut self, flow: u32, d: &Decision) -> anyhow::Result<()> {
        let Some(v) = d.to_bytes() else {
            bail!("decision out of range");
        };
        self.0.update(&flow.to_le_bytes(), &v, MapFlags::ANY)?;
        Ok(())
    }
    fn remove(&mut self, flow: u32) {
        // the datapath deletes it on close too: a missing entry is fine
        let _ = self.0.delete(&flow.to_le_bytes());
    }
}

/// An eventfd the in-process agent writes after each message it sends.
#[derive(Debug)]
pub struct Wake(OwnedFd);

impl Wake {
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd(2) takes no pointers; a non-negative return is a new descriptor
        // this process owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Make the descriptor readable (the counter saturates; a full counter is still readable).
    pub fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to a descriptor we own.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    fn clear(&self) {
        let mut b = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live 8-byte buffer (non-blocking descriptor).
        let _ = unsafe { libc::read(self.0.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) };
    }
}

/// What tells the loop that the agent has sent something.
pub enum AgentReady<'a> {
    /// A socket the agent's messages arrive on (read by the ipc itself).
    Socket(RawFd),
    /// An eventfd the agent's sender writes (the in-process channel).
    Event(&'a Wake),
}

impl AgentReady<'_> {
    fn fd(&self) -> RawFd {
        match self {
            AgentReady::Socket(fd) => *fd,
            AgentReady::Event(w) => w.0.as_raw_fd(),
        }
    }
}

/// `CLOCK_MONOTONIC` in ns: the clock of the records (`bpf_ktime_get_ns`).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec into a live local.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0; // none stale
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Wait until one of `fds` is readable or `timeout` passes (EINTR is a wake-up).
fn wait(fds: [RawFd; 2], timeout: Duration) -> io::Result<()> {
    let mut p = fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `p` is a live array of two pollfd structs; its length is passed with it.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// Bridge the datapath behind `pins` and the agent behind `ipc` until `stop` is set or the
/// agent's end fails for good (the in-process channel closed). Returns the counters; while it
/// runs, `published` holds a copy of them as of the last wake-up (copied only when the lock is
/// free: a reader never holds the bridge up).
pub fn serve<I: DatapathIpc>(
    pins: &Pins,
    ipc: I,
    ready: AgentReady<'_>,
    stop: &AtomicBool,
    published: &Mutex<BridgeStats>,
) -> anyhow::Result<BridgeStats> {
    let mut bridge = Bridge::new(ipc, MapSink(&pins.decisions))?;
    let queue: Rc<RefCell<Vec<Vec<u8>>>> = Rc::new(RefCell::new(Vec::new()));
    let q = queue.clone();
    let mut rb = RingBufferBuilder::new();
    rb.add(&pins.reports, move |data: &[u8]| {
        q.borrow_mut().push(data.to_vec());
        0
    })?;
    let rb = rb.build()?;
    let fds = [rb.epoll_fd(), ready.fd()];
    info!("bridging the BPF datapath");
    bridge.flush();
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        if let Err(e) = wait(fds, IDLE_WAKE) {
            break Err(anyhow::Error::from(e).context("poll"));
        }
        if let Err(e) = rb.consume() {
            warn!(error = %e, "ring buffer");
        }
        bridge.set_datapath_clock(monotonic_ns());
        let batch = std::mem::take(&mut *queue.borrow_mut());
        for raw in batch {
            match Record::parse(&raw) {
                Ok(r) => bridge.on_record(&r),
                Err(e) => {
                    bridge.stats.bad_records += 1;
                    warn!(error = %e, "record refused");
                }
            }
        }
        bridge.flush();
        if let AgentReady::Event(w) = &ready {
            w.clear();
        }
        if let Err(e) = bridge.pump_ready() {
            // the agent's end closes when it stops: not an error once a stop was asked for
            if stop.load(Ordering::Relaxed) {
                break Ok(());
            }
            break Err(e.context("the agent's end"));
        }
        bridge.flush();
        if let Ok(mut p) = published.try_lock() {
            p.clone_from(&bridge.stats);
        }
    };
    info!(stats = ?bridge.stats, flows = bridge.flows(), "bridge stopping");
    result.map(|()| bridge.stats.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eventfd_wakes_a_waiter_and_clears() {
        let w = Wake::new().unwrap();
        let idle = Wake::new().unwrap();
        let fds = [idle.0.as_raw_fd(), w.0.as_raw_fd()];
        let readable = |fd: RawFd| {
            let mut p = [libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }];
            // SAFETY: one live pollfd, timeout 0
            unsafe { libc::poll(p.as_mut_ptr(), 1, 0) == 1 }
        };
        assert!(!readable(fds[1]));
        w.wake();
        w.wake();
        assert!(readable(fds[1]));
        wait(fds, Duration::from_secs(5)).unwrap();
        w.clear();
        assert!(!readable(fds[1]));
        assert!(!readable(fds[0]));
    }
}
