//! The agent's netlink socket (`--ipc netlink`, the ccp-kernel module): portus's
//! `ipc::netlink`, receiving only what the kernel sent.
//!
//! The datapath broadcasts its messages on group 22 of `NETLINK_USERSOCK`, and the kernel
//! registers that protocol with `NL_CFG_F_NONROOT_SEND`: any local user can send a datagram to
//! the agent's port id or to group 22. portus's socket reads without looking at the sender,
//! so a forged MEASURE made the agent answer for someone else's flow, a MEASURE with no
//! fields closed a flow in the agent, a READY dropped all of them, and a datagram shorter than
//! a netlink header made portus panic (`ipc/netlink.rs:94`), which ended the agent (issue 26,
//! item 1). Until the datapath moves to a generic netlink family with an admin-only group,
//! this socket:
//!
//! - reads with `recvfrom` and drops every datagram whose source port id is not 0, i.e. not
//!   the kernel (counted in [`GuardStats::not_from_kernel`]), and every datagram from the
//!   kernel that is not one whole netlink message ([`GuardStats::bad_netlink`]); both are
//!   logged at most every [`LOG_EVERY`], with the number held back, so a flood cannot fill the
//!   log;
//! - hands the guard the CCP message without its 16-byte netlink header;
//! - binds to a port id the kernel chooses (not the process id, which another socket may
//!   hold), joins group 22, and times out receives after [`RECV_TIMEOUT`] so that a stop
//!   request is seen promptly;
//! - sends each message to port id 0 behind a netlink header, as portus does (the kernel's
//!   input runs in the sending thread: a send never waits for a queue).
//!
//! The datapath, for its part, accepts messages only from a sender with `CAP_NET_ADMIN`, and
//! flow updates only from the socket that installed the programs (`datapath/kernel`).

use std::io;
use std::mem::{size_of, zeroed};
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use crate::guard::{GuardStats, LogLimit, LOG_EVERY};

/// The multicast group the datapath sends to.
pub const GROUP: u32 = 22;
/// Length of a netlink message header.
pub const NLMSG_HDRLEN: usize = 16;
/// Longest a receive waits (the run loop checks for a stop request in between).
pub const RECV_TIMEOUT: Duration = Duration::from_secs(1);
/// `nlmsg_type` of the datapath's messages (`NLMSG_DONE`).
const NLMSG_DONE: u16 = 3;

/// Why a datagram was not passed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Its source port id is not the kernel's (0): another process sent it.
    NotFromKernel { port: u32 },
    /// From the kernel, but not one whole netlink message (or longer than the buffer).
    BadNetlink,
}

/// Where the CCP message lies in a datagram of `len` bytes (`buf` holds its first
/// `buf.len()` bytes) from port id `src_port`: only the kernel's, one whole netlink message.
pub fn kernel_payload(src_port: u32, buf: &[u8], len: usize) -> Result<Range<usize>, Dropped> {
    if src_port != 0 {
        return Err(Dropped::NotFromKernel { port: src_port });
    }
    if len > buf.len() || len < NLMSG_HDRLEN {
        return Err(Dropped::BadNetlink);
    }
    let declared = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if declared < NLMSG_HDRLEN || declared > len {
        return Err(Dropped::BadNetlink);
    }
    Ok(NLMSG_HDRLEN..declared)
}

static LOG_FOREIGN: LogLimit = LogLimit::new(LOG_EVERY);
static LOG_BAD: LogLimit = LogLimit::new(LOG_EVERY);

/// The agent's netlink socket; a portus [`portus::ipc::Ipc`] (type `netlink`).
#[derive(Debug)]
pub struct KernelSocket {
    fd: OwnedFd,
    stats: Arc<GuardStats>,
}

fn os_err(what: &str) -> portus::Error {
    portus::Error(format!("{what}: {}", io::Error::last_os_error()))
}

impl KernelSocket {
    /// Open a `NETLINK_USERSOCK` socket, bind it, join group 22; drops are counted in `stats`.
    pub fn open(stats: Arc<GuardStats>) -> portus::Result<Self> {
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_USERSOCK,
            )
        };
        if raw < 0 {
            return Err(os_err("socket(AF_NETLINK, NETLINK_USERSOCK)"));
        }
        // SAFETY: `raw` is a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an all-zero sockaddr_nl is valid (nl_pid 0: the kernel picks the port id).
        let mut addr: libc::sockaddr_nl = unsafe { zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `addr` is a sockaddr_nl of the size given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(os_err("bind(netlink)"));
        }
        let group = GROUP as libc::c_int;
        setsockopt(
            &fd,
            libc::SOL_NETLINK,
            libc::NETLINK_ADD_MEMBERSHIP,
            &group,
            "joining group 22",
        )?;
        let tv = libc::timeval {
            tv_sec: RECV_TIMEOUT.as_secs() as libc::time_t,
            tv_usec: RECV_TIMEOUT.subsec_micros() as libc::suseconds_t,
        };
        setsockopt(
            &fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv,
            "setting the receive timeout",
        )?;
        Ok(Self { fd, stats })
    }

    /// The port id the kernel gave this socket.
    pub fn port_id(&self) -> io::Result<u32> {
        // SAFETY: an all-zero sockaddr_nl is valid; getsockname writes at most `len` bytes.
        let mut addr: libc::sockaddr_nl = unsafe { zeroed() };
        let mut len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: as above.
        let r = unsafe {
            libc::getsockname(
                self.fd.as_raw_fd(),
                (&mut addr as *mut libc::sockaddr_nl).cast(),
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(addr.nl_pid)
    }

    fn count(&self, d: Dropped, len: usize) {
        match d {
            Dropped::NotFromKernel { port } => {
                let total = self.stats.not_from_kernel.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(held) = LOG_FOREIGN.allow() {
                    warn!(
                        from_port = port,
                        len,
                        total,
                        held_back = held,
                        "dropped a netlink datagram not sent by the kernel"
                    );
                }
            }
            Dropped::BadNetlink => {
                let total = self.stats.bad_netlink.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(held) = LOG_BAD.allow() {
                    warn!(
                        len,
                        total,
                        held_back = held,
                        "dropped a datagram from the kernel that is not one netlink message"
                    );
                }
            }
        }
    }
}

fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
    what: &str,
) -> portus::Result<()> {
    // SAFETY: `val` points to a live T of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(os_err(what));
    }
    Ok(())
}

impl portus::ipc::Ipc for KernelSocket {
    type Addr = ();

    fn name() -> String {
        String::from("netlink")
    }

    fn send(&self, msg: &[u8], _to: &Self::Addr) -> portus::Result<()> {
        let len = NLMSG_HDRLEN + msg.len();
        let mut buf = Vec::with_capacity(len);
        buf.extend_from_slice(&(len as u32).to_le_bytes());
        buf.extend_from_slice(&NLMSG_DONE.to_le_bytes());
        buf.extend_from_slice(&[0u8; 10]);
        buf.extend_from_slice(msg);
        // SAFETY: an all-zero sockaddr_nl is the kernel's address (port id 0).
        let mut to: libc::sockaddr_nl = unsafe { zeroed() };
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `buf` and `to` are live for the call, with the sizes given.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(os_err("send to the kernel"));
        }
        Ok(())
    }

    fn recv(&self, msg: &mut [u8]) -> portus::Result<(usize, Self::Addr)> {
        // SAFETY: an all-zero sockaddr_nl is valid; recvfrom writes at most `alen` bytes.
        let mut from: libc::sockaddr_nl = unsafe { zeroed() };
        let mut alen = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // MSG_TRUNC: the datagram's real length, so that a truncated one is seen as such
        // SAFETY: `msg` and `from` are live for the call, with the sizes given.
        let r = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                msg.as_mut_ptr().cast(),
                msg.len(),
                libc::MSG_TRUNC,
                (&mut from as *mut libc::sockaddr_nl).cast(),
                &mut alen,
            )
        };
        if r < 0 {
            // a timeout too: portus tries again (and sees a stop request)
            return Err(os_err("recv"));
        }
        let len = r as usize;
        let src = if (alen as usize) >= size_of::<libc::sockaddr_nl>() {
            from.nl_pid
        } else {
            // no address: not something the kernel sent
            u32::MAX
        };
        match kernel_payload(src, msg, len) {
            Ok(range) => {
                let n = range.len();
                msg.copy_within(range, 0);
                Ok((n, ()))
            }
            Err(d) => {
                self.count(d, len);
                // portus reads again after an error; the guard first checks for a stop
                Err(portus::Error(String::from("datagram dropped")))
            }
        }
    }

    fn close(&mut self) -> portus::Result<()> {
        // the descriptor closes when the socket is dropped
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portus::ipc::Ipc;

    fn nl(payload: &[u8]) -> Vec<u8> {
        let mut m = ((NLMSG_HDRLEN + payload.len()) as u32)
            .to_le_bytes()
            .to_vec();
        m.extend_from_slice(&[0u8; 12]);
        m.extend_from_slice(payload);
        m
    }

    #[test]
    fn only_whole_messages_from_the_kernel_pass() {
        let m = nl(b"ccp message");
        assert_eq!(kernel_payload(0, &m, m.len()), Ok(16..27));
        // any other sender, whatever it sends
        assert_eq!(
            kernel_payload(4242, &m, m.len()),
            Err(Dropped::NotFromKernel { port: 4242 })
        );
        assert_eq!(
            kernel_payload(u32::MAX, &m, m.len()),
            Err(Dropped::NotFromKernel { port: u32::MAX })
        );
        // shorter than a header (what made portus panic), a header claiming more than
        // arrived or less than itself, a datagram longer than the buffer
        for n in 0..NLMSG_HDRLEN {
            assert_eq!(kernel_payload(0, &m[..n], n), Err(Dropped::BadNetlink));
        }
        let mut long = m.clone();
        long[0..4].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(
            kernel_payload(0, &long, long.len()),
            Err(Dropped::BadNetlink)
        );
        long[0..4].copy_from_slice(&15u32.to_le_bytes());
        assert_eq!(
            kernel_payload(0, &long, long.len()),
            Err(Dropped::BadNetlink)
        );
        assert_eq!(kernel_payload(0, &m, m.len() + 1), Err(Dropped::BadNetlink));
        // padding after the message is ignored
        let mut padded = m.clone();
        padded.extend_from_slice(&[0u8; 5]);
        assert_eq!(kernel_payload(0, &padded, padded.len()), Ok(16..27));
    }

    /// A datagram from another process to the agent's port (which any user may send) is
    /// dropped and counted; the socket keeps working.
    #[test]
    fn datagrams_from_other_processes_are_dropped() {
        let stats = Arc::new(GuardStats::default());
        let sock = match KernelSocket::open(stats.clone()) {
            Ok(s) => s,
            Err(e) => {
                // joining a group needs CAP_NET_ADMIN on some systems
                eprintln!("skipped: cannot open a netlink socket here: {e:?}");
                return;
            }
        };
        let port = sock.port_id().expect("getsockname");
        assert_ne!(port, 0);
        // a second netlink socket, as a local user would open it
        // SAFETY: plain socket(2), owned at once.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_USERSOCK,
            )
        };
        assert!(raw >= 0);
        // SAFETY: we own `raw`.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: all-zero sockaddr_nl is valid.
        let mut to: libc::sockaddr_nl = unsafe { zeroed() };
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        to.nl_pid = port;
        let forged: [&[u8]; 3] = [
            b"x",
            &[0u8; 15],
            &nl(&[5, 0, 12, 0, 0, 0, 0, 0, 1, 0, 0, 0]),
        ];
        for d in forged {
            // SAFETY: live buffers of the sizes given.
            let r = unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    d.as_ptr().cast(),
                    d.len(),
                    0,
                    (&to as *const libc::sockaddr_nl).cast(),
                    size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            assert_eq!(r, d.len() as isize);
        }
        let mut buf = vec![0u8; 64 * 1024];
        for _ in 0..3 {
            assert!(sock.recv(&mut buf).is_err(), "a forged datagram passed");
        }
        assert_eq!(stats.not_from_kernel.load(Ordering::Relaxed), 3);
        assert_eq!(stats.bad_netlink.load(Ordering::Relaxed), 0);
    }
}
