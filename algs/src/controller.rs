//! The algorithm boundary: one [`Algorithm`] per congestion-control scheme, one
//! [`Controller`] per flow.
//!
//! The shape follows portus (`CongAlg` algorithm-wide, `Flow` per flow) and quinn's congestion
//! module (a small controller trait, a config type and a metrics struct per algorithm), but
//! nothing here depends on portus: the same controllers run behind the portus adapter in
//! `ccp-agent`, inside the simulator's in-process agent and under the Python training
//! bindings.
//!
//! A decision happens once per report of the algorithm's fold program:
//!
//! ```text
//!   datapath folds ACKs ──report──▶ Interval ──Controller::on_report──▶ Action
//!                                                                     ├ cwnd (bytes)
//!                                                                     ├ pacing rate (bytes/s)
//!                                                                     └ next report interval (µs)
//! ```
//!
//! Window algorithms (Owl, Nuwa, Reno, Cubic) set `cwnd`; rate algorithms (MOCC, Iris) set the
//! pacing `rate` and a cwnd cap large enough not to bind; Jury and BBR set both. Decision clocks
//! differ (Jury 30 ms, Iris 50 ms, MOCC one monitor interval ≈ 1 RTT, Owl/Nuwa short
//! intervals): a controller changes its own clock through `report_interval_us`.

use crate::netstats::NetStats;
use crate::pref::Preference;
use crate::signals::{FoldProgram, Interval};

/// What the datapath told us about a new flow.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowInfo {
    /// Datapath socket id (unique per datapath while the flow lives).
    pub sock_id: u32,
    /// Maximum segment size (bytes).
    pub mss: u32,
    /// Initial congestion window (bytes).
    pub init_cwnd_bytes: u32,
    /// The flow's preference `w` (from the flow, else the agent's `--w`).
    pub preference: Preference,
}

/// A controller's decision. `None` leaves that knob as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Action {
    /// Congestion window to enforce (bytes, > 0).
    pub cwnd_bytes: Option<u32>,
    /// Pacing rate (bytes/s, > 0).
    pub rate_bps: Option<u64>,
    /// Length of the next report interval (µs, > 0).
    pub report_interval_us: Option<u32>,
}

/// Build an algorithm from its config table (`[algs.<name>]`): how the registry table
/// ([`crate::registry`]) constructs every algorithm it lists.
pub trait FromConfig {
    /// The algorithm's knobs (`RenoConfig`, …).
    type Config;
    /// The algorithm with these knobs.
    fn from_config(config: &Self::Config) -> Self;
}

/// Per-flow observability counters. Every controller keeps one; the agent and the simulator
/// print and export them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct FlowMetrics {
    /// Reports handled.
    pub reports: u64,
    /// Reports that carried a loss or timeout.
    pub loss_events: u64,
    /// Last cwnd decided (bytes); 0 if never set.
    pub cwnd_bytes: u64,
    /// Last pacing rate decided (bytes/s); 0 if never set.
    pub rate_bps: u64,
    /// Smoothed RTT (µs) as the controller sees it.
    pub srtt_us: f64,
    /// Minimum RTT seen (µs).
    pub min_rtt_us: u64,
    /// Policy outputs that were NaN/inf or out of range and got clamped.
    pub clamped_outputs: u64,
    /// Policy invocations that failed (the controller then keeps its last action).
    pub policy_errors: u64,
}

/// Shortest report interval ([`Action::report_interval_us`], µs) a datapath is asked for: the
/// agent clamps every action's interval into [`MIN_REPORT_INTERVAL_US`,
/// `MAX_REPORT_INTERVAL_US`], and interval knobs are checked against the same range.
pub const MIN_REPORT_INTERVAL_US: u32 = 1_000;
/// Longest report interval (µs) a datapath is asked for (see [`MIN_REPORT_INTERVAL_US`]).
pub const MAX_REPORT_INTERVAL_US: u32 = 10_000_000;

/// Longest report interval a per-RTT decision clock asks for (µs): the longest the agent
/// asks a datapath for.
pub const MAX_RTT_CLOCK_US: f64 = MAX_REPORT_INTERVAL_US as f64;

impl FlowMetrics {
    /// A decision clock of `rtts` smoothed RTTs, at least `min_ms`; `initial_ms` before the
    /// first RTT sample. In µs, within `[1, MAX_RTT_CLOCK_US]` (Owl, Nuwa-RL).
    pub fn rtt_clock_us(&self, rtts: f64, min_ms: f64, initial_ms: f64) -> u32 {
        let us = if self.srtt_us > 0.0 {
            (self.srtt_us * rtts).max(min_ms * 1e3)
        } else {
            initial_ms * 1e3
        };
        us.clamp(1.0, MAX_RTT_CLOCK_US) as u32
    }

    /// Fold an interval's RTT into `srtt_us`/`min_rtt_us` (RFC 6298 gain 1/8) and count it.
    pub fn observe(&mut self, iv: &Interval) {
        self.reports += 1;
        if iv.lost_pkts > 0 || iv.timeout {
            self.loss_events += 1;
        }
        if let Some(m) = iv.rtt_min_us {
            self.min_rtt_us = if self.min_rtt_us == 0 {
                m
            } else {
                self.min_rtt_us.min(m)
            };
        }
        if let Some(r) = iv.rtt_mean_us {
            self.srtt_us = if self.srtt_us == 0.0 {
                r
            } else {
                0.875 * self.srtt_us + 0.125 * r
            };
        }
    }

    /// Remember what an action set.
    pub fn record(&mut self, a: &Action) {
        if let Some(c) = a.cwnd_bytes {
            self.cwnd_bytes = u64::from(c);
        }
        if let Some(r) = a.rate_bps {
            self.rate_bps = r;
        }
    }
}

/// What a flow brings to an algorithm it is switched to mid-transfer (`ccp_auto` re-choosing
/// once it knows its path): the state in force and what the flow measured, so the new
/// controller can continue from it instead of starting over (no slow start from a full
/// window, no empty bandwidth model).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Handover {
    /// The window to continue from (bytes): what the flow kept in flight lately, its recent
    /// delivery rate times its recent mean RTT (not the window in force, which may be a cap
    /// far above it, BBR's, or a momentary cut); also the new flow's
    /// `FlowInfo::init_cwnd_bytes`.
    pub cwnd_bytes: u32,
    /// The smallest RTT the flow has seen (µs).
    pub min_rtt_us: Option<u64>,
    /// The flow's recent delivery rate (bytes/s), over the path classifier's window.
    pub delivery_rate_bps: Option<f64>,
}

/// Per-flow congestion-control logic.
pub trait Controller: Send {
    /// Decide after one report of this algorithm's fold program.
    fn on_report(&mut self, iv: &Interval) -> Action;

    /// The flow's preference changed; the next decision uses it. Algorithms that do not use
    /// a preference ignore it.
    fn set_preference(&mut self, _w: Preference) {}

    /// The action to apply when the flow starts, before any report (e.g. an initial pacing
    /// rate for rate-based algorithms).
    fn initial_action(&mut self) -> Action {
        Action::default()
    }

    /// The flow was running another algorithm until now ([`Handover`]); called once, after
    /// `new_flow` and before [`Controller::initial_action`]. By default the controller starts
    /// as for a new flow whose initial window is the one in force.
    fn hand_over(&mut self, _h: &Handover) {}

    /// Counters for observability.
    fn metrics(&self) -> &FlowMetrics;

    /// Whether this flow reads in-network statistics of its path (Owl): the agent then hands
    /// it every new sample of its [`crate::netstats::NetworkStats`] source before the report
    /// that follows the sample ([`Controller::network_stats`]).
    fn wants_network_stats(&self) -> bool {
        false
    }

    /// A new sample of the path's in-network statistics, or `None` once the source has none
    /// (it stopped answering, or answered badly). Controllers that read none ignore it.
    fn network_stats(&mut self, _s: Option<&NetStats>) {}

    /// The values this flow's fold program should hold in its own control registers (full
    /// names, `Control.<name>`, declared with [`crate::signals::ProgramBuilder::control`]),
    /// as of the last decision. The agent sends them with the flow's first program and with
    /// every answer after it, next to the [`Action`]'s registers: a register is state the
    /// program reads on every ACK (Nuwa's gain and delay target), so sending the same value
    /// again is harmless, and a value is never lost with one answer. Every name must exist
    /// in the program (portus refuses the whole update otherwise). Empty by default.
    fn control_registers(&self) -> Vec<(&'static str, u32)> {
        Vec::new()
    }
}

/// An algorithm: its name, its fold program and a factory for per-flow controllers.
pub trait Algorithm: Send + Sync {
    /// Registry name (`"cubic"`); the datapath may request it as `ccp_<name>` or `<name>`.
    fn name(&self) -> &'static str;
    /// The fold program every flow of this algorithm runs (name prefixed with `name()`).
    fn program(&self) -> FoldProgram;
    /// A controller for a new flow.
    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller>;
}

impl FlowInfo {
    /// A flow as unit tests use it: socket 1, 1000-byte MSS, 10-segment initial window,
    /// default preference.
    #[cfg(test)]
    pub(crate) fn for_test() -> Self {
        FlowInfo {
            sock_id: 1,
            mss: 1000,
            init_cwnd_bytes: 10_000,
            preference: Preference::default(),
        }
    }
}

/// Clamp one policy output into `[lo, hi]`: NaN becomes the midpoint, ±inf the nearer bound.
/// Returns the clamped value and whether it had to be changed.
pub fn clamp_output(x: f32, lo: f32, hi: f32) -> (f32, bool) {
    if x.is_nan() {
        (0.5 * (lo + hi), true)
    } else if x < lo {
        (lo, true)
    } else if x > hi {
        (hi, true)
    } else {
        (x, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamp_handles_nan_inf_and_range() {
        assert_eq!(clamp_output(f32::NAN, -1.0, 1.0), (0.0, true));
        assert_eq!(clamp_output(f32::INFINITY, -1.0, 1.0), (1.0, true));
        assert_eq!(clamp_output(f32::NEG_INFINITY, -1.0, 1.0), (-1.0, true));
        assert_eq!(clamp_output(0.25, -1.0, 1.0), (0.25, false));
        assert_eq!(clamp_output(3.0, 0.0, 2.0), (2.0, true));
    }

    #[test]
    fn the_rtt_clock_is_rtts_of_srtt_bounded() {
        let mut m = FlowMetrics::default();
        assert_eq!(m.rtt_clock_us(1.0, 5.0, 100.0), 100_000); // no sample yet
        m.srtt_us = 40_000.0;
        assert_eq!(m.rtt_clock_us(0.5, 5.0, 100.0), 20_000);
        assert_eq!(m.rtt_clock_us(0.1, 5.0, 100.0), 5_000); // the floor
        m.srtt_us = 1e12;
        assert_eq!(m.rtt_clock_us(1.0, 5.0, 100.0), MAX_RTT_CLOCK_US as u32);
    }

    #[test]
    fn metrics_track_rtt_and_losses() {
        let mut m = FlowMetrics::default();
        let iv = Interval {
            rtt_min_us: Some(40_000),
            rtt_mean_us: Some(42_000.0),
            lost_pkts: 1,
            ..Default::default()
        };
        m.observe(&iv);
        assert_eq!(m.reports, 1);
        assert_eq!(m.loss_events, 1);
        assert_eq!(m.min_rtt_us, 40_000);
        assert_eq!(m.srtt_us, 42_000.0);
        m.record(&Action {
            cwnd_bytes: Some(14600),
            ..Default::default()
        });
        assert_eq!(m.cwnd_bytes, 14600);
    }
}
