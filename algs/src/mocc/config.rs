//! MOCC's knobs and their ranges.

/// MOCC's knobs. Defaults are the paper's where it gives one (α, Table 2); the others are
/// this implementation's choices, documented in the module header. Every knob but `startup`
/// and `initial_rate_mbps` is part of the dynamics a model was trained under
/// ([`super::Mocc`]'s `dynamics()`): the agent refuses a model trained with other values.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MoccConfig {
    /// Action scale factor (α) of eq. 1.
    pub alpha: f64,
    /// RTT assumed before the first sample (ms): first MI length and start-up rate.
    pub initial_rtt_ms: f64,
    /// Shortest MI (ms).
    pub min_mi_ms: f64,
    /// Longest MI (ms).
    pub max_mi_ms: f64,
    /// Lowest rate ever set (kbit/s).
    pub min_rate_kbps: f64,
    /// Highest rate ever set (Mbit/s).
    pub max_rate_mbps: f64,
    /// Run the start-up (doubling) phase before the policy.
    pub startup: bool,
    /// Start-up ends when an MI's latency ratio `p` exceeds this.
    pub startup_exit_latency_ratio: f64,
    /// Packets added to `2·rate·rtt` in the cwnd cap.
    pub cwnd_headroom_pkts: f64,
    /// The cwnd cap's delivery bound (issue 23): when positive, the cap is also at most
    /// this many times `d̂·D̂` (+ the headroom), `d̂` the largest delivery-rate sample of the
    /// last `cwnd_cap_delivery_mis` MIs and `D̂` the smallest RTT, so bytes in flight follow
    /// what the path delivers when its capacity falls (BBR's `cwnd_gain·BDP`). 0: the rate
    /// cap alone. Default 1 with `cwnd_cap_delivery_w_power = 1` (issue 40: the shipped model
    /// trained with them): the gain in force is `1 / (1 − w_thr)` (`docs/algorithms/mocc.md`).
    pub cwnd_cap_delivery_gain: f64,
    /// MIs over which `d̂` is the largest delivery-rate sample (1–100).
    pub cwnd_cap_delivery_mis: u32,
    /// How the delivery bound depends on the flow's preference (issue 40): the gain in force
    /// is `cwnd_cap_delivery_gain / (w_lat + w_loss)^k`, `k` this knob, so the bound is
    /// tightest (`cwnd_cap_delivery_gain` itself) for a flow that puts no weight on
    /// throughput and off for one that puts all of it there. 0: one gain for every `w`
    /// (issue 23's bound).
    pub cwnd_cap_delivery_w_power: f64,
    /// First rate (Mbit/s) of a flow, start-up's or the policy's; unset: the initial window
    /// over `initial_rtt_ms`. Trainers set it with `startup = false` to start the policy
    /// anywhere below or above the capacity.
    pub initial_rate_mbps: Option<f64>,
    /// Additive increase κ (packets per RTT, added every MI on top of eq. 1), at most
    /// `additive_increase_cap` of the rate: what makes flows that see the same signals
    /// converge to equal shares (the additive increase governor). 0 is the paper's pure eq. 1.
    pub additive_increase_pkts: f64,
    /// The additive term is at most this fraction of the rate.
    pub additive_increase_cap: f64,
    /// The additive term is added only to decisions with `a ≥` this: −5 (the action bound)
    /// adds it to every decision; 0 only while the policy holds or increases (AIMD-like).
    pub additive_increase_min_action: f64,
    /// Lowest rate in packets per smoothed RTT, above `min_rate_kbps` (BBR's floor of
    /// 4 packets; 0: `min_rate_kbps` alone): the rate floor governor.
    pub min_rate_pkts: f64,
    /// Share probe: least MIs between the starts of two trials (0: never probe).
    pub share_probe_every_mis: u32,
    /// Share probe: the trial's rate step `δ`: `x·(1 ± δ)`, then `x·(1 ∓ δ)`.
    pub share_probe_delta: f64,
    /// Share probe: MIs per half of a trial (1–4).
    pub share_probe_half_mis: u32,
    /// Share probe: a trial starts only while the rate is below this fraction of `Ĉ` (or the
    /// guard is on).
    pub share_probe_below_capacity: f64,
    /// Share probe: a trial starts only while a standing queue holds the MI's smallest RTT
    /// sample above this multiple of `D̂`.
    pub share_probe_min_latency_ratio: f64,
    /// Share probe: a flow whose start-up ended before this many doublings (its `Ĉ` records
    /// only its first windows) counts as below capacity until its trials' average share
    /// reaches `share_probe_below_capacity` (0: never).
    pub share_probe_early_doublings: u32,
    /// Share probe: gain of the moving average of the trials' shares.
    pub share_gain: f64,
    /// Share guard: on when a loss-free trial leaves the average share below this.
    pub share_guard_below: f64,
    /// Share guard: loss-free trials needed before it may turn on.
    pub share_guard_min_trials: u32,
    /// Share guard: while on, actions below this are raised to it.
    pub share_guard_min_action: f64,
    /// Share guard: while on, packets per RTT added (within `additive_increase_cap`).
    pub share_guard_pkts: f64,
    /// Share guard: a loss while on multiplies the rate by this once (within `[0.1, 1]`);
    /// the guard stays on.
    pub share_guard_loss_factor: f64,
    /// Local peers: no guard for a flow whose smoothed throughput is at least this fraction
    /// of the mean over the agent's MOCC flows, while they fill the link
    /// (`share_peers_busy`); 0: ignore peers (the share governor's peers' veto).
    pub share_peers_fair: f64,
    /// Local peers: the veto holds only while the flows' summed throughput is at least this
    /// fraction of the largest `Ĉ` among them, counting only flows whose start-up was not
    /// early (they, not outsiders, fill the link).
    pub share_peers_busy: f64,
}

impl Default for MoccConfig {
    fn default() -> Self {
        Self {
            alpha: 0.025,
            initial_rtt_ms: 100.0,
            min_mi_ms: 5.0,
            max_mi_ms: 500.0,
            min_rate_kbps: 100.0,
            max_rate_mbps: 10_000.0,
            startup: true,
            startup_exit_latency_ratio: 1.5,
            cwnd_headroom_pkts: 10.0,
            cwnd_cap_delivery_gain: 1.0,
            cwnd_cap_delivery_mis: 3,
            cwnd_cap_delivery_w_power: 1.0,
            initial_rate_mbps: None,
            additive_increase_pkts: 0.1,
            additive_increase_cap: 0.05,
            additive_increase_min_action: 0.0,
            min_rate_pkts: 4.0,
            share_probe_every_mis: 10,
            share_probe_delta: 0.5,
            share_probe_half_mis: 2,
            share_probe_below_capacity: 0.5,
            share_probe_min_latency_ratio: 1.2,
            share_probe_early_doublings: 4,
            share_gain: 0.2,
            share_guard_below: 0.1,
            share_guard_min_trials: 3,
            share_guard_min_action: 2.0,
            share_guard_pkts: 1.0,
            share_guard_loss_factor: 0.7,
            share_peers_fair: 0.5,
            share_peers_busy: 0.7,
        }
    }
}

impl MoccConfig {
    /// Check every knob against its range (see `config`).
    pub fn validate(&self) -> Result<(), crate::config::KnobError> {
        use crate::config::{Knobs, Range};
        let k = Knobs("mocc");
        let pos = |hi| Range::AboveTo(0.0, hi);
        let non_neg = |hi| Range::Closed(0.0, hi);
        k.real("alpha", self.alpha, pos(1.0))?;
        k.real("initial_rtt_ms", self.initial_rtt_ms, pos(1e5))?;
        k.real("min_mi_ms", self.min_mi_ms, pos(1e5))?;
        k.real("max_mi_ms", self.max_mi_ms, pos(1e5))?;
        k.ordered("min_mi_ms", self.min_mi_ms, "max_mi_ms", self.max_mi_ms)?;
        k.real("min_rate_kbps", self.min_rate_kbps, pos(1e9))?;
        k.real("max_rate_mbps", self.max_rate_mbps, pos(1e6))?;
        k.ordered(
            "min_rate_kbps",
            self.min_rate_kbps,
            "max_rate_mbps (in kbit/s)",
            self.max_rate_mbps * 1e3,
        )?;
        k.real(
            "startup_exit_latency_ratio",
            self.startup_exit_latency_ratio,
            Range::Closed(1.0, 100.0),
        )?;
        k.real("cwnd_headroom_pkts", self.cwnd_headroom_pkts, non_neg(1e6))?;
        k.real(
            "cwnd_cap_delivery_gain",
            self.cwnd_cap_delivery_gain,
            non_neg(100.0),
        )?;
        k.int("cwnd_cap_delivery_mis", self.cwnd_cap_delivery_mis, 1, 100)?;
        k.real(
            "cwnd_cap_delivery_w_power",
            self.cwnd_cap_delivery_w_power,
            non_neg(4.0),
        )?;
        if let Some(r) = self.initial_rate_mbps {
            k.real("initial_rate_mbps", r, pos(1e6))?;
        }
        k.real(
            "additive_increase_pkts",
            self.additive_increase_pkts,
            non_neg(1e6),
        )?;
        k.real(
            "additive_increase_cap",
            self.additive_increase_cap,
            non_neg(1.0),
        )?;
        let action = Range::Closed(-1e3, 1e3);
        k.real(
            "additive_increase_min_action",
            self.additive_increase_min_action,
            action,
        )?;
        k.real("min_rate_pkts", self.min_rate_pkts, non_neg(1e6))?;
        k.int(
            "share_probe_every_mis",
            self.share_probe_every_mis,
            0,
            1_000_000,
        )?;
        k.real(
            "share_probe_delta",
            self.share_probe_delta,
            Range::Open(0.0, 1.0),
        )?;
        k.int("share_probe_half_mis", self.share_probe_half_mis, 1, 4)?;
        let ratio = non_neg(100.0);
        k.real(
            "share_probe_below_capacity",
            self.share_probe_below_capacity,
            ratio,
        )?;
        k.real(
            "share_probe_min_latency_ratio",
            self.share_probe_min_latency_ratio,
            ratio,
        )?;
        k.int(
            "share_probe_early_doublings",
            self.share_probe_early_doublings,
            0,
            64,
        )?;
        k.real("share_gain", self.share_gain, pos(1.0))?;
        k.real("share_guard_below", self.share_guard_below, non_neg(1.0))?;
        k.int(
            "share_guard_min_trials",
            self.share_guard_min_trials,
            0,
            1_000_000,
        )?;
        k.real(
            "share_guard_min_action",
            self.share_guard_min_action,
            action,
        )?;
        k.real("share_guard_pkts", self.share_guard_pkts, non_neg(1e6))?;
        let loss_factor = Range::Closed(0.1, 1.0);
        k.real(
            "share_guard_loss_factor",
            self.share_guard_loss_factor,
            loss_factor,
        )?;
        k.real("share_peers_fair", self.share_peers_fair, ratio)?;
        k.real("share_peers_busy", self.share_peers_busy, ratio)
    }
}

impl MoccConfig {
    /// `us` within `[min_mi_ms, max_mi_ms]`, at least 1 µs; never panics (NaN knobs or a
    /// NaN `us` fall to a bound).
    pub(super) fn mi_within_bounds_us(&self, us: f64) -> u32 {
        us.max(self.min_mi_ms * 1000.0)
            .min(self.max_mi_ms * 1000.0)
            .max(1.0)
            .min(f64::from(u32::MAX / 2)) as u32
    }
}
