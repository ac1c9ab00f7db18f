//! What a learned window core (Owl, Nuwa-RL) believes of a report: every value the datapath
//! gave checked before features, rewards or the loss clock see it. RTTs must lie in
//! `(0, RTT_SAMPLE_CEILING_US)` and be finite; counts, bytes, rates and the interval length
//! are bounded.
//!
//! The checks are one shared base ([`sanitized`]) plus per-core extras for the fields only one
//! core reads ([`inflight_bytes`], [`delivery_rate_bps`]: Owl; [`cwnd_bytes`]: Nuwa-RL), so
//! that each core sees exactly the interval it saw when each wrote its own checks: the base is
//! what the two had in common, and each core applies its own extras on top of it.

use crate::signals::{Interval, RTT_SAMPLE_CEILING_US};

/// Longest report interval believed (µs); a longer one counts as this long. A sanity bound on
/// what a report says, not the range of intervals an algorithm may ask for
/// ([`crate::controller::MAX_REPORT_INTERVAL_US`]).
pub const MAX_BELIEVED_INTERVAL_US: u64 = 60_000_000;
/// Largest packet count believed from a report.
pub const MAX_COUNT: u64 = u32::MAX as u64;
/// Largest byte count believed from a report: [`MAX_COUNT`] packets of 64 KiB.
pub const MAX_BYTES: u64 = MAX_COUNT * 65_536;
/// Largest delivery rate believed from a report (bytes/s, 100 Gbit/s).
pub const MAX_RATE_BPS: u64 = 12_500_000_000;

/// The checks every learned window core applies: RTTs within `(0, RTT_SAMPLE_CEILING_US)`
/// and finite, counts, bytes and the interval bounded; every other field as reported.
pub fn sanitized(iv: &Interval) -> Interval {
    let rtt = |v: Option<u64>| v.filter(|&r| r > 0 && r < RTT_SAMPLE_CEILING_US);
    Interval {
        acked_bytes: iv.acked_bytes.min(MAX_BYTES),
        acked_pkts: iv.acked_pkts.min(MAX_COUNT),
        lost_pkts: iv.lost_pkts.min(MAX_COUNT),
        rtt_min_us: rtt(iv.rtt_min_us),
        rtt_mean_us: iv
            .rtt_mean_us
            .filter(|r| r.is_finite() && *r > 0.0 && *r < RTT_SAMPLE_CEILING_US as f64),
        rtt_last_us: rtt(iv.rtt_last_us),
        interval_us: iv.interval_us.min(MAX_BELIEVED_INTERVAL_US),
        ..*iv
    }
}

/// Bytes in flight, at most [`MAX_BYTES`] (Owl's flight feature).
pub fn inflight_bytes(v: Option<u64>) -> Option<u64> {
    v.map(|b| b.min(MAX_BYTES))
}

/// A delivery-rate sample (bytes/s), at most [`MAX_RATE_BPS`] (Owl's reward unit).
pub fn delivery_rate_bps(v: Option<u64>) -> Option<u64> {
    v.map(|r| r.min(MAX_RATE_BPS))
}

/// The datapath's window (bytes), only if in `(0, u32::MAX]` (Nuwa-RL's window feature).
pub fn cwnd_bytes(v: Option<u64>) -> Option<u64> {
    v.filter(|&c| c > 0 && c <= u64::from(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_values_are_bounded_or_dropped() {
        let iv = Interval {
            acked_bytes: u64::MAX,
            acked_pkts: u64::MAX,
            lost_pkts: u64::MAX,
            rtt_min_us: Some(0),
            rtt_mean_us: Some(f64::NAN),
            rtt_last_us: Some(RTT_SAMPLE_CEILING_US),
            interval_us: u64::MAX,
            inflight_bytes: Some(u64::MAX),
            cwnd_bytes: Some(u64::MAX),
            delivery_rate_max_bps: Some(u64::MAX),
            ecn_pkts: 7,
            ..Default::default()
        };
        let s = sanitized(&iv);
        assert_eq!(
            (s.acked_bytes, s.acked_pkts, s.lost_pkts),
            (MAX_BYTES, MAX_COUNT, MAX_COUNT)
        );
        assert_eq!(
            (s.rtt_min_us, s.rtt_mean_us, s.rtt_last_us),
            (None, None, None)
        );
        assert_eq!(s.interval_us, MAX_BELIEVED_INTERVAL_US);
        // the base leaves the per-core fields (and every other) as reported
        assert_eq!(
            (
                s.inflight_bytes,
                s.cwnd_bytes,
                s.delivery_rate_max_bps,
                s.ecn_pkts
            ),
            (Some(u64::MAX), Some(u64::MAX), Some(u64::MAX), 7)
        );
        assert_eq!(inflight_bytes(s.inflight_bytes), Some(MAX_BYTES));
        assert_eq!(
            delivery_rate_bps(s.delivery_rate_max_bps),
            Some(MAX_RATE_BPS)
        );
        assert_eq!(cwnd_bytes(s.cwnd_bytes), None);
        assert_eq!(cwnd_bytes(Some(0)), None);
        assert_eq!(cwnd_bytes(Some(1500)), Some(1500));
    }
}
