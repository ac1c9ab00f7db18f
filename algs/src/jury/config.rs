//! Jury's knobs and their ranges.

/// Jury's knobs. Defaults are the paper's where it gives one (Table 2: the 30 ms interval,
/// α, β1, β2); the others are this implementation's choices, each explained in the module
/// header. Every knob but the reward's ([`REWARD_KNOBS`]) is part of the dynamics a model was
/// trained under ([`super::Jury`]'s `dynamics()`): the agent refuses a model trained with other
/// values.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct JuryConfig {
    /// Control interval (ms): one report and at most one decision per interval (Table 2).
    pub interval_ms: f64,
    /// Action control coefficient α of eq. 7 (Table 2).
    pub alpha: f64,
    /// Intervals of signals stacked into one observation (§3.5: "a window of intervals").
    pub history: u32,
    /// Moving-average length (intervals) of the policy's RTT and loss signals (§3.4).
    pub signal_window: u32,
    /// Intervals the bandwidth-occupancy estimate (eq. 5) is fitted over (§3.4's moving
    /// average, weighted by each interval's probe size: [`super::core::OccupancyFit`]).
    pub occupancy_window: u32,
    /// The fit updates only while the window's rate changes add up to
    /// `sqrt(Σ(a − 1)²) ≥ min_probe`: near `a = 1` eq. 5 divides measurement noise by `a − 1`.
    pub min_probe: f64,
    /// What eq. 5's fit regresses the throughput response on ([`Probe`]; §3.1's is `rate`,
    /// the default is this implementation's `trial`, a deviation from §3.1).
    pub probe: Probe,
    /// `trial`: the size ε of a flow's own probe; a trial paces (and windows) the flow at
    /// `1 + ε` then `1 − ε` times what eq. 7–8 set, or the other way round.
    pub trial_eps: f64,
    /// `trial`: control intervals each half of a trial lasts.
    pub trial_intervals: u32,
    /// `trial`: a flow waits a number of intervals drawn uniformly from
    /// `[trial_gap_min, trial_gap_max]` before each trial (its first included), from a random
    /// stream of its own.
    pub trial_gap_min: u32,
    /// See [`Self::trial_gap_min`].
    pub trial_gap_max: u32,
    /// Largest centre `|μ|` of the policy's action range (its action box). With
    /// `mu_bound < min_delta` the range `[μ − δ, μ + δ]` always holds `a = 0` strictly inside:
    /// flows above a share the policy picks slow down while those below speed up, a flow with
    /// no share (`ratio_bw = 0`, eq. 6's top) always speeds up, by `α·(min_delta − mu_bound)`
    /// at least, and one with all of it always slows down. Were every flow to step the same
    /// way, eq. 5 would read the common change as each flow's own response and give every
    /// flow the same estimate; at `mu_bound = min_delta` TD3 found the corner `(−δ, δ)`, where
    /// a flow with no share holds still and a link stays empty (docs/algorithms/jury.md).
    pub mu_bound: f64,
    /// Smallest radius δ of the policy's action range (the lower bound of its action box):
    /// eq. 6 spreads flows across `[μ − δ, μ + δ]` by their occupancy, and with `δ = 0` every
    /// flow takes the same multiplicative step, so shares never converge (MIMD).
    pub min_delta: f64,
    /// Exploration (§3.4): a post-processed action with `|a| < explore_band` ...
    pub explore_band: f64,
    /// ... is replaced, with this probability, by `+1` or `−1` (equally likely).
    pub explore_prob: f64,
    /// Statistical significance (§3.4): while an interval's ACKs cover fewer packets than
    /// this, the flow increases at the largest action (`a = 1`) without asking the policy.
    pub min_pkts: u32,
    /// RTT assumed before the first sample (ms): the pacing rate of the first window.
    pub initial_rtt_ms: f64,
    /// Smallest congestion window (packets).
    pub min_cwnd_pkts: f64,
    /// Largest window as a multiple of the flow's best throughput × smallest RTT (its largest
    /// BDP estimate): an action sequence that keeps increasing into loss cannot pace a flow
    /// at many times what its path ever delivered.
    pub max_cwnd_bdp: f64,
    /// First window (packets); unset: the datapath's initial window. Sets where a training
    /// episode begins (flows near their share, where eq. 9 has something to say: below
    /// capacity every action earns `ratio_bw = 0`), so it is not part of the dynamics.
    pub initial_cwnd_pkts: Option<f64>,
    /// Reward (eq. 9): exponent ζ of the occupancy term, `0 < ζ < 1`.
    pub zeta: f64,
    /// Reward (eq. 9): weight β1 of the queueing delay `RTT − RTT_min` (per µs, Table 2).
    pub beta1: f64,
    /// Reward (eq. 9): weight β2 of the delivery ratio `(1 − L_t)/(1 − L_min)` (Table 2).
    pub beta2: f64,
    /// Reward (eq. 9): the loss term as printed, `+β2·ratio·(1 − L_t)/(1 − L_min)` (a bonus
    /// for delivering, 5 × the occupancy term's scale, which makes a full queue pay), instead
    /// of the default penalty `−β2·ratio·(1 − (1 − L_t)/(1 − L_min))`.
    pub printed_loss_term: bool,
}

/// The rate change eq. 5's fit pairs with a flow's throughput change. Flows that share one
/// policy and one queue take the same steps, and at a full bottleneck a step every flow takes
/// leaves every share as it was, so only a step that is the flow's own says what its share
/// is (docs/algorithms/jury.md, "The estimator", with the fluid table of each choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Probe {
    /// §3.1: the whole change of the pacing rate.
    Rate,
    /// The step against the policy's centre, `(1 + α·a)/(1 + α·μ)`: eq. 6's spread and the
    /// exploration.
    Own,
    /// Only the exploration's random ±1 against the action it replaced: independent across
    /// flows, but present only where eq. 6 lands near `a = 0`.
    Explore,
    /// A deviation from §3.1 (the default): paired trials of the flow's own, in the manner of
    /// PCC Vivace's, independent of the policy and of the other flows: after a random gap the
    /// flow paces at `1 ± ε` for `trial_intervals`, then at `1 ∓ ε` (random order). The fit
    /// regresses eq. 4's `a/g − 1` (whole rate change `a`) on the trial's step alone, so
    /// what the flows share (the policy's steps, eq. 6's, the others' trials) averages out.
    Trial,
}

/// Knobs that only shape the reward (a training signal), not what the policy observes or how
/// its action acts: left out of [`super::Jury`]'s dynamics, recorded in the card's training
/// section instead.
pub const REWARD_KNOBS: [&str; 4] = ["zeta", "beta1", "beta2", "printed_loss_term"];

/// Knobs that only set where a training episode begins: left out of the dynamics too.
pub const EPISODE_START_KNOBS: [&str; 1] = ["initial_cwnd_pkts"];

impl Default for JuryConfig {
    fn default() -> Self {
        Self {
            interval_ms: 30.0,
            alpha: 0.025,
            history: 10,
            signal_window: 3,
            occupancy_window: 8,
            min_probe: 0.01,
            probe: Probe::Trial,
            trial_eps: 0.05,
            trial_intervals: 2,
            trial_gap_min: 2,
            trial_gap_max: 10,
            mu_bound: 0.25,
            min_delta: 0.5,
            explore_band: 0.1,
            explore_prob: 0.9,
            min_pkts: 8,
            initial_rtt_ms: 100.0,
            min_cwnd_pkts: 4.0,
            max_cwnd_bdp: 4.0,
            initial_cwnd_pkts: None,
            zeta: 0.9,
            beta1: 1e-5,
            beta2: 5.0,
            printed_loss_term: false,
        }
    }
}

impl JuryConfig {
    /// The control interval in µs (validated: within the agent's report-interval bounds).
    pub fn interval_us(&self) -> u32 {
        // validate() keeps interval_ms within [1, 10 000]
        (self.interval_ms * 1000.0).round() as u32
    }

    pub fn validate(&self) -> Result<(), crate::config::KnobError> {
        use crate::config::{Knobs, Range};
        let k = Knobs("jury");
        k.real(
            "interval_ms",
            self.interval_ms,
            Range::Closed(1.0, 10_000.0),
        )?;
        k.real("alpha", self.alpha, Range::Open(0.0, 1.0))?;
        k.int("history", self.history, 1, 64)?;
        k.int("signal_window", self.signal_window, 1, 64)?;
        k.int("occupancy_window", self.occupancy_window, 1, 256)?;
        k.real("min_probe", self.min_probe, Range::AboveTo(0.0, 1.0))?;
        k.real("trial_eps", self.trial_eps, Range::AboveTo(0.0, 0.5))?;
        k.int("trial_intervals", self.trial_intervals, 1, 1000)?;
        k.int("trial_gap_min", self.trial_gap_min, 0, 100_000)?;
        k.int("trial_gap_max", self.trial_gap_max, 0, 100_000)?;
        k.ordered(
            "trial_gap_min",
            f64::from(self.trial_gap_min),
            "trial_gap_max",
            f64::from(self.trial_gap_max),
        )?;
        k.real("mu_bound", self.mu_bound, Range::AboveTo(0.0, 1.0))?;
        k.real("min_delta", self.min_delta, Range::Closed(0.0, 1.0))?;
        k.real("explore_band", self.explore_band, Range::Closed(0.0, 1.0))?;
        k.real("explore_prob", self.explore_prob, Range::Closed(0.0, 1.0))?;
        k.int("min_pkts", self.min_pkts, 0, 1_000_000)?;
        k.real(
            "initial_rtt_ms",
            self.initial_rtt_ms,
            Range::AboveTo(0.0, 1e5),
        )?;
        k.real("min_cwnd_pkts", self.min_cwnd_pkts, Range::Closed(1.0, 1e6))?;
        k.real("max_cwnd_bdp", self.max_cwnd_bdp, Range::Closed(1.0, 1e3))?;
        if let Some(w) = self.initial_cwnd_pkts {
            k.real("initial_cwnd_pkts", w, Range::Closed(1.0, 1e6))?;
        }
        k.real("zeta", self.zeta, Range::Open(0.0, 1.0))?;
        k.real("beta1", self.beta1, Range::Closed(0.0, 1.0))?;
        k.real("beta2", self.beta2, Range::Closed(0.0, 1e3))?;
        Ok(())
    }
}
