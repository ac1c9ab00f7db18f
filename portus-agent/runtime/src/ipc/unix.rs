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
//! - **Bounded sends**: every send gives up after [`SEND_TIMEOUT`] when the peer's receive
//!   queue stays full (`SO_SNDTIMEO`), so a datapath that stops reading cannot freeze the
//!   agent; the guard then drops that datapath (see [`crate::ipc::guard`]).
//! - Receives time out after [`RECV_TIMEOUT`], so a stop request is seen promptly.
//! - The socket file is removed when the agent closes the socket (if it is still ours).

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where portus's unix backend (and so every CCP unix datapath) puts its sockets.
pub const SOCKET_DIR: &str = "/tmp/ccp";
/// Longest socket name.
pub const MAX_NAME_LEN: usize = 64;
/// Longest a send waits for a datapath's full receive queue.
pub const SEND_TIMEOUT: Duration = Duration::from_millis(250);
/// Longest a receive waits (the run loop checks for a stop request in between).
pub const RECV_TIMEOUT: Duration = Duration::from_millis(250);

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
        sock.set_write_timeout(Some(SEND_TIMEOUT))
            .map_err(io("setting the send timeout of", &path))?;
        sock.set_read_timeout(Some(RECV_TIMEOUT))
            .map_err(io("setting the receive timeout of", &path))?;
        let ino = std::fs::symlink_metadata(&path)
            .map(|m| m.ino())
            .unwrap_or(0);
        Ok(Self { sock, path, ino })
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
        self.sock
            .send_to(msg, to)
            .map(|_| ())
            .map_err(portus::Error::from)
    }

    fn recv(&self, msg: &mut [u8]) -> portus::Result<(usize, Self::Addr)> {
        let (n, addr) = self.sock.recv_from(msg).map_err(portus::Error::from)?;
        match addr.as_pathname() {
            Some(p) => Ok((n, p.to_path_buf())),
            // an unbound sender cannot be answered
            None => Err(portus::Error(String::from(
                "datagram from an unbound socket",
            ))),
        }
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
