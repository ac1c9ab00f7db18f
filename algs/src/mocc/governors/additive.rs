//! The additive increase: `x_{t+1} = eq1(x_t, a_t) + min(κ·MSS/srtt, cap·x_t)` for decisions
//! with `a_t ≥ additive_increase_min_action` (and guarded ones).
//!
//! Why: flows on one FIFO see the same `l`, `p` and `q` (each one's throughput is its share
//! of the arrivals), so one policy gives them one factor `m`, and eq. 1 alone keeps the ratio
//! of their rates for ever. Under one `m`, `x_i ← m·x_i + δ` has the fixed point `δ/(1−m)`
//! for every flow: rate ratios decay to 1 by `δ/x` per MI (Chiu–Jain). An MI is one RTT, so
//! κ packets per MI is Reno's congestion-avoidance slope, and as RTT-unfair. The cap keeps
//! the term from swamping paths of a few packets per RTT (below it the term is
//! multiplicative and fairness is the policy's again). Gated on `a ≥ 0` by default: a
//! decrease is eq. 1 alone, as in AIMD.

use super::{Decision, FlowState, Governor};

/// Adds `additive_increase_pkts` packets per RTT, within `additive_increase_cap` of the rate.
#[derive(Debug, Clone, Copy, Default)]
pub struct AdditiveIncrease;

impl Governor for AdditiveIncrease {
    fn decide(&mut self, flow: &FlowState, d: &mut Decision) {
        let c = &flow.config;
        if d.guarded || d.action >= c.additive_increase_min_action {
            d.add = d
                .add
                .max(flow.pkts_per_rtt_within_cap(c.additive_increase_pkts));
        }
    }
}
