//! Datapath→agent messages as a datapath writes them (libccp's wire format: u16 type, u16
//! length, u32 socket id, little-endian, then the body). Used by tests, benchmarks and tools
//! that play the datapath's part; portus's own CREATE serializer panics on short names
//! (defect 11), so it is not used for this.

use crate::ipc::guard::{CREATE, CREATE_LEN, HDR_LEN, MEASURE, READY};

/// Header of any message.
pub fn header(typ: u16, len: usize, sid: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&typ.to_le_bytes());
    m.extend_from_slice(&(len as u16).to_le_bytes());
    m.extend_from_slice(&sid.to_le_bytes());
    m
}

/// READY, sent by a datapath when it starts.
pub fn ready(id: u32) -> Vec<u8> {
    let mut m = header(READY, HDR_LEN + 4, 0);
    m.extend_from_slice(&id.to_le_bytes());
    m
}

/// CREATE for socket `sid` requesting congestion control `name` (≤ 63 bytes).
pub fn create(sid: u32, name: &str, init_cwnd_bytes: u32, mss: u32) -> Vec<u8> {
    create_from(sid, name, init_cwnd_bytes, mss, ("0.0.0.0:0", "0.0.0.0:0"))
}

/// [`create`] for a socket with these (local, remote) IPv4 addresses (`"10.0.1.1:40000"`;
/// an unparsable one is 0).
pub fn create_from(
    sid: u32,
    name: &str,
    init_cwnd_bytes: u32,
    mss: u32,
    (local, remote): (&str, &str),
) -> Vec<u8> {
    let ep = |s: &str| match s.parse::<std::net::SocketAddrV4>() {
        Ok(a) => (u32::from(*a.ip()), u32::from(a.port())),
        Err(_) => (0, 0),
    };
    let ((sip, sport), (dip, dport)) = (ep(local), ep(remote));
    let mut m = header(CREATE, CREATE_LEN, sid);
    for v in [init_cwnd_bytes, mss, sip, sport, dip, dport] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    let mut n = [0u8; 64];
    let len = name.len().min(63);
    n[..len].copy_from_slice(&name.as_bytes()[..len]);
    m.extend_from_slice(&n);
    m
}

/// MEASURE (a report) of program `uid` with `fields` in the program's report order.
pub fn measure(sid: u32, uid: u32, fields: &[u64]) -> Vec<u8> {
    let mut m = header(MEASURE, HDR_LEN + 8 + 8 * fields.len(), sid);
    m.extend_from_slice(&uid.to_le_bytes());
    m.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    for f in fields {
        m.extend_from_slice(&f.to_le_bytes());
    }
    m
}

/// Type and socket id of a message.
pub fn type_and_sid(m: &[u8]) -> Option<(u16, u32)> {
    (m.len() >= HDR_LEN).then(|| {
        (
            u16::from_le_bytes([m[0], m[1]]),
            u32::from_le_bytes([m[4], m[5], m[6], m[7]]),
        )
    })
}

/// Program uid of a CHANGE_PROG answer.
pub fn change_prog_uid(m: &[u8]) -> Option<u32> {
    (m.len() >= HDR_LEN + 4).then(|| u32::from_le_bytes([m[8], m[9], m[10], m[11]]))
}

/// Lay out a report for `alg`'s program: `values` by canonical field name, others 0.
pub fn report_fields(program: &ccp_algs::FoldProgram, values: &[(&str, u64)]) -> Vec<u64> {
    let Ok((_, scope)) = portus::lang::compile(program.source.as_bytes(), &[]) else {
        return Vec::new();
    };
    let mut fields = vec![0u64; program.fields.len()];
    for f in &program.fields {
        if let Some(portus::lang::Reg::Report(idx, _, _)) = scope.get(&format!("Report.{f}")) {
            if let Some(slot) = fields.get_mut(*idx as usize) {
                *slot = values
                    .iter()
                    .find(|(n, _)| n == f)
                    .map(|(_, v)| *v)
                    .unwrap_or(0);
            }
        }
    }
    fields
}

/// A plausible report for `program`: one round trip of 10 packets (14,480 bytes) acked with a
/// 40 ms RTT over a 20 ms interval, no loss; other fields 0.
pub fn one_rtt_report(program: &ccp_algs::FoldProgram) -> Vec<u64> {
    report_fields(
        program,
        &[
            ("acked_bytes", 14480),
            ("acked_pkts", 10),
            ("rtt_min_us", 40_000),
            ("rtt_sum_us", 40_000),
            ("rtt_cnt", 1),
            ("interval_us", 20_000),
        ],
    )
}
