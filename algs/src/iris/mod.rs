//! Iris (statistical-learning rate control for real-time video, the Iris paper §IV–V) as a CCP
//! algorithm.
//!
//! Units used throughout this module (the paper mixes packets, Mbps and ms):
//! rates `x`, `r` in packets/s (MSS-sized packets), the queue-load target `B` in packets,
//! RTTs and RTT changes (`rtt`, `T`, `Δrtt`, `d`, `δ`) in ms, and `k` in ms per (packet/s).
//! The datapath sees bytes/s (`Action::rate_bps`) and bytes (`cwnd_bytes`).
//!
//! Model, per epoch `i` of `τ` = 50 ms (§IV-A, §V):
//!
//! ```text
//!   r_i       = (packets of epoch i) / (t_i − t_{i−1})                          (eq. 12)
//!               t_i = time of the last ACK of epoch i
//!   U_i       = (x_i·(rtt_i − T) − B) / M        queue-load objective          (eq. 3, 6)
//!               T = min RTT over a window (Iris-min) or its median (Iris-mid)
//!   d_{i+1}   = −δ·tanh(U_i)                     expected RTT change            (eq. 6)
//!   Δrtt_i    = rtt_i − rtt_{i−1} = k·(x_i − r_i) + b                          (eq. 1, 2)
//!               k, b by least squares over a sliding history, refit every 5 s  (§V-B)
//!   x_{i+1}   = r_i + d_{i+1}/k                                                 (eq. 7)
//!   defaults  τ = 50 ms, B = 10 packets, M = 100, δ = 3 ms                      (§V-D)
//!   cold start: 100 kbit/s, doubling per epoch until the loss rate rises,
//!               then the first fit of k                                        (§V-C)
//! ```
//!
//! Reacts to: the epoch's mean RTT against the target delay `T`, the receiving rate, the
//! sending rate of the packets the epoch acknowledged, and (cold start only) a rise in the
//! loss rate. Ignores: random loss in steady state (the paper's §VI-B1 robustness: loss is not
//! a congestion signal of the rate law), ECN, the flow's preference vector.
//!
//! Choices where the paper is vague or CCP differs from its UDP prototype (the reasons and
//! measurements: `docs/algorithms/iris.md`):
//!
//! - **Epoch = report interval, by ACK arrival**: the packets whose fate a 50 ms report
//!   revealed; `t_i` is `LAST_ACK_US`; reports without an ACK carry their packets over.
//! - **Delivered** = SACKed + cumulatively acked, less cumulative ACKs of packets already
//!   counted (SACKed ones, and holes declared lost).
//! - **Packets sent** = `delivered/(1 − p)`, at most delivered + lost, `p` the random-loss
//!   rate (losses of epochs with `U ≤ 0`, over ~500 packets, at most `max_random_loss`).
//! - **`x_i`** = the time-weighted mean of the rates set over the acked packets' sending
//!   times `[now − interval − rtt_i, now − rtt_i]`.
//! - **`r` in eq. 7** = the receiving rate over the last `max(τ, srtt)` (`r_i` when the RTT
//!   is at most an epoch); below target (`U ≤ 0`) at least `min(x, Ĉ)`, `Ĉ` the largest
//!   receiving rate of the last `history_s`. The fit uses eq. 12's `r_i`.
//! - **Target `T`**: Iris-min, the minimum epoch RTT over `min_window_s` = 600 s (LEDBAT's
//!   base-delay history: a shorter window absorbs the flow's own standing queue); Iris-mid,
//!   the median epoch mean over `median_window_s` = 10 s.
//! - **Fit**: least squares with intercept over the last `history_s` = 10 s, refit every
//!   `refit_interval_s`; rejected (previous `k` kept) below `min_fit_samples`, when
//!   ill-conditioned, for `k ≤ 0` or below `min_fit_correlation`. Before an accepted fit,
//!   the queue model's `k₀ = τ/r`.
//! - **Cold start**: slow start, ×`2^(τ/max(τ, srtt))` per epoch, at most `2·gain` (4) times
//!   the largest recent receiving rate; ends on a loss rise (3 σ over its own loss rate, ≥ 3 packets),
//!   `U > 0`, or two epochs of ≥ 8 packets received below 80 % of their sending rate.
//! - **Drain** (not in the paper): at `r − excess/τ` (≥ `drain_gain·r`) until the bytes in
//!   flight fall to `r·T + B` packets, at most `2·srtt`; then eq. 7 from the cold start's
//!   largest receiving rate.
//! - **Re-probe** (not in the paper; `reprobe`): after a queue load below `B/10` for
//!   `max(4·srtt, 8 epochs)` at ≥ 95 % of `Ĉ`, cold start again, growing by `reprobe_gain`.
//! - **Guards**: `x_{i+1}` within `r·(1 ± max_step)` and `[min_rate, max_rate]`, draining no
//!   more than the excess in flight within one epoch; a non-finite value, or an epoch
//!   without a receiving rate or RTT, keeps the rate. Reports count as at most 60 s.
//! - **Timeouts** are no congestion signal and do not end cold start: the rate is kept and
//!   their losses stay out of the loss estimates.
//! - **Window**: rate-based; the cwnd is a cap `2·x·srtt + B` packets (1 s before the first
//!   sample), at least 4 MSS.
//!
//! Files: `config.rs` the knobs, `fit.rs` the queue model and the least-squares fit of `k`,
//! `core.rs` the per-flow controller ([`IrisFlow`]), `tests.rs`.

mod config;
mod core;
mod fit;

pub use self::config::{IrisConfig, IrisTarget};
pub use self::core::{IrisFlow, IrisMetrics, IrisPhase};
pub use self::fit::{expected_rtt_change, fit_k, queue_load_objective, Fit, FitRejection};

use crate::controller::{Algorithm, Controller, FlowInfo};
use crate::signals::{fields, FoldProgram, ProgramBuilder};

/// Report fields Iris reads.
const IRIS_FIELDS: [&str; 10] = [
    fields::ACKED_BYTES,
    fields::MISORDERED_PKTS,
    fields::LOST_PKTS,
    fields::TIMEOUT,
    fields::RTT_MIN_US,
    fields::RTT_SUM_US,
    fields::RTT_CNT,
    fields::LAST_ACK_US,
    fields::INFLIGHT_BYTES,
    fields::INTERVAL_US,
];

/// The Iris algorithm.
#[derive(Debug, Clone, Default)]
pub struct Iris {
    pub config: IrisConfig,
}

impl crate::controller::FromConfig for Iris {
    type Config = IrisConfig;
    fn from_config(config: &IrisConfig) -> Self {
        Self {
            config: config.clone(),
        }
    }
}

impl Algorithm for Iris {
    fn name(&self) -> &'static str {
        "iris"
    }

    fn program(&self) -> FoldProgram {
        ProgramBuilder::new("iris_epoch", self.config.epoch_ms.max(1) * 1000)
            .fields(&IRIS_FIELDS)
            .build()
    }

    fn new_flow(&self, info: &FlowInfo) -> Box<dyn Controller> {
        Box::new(IrisFlow::new(self.config.clone(), info))
    }
}

#[cfg(test)]
mod tests;
