//! The agent's unix datagram socket (`--ipc unix`): portus's `ipc::unix` with the hardening
//! issue 25 asks for.
//!
//! - **Names** are plain file names under `/tmp/ccp/`: 1 to [`MAX_NAME_LEN`] bytes of ASCII
//!   letters, digits, `.`, `_` and `-`, not starting with `.` ([`check_name`]). portus joins
//!   any string onto `/tmp/ccp/` and unlinks whatever is there.
//! - **No stealing**: an existing `/tmp/ccp/<name>` is replaced only if it is a socket that
//!   nobody holds (a connect to it is refused); a socket another process holds, or any other
//!   kind of file, is an error ([`BindError`]). `/tmp/ccp` itself must be a directory, not a
//!   symlink.
//! - **Per-datapath send budgets** (issue 42): answers to each datapath leave through a
//!   socket of their own, connected to it and never blocking. A datagram in flight is charged
//!   to the socket that sent it until its receiver reads it, so with one shared socket the
//!   unread answers of datapaths that never read filled the agent's send buffer and every
//!   other datapath's answers failed with it. Now a datapath's unread answers fill only its
//!   own socket; what its receive queue cannot take waits in its outbox (at most
//!   [`PEER_BUDGET_BYTES`] / [`PEER_BUDGET_MSGS`]), flushed as soon as it reads (the receive
//!   loop polls for that). A datapath whose outbox is over budget, or has not moved for
//!   [`SEND_TIMEOUT`], is not reading: its send fails at once, without waiting, and the guard
//!   drops it (see [`crate::ipc::guard`]). No send ever makes the agent wait.
//! - **Reports before set-up, datapaths in turn** (issue 42): all datapaths share the one
//!   bound socket, read in arrival order, so a healthy datapath's report waited behind every
//!   CREATE queued before it: 100 hostile datapaths opening flows as fast as they can put
//!   tens of CREATEs (each a controller built and a program installed, ~30 µs) ahead of it,
//!   p99 1 ms on 2 cores. When the datagram the agent reads is not a report (a CREATE, a
//!   READY), it first takes what else is waiting (at most [`STAGE_MAX_MSGS`] datagrams,
//!   [`STAGE_MAX_BYTES`]) into one queue per datapath, and then serves: a datagram waiting
//!   [`STAGE_MAX_WAIT`] or longer, oldest first; else a report, datapaths in turn; else a
//!   set-up message, datapaths in turn. Each datapath's own datagrams keep their order;
//!   reports need no wait to be taken (nothing is staged while only reports come).
//! - **Liveness** ([`peer_gone`]): whether a datapath's socket is still there, asked without
//!   sending to it (the guard asks every [`crate::ipc::guard::LIVENESS_EVERY`]).
//! - Receives time out after [`RECV_TIMEOUT`], so a stop request is seen promptly.
//! - Before a receive blocks it spins while reports keep coming ([`crate::ipc::spin`]:
//!   200 µs at most by default, [`UnixSocket::set_spin`]).
//! - The socket file is removed when the agent closes the socket (if it is still ours).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::spin::Spin;

/// Where portus's unix backend (and so every CCP unix datapath) puts its sockets.
pub const SOCKET_DIR: &str = "/tmp/ccp";
/// Longest socket name.
pub const MAX_NAME_LEN: usize = 64;
/// Longest a datapath's outbox may wait without the datapath reading any of it; after that
/// its sends fail (it is not reading). No send waits: this is how long answers are kept.
pub const SEND_TIMEOUT: Duration = Duration::from_millis(250);
/// Most bytes of answers waiting for one datapath (beyond what its receive queue holds).
pub const PEER_BUDGET_BYTES: usize = 256 * 1024;
/// Most answers waiting for one datapath.
pub const PEER_BUDGET_MSGS: usize = 4096;
/// Most datapaths with a sending socket at once (the least recently used one without
/// waiting answers is closed first; one with waiting answers after that).
pub const MAX_PEER_SOCKETS: usize = 2 * crate::ipc::guard::MAX_DATAPATHS;
/// While datagrams keep coming, the outboxes are flushed at least this often (else
/// whenever the socket is idle).
pub const FLUSH_EVERY: Duration = Duration::from_millis(1);
/// Longest a receive waits (the run loop checks for a stop request in between).
pub const RECV_TIMEOUT: Duration = Duration::from_millis(250);
/// Most datagrams taken off the socket ahead of serving them (see the module docs).
pub const STAGE_MAX_MSGS: usize = 1024;
/// Most bytes of them.
pub const STAGE_MAX_BYTES: usize = 1 << 20;
/// A datagram staged this long is served before any other (oldest first): set-up messages
/// wait for reports at most this long.
pub const STAGE_MAX_WAIT: Duration = Duration::from_millis(10);

/// Datagrams taken off the socket and not yet served: one queue per datapath, the
/// datapaths in turn (see the module docs).
#[derive(Debug)]
struct Stage {
    queues: HashMap<PathBuf, VecDeque<Staged>>,
    /// Datapaths with something queued, in the order they are served.
    ring: VecDeque<PathBuf>,
    count: usize,
    bytes: usize,
    /// [`STAGE_MAX_WAIT`] (longer in tests that must not depend on the scheduler).
    max_wait: Duration,
}

impl Default for Stage {
    fn default() -> Self {
        Self {
            queues: HashMap::new(),
            ring: VecDeque::new(),
            count: 0,
            bytes: 0,
            max_wait: STAGE_MAX_WAIT,
        }
    }
}

#[derive(Debug)]
struct Staged {
    data: Vec<u8>,
    at: Instant,
}

/// Is the datagram a report or a close (its first message a MEASURE: served first) rather
/// than a set-up message?
fn is_report(d: &[u8]) -> bool {
    d.len() >= 2 && crate::ipc::guard::u16_at(d, 0) == crate::ipc::guard::MEASURE
}

impl Stage {
    fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn full(&self) -> bool {
        self.count >= STAGE_MAX_MSGS || self.bytes >= STAGE_MAX_BYTES
    }

    fn push(&mut self, from: PathBuf, data: Vec<u8>, at: Instant) {
        self.count += 1;
        self.bytes += data.len();
        let q = self.queues.entry(from.clone()).or_default();
        if q.is_empty() {
            self.ring.push_back(from);
        }
        q.push_back(Staged { data, at });
    }

    /// Is some datapath's next datagram a report?
    fn report_at_head(&self) -> bool {
        self.queues
            .values()
            .any(|q| q.front().is_some_and(|s| is_report(&s.data)))
    }

    /// The next datagram to serve and its sender (see the module docs).
    fn pop(&mut self, now: Instant) -> Option<(Vec<u8>, PathBuf)> {
        // one pass over the datapaths' heads: the oldest, and the first report in turn
        let mut oldest: Option<(usize, Instant)> = None;
        let mut report = None;
        for (i, p) in self.ring.iter().enumerate() {
            let Some(s) = self.queues.get(p).and_then(|q| q.front()) else {
                continue;
            };
            if oldest.is_none_or(|(_, at)| s.at < at) {
                oldest = Some((i, s.at));
            }
            if report.is_none() && is_report(&s.data) {
                report = Some(i);
            }
        }
        let aged = oldest
            .filter(|(_, at)| now.saturating_duration_since(*at) >= self.max_wait)
            .map(|(i, _)| i);
        let i = aged.or(report).or((!self.ring.is_empty()).then_some(0))?;
        let from = self.ring.remove(i)?;
        let q = self.queues.get_mut(&from)?;
        let s = q.pop_front()?;
        if q.is_empty() {
            self.queues.remove(&from);
        } else {
            // its next datagram waits for the others' turns
            self.ring.push_back(from.clone());
        }
        self.count -= 1;
        self.bytes -= s.data.len();
        Some((s.data, from))
    }
}

/// Why the agent's socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("--unix-name {name:?}: {why} (use 1 to {MAX_NAME_LEN} letters, digits, '.', '_' or '-', not starting with '.')")]
    BadName { name: String, why: &'static str },
    #[error("{path} is in use by another live process (another ccp-agent?): stop it or choose another --unix-name")]
    InUse { path: PathBuf },
    #[error("{path} exists and is not a socket: refusing to replace it (remove it, or choose another --unix-name)")]
    NotASocket { path: PathBuf },
    #[error("{path} is not a directory (a symlink or a file): refusing to put sockets there")]
    BadDir { path: PathBuf },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Check a socket name: a plain, printable file name (see the module docs).
pub fn check_name(name: &str) -> Result<(), BindError> {
    let bad = |why| {
        Err(BindError::BadName {
            name: name.to_string(),
            why,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("too long");
    }
    if name.starts_with('.') {
        return bad("starts with '.'");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("not a plain file name");
    }
    Ok(())
}

/// The agent's bound socket; a portus [`portus::ipc::Ipc`] (type `unix`).
#[derive(Debug)]
pub struct UnixSocket {
    sock: UnixDatagram,
    path: PathBuf,
    /// Inode of the socket file we bound (so close removes only our own file).
    ino: u64,
    /// Each datapath's sending socket and outbox (only the portus thread uses them; the
    /// lock makes the type `Sync` for portus).
    out: Mutex<HashMap<PathBuf, PeerOut>>,
    /// When the outboxes were last flushed while datagrams kept coming.
    last_flush: Mutex<Instant>,
    /// Spinning before a receive blocks.
    spin: Spin,
    /// Datagrams read and not yet served, and a buffer to read them into.
    stage: Mutex<(Stage, Vec<u8>)>,
}

/// Answers to one datapath: a socket connected to it (non-blocking) and what waits.
#[derive(Debug)]
struct PeerOut {
    sock: UnixDatagram,
    queue: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Since when the head of the queue has waited without the datapath reading.
    stuck_since: Option<Instant>,
    last_used: Instant,
}

impl PeerOut {
    fn open(to: &Path, now: Instant) -> io::Result<Self> {
        let sock = UnixDatagram::unbound()?;
        sock.connect(to)?;
        sock.set_nonblocking(true)?;
        Ok(Self {
            sock,
            queue: VecDeque::new(),
            bytes: 0,
            stuck_since: None,
            last_used: now,
        })
    }

    /// Send what waits, in order, until the datapath's queue is full; an error means the
    /// datapath is gone (its socket closed).
    fn flush(&mut self, now: Instant) -> io::Result<()> {
        while let Some(m) = self.queue.front() {
            match self.sock.send(m) {
                Ok(_) => {
                    self.bytes -= m.len();
                    self.queue.pop_front();
                    // it reads: the wait starts again for what is left
                    self.stuck_since = (!self.queue.is_empty()).then_some(now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Send `msg` now or queue it within the budget; an error says why the datapath cannot
    /// take it (gone, or not reading).
    fn send(&mut self, msg: &[u8], now: Instant) -> io::Result<()> {
        self.last_used = now;
        self.flush(now)?;
        if self.queue.is_empty() {
            match self.sock.send(msg) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        let waited = self
            .stuck_since
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        if waited >= SEND_TIMEOUT
            || self.queue.len() >= PEER_BUDGET_MSGS
            || self.bytes.saturating_add(msg.len()) > PEER_BUDGET_BYTES
        {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "the datapath is not reading: {} answers ({} bytes) unread for {} ms \
                     (its send budget: {PEER_BUDGET_MSGS} answers, {PEER_BUDGET_BYTES} bytes, \
                     {} ms)",
                    self.queue.len(),
                    self.bytes,
                    waited.as_millis(),
                    SEND_TIMEOUT.as_millis()
                ),
            ));
        }
        if self.queue.is_empty() {
            self.stuck_since = Some(now);
        }
        self.bytes += msg.len();
        self.queue.push_back(msg.to_vec());
        Ok(())
    }
}

/// Is the datapath whose socket is bound at `path` gone? Asked without sending to it: a
/// connect to its path is refused (its socket closed, the file left behind) or finds no
/// file (it removed it). Anything else (it is there; no permission to ask) is not gone.
pub fn peer_gone(path: &Path) -> bool {
    let Ok(probe) = UnixDatagram::unbound() else {
        return false;
    };
    matches!(
        probe.connect(path).map_err(|e| e.kind()),
        Err(io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound)
    )
}

impl UnixSocket {
    /// Bind `/tmp/ccp/<name>` (see the module docs for what is refused).
    pub fn bind(name: &str) -> Result<Self, BindError> {
        Self::bind_in(Path::new(SOCKET_DIR), name)
    }

    /// Bind `<dir>/<name>`, creating `dir` if needed.
    pub fn bind_in(dir: &Path, name: &str) -> Result<Self, BindError> {
        check_name(name)?;
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| BindError::Io { what, path, source }
        };
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        let meta = std::fs::symlink_metadata(dir).map_err(io("reading", dir))?;
        if !meta.is_dir() {
            return Err(BindError::BadDir { path: dir.into() });
        }
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_socket() => {
                // someone bound it: held (a connect succeeds) or stale (refused)
                let probe = UnixDatagram::unbound().map_err(io("probing", &path))?;
                match probe.connect(&path) {
                    Ok(()) => return Err(BindError::InUse { path }),
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                        std::fs::remove_file(&path).map_err(io("removing the stale", &path))?;
                    }
                    Err(e) => return Err(io("probing", &path)(e)),
                }
            }
            Ok(_) => return Err(BindError::NotASocket { path }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("reading", &path)(e)),
        }
        let sock = UnixDatagram::bind(&path).map_err(io("binding", &path))?;
        sock.set_nonblocking(true)
            .map_err(io("making non-blocking", &path))?;
        let ino = std::fs::symlink_metadata(&path)
            .map(|m| m.ino())
            .unwrap_or(0);
        Ok(Self {
            sock,
            path,
            ino,
            out: Mutex::new(HashMap::new()),
            last_flush: Mutex::new(Instant::now()),
            spin: Spin::default(),
            stage: Mutex::new((Stage::default(), Vec::new())),
        })
    }

    /// Spin as `spin` says before a receive blocks (the default: up to
    /// [`super::spin::DEFAULT_MAX`] while reports keep coming).
    pub fn set_spin(&mut self, spin: Spin) {
        self.spin = spin;
    }

    /// The spin's statistics (CPU spent spinning, hits, misses).
    pub fn spin_stats(&self) -> std::sync::Arc<super::spin::SpinStats> {
        self.spin.stats()
    }

    /// Datapaths with answers waiting (tests, the soak).
    pub fn backlogged_peers(&self) -> usize {
        self.out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|p| !p.queue.is_empty())
            .count()
    }

    /// Datapaths whose answers have waited [`SEND_TIMEOUT`] or more without them reading
    /// any: they are not reading. Their sending sockets and outboxes are closed here (the
    /// memory goes at once); the guard drops them as after a failed send.
    pub fn take_stuck(&self) -> Vec<PathBuf> {
        let now = Instant::now();
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let stuck: Vec<PathBuf> = out
            .iter()
            .filter(|(_, p)| {
                p.stuck_since
                    .is_some_and(|t| now.saturating_duration_since(t) >= SEND_TIMEOUT)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in &stuck {
            out.remove(k);
        }
        stuck
    }

    /// Datagrams read off the socket and not yet served (tests).
    pub fn staged(&self) -> usize {
        self.stage.lock().unwrap_or_else(|e| e.into_inner()).0.count
    }

    /// Take what waits on the socket into `stage`, within its bounds, without waiting.
    /// Datagrams from unbound senders are discarded (they cannot be answered).
    fn take_waiting(&self, stage: &mut Stage, buf: &mut Vec<u8>) {
        if buf.is_empty() {
            buf.resize(64 * 1024, 0);
        }
        while !stage.full() {
            match self.sock.recv_from(buf) {
                Ok((n, addr)) => {
                    if let Some(p) = addr.as_pathname() {
                        stage.push(p.to_path_buf(), buf[..n].to_vec(), Instant::now());
                    }
                }
                // nothing more (WouldBlock), or an error the next receive reports
                Err(_) => return,
            }
        }
    }

    /// Is a report waiting (one datapath's next datagram)? What waits on the socket is
    /// staged to find out: the guard hands portus a dropped datapath's closes only after
    /// waiting reports.
    pub fn report_waiting(&self) -> bool {
        let mut guard = self.stage.lock().unwrap_or_else(|e| e.into_inner());
        let (stage, buf) = &mut *guard;
        self.take_waiting(stage, buf);
        stage.report_at_head()
    }

    /// Is a datagram waiting, on the bound socket or staged (nothing read)?
    pub fn readable_now(&self) -> bool {
        if self.staged() > 0 {
            return true;
        }
        let mut fd = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call, no wait
        unsafe { libc::poll(&mut fd, 1, 0) > 0 }
    }

    /// Wait (at most `limit`) until the bound socket is readable, flushing the outboxes of
    /// datapaths that read meanwhile; `true` if it is readable.
    fn wait_readable(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let mut fds = vec![libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            let mut waiting = Vec::new();
            for (to, p) in out.iter() {
                if !p.queue.is_empty() {
                    fds.push(libc::pollfd {
                        fd: p.sock.as_raw_fd(),
                        events: libc::POLLOUT,
                        revents: 0,
                    });
                    waiting.push(to.clone());
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the call
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted && !left.is_zero() {
                    continue;
                }
                return false;
            }
            let now = Instant::now();
            for (pfd, to) in fds[1..].iter().zip(&waiting) {
                if pfd.revents == 0 {
                    continue;
                }
                let gone = out.get_mut(to).is_some_and(|p| p.flush(now).is_err());
                if gone {
                    // its answers have nobody to go to; the guard finds it gone itself
                    out.remove(to);
                }
            }
            if fds[0].revents != 0 {
                return true;
            }
            if n == 0 || left.is_zero() {
                return false;
            }
        }
    }

    /// Make room for one more sending socket: close the least recently used one, preferring
    /// one without waiting answers.
    fn make_room(out: &mut HashMap<PathBuf, PeerOut>) {
        if out.len() < MAX_PEER_SOCKETS {
            return;
        }
        let victim = out
            .iter()
            .min_by_key(|(_, p)| (!p.queue.is_empty(), p.last_used))
            .map(|(k, _)| k.clone());
        if let Some(k) = victim {
            out.remove(&k);
        }
    }

    /// Is it time to flush the outboxes while datagrams keep coming ([`FLUSH_EVERY`])?
    fn flush_due(&self, now: Instant) -> bool {
        let mut last = self.last_flush.lock().unwrap_or_else(|e| e.into_inner());
        let due = now.saturating_duration_since(*last) >= FLUSH_EVERY;
        if due {
            *last = now;
        }
        due
    }

    /// Copy the next staged datagram into `msg` (truncated to it, as a receive would).
    fn serve(stage: &mut Stage, msg: &mut [u8]) -> portus::Result<(usize, PathBuf)> {
        let (data, from) = stage
            .pop(Instant::now())
            .ok_or_else(|| portus::Error(String::from("no datagram staged")))?;
        let n = data.len().min(msg.len());
        msg[..n].copy_from_slice(&data[..n]);
        Ok((n, from))
    }

    /// The bound path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn unlink_if_ours(&self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl portus::ipc::Ipc for UnixSocket {
    type Addr = PathBuf;

    fn name() -> String {
        String::from("unix")
    }

    fn send(&self, msg: &[u8], to: &Self::Addr) -> portus::Result<()> {
        let now = Instant::now();
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if !out.contains_key(to) {
            Self::make_room(&mut out);
            let p = PeerOut::open(to, now).map_err(portus::Error::from)?;
            out.insert(to.clone(), p);
        }
        let mut r = match out.get_mut(to) {
            Some(p) => p.send(msg, now),
            None => Ok(()),
        };
        if r.as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::ConnectionRefused)
        {
            // the socket it was connected to closed: a datapath bound there again gets a
            // new connection (if none is there, the connect says so)
            out.remove(to);
            r = PeerOut::open(to, now).and_then(|mut p| {
                let r = p.send(msg, now);
                out.insert(to.clone(), p);
                r
            });
        }
        if let Err(e) = r {
            // gone or not reading: what waited for it goes (the guard drops the datapath)
            out.remove(to);
            return Err(portus::Error::from(e));
        }
        Ok(())
    }

    fn recv(&self, msg: &mut [u8]) -> portus::Result<(usize, Self::Addr)> {
        // a datagram waiting is taken at once; the outboxes are flushed by a poll of their
        // own at least every FLUSH_EVERY meanwhile, and whenever the socket is idle
        let now = Instant::now();
        {
            let mut guard = self.stage.lock().unwrap_or_else(|e| e.into_inner());
            let (stage, buf) = &mut *guard;
            if !stage.is_empty() {
                self.take_waiting(stage, buf);
                if self.flush_due(now) {
                    self.wait_readable(Duration::ZERO);
                }
                return Self::serve(stage, msg);
            }
        }
        let got = match (self.flush_due(now), self.sock.recv_from(msg)) {
            (false, Ok(r)) => Ok(r),
            (true, Ok(r)) => {
                self.wait_readable(Duration::ZERO);
                Ok(r)
            }
            (_, Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                let spun = self.spin.spin(now, || match self.sock.recv_from(msg) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
                    r => Some(r),
                });
                match spun {
                    Some(r) => r,
                    None => {
                        let readable = self.wait_readable(RECV_TIMEOUT);
                        self.spin.record(now.elapsed());
                        if !readable {
                            return Err(portus::Error(String::from(
                                "no datagram (receive timeout)",
                            )));
                        }
                        self.sock.recv_from(msg)
                    }
                }
            }
            (_, Err(e)) => Err(e),
        };
        let (n, addr) = got.map_err(portus::Error::from)?;
        let Some(from) = addr.as_pathname() else {
            // an unbound sender cannot be answered
            return Err(portus::Error(String::from(
                "datagram from an unbound socket",
            )));
        };
        if is_report(&msg[..n]) {
            return Ok((n, from.to_path_buf()));
        }
        // a set-up message: reports waiting behind it go first (see the module docs)
        let mut guard = self.stage.lock().unwrap_or_else(|e| e.into_inner());
        let (stage, buf) = &mut *guard;
        stage.push(from.to_path_buf(), msg[..n].to_vec(), now);
        self.take_waiting(stage, buf);
        Self::serve(stage, msg)
    }

    fn close(&mut self) -> portus::Result<()> {
        self.unlink_if_ours();
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        Ok(())
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        self.unlink_if_ours();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_plain_file_names() {
        for ok in ["portus", "agent-12-3", "a.b_c", "x"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "", ".", "..", "../x", "a/b", "/abs", ".hidden", "x\ny", "sp ace", &long,
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    fn peer(dir: &Path, name: &str) -> UnixDatagram {
        let p = dir.join(name);
        let _ = std::fs::remove_file(&p);
        UnixDatagram::bind(p).unwrap()
    }

    fn next(agent: &UnixSocket, buf: &mut [u8]) -> (u16, u32, String) {
        use portus::ipc::Ipc;
        let (n, from) = agent.recv(buf).unwrap();
        assert!(n >= 8);
        (
            u16::from_le_bytes([buf[0], buf[1]]),
            u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]),
            from.file_name().unwrap().to_string_lossy().into_owned(),
        )
    }

    /// Issue 42 (seen by ops/hostile_soak.sh): a report queued behind another datapath's
    /// burst of CREATEs waited for all of them (each a controller and a program install).
    /// Reports go first, set-up messages take turns by datapath, each datapath's own order
    /// is kept. (A unix socket queues at most `net.unix.max_dgram_qlen` datagrams, 10 by
    /// default, before its senders block: the bursts are sent in parts.)
    #[test]
    fn reports_go_before_other_datapaths_set_up_and_datapaths_take_turns() {
        let dir = std::env::temp_dir().join(format!("ccp-unix-stage-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let agent = UnixSocket::bind_in(&dir, "agent").unwrap();
        // the order below, not the age limit (a loaded test host may stall 10 ms)
        agent.stage.lock().unwrap().0.max_wait = Duration::from_secs(3600);
        let (a, b, c) = (peer(&dir, "a"), peer(&dir, "b"), peer(&dir, "c"));
        let to = dir.join("agent");
        let create = |s: &UnixDatagram, sid| {
            s.send_to(&crate::ipc::wire::create(sid, "ccp_reno", 14480, 1448), &to)
                .unwrap()
        };
        for sid in 1..=8 {
            create(&a, sid);
        }
        let mut buf = vec![0u8; 64 * 1024];
        // a CREATE is read: what waits behind it is taken off the socket
        assert_eq!(next(&agent, &mut buf), (0, 1, "a".into()));
        assert_eq!(agent.staged(), 7);
        for sid in 1..=3 {
            create(&c, sid);
        }
        b.send_to(&crate::ipc::wire::measure(7, 1, &[1, 2]), &to)
            .unwrap();
        // the report, behind 10 set-up messages, goes next
        let got: Vec<(u16, u32, String)> = (0..11).map(|_| next(&agent, &mut buf)).collect();
        assert_eq!(got[0], (1, 7, "b".into()), "{got:?}");
        // a's and c's CREATEs take turns until c has none; each keeps its own order
        assert_eq!(
            got[1..8]
                .iter()
                .map(|g| (g.2.as_str(), g.1))
                .collect::<Vec<_>>(),
            vec![
                ("a", 2),
                ("c", 1),
                ("a", 3),
                ("c", 2),
                ("a", 4),
                ("c", 3),
                ("a", 5)
            ]
        );
        let a_sids: Vec<u32> = got.iter().filter(|g| g.2 == "a").map(|g| g.1).collect();
        assert_eq!(a_sids, (2..=8).collect::<Vec<u32>>());
        assert_eq!(agent.staged(), 0);
        // reports alone are never staged
        b.send_to(&crate::ipc::wire::measure(7, 1, &[3]), &to)
            .unwrap();
        assert_eq!(next(&agent, &mut buf), (1, 7, "b".into()));
        assert_eq!(agent.staged(), 0);
        drop(agent);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Set-up messages wait for reports at most STAGE_MAX_WAIT: then the oldest goes first.
    #[test]
    fn a_staged_datagram_waits_at_most_the_stage_limit() {
        let now = Instant::now();
        let old = now - STAGE_MAX_WAIT;
        let mut st = Stage::default();
        st.push("a".into(), crate::ipc::wire::create(1, "x", 1, 1), old);
        st.push("b".into(), crate::ipc::wire::measure(2, 1, &[1]), now);
        assert_eq!(st.pop(now).map(|(_, f)| f), Some(PathBuf::from("a")));
        assert_eq!(st.pop(now).map(|(_, f)| f), Some(PathBuf::from("b")));
        assert!(st.pop(now).is_none() && st.is_empty() && st.bytes == 0);
        // fresh: the report first
        st.push("a".into(), crate::ipc::wire::create(1, "x", 1, 1), now);
        st.push("b".into(), crate::ipc::wire::measure(2, 1, &[1]), now);
        assert_eq!(st.pop(now).map(|(_, f)| f), Some(PathBuf::from("b")));
    }

    #[test]
    fn binding_refuses_held_sockets_and_other_files_and_replaces_stale_ones() {
        let dir = std::env::temp_dir().join(format!("ccp-unix-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = UnixSocket::bind_in(&dir, "a").unwrap();
        assert!(matches!(
            UnixSocket::bind_in(&dir, "a"),
            Err(BindError::InUse { .. })
        ));
        drop(a);
        assert!(
            !dir.join("a").exists(),
            "the socket file goes with the socket"
        );
        // stale: bound, then closed, file left behind
        drop(UnixDatagram::bind(dir.join("b")).unwrap());
        let b = UnixSocket::bind_in(&dir, "b").unwrap();
        assert_eq!(b.path(), dir.join("b"));
        std::fs::write(dir.join("c"), "data").unwrap();
        assert!(matches!(
            UnixSocket::bind_in(&dir, "c"),
            Err(BindError::NotASocket { .. })
        ));
        assert_eq!(std::fs::read_to_string(dir.join("c")).unwrap(), "data");
        drop(b);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
