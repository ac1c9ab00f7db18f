//! PNC and PNA from two snapshots of a router's counters: pure arithmetic.
//!
//! Each `--link` is one of the router's egress ports: its interface counters
//! (`rtnl_link_stats64`) and its root qdisc's (`gnet_stats_queue`). Over a period of `dt`
//! seconds, for port ℓ:
//!
//! ```text
//!   P_out = Δ tx_packets                              packets that left through ℓ
//!   P_in  = P_out + Δ drops + Δ qlen                  packets offered to ℓ (drops included)
//!           drops = qdisc drops + interface tx_dropped; qlen = the root qdisc's packet backlog
//!   PNC   = max over ℓ of |P_in − P_out| / dt          (eq. 4; packets per second)
//!   rate  = 8 · Δ tx_bytes / dt;   PNA = min over ℓ of clamp((C_ℓ − rate) / C_ℓ, 0, 1)   (eq. 5)
//! ```
//!
//! `|P_in − P_out|` is then `|drops + queue growth|`: what the simulator's bottleneck reports
//! (packets offered, drops included, minus packets that left), so a model trained there reads
//! the same quantity here. A port without a queue (`noqueue`) has only its interface drops.
//! Counters that go backwards (an interface re-created, a qdisc replaced) make the period
//! unmeasurable: no sample for it. The qdisc's 32-bit drop counter may wrap.

/// One port's counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkCounters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_dropped: u64,
    /// The root qdisc's, when it has one with statistics.
    pub qdisc: Option<QdiscCounters>,
}

/// A root qdisc's queue statistics (`gnet_stats_queue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QdiscCounters {
    /// Packets dropped (a 32-bit counter: it wraps).
    pub drops: u32,
    /// Packets queued now.
    pub qlen: u32,
    /// Bytes queued now.
    pub backlog_bytes: u32,
}

/// One port over one period.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LinkPeriod {
    /// `|P_in − P_out| / dt`: packets per second.
    pub pnc_pkts: f64,
    /// Spare-capacity fraction in `[0, 1]`.
    pub pna: f64,
    /// Egress rate (bit/s).
    pub tx_bps: f64,
    /// Packets per second out, and dropped in the period.
    pub tx_pps: f64,
    pub drops: u64,
    /// Packets queued at the end of the period.
    pub qlen: u32,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error(
        "{0} went backwards (the interface or its qdisc was re-created): no sample this period"
    )]
    WentBack(&'static str),
    #[error("period of {0} s: expected a positive, finite time")]
    BadPeriod(f64),
    #[error("capacity {0} bit/s: expected a positive, finite rate")]
    BadCapacity(f64),
}

fn delta(name: &'static str, prev: u64, cur: u64) -> Result<u64, ModelError> {
    cur.checked_sub(prev).ok_or(ModelError::WentBack(name))
}

/// Port ℓ over `dt` seconds, with capacity `capacity_bps`.
pub fn link_period(
    prev: &LinkCounters,
    cur: &LinkCounters,
    dt: f64,
    capacity_bps: f64,
) -> Result<LinkPeriod, ModelError> {
    if !(dt.is_finite() && dt > 0.0) {
        return Err(ModelError::BadPeriod(dt));
    }
    if !(capacity_bps.is_finite() && capacity_bps > 0.0) {
        return Err(ModelError::BadCapacity(capacity_bps));
    }
    let tx_packets = delta("tx_packets", prev.tx_packets, cur.tx_packets)?;
    let tx_bytes = delta("tx_bytes", prev.tx_bytes, cur.tx_bytes)?;
    let mut drops = delta("tx_dropped", prev.tx_dropped, cur.tx_dropped)?;
    let (mut dq, mut qlen) = (0i64, 0u32);
    match (prev.qdisc, cur.qdisc) {
        (Some(p), Some(c)) => {
            drops += u64::from(c.drops.wrapping_sub(p.drops));
            dq = i64::from(c.qlen) - i64::from(p.qlen);
            qlen = c.qlen;
        }
        (None, None) => {}
        // a qdisc added or removed in the period
        _ => return Err(ModelError::WentBack("qdisc")),
    }
    let p_out = tx_packets as f64;
    let p_in = p_out + drops as f64 + dq as f64;
    let tx_bps = tx_bytes as f64 * 8.0 / dt;
    Ok(LinkPeriod {
        pnc_pkts: (p_in - p_out).abs() / dt,
        pna: ((capacity_bps - tx_bps) / capacity_bps).clamp(0.0, 1.0),
        tx_bps,
        tx_pps: p_out / dt,
        drops,
        qlen,
    })
}

/// A path over its ports: `(PNC, PNA)` = (max of PNC, min of PNA); `None` without ports.
pub fn path_stats<'a>(links: impl IntoIterator<Item = &'a LinkPeriod>) -> Option<(f64, f64)> {
    links.into_iter().fold(None, |acc, l| match acc {
        None => Some((l.pnc_pkts, l.pna)),
        Some((c, a)) => Some((c.max(l.pnc_pkts), a.min(l.pna))),
    })
}

/// A rate in tc's bit units: `100mbit`, `1gbit`, `512kbit`, `9600bit` (decimal multiples).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let units = [
        ("tbit", 1e12),
        ("gbit", 1e9),
        ("mbit", 1e6),
        ("kbit", 1e3),
        ("bit", 1.0),
    ];
    let hint = "write the link's capacity in bits per second as tc does: 100mbit, 1gbit, 512kbit";
    if t.ends_with("bps") {
        return Err(format!(
            "{s:?}: tc's bps units are bytes per second; {hint}"
        ));
    }
    let Some((num, mult)) = units
        .iter()
        .find_map(|(u, m)| t.strip_suffix(u).map(|n| (n, *m)))
    else {
        return Err(format!("{s:?}: no unit; {hint}"));
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * mult <= 1e13 => Ok(v * mult),
        _ => Err(format!("{s:?}: not a positive rate up to 10tbit; {hint}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(tx_packets: u64, tx_bytes: u64, tx_dropped: u64, q: Option<(u32, u32)>) -> LinkCounters {
        LinkCounters {
            tx_packets,
            tx_bytes,
            tx_dropped,
            qdisc: q.map(|(drops, qlen)| QdiscCounters {
                drops,
                qlen,
                backlog_bytes: qlen * 1500,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pna_is_the_spare_share_of_the_capacity() {
        // 6 Mbit/s out of a 12 Mbit/s link over 1 s: half spare, nothing queued or lost
        let p = link_period(
            &c(1000, 10_000_000, 0, Some((5, 0))),
            &c(1500, 10_750_000, 0, Some((5, 0))),
            1.0,
            12e6,
        )
        .unwrap();
        assert_eq!(p.tx_bps, 6e6);
        assert_eq!(p.pna, 0.5);
        assert_eq!(p.pnc_pkts, 0.0);
        assert_eq!((p.tx_pps, p.drops, p.qlen), (500.0, 0, 0));
        // a saturated link has none; a measurement over capacity is clamped, not negative
        let full = link_period(&c(0, 0, 0, None), &c(1000, 1_600_000, 0, None), 1.0, 12e6).unwrap();
        assert_eq!(full.pna, 0.0);
        // the rate is per second: the same bytes over 2 s is half the rate
        let slow = link_period(&c(0, 0, 0, None), &c(500, 750_000, 0, None), 2.0, 12e6).unwrap();
        assert_eq!((slow.tx_bps, slow.pna), (3e6, 0.75));
    }

    #[test]
    fn pnc_is_drops_plus_queue_growth_per_second() {
        // 1000 offered to a 12 Mbit/s port over 1 s: 800 sent, 150 dropped, queue 0 → 50
        let p = link_period(
            &c(0, 0, 0, Some((10, 0))),
            &c(800, 1_200_000, 0, Some((160, 50))),
            1.0,
            12e6,
        )
        .unwrap();
        assert_eq!(p.pnc_pkts, 200.0);
        assert_eq!((p.drops, p.qlen), (150, 50));
        // the queue drains by 40 with no drops: |P_in − P_out| = 40
        let d = link_period(
            &c(800, 0, 0, Some((160, 50))),
            &c(1600, 1_200_000, 0, Some((160, 10))),
            1.0,
            12e6,
        )
        .unwrap();
        assert_eq!(d.pnc_pkts, 40.0);
        // interface drops count too (noqueue ports have only those); over 0.5 s, doubled
        let n = link_period(&c(0, 0, 3, None), &c(100, 0, 8, None), 0.5, 1e9).unwrap();
        assert_eq!(n.pnc_pkts, 10.0);
        // the qdisc's 32-bit drop counter wraps
        let w = link_period(
            &c(0, 0, 0, Some((u32::MAX - 1, 0))),
            &c(0, 0, 0, Some((3, 0))),
            1.0,
            1e9,
        )
        .unwrap();
        assert_eq!(w.drops, 5);
    }

    #[test]
    fn counters_that_go_back_or_bad_inputs_give_no_sample() {
        let a = c(100, 1000, 0, Some((0, 0)));
        for (b, what) in [
            (c(99, 1000, 0, Some((0, 0))), "tx_packets"),
            (c(100, 999, 0, Some((0, 0))), "tx_bytes"),
            (c(100, 1000, 0, None), "qdisc"),
        ] {
            assert_eq!(
                link_period(&a, &b, 1.0, 1e6),
                Err(ModelError::WentBack(what))
            );
        }
        assert!(matches!(
            link_period(&a, &a, 0.0, 1e6),
            Err(ModelError::BadPeriod(_))
        ));
        assert!(matches!(
            link_period(&a, &a, 1.0, f64::NAN),
            Err(ModelError::BadCapacity(_))
        ));
    }

    #[test]
    fn a_path_takes_the_worst_port() {
        let l = |pnc, pna| LinkPeriod {
            pnc_pkts: pnc,
            pna,
            tx_bps: 0.0,
            tx_pps: 0.0,
            drops: 0,
            qlen: 0,
        };
        assert_eq!(
            path_stats(&[l(3.0, 0.9), l(40.0, 0.5), l(7.0, 0.2)]),
            Some((40.0, 0.2))
        );
        assert_eq!(path_stats(&[]), None);
    }

    #[test]
    fn rates_are_tc_bit_units() {
        assert_eq!(parse_rate("100mbit"), Ok(100e6));
        assert_eq!(parse_rate("1.5Gbit"), Ok(1.5e9));
        assert_eq!(parse_rate("512kbit"), Ok(512e3));
        assert_eq!(parse_rate("9600bit"), Ok(9600.0));
        for (bad, says) in [
            ("100mbps", "bytes per second"),
            ("100", "no unit"),
            ("-5mbit", "positive"),
            ("0mbit", "positive"),
            ("20tbit", "positive"),
            ("xmbit", "positive"),
        ] {
            let e = parse_rate(bad).unwrap_err();
            assert!(e.contains(says) && e.contains("100mbit"), "{bad}: {e}");
        }
    }
}
