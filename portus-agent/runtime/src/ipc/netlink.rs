//! The agent's socket to the ccp-kernel module (`--ipc netlink`): the generic netlink
//! family `ccp` (`datapath/kernel/ccp_genl.h`), a portus [`Ipc`].
//!
//! The agent registers its socket with `CCP_CMD_AGENT_HELLO`; the datapath then sends each of
//! its messages (READY, CREATE, MEASURE) from the kernel (port id 0) to that socket alone
//! (unicast, `CCP_CMD_DATAPATH_MSG`, the CCP message in the attribute `CCP_ATTR_MSG`), and
//! takes the agent's (INSTALL, UPDATE_FIELDS, CHANGE_PROG, `CCP_CMD_AGENT_MSG` the same way)
//! only from it. There is no multicast group: nobody else hears the datapath. Only a process
//! with `CAP_NET_ADMIN` may register, send to the family, or send to another netlink socket's
//! port id (`NETLINK_GENERIC` is not open to unprivileged senders, unlike the
//! `NETLINK_USERSOCK` protocol this replaced, issue 26), so an unprivileged user can neither
//! read the datapath's messages nor forge them to the agent. The socket still trusts nothing
//! it has not checked:
//!
//! - [`KernelSocket::open`] resolves the family id through the genl controller
//!   (`CTRL_CMD_GETFAMILY`), binds to a port id the kernel chooses, registers (and waits for
//!   the kernel's acknowledgement, keeping any datapath message that comes before it), joins
//!   the controller's `notify` group (to hear when the family goes away), asks for capped
//!   error answers with their text (`NETLINK_CAP_ACK`, `NETLINK_EXT_ACK`) and times receives
//!   out after [`RECV_TIMEOUT`] so that a stop request is seen promptly (before blocking, a
//!   receive spins while reports keep coming: [`crate::ipc::spin`]). Its errors say what
//!   to do: the module is not loaded or is of another version, or the agent lacks
//!   `CAP_NET_ADMIN`.
//! - [`classify`] looks at each datagram: one whose source port id is not 0 (the kernel) is
//!   dropped ([`GuardStats::not_from_kernel`]); from the kernel it must be one whole netlink
//!   message: a `ccp` message of version 2 with `CCP_CMD_DATAPATH_MSG` and well-formed
//!   attributes holding one non-empty `CCP_ATTR_MSG` (handed to the guard without the
//!   headers), an error answer to something the agent sent ([`GuardStats::kernel_errors`],
//!   logged with the kernel's text), or the controller's notice that the family was removed
//!   ([`GuardStats::datapath_gone`]: the module was unloaded, the socket will hear nothing
//!   more, and the agent exits). Anything else is dropped ([`GuardStats::bad_netlink`]).
//!   Every drop is counted and logged at most every [`LOG_EVERY`] with the number held back,
//!   so a flood cannot fill the log; nothing here panics on what a datagram holds.
//! - A receive that finds the socket's buffer overflowed (`ENOBUFS`: datapath messages were
//!   lost) is counted ([`GuardStats::rx_overruns`]) and logged the same way. The datapath,
//!   whose send found the buffer full (`EAGAIN`), sends a CREATE again later, backing off.
//! - Sends go to the kernel (port id 0) with `NLM_F_REQUEST` and no `NLM_F_ACK`: the kernel
//!   answers only a refused message. The datapath's handler runs in the sending thread, so a
//!   send never waits for a queue.
//!
//! The datapath, for its part, refuses messages from senders without `CAP_NET_ADMIN` (the
//! genl core, `GENL_ADMIN_PERM`) and programs and flow updates from any socket but the
//! registered one (`datapath/kernel`).

use std::collections::VecDeque;
use std::io;
use std::mem::{size_of, zeroed};
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{debug, error, warn};

use crate::ipc::guard::{GuardStats, LOG_EVERY};
use crate::ipc::spin::Spin;
use crate::log_limit::LogLimit;

/// The generic netlink family of the ccp-kernel module.
pub const FAMILY: &str = "ccp";
/// The family's version this agent speaks (2: datapath messages by unicast to the registered
/// agent; 1 multicast them to a group).
pub const FAMILY_VERSION: u8 = 2;
/// Agent → datapath command.
pub const CMD_AGENT_MSG: u8 = 1;
/// Datapath → agent command.
pub const CMD_DATAPATH_MSG: u8 = 2;
/// Agent → datapath: register this socket as the agent's.
pub const CMD_AGENT_HELLO: u8 = 3;
/// Datapath messages kept while [`KernelSocket::open`] waits for the registration's answer.
pub const EARLY_MAX: usize = 4096;
/// The attribute holding one CCP message.
pub const ATTR_MSG: u16 = 1;
/// Longest CCP message the datapath accepts (its policy; `CCP_GENL_MSG_MAX`).
pub const MSG_MAX: usize = 8196;
/// Longest a receive waits (the run loop checks for a stop request in between).
pub const RECV_TIMEOUT: Duration = Duration::from_secs(1);
/// How long [`KernelSocket::open`] waits for the controller's answer.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// Length of a netlink message header.
pub const NLMSG_HDRLEN: usize = 16;
/// Length of a generic netlink header (cmd, version, reserved).
pub const GENL_HDRLEN: usize = 4;
/// Length of an attribute header.
pub const NLA_HDRLEN: usize = 4;

// uapi linux/netlink.h and linux/genetlink.h
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLM_F_CAPPED: u16 = 0x100;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLA_TYPE_MASK: u16 = !(0x8000 | 0x4000);
const NETLINK_CAP_ACK: libc::c_int = 10;
const NETLINK_EXT_ACK: libc::c_int = 11;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_NEWFAMILY: u8 = 1;
const CTRL_CMD_DELFAMILY: u8 = 2;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_VERSION: u16 = 3;
const CTRL_ATTR_MCAST_GROUPS: u16 = 7;
const CTRL_ATTR_MCAST_GRP_NAME: u16 = 1;
const CTRL_ATTR_MCAST_GRP_ID: u16 = 2;
/// The controller's own family name and its notification group.
const CTRL_FAMILY: &str = "nlctrl";
const CTRL_GROUP: &str = "notify";

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn ne16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_ne_bytes([s[0], s[1]]))
}

fn ne32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

/// Netlink framing that does not hold together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// One netlink message: its header fields and where its payload lies in the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlMsg {
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
    pub port: u32,
    /// The bytes after the 16-byte header, up to the header's length.
    pub payload: Range<usize>,
}

/// The first netlink message of `buf` (a datagram): its length field must cover at least the
/// header and at most the datagram. Bytes after it are ignored.
pub fn first_nlmsg(buf: &[u8]) -> Result<NlMsg, Malformed> {
    let len = ne32(buf, 0).ok_or(Malformed)? as usize;
    if len < NLMSG_HDRLEN || len > buf.len() {
        return Err(Malformed);
    }
    Ok(NlMsg {
        ty: ne16(buf, 4).ok_or(Malformed)?,
        flags: ne16(buf, 6).ok_or(Malformed)?,
        seq: ne32(buf, 8).ok_or(Malformed)?,
        port: ne32(buf, 12).ok_or(Malformed)?,
        payload: NLMSG_HDRLEN..len,
    })
}

/// The attributes of `buf[range]`, in order, as (type without flag bits, payload range in
/// `buf`). Every attribute must lie inside `range` (the last one's padding may be missing).
pub struct Attrs<'a> {
    buf: &'a [u8],
    at: usize,
    end: usize,
    failed: bool,
}

impl<'a> Attrs<'a> {
    pub fn new(buf: &'a [u8], range: Range<usize>) -> Self {
        let end = range.end.min(buf.len());
        Self {
            buf,
            at: range.start.min(end),
            end,
            failed: false,
        }
    }
}

impl Iterator for Attrs<'_> {
    type Item = Result<(u16, Range<usize>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.end {
            return None;
        }
        let ok = (|| {
            let len = ne16(self.buf, self.at)? as usize;
            let ty = ne16(self.buf, self.at + 2)? & NLA_TYPE_MASK;
            let stop = self.at.checked_add(len)?;
            if len < NLA_HDRLEN || stop > self.end {
                return None;
            }
            let item = (ty, self.at + NLA_HDRLEN..stop);
            self.at = self.at.checked_add(align4(len))?;
            Some(item)
        })();
        match ok {
            Some(item) => Some(Ok(item)),
            None => {
                self.failed = true;
                Some(Err(Malformed))
            }
        }
    }
}

/// The payload of the only attribute of type `ty` in `buf[range]`, after checking that all
/// the attributes there are well framed; `Ok(None)` if there is none, `Err` if there are
/// several.
pub fn only_attr(
    buf: &[u8],
    range: Range<usize>,
    ty: u16,
) -> Result<Option<Range<usize>>, Malformed> {
    let mut found = None;
    for a in Attrs::new(buf, range) {
        let (t, r) = a?;
        if t == ty {
            if found.is_some() {
                return Err(Malformed);
            }
            found = Some(r);
        }
    }
    Ok(found)
}

/// The ids this socket talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    /// The `ccp` family's id (the `nlmsg_type` of its messages).
    pub family: u16,
}

/// What a datagram from the kernel was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// A CCP message from the datapath, at this range of the buffer.
    Ccp(Range<usize>),
    /// The kernel refused something the agent sent: `errno` (positive) and, if it said why,
    /// the range of its text (not NUL-terminated).
    KernelError {
        errno: i32,
        seq: u32,
        why: Option<Range<usize>>,
    },
    /// The controller announced that the `ccp` family was removed (module unloaded).
    FamilyGone,
    /// Something the agent may ignore: an acknowledgement, another family's notice.
    Ignored,
}

/// Why a datagram was not passed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Its source port id is not the kernel's (0): another process sent it.
    NotFromKernel { port: u32 },
    /// From the kernel, but not one whole netlink message the agent expects (or longer than
    /// the buffer).
    BadNetlink { ty: u16 },
}

/// Look at a datagram of `len` bytes (`buf` holds its first `buf.len()` bytes) from port id
/// `src_port`, for a socket talking to `ids`.
pub fn classify(src_port: u32, buf: &[u8], len: usize, ids: Ids) -> Result<Inbound, Dropped> {
    if src_port != 0 {
        return Err(Dropped::NotFromKernel { port: src_port });
    }
    let bad = |ty| Dropped::BadNetlink { ty };
    if len > buf.len() {
        return Err(bad(0));
    }
    let buf = &buf[..len];
    let m = first_nlmsg(buf).map_err(|_| bad(0))?;
    if m.ty == ids.family {
        // genl header: cmd, version, reserved
        let p = m.payload.start;
        let (Some(&cmd), Some(&version)) = (buf.get(p), buf.get(p + 1)) else {
            return Err(bad(m.ty));
        };
        if cmd != CMD_DATAPATH_MSG || version != FAMILY_VERSION || m.payload.len() < GENL_HDRLEN {
            return Err(bad(m.ty));
        }
        return match only_attr(buf, p + GENL_HDRLEN..m.payload.end, ATTR_MSG) {
            Ok(Some(r)) if !r.is_empty() => Ok(Inbound::Ccp(r)),
            _ => Err(bad(m.ty)),
        };
    }
    if m.ty == NLMSG_ERROR {
        return kernel_error(buf, &m).ok_or(bad(m.ty));
    }
    if m.ty == GENL_ID_CTRL {
        return match ctrl_notice(buf, &m) {
            Some((CTRL_CMD_DELFAMILY, true)) => Ok(Inbound::FamilyGone),
            Some(_) => Ok(Inbound::Ignored),
            None => Err(bad(m.ty)),
        };
    }
    Err(bad(m.ty))
}

/// An error answer (`struct nlmsgerr`: errno, the offending header, attributes).
fn kernel_error(buf: &[u8], m: &NlMsg) -> Option<Inbound> {
    let p = m.payload.start;
    let err = ne32(buf, p)? as i32;
    // the offending message follows: its header only with NETLINK_CAP_ACK (NLM_F_CAPPED)
    let echoed = if m.flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        align4(ne32(buf, p + 4)? as usize)
    };
    if m.payload.len() < 4 + NLMSG_HDRLEN {
        return None;
    }
    let seq = ne32(buf, p + 4 + 8)?;
    if err == 0 {
        return Some(Inbound::Ignored); // an acknowledgement
    }
    let mut why = None;
    if m.flags & NLM_F_ACK_TLVS != 0 {
        let tlvs = p.checked_add(4)?.checked_add(echoed)?;
        if tlvs <= m.payload.end {
            if let Ok(Some(r)) = only_attr(buf, tlvs..m.payload.end, NLMSGERR_ATTR_MSG) {
                // drop the terminating NUL
                let end = buf[r.clone()]
                    .iter()
                    .position(|&c| c == 0)
                    .map_or(r.end, |i| r.start + i);
                why = Some(r.start..end);
            }
        }
    }
    Some(Inbound::KernelError {
        errno: err.checked_neg().unwrap_or(i32::MAX),
        seq,
        why,
    })
}

/// A controller message: (cmd, whether it names the `ccp` family).
fn ctrl_notice(buf: &[u8], m: &NlMsg) -> Option<(u8, bool)> {
    let p = m.payload.start;
    if m.payload.len() < GENL_HDRLEN {
        return None;
    }
    let cmd = *buf.get(p)?;
    let name = only_attr(buf, p + GENL_HDRLEN..m.payload.end, CTRL_ATTR_FAMILY_NAME).ok()?;
    let ours = name.is_some_and(|r| cstr(&buf[r]) == FAMILY.as_bytes());
    Some((cmd, ours))
}

/// The bytes of a NUL-terminated attribute string, without the NUL (and what follows).
fn cstr(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |i| &b[..i])
}

/// A generic netlink message to the kernel: header, genl header, one attribute.
pub fn genl_request(
    family: u16,
    cmd: u8,
    version: u8,
    seq: u32,
    attr: u16,
    value: &[u8],
) -> Vec<u8> {
    let attr_len = NLA_HDRLEN + value.len();
    let len = NLMSG_HDRLEN + GENL_HDRLEN + align4(attr_len);
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&(len as u32).to_ne_bytes());
    b.extend_from_slice(&family.to_ne_bytes());
    b.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills in ours
    b.extend_from_slice(&[cmd, version, 0, 0]);
    b.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    b.extend_from_slice(&attr.to_ne_bytes());
    b.extend_from_slice(value);
    b.resize(len, 0);
    b
}

/// The agent's message to the datapath, framed for the `ccp` family.
pub fn agent_msg(family: u16, seq: u32, msg: &[u8]) -> Vec<u8> {
    genl_request(family, CMD_AGENT_MSG, FAMILY_VERSION, seq, ATTR_MSG, msg)
}

/// The registration (`CCP_CMD_AGENT_HELLO`, no attribute), asking for an acknowledgement.
pub fn hello_msg(family: u16, seq: u32) -> Vec<u8> {
    let len = NLMSG_HDRLEN + GENL_HDRLEN;
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&(len as u32).to_ne_bytes());
    b.extend_from_slice(&family.to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&[CMD_AGENT_HELLO, FAMILY_VERSION, 0, 0]);
    b
}

/// What the controller says about a family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyInfo {
    pub id: u16,
    pub version: u32,
    /// Its multicast groups: (name, id).
    pub groups: Vec<(String, u32)>,
}

impl FamilyInfo {
    pub fn group(&self, name: &str) -> Option<u32> {
        self.groups
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| *id)
    }
}

/// The controller's answer to `CTRL_CMD_GETFAMILY` for `name` (one netlink message in
/// `buf[..]`, already checked to come from the kernel).
pub fn parse_family(buf: &[u8], name: &str) -> Result<FamilyInfo, Malformed> {
    let m = first_nlmsg(buf)?;
    if m.ty != GENL_ID_CTRL || m.payload.len() < GENL_HDRLEN {
        return Err(Malformed);
    }
    let p = m.payload.start;
    if buf.get(p) != Some(&CTRL_CMD_NEWFAMILY) {
        return Err(Malformed);
    }
    let (mut id, mut version, mut named) = (None, 0u32, false);
    let mut groups = Vec::new();
    for a in Attrs::new(buf, p + GENL_HDRLEN..m.payload.end) {
        let (t, r) = a?;
        match t {
            CTRL_ATTR_FAMILY_ID => id = ne16(buf, r.start).filter(|_| r.len() >= 2),
            CTRL_ATTR_FAMILY_NAME => named = cstr(&buf[r]) == name.as_bytes(),
            CTRL_ATTR_VERSION => version = ne32(buf, r.start).filter(|_| r.len() >= 4).unwrap_or(0),
            CTRL_ATTR_MCAST_GROUPS => {
                // a nest of nests, each with a name and an id
                for g in Attrs::new(buf, r) {
                    let (_, gr) = g?;
                    let (mut gname, mut gid) = (None, None);
                    for ga in Attrs::new(buf, gr) {
                        let (gt, v) = ga?;
                        match gt {
                            CTRL_ATTR_MCAST_GRP_NAME => {
                                gname = Some(String::from_utf8_lossy(cstr(&buf[v])).into_owned())
                            }
                            CTRL_ATTR_MCAST_GRP_ID => {
                                gid = ne32(buf, v.start).filter(|_| v.len() >= 4)
                            }
                            _ => {}
                        }
                    }
                    if let (Some(n), Some(i)) = (gname, gid) {
                        groups.push((n, i));
                    }
                }
            }
            _ => {}
        }
    }
    match id {
        Some(id) if named && id != 0 => Ok(FamilyInfo {
            id,
            version,
            groups,
        }),
        _ => Err(Malformed),
    }
}

/// Why [`KernelSocket::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the {FAMILY} generic netlink family is not registered: load the datapath first (insmod datapath/kernel/ccp-kernel.ko, or modprobe ccp-kernel); without a kernel module use --sim SCENARIO")]
    FamilyMissing,
    #[error("{what} needs CAP_NET_ADMIN: run ccp-agent as root (or give it CAP_NET_ADMIN)")]
    Permission { what: &'static str },
    #[error("the {FAMILY} family is version {version}, this agent speaks version {FAMILY_VERSION}: build and load ccp-kernel.ko from the same tree as the agent (make -C datapath/kernel; rmmod ccp_kernel; insmod datapath/kernel/ccp-kernel.ko)")]
    Incompatible { version: u32 },
    #[error("the datapath refused the agent's registration: {why}")]
    Refused { why: String },
    #[error("{what}: {err}")]
    Io { what: &'static str, err: io::Error },
    #[error("looking up the {family} family: {why}")]
    Resolve { family: &'static str, why: String },
}

fn io_err(what: &'static str) -> OpenError {
    OpenError::Io {
        what,
        err: io::Error::last_os_error(),
    }
}

static LOG_FOREIGN: LogLimit = LogLimit::new(LOG_EVERY);
static LOG_BAD: LogLimit = LogLimit::new(LOG_EVERY);
static LOG_KERNEL_ERR: LogLimit = LogLimit::new(LOG_EVERY);
static LOG_OVERRUN: LogLimit = LogLimit::new(LOG_EVERY);

/// The agent's socket to the datapath; a portus [`portus::ipc::Ipc`] (type `netlink`).
#[derive(Debug)]
pub struct KernelSocket {
    fd: OwnedFd,
    ids: Ids,
    seq: AtomicU32,
    stats: Arc<GuardStats>,
    /// Datapath messages that came before the registration's answer, oldest first.
    early: Mutex<VecDeque<Vec<u8>>>,
    /// Spinning before a receive blocks.
    spin: Spin,
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, val: &T) -> io::Result<()> {
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
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A bound `NETLINK_GENERIC` socket (the kernel picks the port id).
fn genl_socket() -> Result<OwnedFd, OpenError> {
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_GENERIC,
        )
    };
    if raw < 0 {
        return Err(io_err("socket(AF_NETLINK, NETLINK_GENERIC)"));
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
        return Err(io_err("bind(netlink)"));
    }
    let tv = libc::timeval {
        tv_sec: RECV_TIMEOUT.as_secs() as libc::time_t,
        tv_usec: RECV_TIMEOUT.subsec_micros() as libc::suseconds_t,
    };
    setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv).map_err(|err| OpenError::Io {
        what: "setting the receive timeout",
        err,
    })?;
    Ok(fd)
}

/// Send `buf` to the kernel (port id 0).
fn send_to_kernel(fd: &OwnedFd, buf: &[u8]) -> io::Result<()> {
    // SAFETY: an all-zero sockaddr_nl is the kernel's address (port id 0).
    let mut to: libc::sockaddr_nl = unsafe { zeroed() };
    to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: `buf` and `to` are live for the call, with the sizes given.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            0,
            (&to as *const libc::sockaddr_nl).cast(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receive one datagram: (its length, even if longer than `buf`; the sender's port id, or
/// `u32::MAX` when the kernel gave no address).
fn recv_from(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<(usize, u32)> {
    recv_from_flags(fd, buf, 0)
}

/// [`recv_from`] with extra `recvfrom` flags (`MSG_DONTWAIT`: do not block).
fn recv_from_flags(fd: &OwnedFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<(usize, u32)> {
    // SAFETY: an all-zero sockaddr_nl is valid; recvfrom writes at most `alen` bytes.
    let mut from: libc::sockaddr_nl = unsafe { zeroed() };
    let mut alen = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
    // MSG_TRUNC: the datagram's real length, so that a truncated one is seen as such
    // SAFETY: `buf` and `from` are live for the call, with the sizes given.
    let r = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_TRUNC | flags,
            (&mut from as *mut libc::sockaddr_nl).cast(),
            &mut alen,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let src = if (alen as usize) >= size_of::<libc::sockaddr_nl>() {
        from.nl_pid
    } else {
        u32::MAX
    };
    Ok((r as usize, src))
}

/// The next datagram on `fd` before `deadline` (a receive timeout or an interrupted call is
/// tried again): its length and sender, an error, or None once the deadline has passed.
fn recv_before(
    fd: &OwnedFd,
    buf: &mut [u8],
    deadline: Instant,
) -> Option<io::Result<(usize, u32)>> {
    while Instant::now() < deadline {
        match recv_from(fd, buf) {
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted => {}
            r => return Some(r),
        }
    }
    None
}

/// Ask the controller about family `name` on `fd` (nothing else may arrive there yet but
/// answers from the kernel; anything from elsewhere or for another request is skipped).
fn resolve(fd: &OwnedFd, name: &'static str, seq: u32) -> Result<FamilyInfo, OpenError> {
    let fail = |why: String| OpenError::Resolve { family: name, why };
    let mut value = name.as_bytes().to_vec();
    value.push(0);
    let req = genl_request(
        GENL_ID_CTRL,
        CTRL_CMD_GETFAMILY,
        1,
        seq,
        CTRL_ATTR_FAMILY_NAME,
        &value,
    );
    send_to_kernel(fd, &req).map_err(|e| fail(format!("send: {e}")))?;
    let deadline = Instant::now() + RESOLVE_TIMEOUT;
    let mut buf = vec![0u8; 64 * 1024];
    while let Some(r) = recv_before(fd, &mut buf, deadline) {
        let (len, src) = r.map_err(|e| fail(format!("recv: {e}")))?;
        if src != 0 || len > buf.len() {
            continue;
        }
        let Ok(m) = first_nlmsg(&buf[..len]) else {
            continue;
        };
        if m.seq != seq {
            continue;
        }
        if m.ty == NLMSG_ERROR {
            let errno = ne32(&buf[..len], m.payload.start).map_or(0, |e| (e as i32).wrapping_neg());
            if errno == 0 {
                continue;
            }
            if errno == libc::ENOENT && name == FAMILY {
                return Err(OpenError::FamilyMissing);
            }
            return Err(fail(io::Error::from_raw_os_error(errno).to_string()));
        }
        return parse_family(&buf[..len], name)
            .map_err(|_| fail("malformed answer from the controller".into()));
    }
    Err(fail("no answer from the controller".into()))
}

/// Register `fd` as the agent's socket (`CCP_CMD_AGENT_HELLO` with sequence number `seq`) and
/// wait for the kernel's answer. The datapath may send to the socket before that answer is
/// queued (its READY probe runs at once on another CPU): such messages are returned, in
/// order, for the agent to read first (at most [`EARLY_MAX`]; more are counted as overruns
/// and the datapath sends its CREATEs again).
fn register(
    fd: &OwnedFd,
    ids: Ids,
    seq: u32,
    stats: &GuardStats,
) -> Result<VecDeque<Vec<u8>>, OpenError> {
    let fail = |err: io::Error| OpenError::Io {
        what: "registering with the datapath",
        err,
    };
    send_to_kernel(fd, &hello_msg(ids.family, seq)).map_err(|err| {
        if err.raw_os_error() == Some(libc::EPERM) {
            OpenError::Permission {
                what: "registering with the datapath",
            }
        } else {
            fail(err)
        }
    })?;
    let mut early = VecDeque::new();
    let deadline = Instant::now() + RESOLVE_TIMEOUT;
    let mut buf = vec![0u8; 64 * 1024];
    while let Some(r) = recv_before(fd, &mut buf, deadline) {
        let (len, src) = match r {
            Ok(x) => x,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                stats.rx_overruns.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => return Err(fail(e)),
        };
        match classify(src, &buf, len, ids) {
            Ok(Inbound::Ccp(r)) => {
                if early.len() < EARLY_MAX {
                    early.push_back(buf[r].to_vec());
                } else {
                    stats.rx_overruns.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(Inbound::KernelError { errno, seq: s, why }) if s == seq => {
                let text = why.map(|r| String::from_utf8_lossy(&buf[r]).into_owned());
                return Err(match errno {
                    libc::EPERM => OpenError::Permission {
                        what: "registering with the datapath",
                    },
                    _ => OpenError::Refused {
                        why: format!(
                            "{} ({})",
                            io::Error::from_raw_os_error(errno),
                            text.unwrap_or_default()
                        ),
                    },
                });
            }
            Ok(Inbound::Ignored) if is_ack(&buf[..len.min(buf.len())], seq) => return Ok(early),
            Ok(Inbound::FamilyGone) => {
                return Err(OpenError::Refused {
                    why: "the module was unloaded meanwhile".into(),
                })
            }
            _ => {}
        }
    }
    Err(OpenError::Refused {
        why: "no answer from the kernel".into(),
    })
}

/// Is `buf` the kernel's acknowledgement (an error answer with errno 0) of request `seq`?
fn is_ack(buf: &[u8], seq: u32) -> bool {
    let Ok(m) = first_nlmsg(buf) else {
        return false;
    };
    let p = m.payload.start;
    m.ty == NLMSG_ERROR
        && m.payload.len() >= 4 + NLMSG_HDRLEN
        && ne32(buf, p) == Some(0)
        && ne32(buf, p + 4 + 8) == Some(seq)
}

impl KernelSocket {
    /// Open the socket: resolve the `ccp` family, register as its agent (needs
    /// `CAP_NET_ADMIN`) and join the controller's notifications. Drops and errors are counted
    /// in `stats`.
    pub fn open(stats: Arc<GuardStats>) -> Result<Self, OpenError> {
        let fd = genl_socket()?;
        // error answers: without the offending message, with the kernel's text (best effort:
        // both are Linux >= 4.3 / 4.12)
        let one: libc::c_int = 1;
        if let Err(e) = setsockopt(&fd, libc::SOL_NETLINK, NETLINK_CAP_ACK, &one) {
            debug!(error = %e, "NETLINK_CAP_ACK");
        }
        if let Err(e) = setsockopt(&fd, libc::SOL_NETLINK, NETLINK_EXT_ACK, &one) {
            debug!(error = %e, "NETLINK_EXT_ACK");
        }
        let ccp = resolve(&fd, FAMILY, 1)?;
        if ccp.version != u32::from(FAMILY_VERSION) {
            return Err(OpenError::Incompatible {
                version: ccp.version,
            });
        }
        let ids = Ids { family: ccp.id };
        let early = register(&fd, ids, 2, &stats)?;
        // the controller's notifications tell us when the family goes away (rmmod): without
        // them the socket would silently hear nothing more
        match resolve(&fd, CTRL_FAMILY, 2).map(|c| c.group(CTRL_GROUP)) {
            Ok(Some(g)) => {
                let g = g as libc::c_int;
                if let Err(e) = setsockopt(&fd, libc::SOL_NETLINK, libc::NETLINK_ADD_MEMBERSHIP, &g)
                {
                    warn!(error = %e, "cannot join the genl controller's notifications: an unloaded datapath will go unnoticed");
                }
            }
            Ok(None) => warn!(
                "the genl controller has no 'notify' group: an unloaded datapath will go unnoticed"
            ),
            Err(e) => warn!(error = %e, "an unloaded datapath will go unnoticed"),
        }
        Ok(Self {
            fd,
            ids,
            seq: AtomicU32::new(4),
            stats,
            early: Mutex::new(early),
            spin: Spin::default(),
        })
    }

    /// Spin as `spin` says before a receive blocks (the default: up to
    /// [`crate::ipc::spin::DEFAULT_MAX`] while reports keep coming).
    pub fn set_spin(&mut self, spin: Spin) {
        self.spin = spin;
    }

    /// The spin's statistics (CPU spent spinning, hits, misses).
    pub fn spin_stats(&self) -> Arc<crate::ipc::spin::SpinStats> {
        self.spin.stats()
    }

    /// The family id in use.
    pub fn ids(&self) -> Ids {
        self.ids
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
            Dropped::BadNetlink { ty } => {
                let total = self.stats.bad_netlink.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(held) = LOG_BAD.allow() {
                    warn!(
                        len,
                        nlmsg_type = ty,
                        total,
                        held_back = held,
                        "dropped a datagram from the kernel that is not one ccp datapath message"
                    );
                }
            }
        }
    }

    fn kernel_error(&self, errno: i32, seq: u32, why: &str) {
        let total = self.stats.kernel_errors.fetch_add(1, Ordering::Relaxed) + 1;
        let err = io::Error::from_raw_os_error(errno);
        // ENOENT: an answer for a flow that ended meanwhile (usual); the rest is worth a look
        if errno == libc::ENOENT {
            debug!(%err, seq, why, total, "the datapath refused a message");
        } else if let Some(held) = LOG_KERNEL_ERR.allow() {
            warn!(%err, seq, why, total, held_back = held, "the datapath refused a message");
        }
    }
}

impl portus::ipc::Ipc for KernelSocket {
    type Addr = ();

    fn name() -> String {
        String::from("netlink")
    }

    fn send(&self, msg: &[u8], _to: &Self::Addr) -> portus::Result<()> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let buf = agent_msg(self.ids.family, seq, msg);
        send_to_kernel(&self.fd, &buf)
            .map_err(|e| portus::Error(format!("send to the datapath ({} bytes): {e}", msg.len())))
    }

    fn recv(&self, msg: &mut [u8]) -> portus::Result<(usize, Self::Addr)> {
        if let Some(m) = self.early.lock().ok().and_then(|mut q| q.pop_front()) {
            if m.len() > msg.len() {
                return Err(portus::Error(String::from("datagram dropped")));
            }
            msg[..m.len()].copy_from_slice(&m);
            return Ok((m.len(), ()));
        }
        // a datagram queued is taken at once; else spin while reports keep coming, then block
        let started = Instant::now();
        let first = match recv_from_flags(&self.fd, msg, libc::MSG_DONTWAIT) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.spin.spin(started, || {
                match recv_from_flags(&self.fd, msg, libc::MSG_DONTWAIT) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
                    r => Some(r),
                }
            }),
            r => Some(r),
        };
        let got = first.unwrap_or_else(|| {
            let r = recv_from(&self.fd, msg);
            self.spin.record(started.elapsed());
            r
        });
        let (len, src) = match got {
            Ok(x) => x,
            Err(e) => {
                if e.raw_os_error() == Some(libc::ENOBUFS) {
                    let total = self.stats.rx_overruns.fetch_add(1, Ordering::Relaxed) + 1;
                    if let Some(held) = LOG_OVERRUN.allow() {
                        warn!(total, held_back = held, "the agent's netlink receive buffer overflowed: datapath messages were lost");
                    }
                }
                // a timeout too: portus tries again (and sees a stop request)
                return Err(portus::Error(format!("recv: {e}")));
            }
        };
        match classify(src, msg, len, self.ids) {
            Ok(Inbound::Ccp(range)) => {
                let n = range.len();
                msg.copy_within(range, 0);
                Ok((n, ()))
            }
            Ok(Inbound::KernelError { errno, seq, why }) => {
                let text = why.map(|r| String::from_utf8_lossy(&msg[r]).into_owned());
                self.kernel_error(errno, seq, text.as_deref().unwrap_or(""));
                Err(portus::Error(String::from(
                    "error answer from the datapath",
                )))
            }
            Ok(Inbound::FamilyGone) => {
                if !self.stats.datapath_gone.swap(true, Ordering::SeqCst) {
                    error!("the {FAMILY} generic netlink family was removed (ccp-kernel unloaded): this socket hears nothing more");
                }
                Err(portus::Error(String::from("datapath gone")))
            }
            Ok(Inbound::Ignored) => Err(portus::Error(String::from("nothing for portus"))),
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

    const IDS: Ids = Ids { family: 0x1f };

    /// A netlink message: header (length, type, flags, seq, port 0) and payload.
    fn nl(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = ((NLMSG_HDRLEN + payload.len()) as u32)
            .to_ne_bytes()
            .to_vec();
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m
    }

    fn attr(ty: u16, value: &[u8]) -> Vec<u8> {
        let mut a = ((NLA_HDRLEN + value.len()) as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(value);
        a.resize(align4(a.len()), 0);
        a
    }

    /// What the datapath sends: genl header (cmd, version) and attributes.
    fn dp(cmd: u8, version: u8, attrs: &[u8]) -> Vec<u8> {
        let mut p = vec![cmd, version, 0, 0];
        p.extend_from_slice(attrs);
        nl(IDS.family, 0, 0, &p)
    }

    const CCP_READY: [u8; 12] = [5, 0, 12, 0, 0, 0, 0, 0, 7, 0, 0, 0];

    #[test]
    fn datapath_messages_pass_without_their_headers() {
        let m = dp(
            CMD_DATAPATH_MSG,
            FAMILY_VERSION,
            &attr(ATTR_MSG, &CCP_READY),
        );
        assert_eq!(classify(0, &m, m.len(), IDS), Ok(Inbound::Ccp(24..36)));
        assert_eq!(&m[24..36], &CCP_READY);
        // an odd length: the attribute's own length counts, not its padding
        let m = dp(
            CMD_DATAPATH_MSG,
            FAMILY_VERSION,
            &attr(ATTR_MSG, &CCP_READY[..9]),
        );
        assert_eq!(classify(0, &m, m.len(), IDS), Ok(Inbound::Ccp(24..33)));
        // unknown attributes beside it are ignored; bytes after the message too
        let mut a = attr(7, b"xyz");
        a.extend_from_slice(&attr(ATTR_MSG, &CCP_READY));
        let mut m = dp(CMD_DATAPATH_MSG, FAMILY_VERSION, &a);
        m.extend_from_slice(&[0u8; 5]);
        assert_eq!(classify(0, &m, m.len(), IDS), Ok(Inbound::Ccp(32..44)));
    }

    #[test]
    fn only_the_kernel_is_heard() {
        let m = dp(
            CMD_DATAPATH_MSG,
            FAMILY_VERSION,
            &attr(ATTR_MSG, &CCP_READY),
        );
        for port in [1, 4242, u32::MAX] {
            assert_eq!(
                classify(port, &m, m.len(), IDS),
                Err(Dropped::NotFromKernel { port })
            );
        }
    }

    #[test]
    fn broken_framing_is_dropped() {
        let good = dp(
            CMD_DATAPATH_MSG,
            FAMILY_VERSION,
            &attr(ATTR_MSG, &CCP_READY),
        );
        let bad =
            |b: &[u8], n: usize| matches!(classify(0, b, n, IDS), Err(Dropped::BadNetlink { .. }));
        // every prefix of a good message
        for n in 0..good.len() {
            assert!(bad(&good[..n], n), "prefix of {n} bytes passed");
        }
        // longer than the buffer holds
        assert!(bad(&good, good.len() + 1));
        // header length below a header, above the datagram
        for l in [0u32, 15, 1000] {
            let mut m = good.clone();
            m[0..4].copy_from_slice(&l.to_ne_bytes());
            assert!(bad(&m, m.len()), "nlmsg_len {l}");
        }
        // attribute lengths: 0, 3 (below a header), past the message
        for l in [0u16, 3, 200] {
            let mut m = good.clone();
            m[20..22].copy_from_slice(&l.to_ne_bytes());
            assert!(bad(&m, m.len()), "nla_len {l}");
        }
        // wrong command, version, family; no attribute, an empty one, two of them
        assert!(bad(
            &dp(CMD_AGENT_MSG, FAMILY_VERSION, &attr(ATTR_MSG, &CCP_READY)),
            good.len()
        ));
        assert!(bad(&dp(0, FAMILY_VERSION, &[]), 20));
        assert!(bad(
            &dp(CMD_DATAPATH_MSG, 1, &attr(ATTR_MSG, &CCP_READY)),
            good.len()
        ));
        let mut other = good.clone();
        other[4..6].copy_from_slice(&0x20u16.to_ne_bytes());
        assert!(bad(&other, other.len()));
        assert!(bad(&dp(CMD_DATAPATH_MSG, FAMILY_VERSION, &[]), 20));
        assert!(bad(
            &dp(CMD_DATAPATH_MSG, FAMILY_VERSION, &attr(ATTR_MSG, &[])),
            24
        ));
        let mut two = attr(ATTR_MSG, &CCP_READY);
        two.extend_from_slice(&attr(ATTR_MSG, &CCP_READY));
        let m = dp(CMD_DATAPATH_MSG, FAMILY_VERSION, &two);
        assert!(bad(&m, m.len()));
        // a genl header cut short
        let m = nl(IDS.family, 0, 0, &[CMD_DATAPATH_MSG, FAMILY_VERSION]);
        assert!(bad(&m, m.len()));
        // other netlink types
        for ty in [1u16, 3, 4, 0xffff] {
            let m = nl(ty, 0, 0, &[0u8; 8]);
            assert!(bad(&m, m.len()), "type {ty}");
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        // a cheap deterministic generator: classify must return, whatever the bytes
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let good = dp(
            CMD_DATAPATH_MSG,
            FAMILY_VERSION,
            &attr(ATTR_MSG, &CCP_READY),
        );
        for _ in 0..20_000 {
            let n = (next() % 80) as usize;
            let mut b: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            if next() % 2 == 0 && n >= good.len() {
                // mostly well-formed, a few bytes changed
                b[..good.len()].copy_from_slice(&good);
                for _ in 0..3 {
                    let i = (next() as usize) % n;
                    b[i] = next() as u8;
                }
            }
            if let Ok(Inbound::Ccp(r)) = classify(0, &b, b.len(), IDS) {
                assert!(r.end <= b.len() && !r.is_empty());
            }
            let _ = parse_family(&b, FAMILY);
            let _ = first_nlmsg(&b);
            for (_, r) in Attrs::new(&b, 0..b.len()).flatten() {
                assert!(r.end <= b.len());
            }
        }
    }

    fn error_answer(errno: i32, seq: u32, text: Option<&str>) -> Vec<u8> {
        let mut p = (-errno).to_ne_bytes().to_vec();
        // the offending header (capped: no payload)
        let mut hdr = nl(IDS.family, 1, seq, &[]);
        hdr[0..4].copy_from_slice(&40u32.to_ne_bytes());
        p.extend_from_slice(&hdr);
        let mut flags = NLM_F_CAPPED;
        if let Some(t) = text {
            let mut v = t.as_bytes().to_vec();
            v.push(0);
            p.extend_from_slice(&attr(NLMSGERR_ATTR_MSG, &v));
            flags |= NLM_F_ACK_TLVS;
        }
        nl(NLMSG_ERROR, flags, seq, &p)
    }

    #[test]
    fn error_answers_are_read() {
        let m = error_answer(libc::EBUSY, 77, Some("not from the agent's socket"));
        let Ok(Inbound::KernelError {
            errno,
            seq,
            why: Some(r),
        }) = classify(0, &m, m.len(), IDS)
        else {
            panic!(
                "not read as an error answer: {:?}",
                classify(0, &m, m.len(), IDS)
            );
        };
        assert_eq!((errno, seq), (libc::EBUSY, 77));
        assert_eq!(&m[r], b"not from the agent's socket");
        let m = error_answer(libc::EPERM, 5, None);
        assert_eq!(
            classify(0, &m, m.len(), IDS),
            Ok(Inbound::KernelError {
                errno: libc::EPERM,
                seq: 5,
                why: None
            })
        );
        // an acknowledgement (errno 0) is nothing for portus
        let m = error_answer(0, 5, None);
        assert_eq!(classify(0, &m, m.len(), IDS), Ok(Inbound::Ignored));
        // cut short
        let m = nl(NLMSG_ERROR, 0, 0, &[1, 0, 0]);
        assert!(classify(0, &m, m.len(), IDS).is_err());
        // a broken text attribute: the error still counts, without a text
        let mut m = error_answer(libc::EINVAL, 1, Some("x"));
        let at = NLMSG_HDRLEN + 4 + NLMSG_HDRLEN;
        m[at..at + 2].copy_from_slice(&99u16.to_ne_bytes());
        assert_eq!(
            classify(0, &m, m.len(), IDS),
            Ok(Inbound::KernelError {
                errno: libc::EINVAL,
                seq: 1,
                why: None
            })
        );
    }

    fn ctrl(cmd: u8, attrs: &[u8]) -> Vec<u8> {
        let mut p = vec![cmd, 2, 0, 0];
        p.extend_from_slice(attrs);
        nl(GENL_ID_CTRL, 0, 0, &p)
    }

    #[test]
    fn the_family_going_away_is_noticed() {
        let gone = ctrl(CTRL_CMD_DELFAMILY, &attr(CTRL_ATTR_FAMILY_NAME, b"ccp\0"));
        assert_eq!(classify(0, &gone, gone.len(), IDS), Ok(Inbound::FamilyGone));
        // another family, or ours coming (back): nothing to do
        let other = ctrl(CTRL_CMD_DELFAMILY, &attr(CTRL_ATTR_FAMILY_NAME, b"ccpx\0"));
        assert_eq!(classify(0, &other, other.len(), IDS), Ok(Inbound::Ignored));
        let back = ctrl(CTRL_CMD_NEWFAMILY, &attr(CTRL_ATTR_FAMILY_NAME, b"ccp\0"));
        assert_eq!(classify(0, &back, back.len(), IDS), Ok(Inbound::Ignored));
        // the same from another process
        assert_eq!(
            classify(9, &gone, gone.len(), IDS),
            Err(Dropped::NotFromKernel { port: 9 })
        );
        // broken
        let mut b = gone.clone();
        b[20..22].copy_from_slice(&1u16.to_ne_bytes());
        assert!(classify(0, &b, b.len(), IDS).is_err());
    }

    fn family_answer(name: &[u8], id: u16, version: u32, groups: &[(&[u8], u32)]) -> Vec<u8> {
        let mut a = attr(CTRL_ATTR_FAMILY_NAME, name);
        a.extend_from_slice(&attr(CTRL_ATTR_FAMILY_ID, &id.to_ne_bytes()));
        a.extend_from_slice(&attr(CTRL_ATTR_VERSION, &version.to_ne_bytes()));
        let mut nest = Vec::new();
        for (i, (n, gid)) in groups.iter().enumerate() {
            let mut g = attr(CTRL_ATTR_MCAST_GRP_NAME, n);
            g.extend_from_slice(&attr(CTRL_ATTR_MCAST_GRP_ID, &gid.to_ne_bytes()));
            nest.extend_from_slice(&attr(i as u16 + 1, &g));
        }
        a.extend_from_slice(&attr(CTRL_ATTR_MCAST_GROUPS, &nest));
        ctrl(CTRL_CMD_NEWFAMILY, &a)
    }

    #[test]
    fn family_answers_are_parsed() {
        let m = family_answer(b"ccp\0", 0x1f, 1, &[(b"datapath\0", 9)]);
        let f = parse_family(&m, FAMILY).expect("parsed");
        assert_eq!((f.id, f.version, f.group("datapath")), (0x1f, 1, Some(9)));
        let m = family_answer(b"nlctrl\0", 0x10, 2, &[(b"notify\0", 16)]);
        assert_eq!(
            parse_family(&m, "nlctrl").map(|f| f.group("notify")),
            Ok(Some(16))
        );
        // another family's answer, no id, id 0, broken nests
        assert!(parse_family(&m, FAMILY).is_err());
        let mut a = attr(CTRL_ATTR_FAMILY_NAME, b"ccp\0");
        a.extend_from_slice(&attr(CTRL_ATTR_VERSION, &1u32.to_ne_bytes()));
        assert!(parse_family(&ctrl(CTRL_CMD_NEWFAMILY, &a), FAMILY).is_err());
        let m = family_answer(b"ccp\0", 0, 1, &[]);
        assert!(parse_family(&m, FAMILY).is_err());
        let mut m = family_answer(b"ccp\0", 0x1f, 1, &[(b"datapath\0", 9)]);
        let n = m.len();
        m[n - 8..n - 6].copy_from_slice(&200u16.to_ne_bytes());
        assert!(parse_family(&m, FAMILY).is_err());
        // a group without an id is left out
        let m = family_answer(b"ccp\0", 0x1f, 1, &[(b"datapath\0", 9)]);
        assert_eq!(parse_family(&m, FAMILY).map(|f| f.groups.len()), Ok(1));
    }

    #[test]
    fn agent_messages_are_framed_for_the_family() {
        let msg = [
            3u8, 0, 21, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 4, 0, 0, 0, 0, 0x10, 0, 0,
        ];
        let b = agent_msg(0x1f, 42, &msg);
        assert_eq!(
            b.len(),
            NLMSG_HDRLEN + GENL_HDRLEN + align4(NLA_HDRLEN + msg.len())
        );
        assert_eq!(b.len() % 4, 0);
        let m = first_nlmsg(&b).expect("framed");
        assert_eq!((m.ty, m.flags, m.seq, m.port), (0x1f, NLM_F_REQUEST, 42, 0));
        assert_eq!(m.payload.end, b.len());
        assert_eq!(&b[16..20], &[CMD_AGENT_MSG, FAMILY_VERSION, 0, 0]);
        let r = only_attr(&b, 20..b.len(), ATTR_MSG)
            .expect("attrs")
            .expect("the message");
        assert_eq!(&b[r], &msg);
        // padding is zero
        assert!(b[20 + NLA_HDRLEN + msg.len()..].iter().all(|&c| c == 0));
    }

    #[test]
    fn the_registration_is_framed_and_its_answer_recognised() {
        let b = hello_msg(0x1f, 7);
        let m = first_nlmsg(&b).expect("framed");
        assert_eq!(
            (m.ty, m.flags, m.seq, m.port, b.len()),
            (0x1f, NLM_F_REQUEST | NLM_F_ACK, 7, 0, 20)
        );
        assert_eq!(&b[16..20], &[CMD_AGENT_HELLO, FAMILY_VERSION, 0, 0]);
        // the kernel's acknowledgement: errno 0, the request's header echoed (capped)
        let ack = |errno: i32, seq: u32| {
            let mut p = errno.to_ne_bytes().to_vec();
            p.extend_from_slice(&b[..NLMSG_HDRLEN]);
            p[4 + 8..4 + 12].copy_from_slice(&seq.to_ne_bytes());
            nl(NLMSG_ERROR, NLM_F_CAPPED, seq, &p)
        };
        assert!(is_ack(&ack(0, 7), 7));
        assert!(!is_ack(&ack(0, 8), 7), "another request's answer");
        assert!(!is_ack(&ack(-libc::EPERM, 7), 7), "a refusal");
        assert!(!is_ack(&ack(0, 7)[..20], 7), "cut short");
        assert!(matches!(
            classify(0, &ack(-libc::EPERM, 7), 36, IDS),
            Ok(Inbound::KernelError {
                errno: libc::EPERM,
                seq: 7,
                ..
            })
        ));
    }

    /// Datapath messages that came before the registration's answer are read first, in order.
    #[test]
    fn messages_kept_from_the_registration_come_first() {
        let fd = match genl_socket() {
            Ok(fd) => fd,
            Err(e) => {
                crate::skip_test!("no generic netlink socket here: {e}");
                return;
            }
        };
        let sock = KernelSocket {
            fd,
            ids: IDS,
            seq: AtomicU32::new(1),
            stats: Arc::new(GuardStats::default()),
            early: Mutex::new(VecDeque::from([CCP_READY.to_vec(), vec![1, 2, 3]])),
            spin: Spin::off(),
        };
        use portus::ipc::Ipc;
        let mut buf = vec![0u8; 64];
        assert_eq!(sock.recv(&mut buf).map(|r| r.0).ok(), Some(CCP_READY.len()));
        assert_eq!(&buf[..CCP_READY.len()], &CCP_READY);
        let mut small = [0u8; 2];
        assert!(
            sock.recv(&mut small).is_err(),
            "too long for the buffer: dropped"
        );
        // then the socket itself (nothing there: the receive times out)
        assert!(sock.early.lock().expect("lock").is_empty());
    }

    /// The genl controller answers on this machine (no module needed): the lookup code works
    /// against a real kernel, and a missing family is reported as such.
    #[test]
    fn the_controller_is_asked_for_real() {
        let fd = match genl_socket() {
            Ok(fd) => fd,
            Err(e) => {
                crate::skip_test!("no generic netlink socket here: {e}");
                return;
            }
        };
        let c = resolve(&fd, CTRL_FAMILY, 7).expect("nlctrl");
        assert_eq!(c.id, GENL_ID_CTRL);
        assert!(c.group(CTRL_GROUP).is_some(), "groups: {:?}", c.groups);
        match resolve(&fd, FAMILY, 8) {
            Err(OpenError::FamilyMissing) => {}
            Ok(f) => eprintln!("the ccp module is loaded here (family id {})", f.id),
            Err(e) => panic!("unexpected: {e}"),
        }
    }

    /// Another process's datagram to the agent's port: on NETLINK_GENERIC an unprivileged
    /// sender is refused by the kernel (EPERM); a privileged one gets through and is
    /// dropped here, counted.
    #[test]
    fn datagrams_from_other_processes_are_dropped() {
        let (rx, tx) = match (genl_socket(), genl_socket()) {
            (Ok(rx), Ok(tx)) => (rx, tx),
            (Err(e), _) | (_, Err(e)) => {
                crate::skip_test!("no generic netlink socket here: {e}");
                return;
            }
        };
        let stats = Arc::new(GuardStats::default());
        let sock = KernelSocket {
            fd: rx,
            ids: IDS,
            seq: AtomicU32::new(1),
            stats: stats.clone(),
            early: Mutex::new(VecDeque::new()),
            spin: Spin::default(),
        };
        let port = sock.port_id().expect("getsockname");
        assert_ne!(port, 0);
        // SAFETY: all-zero sockaddr_nl is valid.
        let mut to: libc::sockaddr_nl = unsafe { zeroed() };
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        to.nl_pid = port;
        let forged = dp(
            CMD_DATAPATH_MSG,
            FAMILY_VERSION,
            &attr(ATTR_MSG, &CCP_READY),
        );
        // SAFETY: live buffers of the sizes given.
        let r = unsafe {
            libc::sendto(
                tx.as_raw_fd(),
                forged.as_ptr().cast(),
                forged.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
            // SAFETY: geteuid has no preconditions.
            assert_ne!(unsafe { libc::geteuid() }, 0, "root was refused: {e}");
            return;
        }
        let mut buf = vec![0u8; 64 * 1024];
        use portus::ipc::Ipc;
        assert!(sock.recv(&mut buf).is_err(), "a forged datagram passed");
        assert_eq!(stats.not_from_kernel.load(Ordering::Relaxed), 1);
        assert_eq!(stats.bad_netlink.load(Ordering::Relaxed), 0);
    }
}
