//! The agent's decision counters ([`DecisionStats`]): how many reports the flows' drivers
//! decided on and how long each decision took. They live beside the flow tables, which every
//! driver holds, and are rendered by [`crate::control::metrics`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the decision-latency histogram's buckets (+Inf implied).
pub const DECISION_BUCKETS: [f64; 13] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
];

/// Decisions made and how long they took (a flow's driver, from a report's values to the
/// register updates that answer it: the controller, its policy and the bookkeeping).
#[derive(Debug, Default)]
pub struct DecisionStats {
    /// Reports decided on.
    pub decisions: AtomicU64,
    /// Reports that could not be read (answered with what is in force).
    pub unreadable: AtomicU64,
    buckets: [AtomicU64; DECISION_BUCKETS.len() + 1],
    sum_ns: AtomicU64,
    /// Policy outputs clamped (NaN/inf or out of range), over all flows.
    pub clamped_outputs: AtomicU64,
    /// Policy invocations that failed, over all flows.
    pub policy_errors: AtomicU64,
    /// Flows started and closed.
    pub flows_started: AtomicU64,
    pub flows_closed: AtomicU64,
}

impl DecisionStats {
    /// Count one decision that took `took`.
    pub fn observe(&self, took: Duration) {
        self.decisions.fetch_add(1, Ordering::Relaxed);
        let s = took.as_secs_f64();
        let i = DECISION_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(DECISION_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Cumulative bucket counts (Prometheus `le` semantics), the last one +Inf.
    pub fn cumulative(&self) -> Vec<u64> {
        let mut acc = 0;
        self.buckets
            .iter()
            .map(|b| {
                acc += b.load(Ordering::Relaxed);
                acc
            })
            .collect()
    }

    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns.load(Ordering::Relaxed) as f64 * 1e-9
    }
}
