//! What a run measured: per-flow and aggregate figures, message counters and a per-flow time
//! series.

use std::io::Write as _;
use std::path::Path;

use serde::Serialize;

/// A log-linear histogram of non-negative integers (HDR-style): values below 1024 are exact,
/// larger ones fall in buckets 1/512 wide relative to their magnitude (≤ 0.2 % error).
/// Memory is fixed (~170 KiB) however many values are recorded.
#[derive(Debug, Clone, Default)]
pub(crate) struct Histogram {
    counts: Vec<u64>,
    total: u64,
    /// Exact sum of the recorded values (for the mean).
    sum: u128,
}

const SUB: u64 = 512;
const EXACT: u64 = 2 * SUB;

impl Histogram {
    fn index(v: u64) -> usize {
        if v < EXACT {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as u64 - 9; // v >> e in [512, 1024)
        let m = v >> e;
        (EXACT + (e - 1) * SUB + (m - SUB)) as usize
    }

    fn value(i: usize) -> u64 {
        let i = i as u64;
        if i < EXACT {
            return i;
        }
        let e = (i - EXACT) / SUB + 1;
        let m = (i - EXACT) % SUB + SUB;
        // middle of the bucket
        (m << e) + (1 << (e - 1))
    }

    pub fn record(&mut self, v: u64) {
        let i = Self::index(v);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        self.total += 1;
        self.sum += u128::from(v);
    }

    /// The exact mean of the recorded values, `None` when empty.
    pub fn mean(&self) -> Option<f64> {
        (self.total > 0).then(|| self.sum as f64 / self.total as f64)
    }

    pub fn merge(&mut self, other: &Histogram) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.sum += other.sum;
    }

    /// The `q`-quantile (0..=1), `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Self::value(i));
            }
        }
        None
    }
}

/// `a == b`, with NaN equal to NaN ("no sample" in both): results of two identical runs
/// compare equal.
fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// One row of the per-flow time series (every `SimOptions::series_interval`). Equality
/// treats NaN ("no sample in the interval") as equal to NaN.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TimePoint {
    /// End of the interval (s of simulated time).
    pub t: f64,
    pub flow: usize,
    /// Payload delivered in the interval (Mbit/s).
    pub throughput_mbps: f64,
    /// Mean RTT sample in the interval (ms); NaN when there was none.
    pub rtt_ms: f64,
    /// Congestion window enforced at the end of the interval (bytes).
    pub cwnd_bytes: u64,
    /// Pacing rate at the end of the interval (Mbit/s); 0 = unpaced.
    pub rate_mbps: f64,
    /// Mean queueing delay of the flow's packets delivered in the interval (ms); NaN if none.
    pub queue_delay_ms: f64,
    /// Payload bytes delivered in the interval.
    pub delivered_bytes: u64,
}

impl PartialEq for TimePoint {
    fn eq(&self, o: &Self) -> bool {
        same(self.t, o.t)
            && self.flow == o.flow
            && same(self.throughput_mbps, o.throughput_mbps)
            && same(self.rtt_ms, o.rtt_ms)
            && self.cwnd_bytes == o.cwnd_bytes
            && same(self.rate_mbps, o.rate_mbps)
            && same(self.queue_delay_ms, o.queue_delay_ms)
            && self.delivered_bytes == o.delivered_bytes
    }
}

/// Per-flow results. Percentiles are NaN when there was no sample (JSON: null); equality
/// treats NaN as equal to NaN.
#[derive(Debug, Clone, Serialize)]
pub struct FlowResult {
    pub id: usize,
    /// libccp's socket id for the flow (the agent's records are keyed by it); 0 if the flow
    /// never started.
    pub sid: u32,
    /// The algorithm the scenario requested, `None` for the agent's default.
    pub alg: Option<String>,
    /// `alg`, or the default's name from `SimOptions::default_alg`.
    pub alg_label: String,
    pub w: Option<[f64; 3]>,
    pub rtt_base_ms: f64,
    pub start_s: f64,
    pub stop_s: f64,
    /// Delivered payload over the flow's active time (Mbit/s).
    pub throughput_mbps: f64,
    /// Flow throughput / mean link capacity over the flow's active time.
    pub utilization: f64,
    pub rtt_p50_ms: f64,
    pub rtt_p95_ms: f64,
    /// Mean RTT sample (ms).
    pub rtt_mean_ms: f64,
    /// Median bottleneck sojourn time of the flow's delivered packets (ms).
    pub queue_delay_p50_ms: f64,
    /// 95th percentile of the bottleneck sojourn time of the flow's delivered packets (ms).
    pub queue_delay_p95_ms: f64,
    /// Mean bottleneck sojourn time of the flow's delivered packets (ms).
    pub queue_delay_mean_ms: f64,
    /// 95th percentile one-way delay of the flow's delivered packets (ms): bottleneck
    /// sojourn plus half the base RTT (the forward propagation delay).
    pub one_way_delay_p95_ms: f64,
    /// Packets the network dropped (buffer or random loss) / packets sent.
    pub loss_rate: f64,
    pub packets_sent: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    /// Packets dropped by the drop-tail buffer.
    pub drops_buffer: u64,
    /// Packets dropped by random loss.
    pub drops_random: u64,
    /// Packets the sender declared lost (3 later packets delivered, or an RTO).
    pub declared_lost: u64,
    pub delivered_bytes: u64,
    /// Reports (MEASURE) this flow's datapath program sent.
    pub reports: u64,
    /// `ccp_invoke` calls that returned an error (e.g. a fold program dividing by zero).
    pub invoke_errors: u64,
    /// With a law at the receiver (`receiver = "nuwa"`): the share of the flow's ACKs whose
    /// advertised window was at or below the sender's congestion window (the receiver's
    /// window was the send window); `None` without one.
    pub receiver_limited: Option<f64>,
}

impl PartialEq for FlowResult {
    fn eq(&self, o: &Self) -> bool {
        self.id == o.id
            && self.alg == o.alg
            && self.alg_label == o.alg_label
            && self.w == o.w
            && same(self.rtt_base_ms, o.rtt_base_ms)
            && same(self.start_s, o.start_s)
            && same(self.stop_s, o.stop_s)
            && same(self.throughput_mbps, o.throughput_mbps)
            && same(self.utilization, o.utilization)
            && same(self.rtt_p50_ms, o.rtt_p50_ms)
            && same(self.rtt_p95_ms, o.rtt_p95_ms)
            && same(self.rtt_mean_ms, o.rtt_mean_ms)
            && same(self.queue_delay_p50_ms, o.queue_delay_p50_ms)
            && same(self.queue_delay_p95_ms, o.queue_delay_p95_ms)
            && same(self.queue_delay_mean_ms, o.queue_delay_mean_ms)
            && same(self.one_way_delay_p95_ms, o.one_way_delay_p95_ms)
            && same(self.loss_rate, o.loss_rate)
            && self.packets_sent == o.packets_sent
            && self.retransmits == o.retransmits
            && self.timeouts == o.timeouts
            && self.drops_buffer == o.drops_buffer
            && self.drops_random == o.drops_random
            && self.declared_lost == o.declared_lost
            && self.delivered_bytes == o.delivered_bytes
            && self.reports == o.reports
            && self.invoke_errors == o.invoke_errors
            && match (self.receiver_limited, o.receiver_limited) {
                (Some(a), Some(b)) => same(a, b),
                (a, b) => a == b,
            }
    }
}

/// Results of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimResults {
    pub duration_s: f64,
    pub seed: u64,
    pub buffer_pkts: u64,
    pub flows: Vec<FlowResult>,
    /// Delivered bytes / link capacity while at least one flow was active.
    pub utilization: f64,
    /// Jain's index of per-flow throughput over the interval where all flows overlapped
    /// (`None` if they never all overlapped, or for a single flow's empty window).
    pub jain: Option<f64>,
    /// The interval `jain` covers (s).
    pub jain_window_s: Option<(f64, f64)>,
    /// 95th percentile bottleneck sojourn time over all delivered packets (ms).
    pub queue_delay_p95_ms: f64,
    /// Packets transmitted by all senders (first transmissions and retransmissions).
    pub sim_packets: u64,
    pub wall_s: f64,
    pub packets_per_wall_s: f64,
    /// Wall-clock time spent waiting for the agent's answers (part of `wall_s`).
    pub agent_wait_s: f64,
    /// MEASURE messages sent (reports; closes not counted).
    pub reports: u64,
    pub creates: u64,
    /// Messages sent to the agent (CREATEs, reports, closes, READYs), one datagram each.
    pub messages_to_agent: u64,
    pub messages_from_agent: u64,
    /// Agent messages refused by validation or by libccp.
    pub rejected_messages: u64,
    /// Of those, refused by libccp for an unknown socket id.
    pub unknown_sid_messages: u64,
    /// Lines libccp logged (warnings, errors).
    pub libccp_log_lines: u64,
    /// Per-flow time series (not in the JSON; see [`SimResults::write_csv`]).
    #[serde(skip)]
    pub series: Vec<TimePoint>,
    #[serde(skip)]
    pub series_interval_s: f64,
}

impl SimResults {
    /// Equal in everything the simulation determines: all but the wall-clock figures.
    pub fn same_outcome(&self, o: &SimResults) -> bool {
        self.duration_s == o.duration_s
            && self.seed == o.seed
            && self.buffer_pkts == o.buffer_pkts
            && self.flows == o.flows
            && same(self.utilization, o.utilization)
            && self.jain.map(f64::to_bits) == o.jain.map(f64::to_bits)
            && self.jain_window_s == o.jain_window_s
            && same(self.queue_delay_p95_ms, o.queue_delay_p95_ms)
            && self.sim_packets == o.sim_packets
            && self.reports == o.reports
            && self.creates == o.creates
            && self.messages_to_agent == o.messages_to_agent
            && self.messages_from_agent == o.messages_from_agent
            && self.rejected_messages == o.rejected_messages
            && self.unknown_sid_messages == o.unknown_sid_messages
            && self.libccp_log_lines == o.libccp_log_lines
            && self.series == o.series
    }

    /// Write the time series as CSV.
    pub fn write_csv(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let f = std::fs::File::create(path)?;
        let mut w = std::io::BufWriter::new(f);
        writeln!(
            w,
            "t_s,flow,throughput_mbps,rtt_ms,cwnd_bytes,rate_mbps,queue_delay_ms"
        )?;
        let num = |x: f64| {
            if x.is_finite() {
                format!("{x:.4}")
            } else {
                String::new()
            }
        };
        for p in &self.series {
            writeln!(
                w,
                "{:.3},{},{},{},{},{},{}",
                p.t,
                p.flow,
                num(p.throughput_mbps),
                num(p.rtt_ms),
                p.cwnd_bytes,
                num(p.rate_mbps),
                num(p.queue_delay_ms)
            )?;
        }
        w.flush()
    }

    /// Throughput (Mbit/s) of each flow active throughout `[t0, t1]` (s), from the time
    /// series (so at its resolution), as `(flow id, Mbit/s)`.
    pub fn throughput_window(&self, t0: f64, t1: f64) -> Vec<(usize, f64)> {
        let dt = self.series_interval_s;
        let eps = 1e-9;
        let mut out = Vec::new();
        for f in &self.flows {
            if f.start_s > t0 + eps || f.stop_s < t1 - eps {
                continue;
            }
            let bytes: u64 = self
                .series
                .iter()
                .filter(|p| p.flow == f.id && p.t - dt >= t0 - eps && p.t <= t1 + eps)
                .map(|p| p.delivered_bytes)
                .sum();
            out.push((f.id, bytes as f64 * 8.0 / 1e6 / (t1 - t0)));
        }
        out
    }

    /// Jain's fairness index over `[t0, t1]` (s) of the flows active throughout it;
    /// `None` if no flow was, or the window is empty.
    pub fn jain_window(&self, t0: f64, t1: f64) -> Option<f64> {
        if t1 <= t0 {
            return None;
        }
        let x: Vec<f64> = self
            .throughput_window(t0, t1)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        jain(&x)
    }
}

/// Jain's fairness index `(Σx)² / (n·Σx²)`; 1 when all are equal. `None` for no values;
/// 1 when every value is 0.
pub fn jain(x: &[f64]) -> Option<f64> {
    if x.is_empty() {
        return None;
    }
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    if s2 == 0.0 {
        return Some(1.0);
    }
    Some(s * s / (x.len() as f64 * s2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_close() {
        let mut h = Histogram::default();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        let p50 = h.quantile(0.5).unwrap() as f64;
        let p95 = h.quantile(0.95).unwrap() as f64;
        assert!((p50 / 50_000.0 - 1.0).abs() < 0.003, "{p50}");
        assert!((p95 / 95_000.0 - 1.0).abs() < 0.003, "{p95}");
        assert_eq!(h.quantile(0.0), Some(1));
        let mut small = Histogram::default();
        small.record(7);
        assert_eq!(small.quantile(0.95), Some(7));
        assert!(Histogram::default().quantile(0.5).is_none());
        assert!((h.mean().unwrap() - 50_000.5).abs() < 1e-9);
        assert_eq!(Histogram::default().mean(), None);
        for v in [1023u64, 1024, 1025, 40_000_000, u32::MAX as u64] {
            let i = Histogram::index(v);
            let back = Histogram::value(i) as f64;
            assert!((back / v as f64 - 1.0).abs() < 0.002, "{v} -> {back}");
        }
    }

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        assert!((jain(&[1.0, 0.0]).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(jain(&[]), None);
    }
}
