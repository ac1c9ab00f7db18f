//! The agent's counters in Prometheus's text exposition format (version 0.0.4), for
//! `--metrics ADDR` and `ctl stats`.
//!
//! What is counted where: decisions and their latency by each flow's driver
//! ([`DecisionStats`], atomics: a decision adds two clock reads and four relaxed atomic
//! adds); IPC drops by the guard ([`GuardStats`]); preferences by the [`PrefStore`]; live
//! flows per algorithm from the flow tables; model versions from the model store; and the
//! kernel datapath's own counters (fallbacks, re-attaches, ...) from `/proc/net/ccp`, read at
//! each scrape when present. Rendering happens on the control plane's thread and takes the
//! flow tables' lock once, briefly.
//!
//! The format is written here (a few dozen lines) rather than with a metrics crate: the
//! agent exports a fixed set of counters that already live in its own atomics.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(doc)]
use crate::flows::decisions::DecisionStats;
use crate::flows::decisions::DECISION_BUCKETS;
#[cfg(doc)]
use crate::flows::prefs::PrefStore;
use crate::flows::FlowTables;
use crate::ipc::guard::GuardStats;
use crate::policy::ModelStore;

/// Where the kernel datapath publishes its counters.
pub const PROC_CCP: &str = "/proc/net/ccp";

/// Read `/proc/net/ccp`-style `name value` lines (at most 64 KiB, at most 256 lines); `None`
/// if the file is absent or unreadable.
pub fn read_proc_counters(path: &Path) -> Option<Vec<(String, u64)>> {
    let text = crate::sources::files::read_regular_to_string(path, 64 * 1024).ok()?;
    Some(
        text.lines()
            .take(256)
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let (k, v) = (it.next()?, it.next()?);
                let ok = !k.is_empty()
                    && k.len() <= 64
                    && k.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
                ok.then(|| v.parse::<u64>().ok().map(|v| (k.to_string(), v)))
                    .flatten()
            })
            .collect(),
    )
}

/// What a scrape reads.
pub struct Sources<'a> {
    pub tables: &'a FlowTables,
    pub guard: &'a GuardStats,
    pub models: Option<&'a ModelStore>,
    /// `/proc/net/ccp`, or another file in tests; `None`: not read.
    pub proc_ccp: Option<&'a Path>,
    /// The in-network statistics poller, when one runs.
    pub netstats: Option<&'a crate::sources::netstats::PolledStats>,
}

fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

struct Out(String);

impl Out {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }
    fn one(&mut self, name: &str, kind: &str, help: &str, v: u64) {
        self.head(name, kind, help);
        let _ = writeln!(self.0, "{name} {v}");
    }
    fn labelled(&mut self, name: &str, labels: &str, v: impl std::fmt::Display) {
        let _ = writeln!(self.0, "{name}{{{labels}}} {v}");
    }
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Every metric, as Prometheus text.
pub fn render(src: &Sources<'_>) -> String {
    let mut o = Out(String::with_capacity(8192));
    let t = src.tables;
    let d = &t.decisions;

    o.head("ccp_flows", "gauge", "Live flows per algorithm.");
    for (alg, n) in t.live_by_alg() {
        o.labelled("ccp_flows", &format!("alg=\"{}\"", escape(alg)), n);
    }
    o.one(
        "ccp_flows_started_total",
        "counter",
        "Flows started.",
        load(&d.flows_started),
    );
    o.one(
        "ccp_flows_closed_total",
        "counter",
        "Flows closed.",
        load(&d.flows_closed),
    );
    o.one(
        "ccp_decisions_total",
        "counter",
        "Reports decided on.",
        load(&d.decisions),
    );
    o.one(
        "ccp_reports_unreadable_total",
        "counter",
        "Reports that could not be read (answered with what is in force).",
        load(&d.unreadable),
    );
    o.head(
        "ccp_decision_seconds",
        "histogram",
        "Time from a report's values to its answer (controller and policy).",
    );
    let cum = d.cumulative();
    for (b, n) in DECISION_BUCKETS.iter().zip(&cum) {
        o.labelled("ccp_decision_seconds_bucket", &format!("le=\"{b}\""), n);
    }
    let total = cum.last().copied().unwrap_or(0);
    o.labelled("ccp_decision_seconds_bucket", "le=\"+Inf\"", total);
    let _ = writeln!(o.0, "ccp_decision_seconds_sum {}", d.sum_seconds());
    let _ = writeln!(o.0, "ccp_decision_seconds_count {total}");
    o.one(
        "ccp_policy_clamped_outputs_total",
        "counter",
        "Policy outputs that were NaN/inf or out of range and were clamped.",
        load(&d.clamped_outputs),
    );
    o.one(
        "ccp_policy_errors_total",
        "counter",
        "Policy invocations that failed (the flow kept its last action).",
        load(&d.policy_errors),
    );

    let g = src.guard;
    o.head(
        "ccp_ipc_dropped_total",
        "counter",
        "Datapath messages dropped or refused by the IPC guard, by reason.",
    );
    for (reason, c) in [
        ("truncated", &g.truncated),
        ("oversized", &g.oversized),
        ("bad_length", &g.bad_length),
        ("bad_type", &g.bad_type),
        ("bad_name", &g.bad_name),
        ("bad_fields", &g.bad_fields),
        ("bad_create", &g.bad_create),
        ("too_many_flows", &g.too_many_flows),
        ("too_many_datapaths", &g.too_many_datapaths),
        ("unknown_flow", &g.unknown_flow),
        ("from_dead_peer", &g.from_dead_peer),
        ("not_from_kernel", &g.not_from_kernel),
        ("bad_netlink", &g.bad_netlink),
    ] {
        o.labelled(
            "ccp_ipc_dropped_total",
            &format!("reason=\"{reason}\""),
            load(c),
        );
    }
    o.one(
        "ccp_ipc_messages_total",
        "counter",
        "Datapath messages accepted.",
        load(&g.accepted),
    );
    o.one(
        "ccp_ipc_send_failed_total",
        "counter",
        "Sends to a datapath that failed.",
        load(&g.send_failed),
    );
    o.one(
        "ccp_ipc_datapaths_vanished_total",
        "counter",
        "Datapaths forgotten because their socket was gone (found without sending to them).",
        load(&g.vanished_datapaths),
    );
    o.one(
        "ccp_ipc_create_clamped_total",
        "counter",
        "CREATEs whose initial window was clamped.",
        load(&g.clamped_create),
    );
    o.one(
        "ccp_ipc_bad_preference_total",
        "counter",
        "CREATEs whose ;w= suffix was not a valid preference.",
        load(&g.bad_preference),
    );
    o.one(
        "ccp_datapaths",
        "gauge",
        "Datapaths the agent tracks.",
        load(&g.datapaths),
    );

    let p = &t.prefs.stats;
    o.head(
        "ccp_pref_flows_total",
        "counter",
        "New flows by where their preference came from.",
    );
    for (src_name, c) in [
        ("socket", &p.from_socket),
        ("rule", &p.from_rule),
        ("request", &p.from_request),
        ("default", &p.from_default),
    ] {
        o.labelled(
            "ccp_pref_flows_total",
            &format!("source=\"{src_name}\""),
            load(c),
        );
    }
    o.head(
        "ccp_pref_requests_total",
        "counter",
        "Per-socket preference requests on the control socket, by outcome.",
    );
    for (outcome, c) in [
        ("set", &p.set),
        ("refused", &p.refused),
        ("cleared", &p.cleared),
    ] {
        o.labelled(
            "ccp_pref_requests_total",
            &format!("outcome=\"{outcome}\""),
            load(c),
        );
    }
    o.one(
        "ccp_pref_expired_total",
        "counter",
        "Per-socket preferences that expired without a flow.",
        load(&p.expired),
    );
    o.one(
        "ccp_pref_changed_mid_flow_total",
        "counter",
        "Live flows whose preference changed.",
        load(&p.changed_mid_flow),
    );
    o.one(
        "ccp_pref_entries",
        "gauge",
        "Per-socket preferences stored (pending or bound).",
        load(&p.entries),
    );
    o.one(
        "ccp_pref_rules",
        "gauge",
        "[[preference]] rules in force.",
        t.prefs.rules().len() as u64,
    );

    if let Some(m) = src.models {
        o.head(
            "ccp_model_info",
            "gauge",
            "Learned models in service (1 per algorithm), with their versions.",
        );
        for alg in m.available() {
            if let Some(model) = m.model(alg) {
                let c = model.card();
                o.labelled(
                    "ccp_model_info",
                    &format!(
                        "alg=\"{}\",sha256=\"{}\",created=\"{}\",feature_version=\"{}\"",
                        escape(alg),
                        escape(model.sha256()),
                        escape(&c.created),
                        c.feature_version
                    ),
                    1,
                );
            }
        }
    }

    if let Some(n) = src.netstats {
        let c = &n.counters;
        o.one(
            "ccp_netstats_polls_ok_total",
            "counter",
            "Polls of the in-network statistics endpoint that returned a good reply.",
            load(&c.ok),
        );
        o.head(
            "ccp_netstats_polls_failed_total",
            "counter",
            "Polls of the in-network statistics endpoint that failed, by reason.",
        );
        for (reason, v) in crate::sources::netstats::REASONS.iter().zip(&c.failed) {
            o.labelled(
                "ccp_netstats_polls_failed_total",
                &format!("reason=\"{reason}\""),
                load(v),
            );
        }
        o.one(
            "ccp_netstats_withdrawn_total",
            "counter",
            "Times every in-network sample was withdrawn after a bad reply.",
            load(&c.withdrawn),
        );
        o.one(
            "ccp_netstats_fresh_paths",
            "gauge",
            "Paths with an in-network sample younger than stale_after_ms.",
            n.fresh_paths() as u64,
        );
    }

    if let Some(path) = src.proc_ccp {
        match read_proc_counters(path) {
            Some(kv) => {
                o.one(
                    "ccp_kernel_present",
                    "gauge",
                    "Whether /proc/net/ccp was read.",
                    1,
                );
                for (k, v) in kv {
                    let name = format!("ccp_kernel_{k}");
                    o.head(&name, "untyped", &format!("/proc/net/ccp {k}."));
                    let _ = writeln!(o.0, "{name} {v}");
                }
            }
            None => o.one(
                "ccp_kernel_present",
                "gauge",
                "Whether /proc/net/ccp was read.",
                0,
            ),
        }
    }
    o.0
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::flows::decisions::DecisionStats;

    #[test]
    fn histogram_buckets_are_cumulative_and_count_everything() {
        let d = DecisionStats::default();
        d.observe(Duration::from_nanos(500)); // <= 1 µs
        d.observe(Duration::from_micros(30)); // <= 50 µs
        d.observe(Duration::from_secs(1)); // +Inf
        let c = d.cumulative();
        assert_eq!(c[0], 1);
        assert_eq!(c[5], 2);
        assert_eq!(c[DECISION_BUCKETS.len() - 1], 2);
        assert_eq!(*c.last().unwrap(), 3);
        assert!((d.sum_seconds() - 1.0000305).abs() < 1e-9);
    }

    #[test]
    fn proc_counters_are_parsed_and_bounded() {
        let p = std::env::temp_dir().join(format!("ccp-proc-{}", std::process::id()));
        std::fs::write(
            &p,
            "agent_up 1\nfallbacks 7\nbad line\nx{y} 3\nreattaches 2\n",
        )
        .unwrap();
        let kv = read_proc_counters(&p).unwrap();
        assert_eq!(
            kv,
            [
                ("agent_up".to_string(), 1),
                ("fallbacks".to_string(), 7),
                ("reattaches".to_string(), 2)
            ]
        );
        let tables = FlowTables::default();
        tables.decisions.observe(Duration::from_micros(3));
        let guard = GuardStats::default();
        guard.count(crate::ipc::guard::Reject::BadName);
        let text = render(&Sources {
            tables: &tables,
            guard: &guard,
            models: None,
            proc_ccp: Some(&p),
            netstats: None,
        });
        let _ = std::fs::remove_file(&p);
        for line in [
            "ccp_decisions_total 1",
            "ccp_decision_seconds_bucket{le=\"0.000005\"} 1",
            "ccp_decision_seconds_count 1",
            "ccp_ipc_dropped_total{reason=\"bad_name\"} 1",
            "ccp_kernel_fallbacks 7",
            "ccp_kernel_reattaches 2",
            "ccp_kernel_present 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        // every sample line is `name{labels} value` with a number
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let v = l.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
        }
        assert!(read_proc_counters(Path::new("/nonexistent/ccp")).is_none());
    }
}
