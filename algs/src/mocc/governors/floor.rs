//! The rate floor: at least `min_rate_pkts` packets per smoothed RTT (BBR's 4), above
//! `min_rate_kbps`. Lifts a flow starved on a small path (10 Mbit/s, 20 ms: 0.44 of a fair
//! share); large paths need the share guard.

use super::{FlowState, Governor};

/// `min_rate_pkts·MSS/srtt` once there is an RTT sample.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateFloor;

impl Governor for RateFloor {
    fn min_rate(&self, flow: &FlowState) -> Option<f64> {
        let srtt = flow.metrics.srtt_us;
        let k = flow.config.min_rate_pkts;
        (k > 0.0 && k.is_finite() && srtt > 0.0 && srtt.is_finite())
            .then(|| k * flow.mss / (srtt / 1e6))
    }
}
