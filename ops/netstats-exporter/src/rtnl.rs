//! Reading interface and qdisc counters over rtnetlink (`NETLINK_ROUTE`): one dump of
//! `RTM_GETLINK` (`IFLA_STATS64`) and one of `RTM_GETQDISC` (`TCA_STATS2`'s queue
//! statistics of each interface's root qdisc) per sample, on a raw socket. Parsing is
//! bounds-checked: a short or malformed message is skipped, never read past.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::model::{LinkCounters, QdiscCounters};

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const IFINFOMSG: usize = 16;
const TCMSG: usize = 20;
const IFLA_IFNAME: u16 = 3;
const IFLA_STATS64: u16 = 23;
const TCA_KIND: u16 = 1;
const TCA_STATS: u16 = 3;
const TCA_STATS2: u16 = 7;
const TCA_STATS_QUEUE: u16 = 3;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;
/// Largest dump read (bytes): thousands of interfaces.
const MAX_DUMP: usize = 16 << 20;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The `(type, payload)` of each attribute in `b` (stops at the first malformed one).
pub fn attrs(b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(len), Some(ty)) = (u16_at(b, at), u16_at(b, at + 2)) {
        let len = usize::from(len);
        if len < 4 || at + len > b.len() {
            break;
        }
        // NLA_F_NESTED and NLA_F_NET_BYTEORDER are flags, not part of the type
        out.push((ty & 0x3fff, &b[at + 4..at + len]));
        at += (len + 3) & !3;
    }
    out
}

/// A netlink message: its type and its payload after the header.
pub type Message<'a> = (u16, &'a [u8]);

/// The messages of a netlink buffer that answer request `seq`, and whether the dump is done.
pub fn messages(b: &[u8], seq: u32) -> io::Result<(Vec<Message<'_>>, bool)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(len), Some(ty), Some(s)) = (u32_at(b, at), u16_at(b, at + 4), u32_at(b, at + 8))
    {
        let len = len as usize;
        if len < NLMSG_HDR || at + len > b.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a truncated netlink message",
            ));
        }
        let payload = &b[at + NLMSG_HDR..at + len];
        at += (len + 3) & !3;
        if s != seq {
            continue; // an answer to an earlier request
        }
        match ty {
            NLMSG_DONE => return Ok((out, true)),
            NLMSG_ERROR => {
                let code = u32_at(payload, 0).map(|c| c as i32).unwrap_or(-libc::EIO);
                if code != 0 {
                    return Err(io::Error::from_raw_os_error(-code));
                }
            }
            _ => out.push((ty, payload)),
        }
    }
    Ok((out, false))
}

/// One interface: its index, name and counters (without qdisc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: i32,
    pub name: String,
    pub counters: Option<LinkCounters>,
}

/// An `RTM_NEWLINK` payload.
pub fn parse_link(p: &[u8]) -> Option<Link> {
    let index = u32_at(p, 4)? as i32;
    let mut name = None;
    let mut counters = None;
    for (ty, v) in attrs(p.get(IFINFOMSG..)?) {
        match ty {
            IFLA_IFNAME => {
                let end = v.iter().position(|c| *c == 0).unwrap_or(v.len());
                name = std::str::from_utf8(&v[..end]).ok().map(str::to_string);
            }
            IFLA_STATS64 => {
                counters = Some(LinkCounters {
                    rx_packets: u64_at(v, 0)?,
                    tx_packets: u64_at(v, 8)?,
                    rx_bytes: u64_at(v, 16)?,
                    tx_bytes: u64_at(v, 24)?,
                    tx_dropped: u64_at(v, 56)?,
                    qdisc: None,
                })
            }
            _ => {}
        }
    }
    Some(Link {
        index,
        name: name?,
        counters,
    })
}

/// A root qdisc: its interface, kind and queue statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    pub ifindex: i32,
    pub kind: String,
    pub stats: Option<QdiscCounters>,
}

/// An `RTM_NEWQDISC` payload, if it is a root qdisc.
pub fn parse_root_qdisc(p: &[u8]) -> Option<Qdisc> {
    let ifindex = u32_at(p, 4)? as i32;
    if u32_at(p, 12)? != TC_H_ROOT {
        return None;
    }
    let mut kind = String::new();
    let mut stats = None;
    for (ty, v) in attrs(p.get(TCMSG..)?) {
        match ty {
            TCA_KIND => {
                let end = v.iter().position(|c| *c == 0).unwrap_or(v.len());
                kind = String::from_utf8_lossy(&v[..end]).into_owned();
            }
            TCA_STATS2 => {
                for (t2, q) in attrs(v) {
                    if t2 == TCA_STATS_QUEUE {
                        // gnet_stats_queue: qlen, backlog, drops, requeues, overlimits
                        stats = Some(QdiscCounters {
                            qlen: u32_at(q, 0)?,
                            backlog_bytes: u32_at(q, 4)?,
                            drops: u32_at(q, 8)?,
                        });
                    }
                }
            }
            // the old struct tc_stats: bytes u64, packets, drops, overlimits, bps, pps,
            // qlen, backlog (u32 each)
            TCA_STATS if stats.is_none() => {
                stats = Some(QdiscCounters {
                    drops: u32_at(v, 12)?,
                    qlen: u32_at(v, 28)?,
                    backlog_bytes: u32_at(v, 32)?,
                });
            }
            _ => {}
        }
    }
    Some(Qdisc {
        ifindex,
        kind,
        stats,
    })
}

/// A route netlink socket.
pub struct Rtnl {
    fd: OwnedFd,
    seq: u32,
}

impl Rtnl {
    /// Open and bind a `NETLINK_ROUTE` socket (no privilege needed to read counters).
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain socket(2); the result is checked before use
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor this function owns
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a zeroed sockaddr_nl is valid; family set below
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: `sa` is a valid sockaddr_nl of the size given
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let tv = libc::timeval {
            tv_sec: Duration::from_secs(2).as_secs() as libc::time_t,
            tv_usec: 0,
        };
        // SAFETY: `tv` is a valid timeval of the size given
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd, seq: 1 })
    }

    /// Send a dump request of `ty` with `body` (the family header), collect the payloads of
    /// messages of type `want`.
    fn dump(&mut self, ty: u16, body: &[u8], want: u16) -> io::Result<Vec<Vec<u8>>> {
        self.seq = self.seq.wrapping_add(1);
        let len = NLMSG_HDR + body.len();
        let mut req = Vec::with_capacity(len);
        req.extend_from_slice(&(len as u32).to_ne_bytes());
        req.extend_from_slice(&ty.to_ne_bytes());
        req.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        req.extend_from_slice(&self.seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes());
        req.extend_from_slice(body);
        // SAFETY: `req` is valid for its length; the kernel is the destination (pid 0)
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                req.as_ptr() as *const libc::c_void,
                req.len(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 64 * 1024];
        let mut out = Vec::new();
        let mut total = 0;
        loop {
            // SAFETY: `buf` is valid for writes of its length
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    0,
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            total += n;
            if total > MAX_DUMP {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a netlink dump over 16 MiB",
                ));
            }
            let (msgs, done) = messages(&buf[..n], self.seq)?;
            out.extend(
                msgs.into_iter()
                    .filter(|(t, _)| *t == want)
                    .map(|(_, p)| p.to_vec()),
            );
            if done {
                return Ok(out);
            }
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the netlink dump ended without NLMSG_DONE",
                ));
            }
        }
    }

    /// Every interface.
    pub fn links(&mut self) -> io::Result<Vec<Link>> {
        let body = [0u8; IFINFOMSG]; // AF_UNSPEC: every interface
        Ok(self
            .dump(RTM_GETLINK, &body, RTM_NEWLINK)?
            .iter()
            .filter_map(|p| parse_link(p))
            .collect())
    }

    /// Every interface's root qdisc.
    pub fn root_qdiscs(&mut self) -> io::Result<Vec<Qdisc>> {
        let body = [0u8; TCMSG];
        Ok(self
            .dump(RTM_GETQDISC, &body, RTM_NEWQDISC)?
            .iter()
            .filter_map(|p| parse_root_qdisc(p))
            .collect())
    }

    /// Counters of every interface by name, with its root qdisc's queue statistics.
    pub fn counters(&mut self) -> io::Result<HashMap<String, LinkCounters>> {
        let links = self.links()?;
        let qdiscs = self.root_qdiscs()?;
        Ok(links
            .into_iter()
            .filter_map(|l| {
                let mut c = l.counters?;
                c.qdisc = qdiscs
                    .iter()
                    .find(|q| q.ifindex == l.index)
                    .and_then(|q| q.stats);
                Some((l.name, c))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        b.extend_from_slice(&ty.to_ne_bytes());
        b.extend_from_slice(v);
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }

    #[test]
    fn links_and_root_qdiscs_are_parsed_and_bounded() {
        let mut p = vec![0u8; IFINFOMSG];
        p[4..8].copy_from_slice(&7u32.to_ne_bytes());
        p.extend(attr(IFLA_IFNAME, b"eth1\0"));
        let mut st = Vec::new();
        for v in [10u64, 20, 1000, 2000, 0, 0, 0, 3, 0, 0] {
            st.extend_from_slice(&v.to_ne_bytes());
        }
        p.extend(attr(IFLA_STATS64, &st));
        let l = parse_link(&p).unwrap();
        assert_eq!((l.index, l.name.as_str()), (7, "eth1"));
        let c = l.counters.unwrap();
        assert_eq!(
            (
                c.rx_packets,
                c.tx_packets,
                c.rx_bytes,
                c.tx_bytes,
                c.tx_dropped
            ),
            (10, 20, 1000, 2000, 3)
        );
        // a truncated stats attribute: the attribute is dropped, nothing read past the end
        let cut = &p[..p.len() - 8];
        assert!(parse_link(cut).is_some_and(|l| l.counters.is_none()));
        assert!(parse_link(&p[..10]).is_none());

        let mut q = vec![0u8; TCMSG];
        q[4..8].copy_from_slice(&7u32.to_ne_bytes());
        q[12..16].copy_from_slice(&TC_H_ROOT.to_ne_bytes());
        q.extend(attr(TCA_KIND, b"tbf\0"));
        let mut qs = Vec::new();
        for v in [5u32, 7500, 42, 0, 1] {
            qs.extend_from_slice(&v.to_ne_bytes());
        }
        q.extend(attr(TCA_STATS2, &attr(TCA_STATS_QUEUE, &qs)));
        let r = parse_root_qdisc(&q).unwrap();
        assert_eq!((r.ifindex, r.kind.as_str()), (7, "tbf"));
        assert_eq!(
            r.stats,
            Some(QdiscCounters {
                qlen: 5,
                backlog_bytes: 7500,
                drops: 42
            })
        );
        // a child qdisc is not the port's
        q[12..16].copy_from_slice(&0x0001_0000u32.to_ne_bytes());
        assert!(parse_root_qdisc(&q).is_none());
    }

    #[test]
    fn messages_stop_at_done_and_report_errors() {
        let msg = |ty: u16, seq: u32, payload: &[u8]| {
            let mut b = Vec::new();
            b.extend_from_slice(&((NLMSG_HDR + payload.len()) as u32).to_ne_bytes());
            b.extend_from_slice(&ty.to_ne_bytes());
            b.extend_from_slice(&0u16.to_ne_bytes());
            b.extend_from_slice(&seq.to_ne_bytes());
            b.extend_from_slice(&0u32.to_ne_bytes());
            b.extend_from_slice(payload);
            b
        };
        let mut b = msg(RTM_NEWLINK, 5, &[1, 2, 3, 4]);
        b.extend(msg(RTM_NEWLINK, 4, &[9, 9, 9, 9])); // an old request's
        b.extend(msg(NLMSG_DONE, 5, &[0; 4]));
        let (m, done) = messages(&b, 5).unwrap();
        assert!(done);
        assert_eq!(m, [(RTM_NEWLINK, &[1u8, 2, 3, 4][..])]);
        let e = messages(&msg(NLMSG_ERROR, 5, &(-libc::EPERM).to_ne_bytes()), 5).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        assert!(messages(&b[..18], 5).is_err());
    }
}
