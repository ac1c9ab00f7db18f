//! The datapath side of the agent IPC.
//!
//! - [`ChanIpc`]: in-process crossbeam channels; pairs with
//!   `portus::ipc::chan::Socket::<Blocking>::new(to_datapath_sender, from_datapath_receiver)`.
//! - [`UnixIpc`]: unix datagram sockets under `/tmp/ccp/`, where portus's unix backend binds;
//!   portus replies to the sender's bound path, so the simulator binds one too.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

/// Where portus's unix backend binds its sockets.
pub const UNIX_SOCKET_DIR: &str = "/tmp/ccp";

/// How the simulator talks to the agent: whole messages (datagrams) both ways.
pub trait DatapathIpc {
    /// Send one message to the agent.
    fn send(&mut self, msg: &[u8]) -> io::Result<()>;
    /// Wait up to `timeout` for one message from the agent; `Ok(None)` on timeout.
    fn recv(&mut self, timeout: Duration) -> io::Result<Option<Vec<u8>>>;
    /// One message from the agent if one is waiting, without blocking.
    fn try_recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        self.recv(Duration::ZERO)
    }
}

/// In-process channels to an agent thread.
pub struct ChanIpc {
    to_agent: Sender<Vec<u8>>,
    from_agent: Receiver<Vec<u8>>,
}

impl ChanIpc {
    pub fn new(to_agent: Sender<Vec<u8>>, from_agent: Receiver<Vec<u8>>) -> Self {
        ChanIpc {
            to_agent,
            from_agent,
        }
    }
}

impl DatapathIpc for ChanIpc {
    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        self.to_agent.send(msg.to_vec()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the agent's end of the channel is closed (agent thread exited?)",
            )
        })
    }

    fn recv(&mut self, timeout: Duration) -> io::Result<Option<Vec<u8>>> {
        match self.from_agent.recv_timeout(timeout) {
            Ok(m) => Ok(Some(m)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the agent's end of the channel is closed (agent thread exited?)",
            )),
        }
    }
}

/// A unix datagram socket bound at `/tmp/ccp/<own_name>`, sending to
/// `/tmp/ccp/<agent_name>`. The bound path is removed on drop.
pub struct UnixIpc {
    sock: UnixDatagram,
    own_path: PathBuf,
    agent_path: PathBuf,
    agent_seen: bool,
    agent_wait: Duration,
    buf: Vec<u8>,
}

impl UnixIpc {
    /// Bind `/tmp/ccp/<own_name>` (replacing a stale socket file) and address the agent at
    /// `/tmp/ccp/<agent_name>`.
    pub fn new(own_name: &str, agent_name: &str) -> io::Result<Self> {
        for (what, n) in [("own", own_name), ("agent", agent_name)] {
            if n.is_empty() || n.contains('/') || n == "." || n == ".." {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{what} socket name {n:?} must be a plain file name (no '/')"),
                ));
            }
        }
        std::fs::create_dir_all(UNIX_SOCKET_DIR)?;
        let own_path = PathBuf::from(UNIX_SOCKET_DIR).join(own_name);
        match std::fs::remove_file(&own_path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let sock = UnixDatagram::bind(&own_path).map_err(|e| {
            io::Error::new(e.kind(), format!("binding {}: {e}", own_path.display()))
        })?;
        Ok(UnixIpc {
            sock,
            own_path,
            agent_path: PathBuf::from(UNIX_SOCKET_DIR).join(agent_name),
            agent_seen: false,
            agent_wait: Duration::from_secs(10),
            buf: vec![0u8; 64 * 1024],
        })
    }

    /// How long the first send waits for the agent's socket to appear (default 10 s).
    pub fn with_agent_wait(mut self, d: Duration) -> Self {
        self.agent_wait = d;
        self
    }

    fn wait_for_agent(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + self.agent_wait;
        while !self.agent_path.exists() {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "no agent socket at {} after {:?}: start `ccp-agent --ipc unix` first \
                         (or pass the agent's socket name with --agent)",
                        self.agent_path.display(),
                        self.agent_wait
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.agent_seen = true;
        Ok(())
    }
}

impl DatapathIpc for UnixIpc {
    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        if !self.agent_seen {
            self.wait_for_agent()?;
        }
        self.sock
            .send_to(msg, &self.agent_path)
            .map(|_| ())
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("sending to {}: {e}", self.agent_path.display()),
                )
            })
    }

    fn recv(&mut self, timeout: Duration) -> io::Result<Option<Vec<u8>>> {
        let t = timeout.max(Duration::from_micros(1));
        self.sock.set_read_timeout(Some(t))?;
        match self.sock.recv(&mut self.buf) {
            Ok(n) => Ok(Some(self.buf[..n].to_vec())),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn try_recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        // not a short timeout: SO_RCVTIMEO rounds up to a jiffy (up to 4 ms of blocking)
        self.sock.set_nonblocking(true)?;
        let r = self.sock.recv(&mut self.buf);
        self.sock.set_nonblocking(false)?;
        match r {
            Ok(n) => Ok(Some(self.buf[..n].to_vec())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl std::os::fd::AsRawFd for UnixIpc {
    /// The bound socket (readable when the agent has sent something): a caller may wait on
    /// it together with other descriptors, then [`DatapathIpc::try_recv`].
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }
}

impl Drop for UnixIpc {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.own_path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chan_roundtrip_and_timeout() {
        let (to_agent, agent_rx) = crossbeam_channel::unbounded();
        let (agent_tx, from_agent) = crossbeam_channel::unbounded();
        let mut ipc = ChanIpc::new(to_agent, from_agent);
        ipc.send(&[1, 2, 3]).unwrap();
        assert_eq!(agent_rx.recv().unwrap(), vec![1, 2, 3]);
        assert_eq!(ipc.recv(Duration::from_millis(1)).unwrap(), None);
        agent_tx.send(vec![9]).unwrap();
        assert_eq!(ipc.recv(Duration::from_millis(1)).unwrap(), Some(vec![9]));
        drop(agent_tx);
        assert!(ipc.recv(Duration::from_millis(1)).is_err());
    }

    #[test]
    fn unix_roundtrip_and_missing_agent() {
        let pid = std::process::id();
        let own = format!("ccp-sim-unit-{pid}-dp");
        let agent = format!("ccp-sim-unit-{pid}-agent");
        let mut ipc = UnixIpc::new(&own, &agent)
            .unwrap()
            .with_agent_wait(Duration::from_millis(50));
        let e = ipc.send(&[1]).unwrap_err();
        assert!(e.to_string().contains("no agent socket"), "{e}");
        let agent_path = PathBuf::from(UNIX_SOCKET_DIR).join(&agent);
        let _ = std::fs::remove_file(&agent_path);
        let a = UnixDatagram::bind(&agent_path).unwrap();
        ipc.send(&[4, 5]).unwrap();
        let mut b = [0u8; 16];
        let (n, from) = a.recv_from(&mut b).unwrap();
        assert_eq!(&b[..n], &[4, 5]);
        a.send_to(&[6], from.as_pathname().unwrap()).unwrap();
        assert_eq!(ipc.recv(Duration::from_secs(1)).unwrap(), Some(vec![6]));
        assert_eq!(ipc.recv(Duration::from_millis(5)).unwrap(), None);
        // without blocking: nothing, then what was sent, and the socket blocks again after
        assert_eq!(ipc.try_recv().unwrap(), None);
        a.send_to(&[7, 8], from.as_pathname().unwrap()).unwrap();
        assert_eq!(ipc.try_recv().unwrap(), Some(vec![7, 8]));
        let t = Instant::now();
        assert_eq!(ipc.recv(Duration::from_millis(30)).unwrap(), None);
        assert!(t.elapsed() >= Duration::from_millis(25));
        drop(ipc);
        assert!(!PathBuf::from(UNIX_SOCKET_DIR).join(&own).exists());
        let _ = std::fs::remove_file(&agent_path);
    }
}
