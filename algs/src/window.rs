//! Window and loss machinery shared by the window algorithms (Reno, Cubic, BBR, Owl,
//! Nuwa-RL): the fields they read, the loss clock that turns lost-packet reports into
//! congestion events (NewReno's recovery episode, RFC 6582, without per-packet state) and the
//! half-RTT report clock. Kept out of any one algorithm so that editing that algorithm
//! changes no other.

use crate::signals::{fields, Interval};

/// Fields Reno and Cubic need from the datapath.
pub(crate) const WINDOW_FIELDS: [&str; 7] = [
    fields::ACKED_BYTES,
    fields::ACKED_PKTS,
    fields::LOST_PKTS,
    fields::TIMEOUT,
    fields::RTT_MIN_US,
    fields::RTT_SUM_US,
    fields::RTT_CNT,
];

/// What a report means for a window algorithm's loss response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Congestion {
    /// No loss, or a loss inside the current recovery episode (already answered).
    None,
    /// A loss or timeout that opens a new episode: reduce ssthresh and the window.
    NewEpisode { timeout: bool },
    /// A timeout inside an episode already answered: the window restarts from one segment but
    /// ssthresh stays (Linux's `tcp_enter_loss` keeps ssthresh when already in recovery).
    TimeoutInEpisode,
}

/// Loss-recovery bookkeeping shared by Reno, Cubic, BBR, Owl and Nuwa-RL: elapsed datapath time and the end of
/// the current congestion event.
///
/// NewReno's recovery (RFC 6582) lasts until everything outstanding at the loss is
/// acknowledged. Without per-packet state the episode lasts until the bytes acknowledged since
/// it began reach the window at its start, and at least [`MIN_EPISODE_RTTS`] current RTTs, at
/// most [`MAX_EPISODE_RTTS`]. The byte rule matters at slow-start exit: a window that
/// overshot the pipe loses packets for several RTTs, and a one-RTT episode halved it two or
/// three times (measured in the VM at 50 Mbit/s / 40 ms / 1 BDP: 567 → 83 segments, then a
/// 3 s climb back).
#[derive(Debug, Clone, Default)]
pub(crate) struct LossClock {
    /// Datapath time elapsed since the flow started (µs), summed from report intervals.
    pub now_us: u64,
    /// The episode lasts at least until this time (µs)...
    pub recovery_until_us: u64,
    /// ...and until this many more bytes are acknowledged...
    recovery_left_bytes: f64,
    /// ...but no longer than this time (µs).
    recovery_cap_us: u64,
}

/// Shortest recovery episode, in current RTTs: one RTT for the data outstanding at the loss
/// plus RACK's reordering window. Measured in the VM (50 Mbit/s, 40 ms, 1 BDP): the tail of a
/// window lost at a congestion-avoidance peak is reported 83 ms after the first loss at an
/// RTT of 79 ms, after the cumulative ACK had already passed the window at the reduction.
pub(crate) const MIN_EPISODE_RTTS: f64 = 1.25;

/// Longest recovery episode, in current RTTs, whatever the byte count says (a datapath that
/// under-reports acknowledged bytes must not switch loss response off).
pub(crate) const MAX_EPISODE_RTTS: f64 = 4.0;

impl LossClock {
    /// Whether a recovery episode is still open at `now_us` (BBR restores its window when it
    /// ends).
    pub fn in_episode(&self) -> bool {
        self.now_us < self.recovery_cap_us
            && (self.now_us < self.recovery_until_us || self.recovery_left_bytes > 0.0)
    }

    /// Advance time by one report; `window_bytes` is the window before any reduction.
    pub fn advance(&mut self, iv: &Interval, srtt_us: f64, window_bytes: f64) -> Congestion {
        self.now_us = self.now_us.saturating_add(iv.interval_us);
        let in_episode = self.in_episode();
        self.recovery_left_bytes -= iv.acked_bytes as f64;
        if !(iv.lost_pkts > 0 || iv.timeout) {
            return Congestion::None;
        }
        if in_episode {
            return if iv.timeout {
                Congestion::TimeoutInEpisode
            } else {
                Congestion::None
            };
        }
        // Data sent up to this report is acknowledged, or found lost, one *current* RTT
        // later plus RACK's reordering window (min_rtt/4, RFC 8985 §6.2): the episode lasts
        // at least 1.25 current RTTs. At slow-start exit the queue inflates the RTT well
        // above srtt.
        let rtt = [
            Some(srtt_us),
            iv.rtt_mean_us,
            iv.rtt_last_us.map(|v| v as f64),
        ]
        .into_iter()
        .flatten()
        .fold(1.0, f64::max);
        self.recovery_until_us = self.now_us.saturating_add((MIN_EPISODE_RTTS * rtt) as u64);
        self.recovery_cap_us = self.now_us.saturating_add((MAX_EPISODE_RTTS * rtt) as u64);
        self.recovery_left_bytes = if window_bytes.is_finite() {
            window_bytes.max(0.0)
        } else {
            0.0
        };
        Congestion::NewEpisode {
            timeout: iv.timeout,
        }
    }
}

/// Report interval for window algorithms: half a smoothed RTT, at least `min_us`.
pub(crate) fn half_rtt_interval(srtt_us: f64, min_us: u32, initial_us: u32) -> u32 {
    if srtt_us <= 0.0 {
        initial_us
    } else {
        ((srtt_us / 2.0) as u32).max(min_us)
    }
}
