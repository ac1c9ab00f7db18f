//! The agent's flow tables: what each datapath asked for (the guard's [`FlowRequest`]s) and
//! what the agent knows about each flow ([`FlowRecord`]s), bounded.
//!
//! Flows are keyed by datapath and socket id ([`FlowKey`]): socket ids are unique only per
//! datapath, and one agent may serve several (unix sockets). The guard numbers datapaths
//! ([`FlowTables::set_current_peer`]) as their messages pass; the adapter reads the number
//! when portus hands it a new flow, on the same thread.
//!
//! Bounds: a live flow has one request and one record; the guard caps live flows
//! ([`MAX_FLOWS_PER_DATAPATH`], [`MAX_FLOWS`]). When a flow closes (or its
//! datapath is dropped) its request goes and its record moves to a ring of the
//! [`CLOSED_KEPT`] most recently closed flows (for `--sim` output and tests). Every request
//! carries a generation, so a flow replaced by a new CREATE for the same socket id never
//! removes its successor's request or record.

pub mod decisions;
pub mod flowlog;
pub mod key;
pub mod pathclass;
pub mod portfolio;
pub mod prefs;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use ccp_algs::{FlowMetrics, Preference};

use crate::flows::decisions::DecisionStats;
use crate::flows::key::FlowKey;
use crate::flows::pathclass::Classified;
use crate::flows::portfolio::Choice;
use crate::flows::prefs::{FlowAddr, PrefSource, PrefStore, Resolved};

/// Records of closed flows kept (most recent first out of the ring).
pub const CLOSED_KEPT: usize = 1024;

/// Live flows per datapath: libccp's socket ids are 16-bit, so no datapath holds more
/// (ccp-kernel's table has `max_flows` slots, 1024 by default, up to 65,535).
pub const MAX_FLOWS_PER_DATAPATH: usize = 65_535;
/// Live flows over all datapaths.
pub const MAX_FLOWS: usize = 4 * MAX_FLOWS_PER_DATAPATH;

/// What a datapath asked for when it created a flow.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRequest {
    /// The congAlg name as the datapath sent it (`ccp_cubic;w=…`).
    pub requested: String,
    /// The registry name portus will dispatch on; empty = the default algorithm.
    pub alg: String,
    /// The flow's own preference (the `;w=` suffix), if it carried one.
    pub preference: Option<Preference>,
    /// The CREATE's addresses and ports.
    pub addr: Option<FlowAddr>,
    /// The flow's preference as resolved at CREATE ([`PrefStore::resolve`]).
    pub resolved: Option<Resolved>,
    /// For a flow that asked for `ccp_auto`: the portfolio's choice and why.
    pub choice: Option<Choice>,
}

/// What the agent knows about one flow, for output and tests.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlowRecord {
    pub sid: u32,
    /// congAlg name as the datapath sent it.
    pub requested: String,
    /// The algorithm that runs the flow.
    pub alg: &'static str,
    /// The preference in force, and where it came from ([`crate::flows::prefs`]).
    pub w: Preference,
    pub w_source: PrefSource,
    /// The CREATE's addresses and ports (none for flows started without a CREATE).
    pub addr: Option<FlowAddr>,
    /// `ccp_auto` flows: the portfolio's choice and why.
    pub choice: Option<Choice>,
    /// `ccp_auto` flows whose table has a classifier: the path class last decided and the
    /// features it was decided on ([`crate::flows::pathclass`]).
    pub class: Option<Classified>,
    /// `ccp_auto` flows: each change of algorithm (the first [`SWITCHES_KEPT`]).
    pub switches: Vec<Switch>,
    pub closed: bool,
    pub metrics: FlowMetrics,
}

/// Switches kept per flow record (later ones are counted in the flow log only).
pub const SWITCHES_KEPT: usize = 16;

/// A `ccp_auto` flow changed its algorithm.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Switch {
    /// Flow time (s, datapath clock).
    pub at_s: f64,
    pub from: &'static str,
    pub to: &'static str,
    /// Why: the class the flow was put in (or kept, on a preference change).
    pub class: String,
    /// `w · o` of the new algorithm's entry in that class.
    pub score: f64,
    /// The window and rate handed over (bytes, bytes/s).
    pub cwnd_bytes: u32,
    pub delivery_rate_bps: Option<f64>,
}

/// Sizes of the tables (for tests and the soak benchmark).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableSizes {
    /// Records of live flows.
    pub live: usize,
    /// Records of closed flows kept.
    pub closed: usize,
    /// Requests of live (or just announced) flows.
    pub requests: usize,
}

#[derive(Debug, Default)]
struct Inner {
    requests: HashMap<FlowKey, (u64, FlowRequest)>,
    live: HashMap<FlowKey, (u64, FlowRecord)>,
    closed: VecDeque<FlowRecord>,
}

/// Requests and records of every flow, shared by the guard, the adapters and the agent;
/// with them the flows' preferences ([`PrefStore`]) and the decision counters.
#[derive(Debug, Default)]
pub struct FlowTables {
    inner: Mutex<Inner>,
    current_peer: AtomicU32,
    next_gen: AtomicU64,
    /// Per-socket entries, rules and each live flow's current preference.
    pub prefs: PrefStore,
    /// Decisions made and how long they took (metrics).
    pub decisions: DecisionStats,
}

impl FlowTables {
    /// Tables whose flows resolve their preferences with `prefs`.
    pub fn with_prefs(prefs: PrefStore) -> Self {
        Self {
            prefs,
            ..Default::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // a panic elsewhere while holding the lock leaves consistent maps: keep going
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The datapath whose messages portus is handling now (set by the guard).
    pub fn set_current_peer(&self, peer: u32) {
        self.current_peer.store(peer, Ordering::Relaxed);
    }

    pub fn current_peer(&self) -> u32 {
        self.current_peer.load(Ordering::Relaxed)
    }

    /// Record a flow's request (its CREATE); returns the request's generation.
    pub fn set_request(&self, key: FlowKey, req: FlowRequest) -> u64 {
        let gen = self.next_gen.fetch_add(1, Ordering::Relaxed) + 1;
        self.lock().requests.insert(key, (gen, req));
        gen
    }

    /// The request of `key` and its generation.
    pub fn request(&self, key: FlowKey) -> Option<(u64, FlowRequest)> {
        self.lock().requests.get(&key).cloned()
    }

    /// A new flow's record. A live record of an earlier flow with the same key (replaced
    /// without a close) counts as closed.
    pub fn open(&self, key: FlowKey, gen: u64, record: FlowRecord) -> Option<FlowRecord> {
        let mut t = self.lock();
        let displaced = t.live.insert(key, (gen, record)).map(|(_, mut r)| {
            r.closed = true;
            r
        });
        if let Some(r) = &displaced {
            push_closed(&mut t.closed, r.clone());
        }
        displaced
    }

    /// Update the live record of `key` (generation `gen`); `f` sees it if present.
    pub fn update<R>(
        &self,
        key: FlowKey,
        gen: u64,
        f: impl FnOnce(&mut FlowRecord) -> R,
    ) -> Option<R> {
        let mut t = self.lock();
        match t.live.get_mut(&key) {
            Some((g, rec)) if *g == gen => Some(f(rec)),
            _ => None,
        }
    }

    /// Close the flow `key` of generation `gen`: its request goes, its record (updated by
    /// `f`) moves to the closed ring. Returns the record if this flow was still live.
    pub fn close(
        &self,
        key: FlowKey,
        gen: u64,
        f: impl FnOnce(&mut FlowRecord),
    ) -> Option<FlowRecord> {
        let mut t = self.lock();
        if t.requests.get(&key).is_some_and(|(g, _)| *g == gen) {
            t.requests.remove(&key);
        }
        if t.live.get(&key).is_none_or(|(g, _)| *g != gen) {
            return None;
        }
        let (_, mut rec) = t.live.remove(&key)?;
        rec.closed = true;
        f(&mut rec);
        push_closed(&mut t.closed, rec.clone());
        Some(rec)
    }

    /// Forget a request that never became a flow (a CREATE portus did not get).
    pub fn drop_request(&self, key: FlowKey, gen: u64) {
        let mut t = self.lock();
        if t.requests.get(&key).is_some_and(|(g, _)| *g == gen) {
            t.requests.remove(&key);
        }
    }

    /// Live records, then the closed ones kept, sorted by socket id (stable).
    pub fn records(&self) -> Vec<FlowRecord> {
        let t = self.lock();
        let mut live: Vec<(FlowKey, FlowRecord)> =
            t.live.iter().map(|(k, (_, r))| (*k, r.clone())).collect();
        live.sort_by_key(|(k, _)| *k);
        let mut v: Vec<FlowRecord> = t.closed.iter().cloned().collect();
        v.extend(live.into_iter().map(|(_, r)| r));
        v.sort_by_key(|r| r.sid);
        v
    }

    /// Live flows per algorithm.
    pub fn live_by_alg(&self) -> BTreeMap<&'static str, usize> {
        let t = self.lock();
        let mut m = BTreeMap::new();
        for (_, r) in t.live.values() {
            *m.entry(r.alg).or_insert(0) += 1;
        }
        m
    }

    /// Records of the live flows only, by (datapath, socket id).
    pub fn live_records(&self) -> Vec<(FlowKey, FlowRecord)> {
        let t = self.lock();
        let mut v: Vec<(FlowKey, FlowRecord)> =
            t.live.iter().map(|(k, (_, r))| (*k, r.clone())).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    /// At most `limit` live records from the `skip`-th on (in key order), and how many
    /// there are: a bounded copy whatever the table holds.
    pub fn live_records_page(
        &self,
        skip: usize,
        limit: usize,
    ) -> (Vec<(FlowKey, FlowRecord)>, usize) {
        let t = self.lock();
        let mut keys: Vec<FlowKey> = t.live.keys().copied().collect();
        keys.sort();
        let total = keys.len();
        let page = keys
            .iter()
            .skip(skip)
            .take(limit)
            .filter_map(|k| t.live.get(k).map(|(_, r)| (*k, r.clone())))
            .collect();
        (page, total)
    }

    pub fn sizes(&self) -> TableSizes {
        let t = self.lock();
        TableSizes {
            live: t.live.len(),
            closed: t.closed.len(),
            requests: t.requests.len(),
        }
    }
}

fn push_closed(ring: &mut VecDeque<FlowRecord>, r: FlowRecord) {
    if ring.len() >= CLOSED_KEPT {
        ring.pop_front();
    }
    ring.push_back(r);
}
