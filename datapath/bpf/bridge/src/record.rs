//! The BPF datapath's records and decisions as bytes (`datapath/bpf/ccp_bpf.h`, ABI 4).
//!
//! Everything read from the ring is checked here before use: its size, its kind, a flow id,
//! an algorithm id the datapath knows and an MSS; values the datapath saturates are taken as
//! they come. Parsing is by offset (little-endian), no `unsafe`.

use thiserror::Error;

/// `CCPB_ABI` of the BPF object this bridge speaks to (`stats.abi`).
pub const ABI: u64 = 4;
/// `sizeof(struct ccpb_report)`.
pub const REPORT_LEN: usize = 168;
/// `sizeof(struct ccpb_decision)`.
pub const DECISION_LEN: usize = 16;
/// `sizeof(struct ccpb_stats)`.
pub const STATS_LEN: usize = 128;
/// Where `struct ccpb_stats` keeps `abi`, in every ABI.
pub const STATS_ABI_OFFSET: usize = 80;
/// `CCPB_STALE_REPORTS`: the datapath ignores a decision this many reports old.
pub const STALE_REPORTS: u32 = 3;
/// `CCPB_MAX_CWND_BYTES`, `CCPB_MAX_RATE`: the datapath refuses larger decisions.
pub const MAX_CWND_BYTES: u32 = 1 << 30;
pub const MAX_RATE: u64 = 1 << 40;

/// The congestion-control names, by algorithm id (`CCPB_ALGORITHMS`, the module's table
/// `datapath/kernel/ccp_algs.h`): what the flow's CREATE tells the agent.
pub const ALG_NAMES: [&str; 10] = [
    "ccp",
    "ccp_reno",
    "ccp_cubic",
    "ccp_bbr",
    "ccp_jury",
    "ccp_owl",
    "ccp_mocc",
    "ccp_iris",
    "ccp_nuwa",
    "ccp_auto",
];

/// Record kinds (`CCPB_CREATE`, `CCPB_REPORT`, `CCPB_CLOSE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Create,
    Report,
    /// The flow ended; carries the last, partial interval.
    Close,
}

/// One record of the ring "reports" (`struct ccpb_report`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    pub kind: Option<Kind>,
    pub flow: u32,
    pub seq: u32,
    pub alg: u32,
    pub now_ns: u64,
    pub mss: u32,
    pub init_cwnd: u32,
    pub src_ip: u32,
    pub dst_ip: u32,
    pub src_port: u32,
    pub dst_port: u32,
    pub interval_us: u64,
    pub bytes_acked: u64,
    pub packets_acked: u32,
    pub packets_misordered: u32,
    pub lost_pkts: u32,
    pub ecn_packets: u32,
    pub acks: u32,
    pub timeouts: u32,
    pub rtt_min_us: u32,
    pub rtt_max_us: u32,
    pub rtt_last_us: u32,
    pub rtt_samples: u32,
    pub rtt_sum_us: u64,
    pub rate_outgoing: u64,
    pub rate_incoming: u64,
    pub delivered_bytes: u64,
    pub snd_cwnd: u32,
    pub bytes_in_flight: u32,
    pub packets_in_flight: u32,
    pub bytes_pending: u32,
    pub snd_rate: u64,
    pub mode: u32,
    pub lost_reports: u32,
}

/// Why a record was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record of {0} bytes, not {REPORT_LEN}")]
    Size(usize),
    #[error("unknown record kind {0}")]
    Kind(u32),
    #[error("record without a flow id")]
    NoFlow,
    #[error("unknown algorithm id {0}")]
    Alg(u32),
    #[error("MSS {0} out of range")]
    Mss(u32),
}

struct Reader<'a> {
    b: &'a [u8],
    off: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> u32 {
        let mut v = [0u8; 4];
        v.copy_from_slice(&self.b[self.off..self.off + 4]);
        self.off += 4;
        u32::from_le_bytes(v)
    }
    fn u64(&mut self) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&self.b[self.off..self.off + 8]);
        self.off += 8;
        u64::from_le_bytes(v)
    }
}

impl Record {
    /// Parse and check one ring record.
    pub fn parse(b: &[u8]) -> Result<Record, RecordError> {
        if b.len() != REPORT_LEN {
            return Err(RecordError::Size(b.len()));
        }
        let mut r = Reader { b, off: 0 };
        let kind = match r.u32() {
            1 => Kind::Create,
            2 => Kind::Report,
            3 => Kind::Close,
            k => return Err(RecordError::Kind(k)),
        };
        let rec = Record {
            kind: Some(kind),
            flow: r.u32(),
            seq: r.u32(),
            alg: r.u32(),
            now_ns: r.u64(),
            mss: r.u32(),
            init_cwnd: r.u32(),
            src_ip: r.u32(),
            dst_ip: r.u32(),
            src_port: r.u32(),
            dst_port: r.u32(),
            interval_us: r.u64(),
            bytes_acked: r.u64(),
            packets_acked: r.u32(),
            packets_misordered: r.u32(),
            lost_pkts: r.u32(),
            ecn_packets: r.u32(),
            acks: r.u32(),
            timeouts: r.u32(),
            rtt_min_us: r.u32(),
            rtt_max_us: r.u32(),
            rtt_last_us: r.u32(),
            rtt_samples: r.u32(),
            rtt_sum_us: r.u64(),
            rate_outgoing: r.u64(),
            rate_incoming: r.u64(),
            delivered_bytes: r.u64(),
            snd_cwnd: r.u32(),
            bytes_in_flight: r.u32(),
            packets_in_flight: r.u32(),
            bytes_pending: r.u32(),
            snd_rate: r.u64(),
            mode: r.u32(),
            lost_reports: r.u32(),
        };
        debug_assert_eq!(r.off, REPORT_LEN);
        if rec.flow == 0 {
            return Err(RecordError::NoFlow);
        }
        if rec.alg as usize >= ALG_NAMES.len() {
            return Err(RecordError::Alg(rec.alg));
        }
        // the socket's mss_cache (or 1 when unset); a TCP MSS fits 16 bits
        if rec.mss == 0 || rec.mss > 65535 {
            return Err(RecordError::Mss(rec.mss));
        }
        Ok(rec)
    }

    /// The record's kind (always set by [`Record::parse`]).
    pub fn kind(&self) -> Kind {
        self.kind.unwrap_or(Kind::Report)
    }

    /// The record as the datapath writes it (tests).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(REPORT_LEN);
        let kind = match self.kind() {
            Kind::Create => 1u32,
            Kind::Report => 2,
            Kind::Close => 3,
        };
        for v in [kind, self.flow, self.seq, self.alg] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.now_ns.to_le_bytes());
        for v in [
            self.mss,
            self.init_cwnd,
            self.src_ip,
            self.dst_ip,
            self.src_port,
            self.dst_port,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.interval_us.to_le_bytes());
        b.extend_from_slice(&self.bytes_acked.to_le_bytes());
        for v in [
            self.packets_acked,
            self.packets_misordered,
            self.lost_pkts,
            self.ecn_packets,
            self.acks,
            self.timeouts,
            self.rtt_min_us,
            self.rtt_max_us,
            self.rtt_last_us,
            self.rtt_samples,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            self.rtt_sum_us,
            self.rate_outgoing,
            self.rate_incoming,
            self.delivered_bytes,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            self.snd_cwnd,
            self.bytes_in_flight,
            self.packets_in_flight,
            self.bytes_pending,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.snd_rate.to_le_bytes());
        b.extend_from_slice(&self.mode.to_le_bytes());
        b.extend_from_slice(&self.lost_reports.to_le_bytes());
        b
    }
}

/// One entry of the map "decisions" (`struct ccpb_decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The report it answers (1 ..= the flow's last).
    pub seq: u32,
    /// Window in bytes; 0 keeps the window.
    pub cwnd_bytes: u32,
    /// Pacing rate in bytes/s; 0: none.
    pub rate: u64,
}

impl Decision {
    /// The map value, or `None` when the datapath would refuse it (out of range).
    pub fn to_bytes(&self) -> Option<[u8; DECISION_LEN]> {
        if self.seq == 0 || self.cwnd_bytes > MAX_CWND_BYTES || self.rate > MAX_RATE {
            return None;
        }
        let mut b = [0u8; DECISION_LEN];
        b[0..4].copy_from_slice(&self.seq.to_le_bytes());
        b[4..8].copy_from_slice(&self.cwnd_bytes.to_le_bytes());
        b[8..16].copy_from_slice(&self.rate.to_le_bytes());
        Some(b)
    }
}

/// `stats.abi` from the map "stats"'s value.
pub fn stats_abi(value: &[u8]) -> Option<u64> {
    let b = value.get(STATS_ABI_OFFSET..STATS_ABI_OFFSET + 8)?;
    let mut v = [0u8; 8];
    v.copy_from_slice(b);
    Some(u64::from_le_bytes(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Record {
        Record {
            kind: Some(Kind::Report),
            flow: 7,
            seq: 3,
            alg: 2,
            now_ns: 123,
            mss: 1448,
            bytes_acked: 1 << 33,
            rtt_sum_us: 99,
            snd_rate: 5,
            lost_reports: 9,
            ..Default::default()
        }
    }

    #[test]
    fn roundtrip_and_layout() {
        let r = report();
        let b = r.to_bytes();
        assert_eq!(b.len(), REPORT_LEN);
        // fields at the offsets of struct ccpb_report
        assert_eq!(&b[0..4], &2u32.to_le_bytes());
        assert_eq!(&b[4..8], &7u32.to_le_bytes());
        assert_eq!(&b[16..24], &123u64.to_le_bytes());
        assert_eq!(&b[24..28], &1448u32.to_le_bytes());
        assert_eq!(&b[56..64], &(1u64 << 33).to_le_bytes());
        assert_eq!(&b[104..112], &99u64.to_le_bytes());
        assert_eq!(&b[152..160], &5u64.to_le_bytes());
        assert_eq!(&b[164..168], &9u32.to_le_bytes());
        assert_eq!(Record::parse(&b), Ok(r));
    }

    #[test]
    fn refuses_what_the_datapath_never_writes() {
        let good = report().to_bytes();
        assert_eq!(Record::parse(&good[..100]), Err(RecordError::Size(100)));
        let mut b = good.clone();
        b[0] = 9;
        assert_eq!(Record::parse(&b), Err(RecordError::Kind(9)));
        let mut r = report();
        r.flow = 0;
        assert_eq!(Record::parse(&r.to_bytes()), Err(RecordError::NoFlow));
        let mut r = report();
        r.alg = 10;
        assert_eq!(Record::parse(&r.to_bytes()), Err(RecordError::Alg(10)));
        let mut r = report();
        r.mss = 0;
        assert_eq!(Record::parse(&r.to_bytes()), Err(RecordError::Mss(0)));
    }

    #[test]
    fn decisions_out_of_range_are_not_written() {
        let d = Decision {
            seq: 4,
            cwnd_bytes: 14480,
            rate: 1_000_000,
        };
        let b = d.to_bytes().expect("in range");
        assert_eq!(&b[0..4], &4u32.to_le_bytes());
        assert_eq!(&b[4..8], &14480u32.to_le_bytes());
        assert_eq!(&b[8..16], &1_000_000u64.to_le_bytes());
        assert!(Decision { seq: 0, ..d }.to_bytes().is_none());
        assert!(Decision {
            cwnd_bytes: MAX_CWND_BYTES + 1,
            ..d
        }
        .to_bytes()
        .is_none());
        assert!(Decision {
            rate: MAX_RATE + 1,
            ..d
        }
        .to_bytes()
        .is_none());
    }

    /// The names in the module's generated table (from the agent's registry), the BPF
    /// datapath's table and this crate's, in the same order: a registry change that
    /// regenerates `ccp_algs.h` fails here until the BPF side follows.
    #[test]
    fn name_tables_agree() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let module =
            std::fs::read_to_string(dir.join("../../kernel/ccp_algs.h")).expect("ccp_algs.h");
        let names: Vec<&str> = module
            .lines()
            .filter_map(|l| l.trim().strip_prefix("X(\""))
            .filter_map(|l| l.split('"').next())
            .collect();
        assert_eq!(names, ALG_NAMES, "datapath/kernel/ccp_algs.h");
        let bpf = std::fs::read_to_string(dir.join("../ccp_bpf.h")).expect("ccp_bpf.h");
        let ids: Vec<(usize, &str)> = bpf
            .lines()
            .filter_map(|l| l.trim().strip_prefix("X("))
            .filter_map(|l| {
                let (id, rest) = l.split_once(',')?;
                Some((id.trim().parse().ok()?, rest.split(')').next()?.trim()))
            })
            .collect();
        let want: Vec<(usize, &str)> = ALG_NAMES.iter().copied().enumerate().collect();
        assert_eq!(ids, want, "datapath/bpf/ccp_bpf.h CCPB_ALGORITHMS");
    }

    /// The ABI and the sizes this file parses by are the C header's (its `CCPB_ABI` and
    /// `_Static_assert`s): a change there without one here fails.
    #[test]
    fn abi_and_sizes_are_the_headers() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let h = std::fs::read_to_string(dir.join("../ccp_bpf.h")).expect("ccp_bpf.h");
        let abi = h
            .lines()
            .find_map(|l| l.strip_prefix("#define CCPB_ABI"))
            .map(|v| v.trim().parse::<u64>().expect("CCPB_ABI is a number"));
        assert_eq!(abi, Some(ABI), "ccp_bpf.h CCPB_ABI");
        let size = |ty: &str| {
            let pat = format!("sizeof(struct {ty}) == ");
            h.lines()
                .find_map(|l| l.split_once(pat.as_str()).map(|(_, r)| r))
                .and_then(|r| r.split(',').next())
                .map(|n| n.trim().parse::<usize>().expect("a size"))
        };
        assert_eq!(size("ccpb_report"), Some(REPORT_LEN));
        assert_eq!(size("ccpb_decision"), Some(DECISION_LEN));
        assert_eq!(size("ccpb_stats"), Some(STATS_LEN));
    }

    #[test]
    fn stats_abi_is_at_offset_80() {
        let mut v = vec![0u8; STATS_LEN];
        v[80..88].copy_from_slice(&ABI.to_le_bytes());
        assert_eq!(stats_abi(&v), Some(ABI));
        assert_eq!(stats_abi(&v[..40]), None);
    }
}
