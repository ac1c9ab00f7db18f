//! In-network statistics of a flow's path: what Owl (the Owl paper §IV-A, §VI) reads next to its
//! end-to-end signals when the network offers it.
//!
//! A measurement agent (the paper's SDN controller behind a REST API; here the simulator's
//! bottleneck, or `ccp-netstats-exporter` on a Linux router, polled over HTTP/JSON by the
//! agent's `ccp_runtime::netstats`) samples its switches once per
//! period (1 s, §VI and §VII-H) and reports, per source-destination path:
//!
//! ```text
//!   PNC = max over the path's known switches of |P_in − P_out| in the period   (eq. 4, packets)
//!   PNA = min over the path's known links of (C − rate) / C                      (eq. 5, [0, 1])
//!   known share = known nodes on the path / all nodes on the path                (Table I, 12)
//! ```
//!
//! A [`NetworkStats`] source answers the latest [`NetStats`] of a path; the agent hands each
//! new sample (a new [`NetStats::seq`]) to the flows whose controller asks for them
//! ([`crate::Controller::wants_network_stats`]), before the report that follows it, and says
//! so once when the source has none any more. Whether a sample is still fresh is the flow's
//! business: it ages samples on its own clock and masks stale ones (Owl's state masking).
//! Values are validated where a sample is made ([`NetStats::new`]), so a bad reply becomes
//! "no sample", never a bad observation.

use std::net::IpAddr;
use std::sync::Mutex;

/// One sample of a path's in-network statistics, validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetStats {
    pnc_pkts: f64,
    pna: f64,
    known_share: f64,
    seq: u64,
    age_us: u64,
}

/// Largest PNC accepted (packets per period): 10⁹ packets of difference per second is no
/// switch this side of a terabit; a larger value is a broken source.
pub const MAX_PNC_PKTS: f64 = 1e9;

/// Why a sample was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NetStatsError {
    #[error("PNC = {0}: expected a finite number of packets in [0, {MAX_PNC_PKTS}]")]
    Pnc(f64),
    #[error("PNA = {0}: expected a finite spare-capacity fraction")]
    Pna(f64),
    #[error("known share = {0}: expected a finite fraction in [0, 1]")]
    KnownShare(f64),
}

impl NetStats {
    /// A sample: `pnc_pkts` (eq. 4), `pna` (eq. 5), the `known_share` of the path, the source's
    /// sample number `seq` and how old the sample was when read (`age_us`). PNC must be a
    /// finite count in `[0, MAX_PNC_PKTS]` and the share a fraction; PNA must be finite and is
    /// clamped into `[0, 1]` (a link measured above its capacity has no spare capacity, one
    /// measured below zero is idle).
    pub fn new(
        pnc_pkts: f64,
        pna: f64,
        known_share: f64,
        seq: u64,
        age_us: u64,
    ) -> Result<Self, NetStatsError> {
        if !(pnc_pkts.is_finite() && (0.0..=MAX_PNC_PKTS).contains(&pnc_pkts)) {
            return Err(NetStatsError::Pnc(pnc_pkts));
        }
        if !pna.is_finite() {
            return Err(NetStatsError::Pna(pna));
        }
        if !(known_share.is_finite() && (0.0..=1.0).contains(&known_share)) {
            return Err(NetStatsError::KnownShare(known_share));
        }
        Ok(Self {
            pnc_pkts,
            pna: pna.clamp(0.0, 1.0),
            known_share,
            seq,
            age_us,
        })
    }

    /// PNC (eq. 4): packets.
    pub fn pnc_pkts(&self) -> f64 {
        self.pnc_pkts
    }
    /// PNA (eq. 5): spare-capacity fraction in `[0, 1]`.
    pub fn pna(&self) -> f64 {
        self.pna
    }
    /// Share of the path's nodes the sample covers, in `[0, 1]`.
    pub fn known_share(&self) -> f64 {
        self.known_share
    }
    /// The source's sample number: a new number is a new sample.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// How old the sample was when it was read (µs).
    pub fn age_us(&self) -> u64 {
        self.age_us
    }
}

/// The path a flow takes, as far as the agent knows it: its destination (`None` when the
/// datapath did not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PathKey {
    pub dst: Option<IpAddr>,
}

/// A source of in-network statistics, read on the decision path: `latest` must not block
/// (a poller updates its table off that path).
pub trait NetworkStats: Send + Sync + std::fmt::Debug {
    /// The latest sample for `path`; `None` when the source has none (no measurement yet, a
    /// bad or missing reply, a path it does not cover).
    fn latest(&self, path: &PathKey) -> Option<NetStats>;
}

/// The latest sample of one path, served for every flow: the simulator's dumbbell, where
/// every flow crosses the one bottleneck.
#[derive(Debug, Default)]
pub struct NetStatsCell {
    latest: Mutex<Option<NetStats>>,
}

impl NetStatsCell {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace the sample.
    pub fn publish(&self, s: NetStats) {
        *self.lock() = Some(s);
    }

    /// Forget the sample (a new run starts).
    pub fn clear(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<NetStats>> {
        // a sample is one Copy value: a poisoned lock still holds a whole one
        self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl NetworkStats for NetStatsCell {
    fn latest(&self, _path: &PathKey) -> Option<NetStats> {
        *self.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_validated() {
        let s = NetStats::new(12.0, 0.25, 0.5, 7, 30).unwrap();
        assert_eq!(
            (s.pnc_pkts(), s.pna(), s.known_share(), s.seq(), s.age_us()),
            (12.0, 0.25, 0.5, 7, 30)
        );
        for bad in [f64::NAN, f64::INFINITY, -1.0, 2e9] {
            assert!(matches!(
                NetStats::new(bad, 0.5, 1.0, 0, 0),
                Err(NetStatsError::Pnc(_))
            ));
        }
        for bad in [f64::NAN, f64::NEG_INFINITY] {
            assert!(matches!(
                NetStats::new(0.0, bad, 1.0, 0, 0),
                Err(NetStatsError::Pna(_))
            ));
        }
        for bad in [f64::NAN, -0.1, 1.5] {
            assert!(matches!(
                NetStats::new(0.0, 0.5, bad, 0, 0),
                Err(NetStatsError::KnownShare(_))
            ));
        }
        // PNA measured beyond its range is clamped: overload has no spare capacity
        assert_eq!(NetStats::new(0.0, -0.3, 1.0, 0, 0).unwrap().pna(), 0.0);
        assert_eq!(NetStats::new(0.0, 1.2, 1.0, 0, 0).unwrap().pna(), 1.0);
        let e = NetStats::new(f64::NAN, 0.5, 1.0, 0, 0).unwrap_err();
        assert!(e.to_string().starts_with("PNC = NaN"), "{e}");
    }

    #[test]
    fn a_cell_serves_its_latest_sample_for_every_path() {
        let c = NetStatsCell::new();
        let any = PathKey::default();
        let other = PathKey {
            dst: Some(IpAddr::from([10, 0, 0, 2])),
        };
        assert_eq!(c.latest(&any), None);
        let a = NetStats::new(3.0, 0.5, 1.0, 1, 0).unwrap();
        let b = NetStats::new(4.0, 0.4, 1.0, 2, 0).unwrap();
        c.publish(a);
        c.publish(b);
        assert_eq!(c.latest(&any), Some(b));
        assert_eq!(c.latest(&other), Some(b));
        c.clear();
        assert_eq!(c.latest(&any), None);
    }
}
