//! The local peers: the agent's MOCC flows, as each one's share guard sees them.
//!
//! A crowd of equals reads as low in the share probe's trials as a starved flow does (the
//! neighbours make room for a trial's push, so less of it stays in the queue), and a flow
//! alone cannot tell the two apart: it knows its share, not the number of flows. The agent
//! can, for its own flows: they share a table of smoothed throughputs and `Ĉ`s, and a trial
//! that would turn the guard on does not while the table's flows fill the link between them
//! and this flow has at least `share_peers_fair` of their mean. Flows of other agents or
//! hosts are not in it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The agent's MOCC flows as each one's share guard sees them. A flow enters with its first
/// policy MI and leaves when it is dropped.
#[derive(Debug, Default)]
pub struct Peers {
    flows: Mutex<HashMap<u64, PeerEntry>>,
    next_id: AtomicU64,
}

/// What a flow shows its peers.
#[derive(Debug, Clone, Copy)]
struct PeerEntry {
    /// Smoothed throughput (bytes/s).
    thr_bps: f64,
    /// `Ĉ` (bytes/s), `None` after an early start-up (it recorded only the first windows).
    capacity_bps: Option<f64>,
}

impl Peers {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, PeerEntry>> {
        // a panic elsewhere while holding the lock left plain numbers: keep using them
        self.flows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether flow `id` is one of two or more local flows that fill the link between them
    /// (summed throughput ≥ `busy` × the largest `Ĉ` of a flow that started up on its own;
    /// with none, nobody knows the link) and gets at least `fair` of their mean
    /// throughput: whatever its trials read, its peers are not starving it.
    pub(crate) fn not_starved(&self, id: u64, fair: f64, busy: f64) -> bool {
        let t = self.table();
        let Some(mine) = t.get(&id) else {
            return false;
        };
        if t.len() < 2 || fair.is_nan() || fair <= 0.0 {
            return false;
        }
        let Some(cap) = t.values().filter_map(|e| e.capacity_bps).reduce(f64::max) else {
            return false;
        };
        let sum: f64 = t.values().map(|e| e.thr_bps).sum();
        sum >= busy * cap && mine.thr_bps >= fair * sum / t.len() as f64
    }

    /// Flows in the table.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    /// No flow in the table.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A flow's entry in [`Peers`]; dropping it removes the entry.
#[derive(Debug)]
pub(crate) struct PeerSlot {
    pub(crate) peers: Arc<Peers>,
    pub(crate) id: u64,
}

impl PeerSlot {
    pub(crate) fn new(peers: Arc<Peers>) -> Self {
        let id = peers.next_id.fetch_add(1, Ordering::Relaxed);
        Self { peers, id }
    }

    pub(crate) fn publish(&self, thr_bps: f64, capacity_bps: Option<f64>) {
        self.peers.table().insert(
            self.id,
            PeerEntry {
                thr_bps,
                capacity_bps,
            },
        );
    }

    /// See [`Peers::not_starved`].
    pub(crate) fn not_starved(&self, fair: f64, busy: f64) -> bool {
        self.peers.not_starved(self.id, fair, busy)
    }
}

/// A clone is another flow: a new entry, empty until it publishes.
impl Clone for PeerSlot {
    fn clone(&self) -> Self {
        Self::new(Arc::clone(&self.peers))
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        self.peers.table().remove(&self.id);
    }
}
