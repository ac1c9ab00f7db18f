//! Measurement: the per-interval time series, the bottleneck's in-network statistics
//! (`NetStatsPublisher`), and the results of a run.

use std::sync::Arc;

use ccp_algs::netstats::{NetStats, NetStatsCell};

use crate::link::LinkCounters;
use crate::results::{FlowResult, Histogram, SimResults, TimePoint};
use crate::scenario::NetStatsSpec;

use super::events::{push_ev, Ev};
use super::flow::Phase;
use super::world::{IpcHolder, World};

/// Samples the bottleneck switch every period (the Owl paper §IV-A eq. 4–5, over one switch and
/// one link) and publishes the result.
pub(super) struct NetStatsPublisher {
    pub(super) spec: NetStatsSpec,
    pub(super) cell: Arc<NetStatsCell>,
    pub(super) period_ns: u64,
    pub(super) seq: u64,
    pub(super) last_ns: u64,
    pub(super) last: LinkCounters,
}

impl<H: IpcHolder> World<H> {
    pub(super) fn sample(&mut self) {
        let t = self.now as f64 / 1e9;
        let dt = self.series_ns as f64 / 1e9;
        for f in &mut self.flows {
            if f.phase != Phase::Active {
                continue;
            }
            self.series.push(TimePoint {
                t,
                flow: f.id,
                throughput_mbps: f.iv_bytes as f64 * 8.0 / dt / 1e6,
                rtt_ms: if f.iv_rtt_n > 0 {
                    f.iv_rtt_sum_us as f64 / f.iv_rtt_n as f64 / 1e3
                } else {
                    f64::NAN
                },
                cwnd_bytes: u64::from(f.send_window()),
                rate_mbps: f64::from(f.rate) * 8.0 / 1e6,
                queue_delay_ms: if f.iv_qd_n > 0 {
                    f.iv_qd_sum_ns as f64 / f.iv_qd_n as f64 / 1e6
                } else {
                    f64::NAN
                },
                delivered_bytes: f.iv_bytes,
            });
            f.iv_bytes = 0;
            f.iv_rtt_sum_us = 0;
            f.iv_rtt_n = 0;
            f.iv_qd_sum_ns = 0;
            f.iv_qd_n = 0;
        }
        let next = self.now + self.series_ns;
        if next <= self.end_ns {
            push_ev(&mut self.heap, &mut self.seq, next, Ev::Sample);
        }
    }

    /// The bottleneck's PNC and PNA over the period that ends now, published for every flow.
    pub(super) fn publish_netstats(&mut self) {
        let now = self.now;
        let Some(p) = self.netstats.as_mut() else {
            return;
        };
        let c = self.link.counters(now);
        let p_in = c.arrived - p.last.arrived;
        let p_out = c.departed - p.last.departed;
        let out_bytes = (c.departed_bytes - p.last.departed_bytes) as f64;
        let cap = self.link.capacity_bytes(p.last_ns, now);
        let pna = if cap > 0.0 {
            (cap - out_bytes) / cap
        } else {
            0.0
        };
        p.seq += 1;
        match NetStats::new(
            p_in.abs_diff(p_out) as f64,
            pna,
            p.spec.known_share,
            p.seq,
            0,
        ) {
            Ok(s) => p.cell.publish(s),
            Err(e) => tracing::warn!(error = %e, "bottleneck statistics not published"),
        }
        p.last = c;
        p.last_ns = now;
        let next = now + p.period_ns;
        if next <= self.end_ns {
            push_ev(&mut self.heap, &mut self.seq, next, Ev::NetStats);
        }
    }

    pub(super) fn results(self, wall_s: f64) -> SimResults {
        let ms = |v: Option<u64>| v.map_or(f64::NAN, |us| us as f64 / 1e3);
        let mut flows = Vec::with_capacity(self.flows.len());
        for (f, spec) in self.flows.iter().zip(&self.sc.flows) {
            // a flow that never started (cannot happen for valid scenarios) has no interval
            let (a, b) = (f.start_ns, f.stop_ns.max(f.start_ns));
            let secs = (b - a) as f64 / 1e9;
            let cap = self.link.capacity_bytes(a, b);
            let dropped = f.drops_buffer + f.drops_random;
            flows.push(FlowResult {
                id: f.id,
                sid: u32::from(f.sid),
                alg: spec.alg.clone(),
                alg_label: spec
                    .alg
                    .clone()
                    .unwrap_or_else(|| self.opts.default_alg.clone()),
                w: spec.w.map(|w| w.as_array()),
                rtt_base_ms: spec.rtt_ms,
                start_s: a as f64 / 1e9,
                stop_s: b as f64 / 1e9,
                throughput_mbps: if secs > 0.0 {
                    f.delivered_bytes as f64 * 8.0 / secs / 1e6
                } else {
                    0.0
                },
                utilization: if cap > 0.0 {
                    f.delivered_bytes as f64 / cap
                } else {
                    0.0
                },
                rtt_p50_ms: ms(f.rtt_hist.quantile(0.5)),
                rtt_p95_ms: ms(f.rtt_hist.quantile(0.95)),
                rtt_mean_ms: f.rtt_hist.mean().map_or(f64::NAN, |us| us / 1e3),
                queue_delay_p50_ms: ms(f.qdelay_hist.quantile(0.5)),
                queue_delay_p95_ms: ms(f.qdelay_hist.quantile(0.95)),
                queue_delay_mean_ms: f.qdelay_hist.mean().map_or(f64::NAN, |us| us / 1e3),
                one_way_delay_p95_ms: ms(f.qdelay_hist.quantile(0.95)) + spec.rtt_ms / 2.0,
                loss_rate: if f.sent > 0 {
                    dropped as f64 / f.sent as f64
                } else {
                    0.0
                },
                packets_sent: f.sent,
                retransmits: f.retransmits,
                timeouts: f.timeouts,
                drops_buffer: f.drops_buffer,
                drops_random: f.drops_random,
                declared_lost: f.declared_lost,
                delivered_bytes: f.delivered_bytes,
                reports: f.reports,
                invoke_errors: f.invoke_errors,
                receiver_limited: f
                    .rx
                    .as_ref()
                    .map(|_| f.rx_limited as f64 / f.rx_acks.max(1) as f64),
            });
        }
        // capacity while at least one flow was active: union of the active intervals
        let mut iv: Vec<(u64, u64)> = self
            .flows
            .iter()
            .map(|f| (f.start_ns, f.stop_ns.max(f.start_ns)))
            .collect();
        iv.sort_unstable();
        let mut cap = 0.0;
        let mut cur: Option<(u64, u64)> = None;
        for (a, b) in iv {
            cur = match cur {
                Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
                Some((ca, cb)) => {
                    cap += self.link.capacity_bytes(ca, cb);
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        if let Some((ca, cb)) = cur {
            cap += self.link.capacity_bytes(ca, cb);
        }
        let delivered: u64 = self.flows.iter().map(|f| f.delivered_bytes).sum();
        let mut qdelay_all = Histogram::default();
        for f in &self.flows {
            qdelay_all.merge(&f.qdelay_hist);
        }
        let overlap_a = self.flows.iter().map(|f| f.start_ns).max().unwrap_or(0);
        let overlap_b = self.flows.iter().map(|f| f.stop_ns).min().unwrap_or(0);
        let mut r = SimResults {
            duration_s: self.sc.duration_s,
            seed: self.sc.seed,
            buffer_pkts: self.buffer_pkts,
            flows,
            utilization: if cap > 0.0 {
                delivered as f64 / cap
            } else {
                0.0
            },
            jain: None,
            jain_window_s: None,
            queue_delay_p95_ms: ms(qdelay_all.quantile(0.95)),
            sim_packets: self.sim_packets,
            wall_s,
            packets_per_wall_s: if wall_s > 0.0 {
                self.sim_packets as f64 / wall_s
            } else {
                0.0
            },
            reports: self.reports,
            creates: self.creates,
            messages_to_agent: self.to_agent,
            messages_from_agent: self.from_agent,
            rejected_messages: self.rejected,
            unknown_sid_messages: self.unknown_sid,
            libccp_log_lines: self.dp.log_lines(),
            agent_wait_s: self.agent_wait.as_secs_f64(),
            series: self.series,
            series_interval_s: self.series_ns as f64 / 1e9,
        };
        if overlap_b > overlap_a {
            let (t0, t1) = (overlap_a as f64 / 1e9, overlap_b as f64 / 1e9);
            r.jain_window_s = Some((t0, t1));
            r.jain = r.jain_window(t0, t1);
        }
        r
    }
}
