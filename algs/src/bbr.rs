//! BBR v1 (Bottleneck Bandwidth and RTT) as a CCP algorithm, after Linux `net/ipv4/tcp_bbr.c`.
//!
//! BBR paces at its estimate of the bottleneck bandwidth and bounds what is in flight by a
//! multiple of the estimated bandwidth-delay product. Model (bytes, µs; a "round" is one
//! packet-timed round trip, defined below):
//!
//! ```text
//!   max_bw      = windowed max(delivery-rate samples, 10 rounds)
//!   min_rtt     = windowed min(RTT samples, 10 s)
//!   BDP         = max_bw · min_rtt
//!   pacing_rate = pacing_gain · max_bw · (1 − 1 %)            (tcp_bbr.c's pacing margin)
//!   cwnd        = max(cwnd_gain · BDP + 3 packets, 4 packets)
//!
//!   mode       pacing_gain                     cwnd_gain   leaves
//!   STARTUP    2/ln 2 ≈ 2.885                  2.885       max_bw grew < 25 % in 3 rounds: DRAIN
//!   DRAIN      1/2.885                         2.885       in-flight ≤ BDP + 3 packets: PROBE_BW
//!   PROBE_BW   1.25, 0.75, 1, 1, 1, 1, 1, 1    2           (cycles, a phase ≈ min_rtt)
//!   PROBE_RTT  1                               cwnd = 4 packets for max(200 ms, 1 round), then
//!                                              PROBE_BW (STARTUP if the pipe was never full)
//!   any mode → PROBE_RTT when no RTT sample has been below min_rtt for 10 s
//! ```
//!
//! PROBE_BW phases end as in `bbr_is_next_cycle_phase`: a gain-1 phase after min_rtt; the
//! 1.25 phase after min_rtt *and* once in-flight reaches 1.25·BDP + 5 packets or a loss is
//! seen; the 0.75 phase after min_rtt, or earlier once in-flight ≤ BDP + 3 packets. A flow
//! enters PROBE_BW at a random phase other than the 0.75 one, drawn from splitmix64 seeded
//! with `seed ⊕ sock_id`, so runs are reproducible. While the pipe has not been full the
//! pacing rate never decreases and cwnd grows by the delivered bytes up to its target (never
//! cut); afterwards cwnd = min(cwnd + delivered, target) per report.
//!
//! Reacts to: delivery-rate samples, the minimum RTT, the bytes in flight, and losses only
//! through cwnd: lost bytes are deducted from cwnd; entering recovery, cwnd is cut to what is
//! in flight and for one round replaces delivered packets but not lost ones (packet
//! conservation: done here, knob `packet_conservation`); after that round it grows by the
//! delivered bytes again; when recovery ends cwnd returns to the value saved at its start. A
//! timeout sets cwnd to one packet, it grows back by the delivered bytes, and the saved cwnd
//! returns when the episode ends. Ignores: loss and RTT growth as congestion signals (the
//! pacing rate reacts to neither), ECN.
//!
//! CCP choices:
//! - One decision per report; reports every min_rtt/4 (at least 2 ms; 10 ms until the first
//!   RTT sample) in every mode. A PROBE_BW phase spans four reports, the 1.25 phase's
//!   extension and the 0.75 phase's early end have a quarter-RTT grain, and STARTUP raises its
//!   pacing rate four times per RTT (Linux: on every ACK).
//! - Bandwidth sample: the report field `delivery_rate_max`, the interval's best per-ACK
//!   min(rate_outgoing, rate_incoming), which is Linux's delivered / max(send interval, ACK
//!   interval) over one packet's flight. Only a datapath without rate samples falls back to
//!   delivered bytes / interval length (which ACK compression inflates).
//! - Delivered bytes (Linux's `acked_sacked`): bytes the cumulative ACK passed plus SACKed
//!   (misordered) packets, less SACKed bytes already counted, so the cumulative ACK's jump
//!   after a repair is not counted twice. They drive rounds, cwnd growth and packet
//!   conservation.
//! - Round: starts at a report, with that report's in-flight bytes as its target; it ends at
//!   the first report where the bytes delivered since reach the target (all outstanding at
//!   its start is acknowledged: Linux's packet-timed round, to a report's grain), or after
//!   2 smoothed RTTs (losses keep the count short).
//! - Recovery episodes are the window algorithms' `LossClock` (`window.rs`): at least 1.25
//!   RTTs and until the in-flight bytes at the loss are acknowledged, at most 4 RTTs. Time is
//!   datapath time summed from report intervals.
//! - The bandwidth filter is an exact max over per-round maxima (tcp_bbr.c keeps a 3-sample
//!   approximation); like Linux's it ages only when a sample enters it.
//!
//! Omitted from tcp_bbr.c: the long-term bandwidth (policer) mode; the ACK-aggregation
//! cwnd allowance (extra_acked); app-limited marking (every sample enters the filter), except
//! for PROBE_RTT's own samples, which as in Linux enter only if they raise the estimate until
//! the data sent during PROBE_RTT is acknowledged; idle restart; TSO sizing (the quantization
//! budget is a fixed 3 packets, +2 in the 1.25 phase, without rounding cwnd up to even); the
//! EDT correction of in-flight.

use std::collections::VecDeque;

use crate::controller::{Action, Algorithm, Controller, FlowInfo, FlowMetrics};
use crate::signals::{fields, FoldProgram, Interval, ProgramBuilder, Trigger};
use crate::window::{Congestion, LossClock};

/// BBR's knobs; defaults from `tcp_bbr.c`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BbrConfig {
    /// STARTUP pacing and cwnd gain (`bbr_high_gain`, 2/ln 2); DRAIN paces at its inverse.
    pub high_gain: f64,
    /// cwnd gain in PROBE_BW (`bbr_cwnd_gain`).
    pub cwnd_gain: f64,
    /// Pacing gain of the probing phase of the PROBE_BW cycle (phase 0).
    pub probe_up_gain: f64,
    /// Pacing gain of the draining phase of the PROBE_BW cycle (phase 1).
    pub probe_down_gain: f64,
    /// Pace this many percent below the estimate (`bbr_pacing_margin_percent`).
    pub pacing_margin_percent: f64,
    /// Growth of max_bw per round that means STARTUP has not yet filled the pipe
    /// (`bbr_full_bw_thresh`, 1.25 = 25 %).
    pub full_bw_thresh: f64,
    /// Rounds without that growth after which the pipe is full (`bbr_full_bw_cnt`).
    pub full_bw_rounds: u32,
    /// Length of the max-bandwidth filter in rounds (`bbr_bw_rtts`), 1..=1024.
    pub bw_window_rounds: u64,
    /// Length of the min-RTT filter (µs) (`bbr_min_rtt_win_sec`).
    pub min_rtt_window_us: u64,
    /// Shortest time at the minimum window in PROBE_RTT (µs) (`bbr_probe_rtt_mode_ms`).
    pub probe_rtt_duration_us: u64,
    /// Smallest window, and PROBE_RTT's window (packets) (`bbr_cwnd_min_target`).
    pub min_cwnd_pkts: u32,
    /// Packets added to the window target (Linux: 3 TSO bursts).
    pub quantization_pkts: u32,
    /// Packet conservation during the first round of a recovery episode.
    pub packet_conservation: bool,
    /// Reports per min_rtt.
    pub reports_per_rtt: u32,
    /// Shortest report interval (µs).
    pub min_interval_us: u32,
    /// Report interval before the first RTT sample (µs).
    pub initial_interval_us: u32,
    /// Mixed with the socket id to draw each flow's first PROBE_BW phase.
    pub seed: u64,
}

impl Default for BbrConfig {
    fn default() -> Self {
        Self {
            high_gain: 2.885,
            cwnd_gain: 2.0,
            probe_up_gain: 1.25,
            probe_down_gain: 0.75,
            pacing_margin_percent: 1.0,
            full_bw_thresh: 1.25,
            full_bw_rounds: 3,
            bw_window_rounds: 10,
            min_rtt_window_us: 10_000_000,
            probe_rtt_duration_us: 200_000,
            min_cwnd_pkts: 4,
            quantization_pkts: 3,
            packet_conservation: true,
            reports_per_rtt: 4,
            min_interval_us: 2_000,
            initial_interval_us: 10_000,
            seed: 0,
        }
    }
}

impl BbrConfig {
    /// Check every knob against its range (see `config`).
    pub fn validate(&self) -> Result<(), crate::config::KnobError> {
        use crate::config::{Knobs, Range};
        let k = Knobs("bbr");
        k.real("high_gain", self.high_gain, Range::Closed(1.0, 10.0))?;
        k.real("cwnd_gain", self.cwnd_gain, Range::Closed(0.5, 10.0))?;
        k.real("probe_up_gain", self.probe_up_gain, Range::Closed(1.0, 4.0))?;
        k.real(
            "probe_down_gain",
            self.probe_down_gain,
            Range::AboveTo(0.0, 1.0),
        )?;
        k.real(
            "pacing_margin_percent",
            self.pacing_margin_percent,
            Range::Closed(0.0, 49.0),
        )?;
        k.real(
            "full_bw_thresh",
            self.full_bw_thresh,
            Range::AboveTo(1.0, 4.0),
        )?;
        k.int("full_bw_rounds", self.full_bw_rounds, 1, 100)?;
        k.int("bw_window_rounds", self.bw_window_rounds, 1, 1024)?;
        k.int(
            "min_rtt_window_us",
            self.min_rtt_window_us,
            10_000,
            3_600_000_000,
        )?;
        k.int(
            "probe_rtt_duration_us",
            self.probe_rtt_duration_us,
            1_000,
            60_000_000,
        )?;
        k.ordered(
            "probe_rtt_duration_us",
            self.probe_rtt_duration_us as f64,
            "min_rtt_window_us",
            self.min_rtt_window_us as f64,
        )?;
        k.int("min_cwnd_pkts", self.min_cwnd_pkts, 1, 1_000)?;
        k.int("quantization_pkts", self.quantization_pkts, 0, 1_000)?;
        k.int("reports_per_rtt", self.reports_per_rtt, 1, 100)?;
        k.interval_us("min_interval_us", self.min_interval_us)?;
        k.interval_us("initial_interval_us", self.initial_interval_us)
    }
}

/// Fields BBR's program reports.
const BBR_FIELDS: [&str; 9] = [
    fields::ACKED_BYTES,
    fields::MISORDERED_PKTS,
    fields::LOST_PKTS,
    fields::TIMEOUT,
    fields::RTT_MIN_US,
    fields::RTT_SUM_US,
    fields::RTT_CNT,
    fields::INFLIGHT_BYTES,
    fields::DELIVERY_RATE_MAX,
];

/// BBR's cap on its own report clock (µs): at most one report a second however long
/// `min_rtt / reports_per_rtt` is (inside the agent's range,
/// [`crate::controller::MAX_REPORT_INTERVAL_US`]).
const REPORT_INTERVAL_CAP_US: u64 = 1_000_000;

/// Number of phases in the PROBE_BW gain cycle.
pub const CYCLE_LEN: usize = 8;

/// The BBR algorithm.
#[derive(Debug, Clone, Default)]
pub struct Bbr {
    pub config: BbrConfig,
}

impl crate::controller::FromConfig for Bbr {
    type Config = BbrConfig;
    fn from_config(config: &BbrConfig) -> Self {
        Self {
            config: config.clone(),
        }
    }
}

impl Algorithm for Bbr {
    fn name(&self) -> &'static str {
        "bbr"
    }

    fn program(&self) -> FoldProgram {
        ProgramBuilder::new("bbr_rate_sample", self.config.initial_interval_us)
            .fields(&BBR_FIELDS)
            .trigger(Trigger::Interval)
            .build()
    }

    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(BbrFlow::new(self.config.clone(), info))
    }
}

/// BBR's modes (`enum bbr_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// Windowed max over per-round maxima: a sample taken in round `r` counts while the current
/// round is below `r + window`. It ages only when a sample enters it.
#[derive(Debug, Clone)]
struct MaxFilter {
    window: u64,
    entries: VecDeque<(u64, f64)>,
}

impl MaxFilter {
    fn new(window: u64) -> Self {
        Self {
            window: window.clamp(1, 1024),
            entries: VecDeque::new(),
        }
    }

    fn update(&mut self, round: u64, v: f64) {
        while self
            .entries
            .front()
            .is_some_and(|&(r, _)| round.saturating_sub(r) >= self.window)
        {
            self.entries.pop_front();
        }
        match self.entries.back_mut() {
            Some((r, m)) if *r == round => *m = m.max(v),
            _ => self.entries.push_back((round, v)),
        }
    }

    fn get(&self) -> f64 {
        self.entries.iter().map(|&(_, v)| v).fold(0.0, f64::max)
    }
}

/// splitmix64: a deterministic per-flow generator for the first PROBE_BW phase.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One BBR flow. Windows and rates in bytes and bytes/s.
#[derive(Debug, Clone)]
pub struct BbrFlow {
    config: BbrConfig,
    mss: f64,
    init_cwnd: f64,
    mode: Mode,
    // the model
    bw: MaxFilter,
    min_rtt_us: Option<u64>,
    min_rtt_stamp_us: u64,
    // packet-timed rounds
    round_count: u64,
    round_start: bool,
    delivered: f64,
    /// SACKed (out-of-order) bytes the cumulative ACK has not passed yet.
    sacked_pending: f64,
    round_start_delivered: f64,
    round_target: f64,
    round_start_us: u64,
    // STARTUP
    full_bw: f64,
    full_bw_count: u32,
    full_bw_reached: bool,
    // PROBE_BW
    cycle_idx: usize,
    cycle_start_us: u64,
    rng: u64,
    // PROBE_RTT
    probe_rtt_done_us: Option<u64>,
    probe_rtt_round_done: bool,
    app_limited_until: f64,
    // losses
    clock: LossClock,
    in_recovery: bool,
    packet_conservation: bool,
    prior_cwnd: f64,
    // control
    pacing_gain: f64,
    cwnd_gain: f64,
    cwnd: f64,
    /// Pacing rate (bytes/s); 0 until the first RTT sample.
    rate: f64,
    metrics: FlowMetrics,
}

impl BbrFlow {
    pub fn new(config: BbrConfig, info: &FlowInfo) -> Self {
        let mss = f64::from(info.mss.max(1));
        let min_cwnd = f64::from(config.min_cwnd_pkts.max(1)) * mss;
        let init_cwnd = if info.init_cwnd_bytes > 0 {
            f64::from(info.init_cwnd_bytes)
        } else {
            10.0 * mss
        }
        .max(min_cwnd);
        let high_gain = sane_gain(config.high_gain, 2.885);
        Self {
            bw: MaxFilter::new(config.bw_window_rounds),
            rng: config.seed ^ u64::from(info.sock_id),
            mss,
            init_cwnd,
            mode: Mode::Startup,
            min_rtt_us: None,
            min_rtt_stamp_us: 0,
            round_count: 0,
            round_start: false,
            delivered: 0.0,
            sacked_pending: 0.0,
            round_start_delivered: 0.0,
            round_target: 0.0,
            round_start_us: 0,
            full_bw: 0.0,
            full_bw_count: 0,
            full_bw_reached: false,
            cycle_idx: 0,
            cycle_start_us: 0,
            probe_rtt_done_us: None,
            probe_rtt_round_done: false,
            app_limited_until: 0.0,
            clock: LossClock::default(),
            in_recovery: false,
            packet_conservation: false,
            prior_cwnd: 0.0,
            pacing_gain: high_gain,
            cwnd_gain: high_gain,
            cwnd: init_cwnd,
            rate: 0.0,
            metrics: FlowMetrics::default(),
            config,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Index of the current PROBE_BW phase (0 = the 1.25 phase, 1 = the 0.75 phase).
    pub fn cycle_index(&self) -> usize {
        self.cycle_idx
    }

    pub fn pacing_gain(&self) -> f64 {
        self.pacing_gain
    }

    pub fn cwnd_gain(&self) -> f64 {
        self.cwnd_gain
    }

    /// The windowed max bandwidth (bytes/s); 0 before the first sample.
    pub fn max_bw(&self) -> f64 {
        self.bw.get()
    }

    /// The windowed min RTT (µs).
    pub fn min_rtt_us(&self) -> Option<u64> {
        self.min_rtt_us
    }

    /// Packet-timed rounds completed.
    pub fn round_count(&self) -> u64 {
        self.round_count
    }

    pub fn full_bw_reached(&self) -> bool {
        self.full_bw_reached
    }

    pub fn cwnd_bytes(&self) -> f64 {
        self.cwnd
    }

    pub fn pacing_rate(&self) -> f64 {
        self.rate
    }

    fn high_gain(&self) -> f64 {
        sane_gain(self.config.high_gain, 2.885)
    }

    fn min_cwnd(&self) -> f64 {
        f64::from(self.config.min_cwnd_pkts.max(1)) * self.mss
    }

    /// `bbr_bdp`: gain · max_bw · min_rtt, or the initial window before any RTT sample.
    fn bdp(&self, gain: f64) -> f64 {
        match self.min_rtt_us {
            None => self.init_cwnd,
            Some(rtt) => gain * self.bw.get() * rtt as f64 / 1e6,
        }
    }

    /// `bbr_inflight`: the BDP at `gain` plus the quantization budget.
    fn inflight_target(&self, gain: f64) -> f64 {
        let mut pkts = f64::from(self.config.quantization_pkts);
        if self.mode == Mode::ProbeBw && self.cycle_idx == 0 {
            pkts += 2.0;
        }
        self.bdp(gain) + pkts * self.mss
    }

    fn start_round(&mut self, now: u64, inflight: Option<f64>) {
        self.round_start_delivered = self.delivered;
        self.round_target = inflight.unwrap_or(self.cwnd).max(self.mss);
        self.round_start_us = now;
    }

    /// `bbr_save_cwnd`: remember the last good window before recovery or PROBE_RTT cut it.
    fn save_cwnd(&mut self) {
        if !self.in_recovery && self.mode != Mode::ProbeRtt {
            self.prior_cwnd = self.cwnd;
        } else {
            self.prior_cwnd = self.prior_cwnd.max(self.cwnd);
        }
    }

    fn reset_probe_bw(&mut self, now: u64) {
        // any phase but the 0.75 one (`bbr_reset_probe_bw_mode`)
        const FIRST: [usize; CYCLE_LEN - 1] = [0, 2, 3, 4, 5, 6, 7];
        let r = splitmix64(&mut self.rng) % FIRST.len() as u64;
        self.mode = Mode::ProbeBw;
        self.cycle_idx = FIRST[r as usize];
        self.cycle_start_us = now;
        tracing::debug!(now_us = now, phase = self.cycle_idx, "bbr: PROBE_BW");
    }

    fn phase_gain(&self, idx: usize) -> f64 {
        match idx {
            0 => self.config.probe_up_gain,
            1 => self.config.probe_down_gain,
            _ => 1.0,
        }
    }

    /// `bbr_is_next_cycle_phase`.
    fn is_next_cycle_phase(&self, now: u64, inflight: Option<f64>, lost: bool) -> bool {
        let full_length = now.saturating_sub(self.cycle_start_us) > self.min_rtt_us.unwrap_or(0);
        let gain = self.phase_gain(self.cycle_idx);
        if gain == 1.0 {
            full_length
        } else if gain > 1.0 {
            // unknown in-flight: the phase is time-based
            full_length && (lost || inflight.is_none_or(|x| x >= self.inflight_target(gain)))
        } else {
            full_length || inflight.is_some_and(|x| x <= self.inflight_target(1.0))
        }
    }

    fn update_gains(&mut self) {
        let high = self.high_gain();
        (self.pacing_gain, self.cwnd_gain) = match self.mode {
            Mode::Startup => (high, high),
            Mode::Drain => (1.0 / high, high),
            Mode::ProbeBw => (self.phase_gain(self.cycle_idx), self.config.cwnd_gain),
            Mode::ProbeRtt => (1.0, 1.0),
        };
    }

    fn report_interval_us(&self) -> u32 {
        match self.min_rtt_us {
            None => self.config.initial_interval_us.max(1),
            Some(rtt) => {
                let per = u64::from(self.config.reports_per_rtt.max(1));
                let min = u64::from(self.config.min_interval_us.max(1)).min(REPORT_INTERVAL_CAP_US);
                (rtt / per).clamp(min, REPORT_INTERVAL_CAP_US) as u32
            }
        }
    }
}

/// One report as BBR's steps read it: tcp_bbr.c's `struct rate_sample`, per report instead of
/// per ACK, with the loss events the report brought.
#[derive(Debug, Clone, Copy)]
struct RateSample {
    /// Datapath time (µs): the loss clock's, after this report.
    now: u64,
    /// Smoothed RTT (µs; 0 before the first sample).
    srtt: f64,
    /// Bytes newly delivered (Linux's `acked_sacked`).
    acked: f64,
    /// Bytes in flight, when the datapath reports them.
    inflight: Option<f64>,
    /// A loss (not a timeout) opened a recovery episode with this report.
    entered_recovery: bool,
    /// A timeout: the round ends with this report.
    force_round: bool,
    /// A recovery episode is open after this report.
    in_recovery: bool,
    /// The recovery episode ended with this report.
    left_recovery: bool,
}

/// The steps of a report, named after tcp_bbr.c's functions.
impl BbrFlow {
    /// What the report delivered and lost: Linux's `acked_sacked`, and the loss events that
    /// reach BBR before `bbr_main` (tcp_enter_recovery / tcp_enter_loss call `bbr_ssthresh`,
    /// `bbr_set_state(TCP_CA_Loss)`).
    fn rate_sample(&mut self, iv: &Interval) -> RateSample {
        let mss = self.mss;
        let srtt = self.metrics.srtt_us;
        // newly delivered bytes (Linux's acked_sacked): SACKed bytes count when they arrive,
        // not again when the cumulative ACK jumps over them after a repair
        let sacked = iv.misordered_pkts as f64 * mss;
        let consumed = self.sacked_pending.min(iv.acked_bytes as f64);
        let acked = iv.acked_bytes as f64 - consumed + sacked;
        self.sacked_pending += sacked - consumed;
        let inflight = iv.inflight_bytes.map(|b| b as f64);

        // losses (tcp_enter_recovery / tcp_enter_loss call bbr_ssthresh first)
        let event = self.clock.advance(iv, srtt, inflight.unwrap_or(self.cwnd));
        let now = self.clock.now_us;
        let mut entered_recovery = false;
        let mut force_round = false;
        match event {
            Congestion::NewEpisode { timeout: false } => {
                self.save_cwnd();
                entered_recovery = true;
            }
            Congestion::NewEpisode { timeout: true } | Congestion::TimeoutInEpisode => {
                // bbr_set_state(TCP_CA_Loss): restart full-pipe detection, end the round
                self.save_cwnd();
                self.cwnd = mss;
                self.full_bw = 0.0;
                force_round = true;
            }
            Congestion::None => {}
        }
        let in_recovery = self.clock.in_episode();
        RateSample {
            now,
            srtt,
            acked,
            inflight,
            entered_recovery,
            force_round,
            in_recovery,
            left_recovery: self.in_recovery && !in_recovery,
        }
    }

    /// `bbr_update_model`: the bandwidth estimate, the state machine (gain cycle, full pipe,
    /// DRAIN, min_rtt and PROBE_RTT), then the gains of the mode it leaves (`bbr_update_gains`).
    fn update_model(&mut self, iv: &Interval, rs: &RateSample) {
        self.update_bw(iv, rs);
        self.update_cycle_phase(rs, iv.lost_pkts > 0);
        self.check_full_bw_reached();
        self.check_drain(rs);
        self.update_min_rtt(iv, rs);
        self.update_gains();
    }

    /// `bbr_update_bw`: packet-timed rounds, then the bandwidth sample.
    fn update_bw(&mut self, iv: &Interval, rs: &RateSample) {
        let (now, srtt, acked) = (rs.now, rs.srtt, rs.acked);
        self.delivered += acked;
        self.round_start = false;
        let round_timed_out =
            srtt > 0.0 && now.saturating_sub(self.round_start_us) as f64 >= 2.0 * srtt;
        if rs.force_round
            || self.delivered - self.round_start_delivered >= self.round_target
            || round_timed_out
        {
            self.round_count += 1;
            self.round_start = true;
            self.packet_conservation = false;
            self.start_round(now, rs.inflight);
        }
        let sample = iv.delivery_rate_max_bps.map(|v| v as f64).or_else(|| {
            (iv.interval_us > 0 && acked > 0.0).then(|| acked * 1e6 / iv.interval_us as f64)
        });
        if let Some(s) = sample.filter(|s| s.is_finite() && *s > 0.0) {
            // PROBE_RTT's low rates are app-limited: they enter only if they raise the max
            let app_limited =
                self.mode == Mode::ProbeRtt || self.delivered < self.app_limited_until;
            if !app_limited || s >= self.bw.get() {
                self.bw.update(self.round_count, s);
            }
        }
    }

    /// `bbr_update_cycle_phase`.
    fn update_cycle_phase(&mut self, rs: &RateSample, lost: bool) {
        if self.mode == Mode::ProbeBw && self.is_next_cycle_phase(rs.now, rs.inflight, lost) {
            self.cycle_idx = (self.cycle_idx + 1) % CYCLE_LEN;
            self.cycle_start_us = rs.now;
        }
    }

    /// `bbr_check_full_bw_reached`.
    fn check_full_bw_reached(&mut self) {
        if !self.full_bw_reached && self.round_start {
            let max_bw = self.bw.get();
            if max_bw >= self.full_bw * self.config.full_bw_thresh {
                self.full_bw = max_bw;
                self.full_bw_count = 0;
            } else {
                self.full_bw_count += 1;
                self.full_bw_reached = self.full_bw_count >= self.config.full_bw_rounds;
            }
        }
    }

    /// `bbr_check_drain`.
    fn check_drain(&mut self, rs: &RateSample) {
        let now = rs.now;
        if self.mode == Mode::Startup && self.full_bw_reached {
            self.mode = Mode::Drain;
            tracing::debug!(now_us = now, max_bw = self.bw.get(), "bbr: DRAIN");
        }
        if self.mode == Mode::Drain && rs.inflight.is_none_or(|x| x <= self.inflight_target(1.0)) {
            self.reset_probe_bw(now);
        }
    }

    /// `bbr_update_min_rtt`: the min_rtt filter, and PROBE_RTT's entry and exit
    /// (`bbr_check_probe_rtt_done`).
    fn update_min_rtt(&mut self, iv: &Interval, rs: &RateSample) {
        let (now, inflight) = (rs.now, rs.inflight);
        let expired = now
            > self
                .min_rtt_stamp_us
                .saturating_add(self.config.min_rtt_window_us);
        if let Some(r) = iv.rtt_min_us {
            if self.min_rtt_us.is_none_or(|m| r < m) || expired {
                self.min_rtt_us = Some(r);
                self.min_rtt_stamp_us = now;
            }
        }
        if expired && self.mode != Mode::ProbeRtt {
            self.save_cwnd();
            self.mode = Mode::ProbeRtt;
            self.probe_rtt_done_us = None;
            tracing::debug!(now_us = now, "bbr: PROBE_RTT");
        }
        if self.mode == Mode::ProbeRtt {
            self.app_limited_until = self.delivered + inflight.unwrap_or(0.0).max(self.mss);
            match self.probe_rtt_done_us {
                None if inflight.is_none_or(|x| x <= self.min_cwnd()) => {
                    self.probe_rtt_done_us =
                        Some(now.saturating_add(self.config.probe_rtt_duration_us));
                    self.probe_rtt_round_done = false;
                    self.start_round(now, inflight);
                }
                Some(done) => {
                    if self.round_start {
                        self.probe_rtt_round_done = true;
                    }
                    if self.probe_rtt_round_done && now > done {
                        // bbr_check_probe_rtt_done
                        self.min_rtt_stamp_us = now;
                        self.cwnd = self.cwnd.max(self.prior_cwnd);
                        if self.full_bw_reached {
                            self.reset_probe_bw(now);
                        } else {
                            self.mode = Mode::Startup;
                        }
                    }
                }
                None => {}
            }
        }
    }

    /// `bbr_set_pacing_rate`: pacing_gain · max_bw less the margin, never lowered before the
    /// pipe is full (`bbr_init_pacing_rate_from_rtt` before any bandwidth sample).
    fn set_pacing_rate(&mut self, srtt: f64) {
        let margin = (1.0 - self.config.pacing_margin_percent / 100.0).clamp(0.0, 1.0);
        if self.rate <= 0.0 && srtt > 0.0 {
            // bbr_init_pacing_rate_from_rtt: high_gain · cwnd / srtt
            self.rate = self.high_gain() * self.cwnd * 1e6 / srtt * margin;
        }
        let bw = self.bw.get();
        if bw > 0.0 {
            let rate = self.pacing_gain * bw * margin;
            if self.full_bw_reached || rate > self.rate {
                self.rate = rate;
            }
        }
        if !self.rate.is_finite() || self.rate < 0.0 {
            self.rate = 0.0;
        }
    }

    /// `bbr_set_cwnd`: recovery (`bbr_set_cwnd_to_recover_or_restore`), growth toward the
    /// in-flight target, PROBE_RTT's floor; kept within `[mss, u32::MAX]`.
    fn set_cwnd(&mut self, iv: &Interval, rs: &RateSample) {
        let (mss, now, inflight, acked) = (self.mss, rs.now, rs.inflight, rs.acked);
        if rs.left_recovery {
            self.cwnd = self.cwnd.max(self.prior_cwnd);
            self.packet_conservation = false;
        }
        let lost_bytes = iv.lost_pkts as f64 * mss;
        if lost_bytes > 0.0 {
            self.cwnd = (self.cwnd - lost_bytes).max(mss);
        }
        // Packet conservation. Per ACK, tcp_bbr.c keeps cwnd = max(cwnd − losses, in-flight +
        // acked): each delivered packet is replaced, a lost one is not. A report's in-flight
        // is taken after the datapath refilled the window for the whole interval (lost
        // packets included), so the per-report form is max(cwnd, in-flight) − lost.
        if rs.entered_recovery && self.config.packet_conservation {
            self.packet_conservation = true;
            self.start_round(now, inflight);
            // cut what the window allowed beyond what is in flight
            self.cwnd = inflight.unwrap_or(self.cwnd);
        }
        if self.packet_conservation {
            let floor = inflight.map_or(0.0, |x| x - lost_bytes);
            self.cwnd = self.cwnd.max(floor).max(mss);
        } else if acked > 0.0 {
            let target = self.inflight_target(self.cwnd_gain);
            if self.full_bw_reached {
                self.cwnd = (self.cwnd + acked).min(target);
            } else if self.delivered < self.init_cwnd {
                self.cwnd += acked;
            } else {
                // slow start toward the target, never cut before the pipe was full
                self.cwnd = (self.cwnd + acked).min(target.max(self.cwnd));
            }
            self.cwnd = self.cwnd.max(self.min_cwnd());
        }
        if self.mode == Mode::ProbeRtt {
            self.cwnd = self.cwnd.min(self.min_cwnd());
        }
        if !self.cwnd.is_finite() {
            self.cwnd = self.min_cwnd();
        }
        self.cwnd = self
            .cwnd
            .clamp(mss.min(f64::from(u32::MAX)), f64::from(u32::MAX));
    }
}

/// A gain knob, or `default` if it is not a positive finite number.
fn sane_gain(g: f64, default: f64) -> f64 {
    if g.is_finite() && g > 0.0 {
        g
    } else {
        default
    }
}

impl Controller for BbrFlow {
    /// With the flow's delivery rate and minimum RTT the model is already full: the flow
    /// enters PROBE_BW at the window in force and paces at the delivery rate (STARTUP from
    /// a full pipe would overshoot it by the high gain for several rounds).
    fn hand_over(&mut self, h: &crate::Handover) {
        self.cwnd = f64::from(h.cwnd_bytes).max(self.min_cwnd());
        let (Some(bw), Some(rtt)) = (h.delivery_rate_bps, h.min_rtt_us) else {
            return;
        };
        if !(bw.is_finite() && bw > 0.0 && rtt > 0) {
            return;
        }
        self.bw.update(0, bw);
        self.min_rtt_us = Some(rtt);
        self.full_bw = bw;
        self.full_bw_reached = true;
        self.reset_probe_bw(0);
        self.update_gains();
        self.rate = self.pacing_gain * bw;
    }

    fn initial_action(&mut self) -> Action {
        let a = Action {
            cwnd_bytes: Some(to_u32(self.cwnd)),
            rate_bps: (self.rate > 0.0).then_some(self.rate as u64),
            report_interval_us: Some(self.report_interval_us()),
        };
        self.metrics.record(&a);
        a
    }

    /// One report, in tcp_bbr.c's order: what the report delivered and lost
    /// (`rate_sample`), `bbr_update_model`, `bbr_set_pacing_rate`, `bbr_set_cwnd`.
    fn on_report(&mut self, iv: &Interval) -> Action {
        self.metrics.observe(iv);
        let rs = self.rate_sample(iv);
        self.update_model(iv, &rs);
        self.set_pacing_rate(rs.srtt);
        self.set_cwnd(iv, &rs);
        self.in_recovery = rs.in_recovery;

        tracing::trace!(
            now_us = rs.now,
            mode = ?self.mode,
            phase = self.cycle_idx,
            round = self.round_count,
            max_bw = self.bw.get(),
            min_rtt_us = self.min_rtt_us.unwrap_or(0),
            inflight = rs.inflight.unwrap_or(-1.0),
            acked = rs.acked,
            lost = iv.lost_pkts,
            cwnd = self.cwnd,
            rate = self.rate,
            "bbr report"
        );
        let a = Action {
            cwnd_bytes: Some(to_u32(self.cwnd)),
            rate_bps: (self.rate >= 1.0).then(|| self.rate.min(u64::MAX as f64) as u64),
            report_interval_us: Some(self.report_interval_us()),
        };
        self.metrics.record(&a);
        a
    }

    fn metrics(&self) -> &FlowMetrics {
        &self.metrics
    }
}

/// A window in bytes as the datapath takes it: at least 1, at most `u32::MAX`.
fn to_u32(x: f64) -> u32 {
    if x.is_finite() {
        x.clamp(1.0, f64::from(u32::MAX)) as u32
    } else {
        u32::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pref::Preference;

    /// The test flows' MSS (bytes).
    const MSS: u64 = 1000;
    /// min RTT of the test path (µs).
    const RTT: u64 = 40_000;
    /// Report spacing a little above min_rtt/4, as the datapath's ACK clock gives it (µs).
    const TICK: u64 = 10_100;
    /// Bottleneck rate of the test path (bytes/s): BDP = 40 kB = 40 packets.
    const BW: u64 = 1_000_000;
    const BDP: u64 = BW * RTT / 1_000_000;

    fn info(sock_id: u32) -> FlowInfo {
        FlowInfo {
            sock_id,
            mss: MSS as u32,
            init_cwnd_bytes: 10 * MSS as u32,
            preference: Preference::default(),
        }
    }

    fn flow() -> BbrFlow {
        BbrFlow::new(BbrConfig::default(), &info(1))
    }

    /// One report: `acked` bytes acknowledged, `inflight` bytes at its end, best rate sample
    /// `bw` (bytes/s), every RTT sample `rtt` (µs), `len` µs long.
    fn rep(acked: u64, inflight: u64, bw: u64, rtt: u64, len: u64) -> Interval {
        Interval {
            acked_bytes: acked,
            acked_pkts: acked / MSS,
            rtt_min_us: Some(rtt),
            rtt_mean_us: Some(rtt as f64),
            rtt_samples: 1,
            inflight_bytes: Some(inflight),
            delivery_rate_max_bps: Some(bw),
            interval_us: len,
            ..Default::default()
        }
    }

    /// A steady-state report on the test path: one tick's worth acknowledged at `BW`.
    fn steady(inflight: u64) -> Interval {
        rep(BW * TICK / 1_000_000, inflight, BW, RTT, TICK)
    }

    /// STARTUP at the test path's rate (each report is one round: acked = in-flight at the
    /// round's start), then DRAIN, then a report with the queue drained.
    fn into_probe_bw(f: &mut BbrFlow) {
        for bw in [BW / 8, BW / 4, BW / 2, BW, BW, BW, BW] {
            f.on_report(&rep(3 * BDP, 3 * BDP, bw, RTT, RTT));
        }
        assert_eq!(f.mode(), Mode::Drain);
        f.on_report(&rep(BDP, BDP, BW, RTT, TICK));
        assert_eq!(f.mode(), Mode::ProbeBw);
    }

    #[test]
    fn startup_leaves_after_three_rounds_without_25_percent_growth() {
        let mut f = flow();
        let a = f.initial_action();
        assert_eq!(a.cwnd_bytes, Some(10 * MSS as u32));
        assert_eq!(a.rate_bps, None);
        assert_eq!(a.report_interval_us, Some(10_000));
        // the rate sample doubles per round: STARTUP
        for bw in [BW / 8, BW / 4, BW / 2, BW] {
            f.on_report(&rep(3 * BDP, 3 * BDP, bw, RTT, RTT));
            assert_eq!(f.mode(), Mode::Startup);
        }
        assert!((f.pacing_gain() - 2.885).abs() < 1e-12);
        assert!((f.cwnd_gain() - 2.885).abs() < 1e-12);
        let rate = f.pacing_rate();
        assert!((rate - 2.885 * BW as f64 * 0.99).abs() < 1.0, "{rate}");
        // flat for two rounds: still STARTUP; the third: DRAIN (in-flight 3 BDP is a queue)
        for _ in 0..2 {
            f.on_report(&rep(3 * BDP, 3 * BDP, BW, RTT, RTT));
            assert_eq!(f.mode(), Mode::Startup);
            assert!(!f.full_bw_reached());
        }
        let a = f.on_report(&rep(3 * BDP, 3 * BDP, BW, RTT, RTT));
        assert_eq!(f.mode(), Mode::Drain);
        assert_eq!(f.round_count(), 7);
        assert!((f.pacing_gain() - 1.0 / 2.885).abs() < 1e-12);
        let r = a.rate_bps.unwrap() as f64;
        assert!((r - BW as f64 / 2.885 * 0.99).abs() < 2.0, "{r}");
        // DRAIN keeps the STARTUP window (snap down to 2.885 BDP + 3 packets at most)
        assert!(f.cwnd_bytes() <= 2.885 * BDP as f64 + 3.0 * MSS as f64 + 1.0);
    }

    #[test]
    fn growth_threshold_is_25_percent_over_the_last_reference() {
        // after a reference round at B: rounds at 1.24 B do not count as growth, 1.26 B does
        // (and becomes the new reference)
        let run = |bws: &[f64]| {
            let mut f = flow();
            let mut reached = vec![];
            for &bw in bws {
                f.on_report(&rep(3 * BDP, 3 * BDP, bw as u64, RTT, RTT));
                reached.push(f.full_bw_reached());
            }
            reached
        };
        let b = 100_000.0;
        assert_eq!(
            run(&[b, 1.24 * b, 1.24 * b, 1.24 * b]),
            [false, false, false, true]
        );
        assert_eq!(
            run(&[b, 1.24 * b, 1.24 * b, 1.26 * b, 1.26 * b, 1.26 * b, 1.3 * b]),
            [false, false, false, false, false, false, true]
        );
        // compounding growth of 10 % per round crosses 25 % every third round: never full
        let mut bw = b;
        let mut v = vec![];
        for _ in 0..30 {
            v.push(bw);
            bw *= 1.1;
        }
        assert!(run(&v).iter().all(|r| !r));
    }

    #[test]
    fn drain_ends_when_inflight_falls_to_the_bdp() {
        let mut f = flow();
        for bw in [BW / 8, BW / 4, BW / 2, BW, BW, BW, BW] {
            f.on_report(&rep(3 * BDP, 3 * BDP, bw, RTT, RTT));
        }
        assert_eq!(f.mode(), Mode::Drain);
        // BDP + 3 packets = 43 kB: 50 kB in flight is still a queue
        for inflight in [2 * BDP, 50_000, 43_001] {
            f.on_report(&rep(BDP / 4, inflight, BW, RTT, TICK));
            assert_eq!(f.mode(), Mode::Drain, "in-flight {inflight}");
        }
        f.on_report(&rep(BDP / 4, 43_000, BW, RTT, TICK));
        assert_eq!(f.mode(), Mode::ProbeBw);
        assert_ne!(
            f.cycle_index(),
            1,
            "PROBE_BW never starts in the 0.75 phase"
        );
        assert!((f.cwnd_gain() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn gain_cycle_runs_in_order_one_min_rtt_per_phase() {
        let mut f = flow();
        into_probe_bw(&mut f);
        // 60 kB in flight: the 1.25 phase reaches its target (55 kB), the 0.75 phase does
        // not fall to the BDP: every phase ends on time
        let mut idx = vec![f.cycle_index()];
        let mut gains = vec![];
        for _ in 0..(4 * 2 * CYCLE_LEN) {
            let a = f.on_report(&steady(60_000));
            idx.push(f.cycle_index());
            gains.push((f.pacing_gain(), a.rate_bps.unwrap()));
        }
        // each phase lasts 4 reports (4 × 10.1 ms > min_rtt), the index steps by one
        for (k, w) in idx.windows(2).enumerate() {
            let step = (w[0] + 1) % CYCLE_LEN;
            if (k + 1) % 4 == 0 {
                assert_eq!(w[1], step, "report {k}: {idx:?}");
            } else {
                assert_eq!(w[1], w[0], "report {k}: {idx:?}");
            }
        }
        for (g, rate) in gains {
            assert!([1.25, 0.75, 1.0].contains(&g), "{g}");
            assert!((rate as f64 - g * BW as f64 * 0.99).abs() <= 1.0);
        }
        // from the start of the 1.25 phase: 1.25, 0.75, then six phases at 1, 4 reports each
        let mut f = flow();
        into_probe_bw(&mut f);
        while f.cycle_index() != 0 {
            f.on_report(&steady(60_000));
        }
        let mut runs: Vec<(usize, f64, usize)> = vec![(0, f.pacing_gain(), 1)];
        for _ in 0..(4 * CYCLE_LEN) {
            f.on_report(&steady(60_000));
            match runs.last_mut() {
                Some((i, _, n)) if *i == f.cycle_index() => *n += 1,
                _ => runs.push((f.cycle_index(), f.pacing_gain(), 1)),
            }
        }
        let expect: Vec<(usize, f64, usize)> = (0..CYCLE_LEN)
            .map(|i| (i, [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0][i], 4))
            .chain([(0, 1.25, 1)])
            .collect();
        assert_eq!(runs, expect);
    }

    #[test]
    fn probing_phase_waits_for_its_inflight_target_or_a_loss() {
        let mut f = flow();
        into_probe_bw(&mut f);
        while f.cycle_index() != 0 {
            f.on_report(&steady(60_000));
        }
        // target 1.25 BDP + 5 packets = 55 kB: 50 kB is short of it, the phase goes on
        for _ in 0..8 {
            f.on_report(&steady(50_000));
            assert_eq!(f.cycle_index(), 0);
        }
        let mut lossy = steady(50_000);
        lossy.lost_pkts = 1;
        f.on_report(&lossy);
        assert_eq!(f.cycle_index(), 1, "a loss ends the probing phase");
        // the 0.75 phase ends early once in-flight is down to BDP + 3 packets
        f.on_report(&steady(44_000));
        assert_eq!(f.cycle_index(), 1);
        f.on_report(&steady(43_000));
        assert_eq!(f.cycle_index(), 2);

        // reaching the target ends it at full length
        let mut f = flow();
        into_probe_bw(&mut f);
        while f.cycle_index() != 0 {
            f.on_report(&steady(60_000));
        }
        for _ in 0..3 {
            f.on_report(&steady(55_000));
            assert_eq!(f.cycle_index(), 0, "not before min_rtt");
        }
        f.on_report(&steady(55_000));
        assert_eq!(f.cycle_index(), 1);
    }

    #[test]
    fn first_phase_is_random_reproducible_and_never_the_draining_one() {
        let first = |sock: u32| {
            let mut f = BbrFlow::new(BbrConfig::default(), &info(sock));
            into_probe_bw(&mut f);
            f.cycle_index()
        };
        let mut seen = std::collections::BTreeSet::new();
        for sock in 0..200 {
            let p = first(sock);
            assert_ne!(p, 1);
            assert_eq!(p, first(sock), "sock {sock}: not reproducible");
            seen.insert(p);
        }
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            vec![0, 2, 3, 4, 5, 6, 7]
        );
    }

    #[test]
    fn probe_rtt_after_ten_seconds_without_a_lower_rtt() {
        let mut f = flow();
        into_probe_bw(&mut f);
        let start = f.clock.now_us;
        let cwnd_before = f.cwnd_bytes();
        assert!(cwnd_before > 2.0 * BDP as f64, "{cwnd_before}");
        // equal RTT samples do not refresh min_rtt (tcp_bbr.c: a sample must be lower)
        let mut entered = None;
        while f.clock.now_us < start + 11_000_000 {
            let a = f.on_report(&steady(60_000));
            if f.mode() == Mode::ProbeRtt {
                entered = Some(f.clock.now_us);
                assert_eq!(a.cwnd_bytes, Some(4 * MSS as u32));
                assert_eq!(a.rate_bps, Some((BW as f64 * 0.99) as u64));
                break;
            }
        }
        // min_rtt was last set by the first report, 40 ms after the flow started
        let entered = entered.expect("PROBE_RTT");
        assert!(
            (10_040_000..10_040_000 + TICK + 1).contains(&entered),
            "{entered}"
        );
        // in-flight falls to 4 packets; hold for 200 ms and one round; low rate samples do
        // not lower the bandwidth estimate
        let mut left = None;
        while f.clock.now_us < entered + 1_000_000 {
            let a = f.on_report(&rep(1_000, 4 * MSS, BW / 10, RTT, TICK));
            if f.mode() != Mode::ProbeRtt {
                left = Some(f.clock.now_us);
                assert!(a.cwnd_bytes.unwrap() as f64 >= cwnd_before);
                break;
            }
            assert_eq!(a.cwnd_bytes, Some(4 * MSS as u32));
        }
        let left = left.expect("PROBE_RTT ends");
        let held = left - entered;
        assert!(
            (200_000..200_000 + RTT + 2 * TICK).contains(&held),
            "{held}"
        );
        assert_eq!(f.mode(), Mode::ProbeBw);
        assert_eq!(f.max_bw(), BW as f64);

        // a lower RTT sample restarts the 10 s
        let mut f = flow();
        into_probe_bw(&mut f);
        let start = f.clock.now_us;
        while f.clock.now_us < start + 5_000_000 {
            f.on_report(&steady(60_000));
        }
        f.on_report(&rep(10_000, 60_000, BW, RTT - 1_000, TICK));
        while f.clock.now_us < start + 14_000_000 {
            f.on_report(&steady(60_000));
            assert_ne!(f.mode(), Mode::ProbeRtt, "at {}", f.clock.now_us - start);
        }
        assert_eq!(f.min_rtt_us(), Some(RTT - 1_000));
    }

    #[test]
    fn max_filter_forgets_a_sample_after_ten_rounds() {
        let mut m = MaxFilter::new(10);
        m.update(5, 9.0);
        for r in 6..15 {
            m.update(r, 1.0);
            assert_eq!(m.get(), 9.0, "round {r}");
        }
        m.update(15, 1.0);
        assert_eq!(m.get(), 1.0);

        // the flow: one round per report (acked = in-flight at the round's start)
        let mut f = flow();
        into_probe_bw(&mut f);
        f.on_report(&rep(BDP, BDP, 2 * BW, RTT, RTT));
        let r0 = f.round_count();
        assert_eq!(f.max_bw(), 2.0 * BW as f64);
        loop {
            f.on_report(&rep(BDP, BDP, BW, RTT, RTT));
            let age = f.round_count() - r0;
            if age < 10 {
                assert_eq!(f.max_bw(), 2.0 * BW as f64, "age {age}");
            } else {
                assert_eq!(f.max_bw(), BW as f64, "age {age}");
                break;
            }
        }
    }

    #[test]
    fn a_round_is_the_in_flight_at_its_start_acknowledged() {
        let mut f = flow();
        f.on_report(&rep(1_000, 40_000, BW, RTT, TICK)); // round 1 starts: 40 kB out
        assert_eq!(f.round_count(), 1);
        for _ in 0..3 {
            f.on_report(&rep(10_000, 40_000, BW, RTT, TICK));
            assert_eq!(f.round_count(), 1);
        }
        f.on_report(&rep(10_000, 40_000, BW, RTT, TICK));
        assert_eq!(f.round_count(), 2);
        // no acknowledgements at all: the round ends after 2 smoothed RTTs
        let r = f.round_count();
        let mut t = 0;
        while f.round_count() == r {
            f.on_report(&rep(0, 40_000, 0, RTT, TICK));
            t += TICK;
            assert!(t <= 2 * RTT + TICK, "{t}");
        }
        assert!(t >= 2 * RTT, "{t}");
    }

    #[test]
    fn loss_recovery_conserves_packets_then_restores_the_window() {
        let mut f = flow();
        into_probe_bw(&mut f);
        for _ in 0..8 {
            f.on_report(&steady(60_000));
        }
        let cwnd = f.cwnd_bytes();
        let rate = f.pacing_rate();
        assert!(
            (cwnd - (2.0 * BDP as f64 + 3_000.0)).abs() < 2_100.0,
            "{cwnd}"
        );
        // entering recovery: cwnd is cut to what is in flight; the pacing rate does not move
        let lossy = |inflight, lost| Interval {
            lost_pkts: lost,
            ..rep(10_000, inflight, BW, RTT, TICK)
        };
        let a = f.on_report(&lossy(30_000, 3));
        assert_eq!(a.cwnd_bytes, Some(30_000));
        assert_eq!(f.pacing_rate(), rate);
        // for one round delivered packets are replaced, lost ones are not
        let a = f.on_report(&lossy(30_000, 2));
        assert_eq!(a.cwnd_bytes, Some(28_000));
        let a = f.on_report(&lossy(28_000, 0));
        assert_eq!(a.cwnd_bytes, Some(28_000));
        // the round (30 kB delivered since the loss) is over: the window grows by what is
        // delivered again
        let a = f.on_report(&lossy(28_000, 0));
        assert_eq!(a.cwnd_bytes, Some(38_000));
        // after the episode the saved window is back
        for _ in 0..4 {
            f.on_report(&rep(10_000, 35_000, BW, RTT, TICK));
        }
        assert!(f.cwnd_bytes() >= cwnd, "{} < {cwnd}", f.cwnd_bytes());

        // a timeout: one packet, then slow start and the saved window after the episode
        let mut f = flow();
        into_probe_bw(&mut f);
        for _ in 0..8 {
            f.on_report(&steady(60_000));
        }
        let cwnd = f.cwnd_bytes();
        let to = Interval {
            timeout: true,
            lost_pkts: 60,
            interval_us: 250_000,
            ..Default::default()
        };
        let a = f.on_report(&to);
        assert_eq!(a.cwnd_bytes, Some(MSS as u32));
        let a = f.on_report(&rep(1_000, 2_000, BW, RTT, TICK));
        assert_eq!(a.cwnd_bytes, Some(4 * MSS as u32), "min window");
        for _ in 0..20 {
            f.on_report(&rep(10_000, 30_000, BW, RTT, TICK));
        }
        assert!(f.cwnd_bytes() >= cwnd, "{} < {cwnd}", f.cwnd_bytes());
    }

    #[test]
    fn sacked_bytes_are_delivered_once() {
        let mut f = flow();
        f.on_report(&rep(1_000, 40_000, BW, RTT, TICK)); // round 1 starts: 40 kB out
        assert_eq!(f.round_count(), 1);
        // a hole: 30 packets arrive out of order (SACKed), nothing is cumulatively acked
        let mut sack = rep(0, 40_000, BW, RTT, TICK);
        sack.misordered_pkts = 30;
        f.on_report(&sack);
        // the repair: the cumulative ACK passes the hole and the 30 SACKed packets; only the
        // retransmission is newly delivered (31 of 40 kB), the round goes on
        f.on_report(&rep(31_000, 40_000, BW, RTT, TICK));
        assert_eq!(f.round_count(), 1);
        f.on_report(&rep(9_000, 40_000, BW, RTT, TICK));
        assert_eq!(f.round_count(), 2);
    }

    #[test]
    fn report_interval_is_a_quarter_of_min_rtt() {
        let mut f = flow();
        assert_eq!(f.initial_action().report_interval_us, Some(10_000));
        let a = f.on_report(&rep(1_000, 1_000, BW, RTT, TICK));
        assert_eq!(a.report_interval_us, Some(10_000));
        let a = f.on_report(&rep(1_000, 1_000, BW, 4_000, TICK));
        assert_eq!(a.report_interval_us, Some(2_000), "at least 2 ms");
    }

    #[test]
    fn bad_inputs_give_finite_actions() {
        let check = |a: Action| {
            let c = a.cwnd_bytes.expect("cwnd");
            assert!(c >= 1);
            assert!(a.rate_bps.is_none_or(|r| r >= 1));
            let i = a.report_interval_us.expect("interval");
            assert!((1..=1_000_000).contains(&i), "{i}");
        };
        let reports = [
            Interval::default(),
            Interval {
                acked_bytes: 5_000,
                interval_us: 0,
                ..Default::default()
            },
            rep(0, 0, 0, 1, 0),
            rep(u64::MAX, u64::MAX, u64::MAX, u64::MAX, u64::MAX),
            Interval {
                lost_pkts: u64::MAX,
                timeout: true,
                rtt_mean_us: Some(f64::MAX),
                ..rep(u64::MAX / 2, 0, 1, 1, u64::MAX)
            },
            rep(10_000, 10_000, BW, RTT, TICK),
        ];
        for mss in [0, 1, 1000, 1 << 31, u32::MAX] {
            for init in [0, 1, u32::MAX] {
                let mut f = BbrFlow::new(
                    BbrConfig::default(),
                    &FlowInfo {
                        mss,
                        init_cwnd_bytes: init,
                        ..info(7)
                    },
                );
                check(f.initial_action());
                for _ in 0..3 {
                    for iv in &reports {
                        check(f.on_report(iv));
                        assert!(f.cwnd_bytes().is_finite() && f.pacing_rate().is_finite());
                        assert!(f.max_bw().is_finite());
                    }
                }
            }
        }
        // no RTT sample ever: no pacing rate yet, the initial window, the initial interval
        let mut f = flow();
        let a = f.on_report(&Interval {
            acked_bytes: 2_000,
            interval_us: 10_000,
            ..Default::default()
        });
        assert_eq!(a.report_interval_us, Some(10_000));
        assert!(a.cwnd_bytes.unwrap() >= 10 * MSS as u32);
        // a huge MSS: the window is clamped to what a u32 holds
        let mut f = BbrFlow::new(
            BbrConfig::default(),
            &FlowInfo {
                mss: 1 << 31,
                ..info(1)
            },
        );
        let a = f.on_report(&rep(1 << 31, 1 << 31, BW, RTT, TICK));
        assert_eq!(a.cwnd_bytes, Some(u32::MAX));
    }

    #[test]
    fn config_takes_defaults_and_rejects_unknown_keys() {
        use serde::de::value::{Error, MapDeserializer};
        use serde::Deserialize;
        let de = |kv: Vec<(&'static str, u32)>| {
            BbrConfig::deserialize(MapDeserializer::<_, Error>::new(kv.into_iter()))
        };
        let c = de(vec![("reports_per_rtt", 2)]).expect("known key");
        assert_eq!(
            c,
            BbrConfig {
                reports_per_rtt: 2,
                ..Default::default()
            }
        );
        assert_eq!(c.high_gain, 2.885);
        assert_eq!(c.bw_window_rounds, 10);
        let e = de(vec![("report_per_rtt", 2)]).expect_err("unknown key");
        assert!(e.to_string().contains("report_per_rtt"), "{e}");
    }
}
