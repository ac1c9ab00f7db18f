//! The bottleneck: a FIFO drop-tail queue in front of a link whose capacity is a constant
//! rate, a rate schedule, a mahimahi trace, or a throughput log.
//!
//! FIFO service makes every departure time computable when a packet is enqueued:
//!
//! - rate link: `departure = max(now, link_free) + 8·bytes / rate(start of service)`;
//! - trace link: the first unused delivery opportunity at or after `now` (opportunities that
//!   pass while the queue is empty are wasted, as in mahimahi's `mm-link`);
//! - log link: `departure = B⁻¹(B(max(now, link_free)) + 8·bytes)`, `B(t)` the bits the log's
//!   piecewise-constant rate delivers by `t` (`crate::trace`): capacity that passes while the
//!   queue is empty is wasted too, and an outage (rate 0) holds the packet.
//!
//! So the queue is just the list of scheduled departure times: a packet is in the queue (or
//! being transmitted) while its departure time lies in the future, and the drop-tail check
//! counts those. No per-packet link event is needed.
//!
//! Trace timeline: opportunity `g = c·n + i` (cycle `c`, line `i` of `n`) happens at
//! `c·P + T[i]` ms, `P` = last timestamp (mahimahi's repeat). With `trace_scale = s`,
//! opportunity `g` carries `⌊(g+1)·s⌋ − ⌊g·s⌋` packets: the capacity scales by `s` and the
//! trace keeps its time structure.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::scenario::{Capacity, PACKET_BYTES};
use crate::trace::RateLog;

const NS_PER_MS: u64 = 1_000_000;

#[derive(Debug)]
enum Model {
    Rate {
        /// (start ns, bits per ns)
        steps: Vec<(u64, f64)>,
        /// when the transmitter is next free (ns, fractional)
        free_at: f64,
    },
    Trace {
        times_ms: Arc<[u64]>,
        period_ms: u64,
        scale: f64,
        /// next unused opportunity and how many of its packets are used
        g: u64,
        used: u64,
    },
    Log {
        log: Arc<RateLog>,
        scale: f64,
        /// when the transmitter is next free (ns, fractional)
        free_at: f64,
    },
}

/// The bottleneck queue and link.
#[derive(Debug)]
pub(crate) struct Link {
    model: Model,
    /// (departure ns, bytes) of every packet queued or in transmission.
    departures: VecDeque<(u64, u32)>,
    buffer_pkts: usize,
    counters: LinkCounters,
}

/// What the bottleneck switch counted since the run began: packets offered to it (dropped
/// ones included) and packets (bytes) that left it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LinkCounters {
    pub arrived: u64,
    pub departed: u64,
    pub departed_bytes: u64,
}

impl Link {
    pub fn new(cap: &Capacity, buffer_pkts: u64) -> Self {
        let model = match cap {
            Capacity::Rate { steps } => Model::Rate {
                steps: steps
                    .iter()
                    .map(|&(at_s, mbps)| ((at_s * 1e9).round() as u64, mbps * 1e6 / 1e9))
                    .collect(),
                free_at: 0.0,
            },
            Capacity::Trace {
                opportunities_ms,
                scale,
                ..
            } => Model::Trace {
                period_ms: *opportunities_ms.last().unwrap_or(&1),
                times_ms: opportunities_ms.clone(),
                scale: *scale,
                g: 0,
                used: 0,
            },
            Capacity::Log { log, scale, .. } => Model::Log {
                log: log.clone(),
                scale: *scale,
                free_at: 0.0,
            },
        };
        Link {
            model,
            departures: VecDeque::with_capacity(buffer_pkts.min(1 << 20) as usize + 1),
            buffer_pkts: buffer_pkts.min(usize::MAX as u64) as usize,
            counters: LinkCounters::default(),
        }
    }

    /// Packets queued or in transmission at `now`.
    pub fn backlog(&mut self, now: u64) -> usize {
        while let Some(&(_, bytes)) = self.departures.front().filter(|&&(d, _)| d <= now) {
            self.departures.pop_front();
            self.counters.departed += 1;
            self.counters.departed_bytes += u64::from(bytes);
        }
        self.departures.len()
    }

    /// The switch's counters at `now` (packets that left by `now` included).
    pub fn counters(&mut self, now: u64) -> LinkCounters {
        self.backlog(now);
        self.counters
    }

    /// Offer a packet at `now`: `Some(departure ns)` or `None` if the buffer is full.
    pub fn enqueue(&mut self, now: u64, bytes: u32) -> Option<u64> {
        self.counters.arrived += 1;
        if self.backlog(now) >= self.buffer_pkts {
            return None;
        }
        let dep = match &mut self.model {
            Model::Rate { steps, free_at } => {
                let start = free_at.max(now as f64);
                let bits_per_ns = rate_at(steps, start as u64);
                *free_at = start + f64::from(bytes) * 8.0 / bits_per_ns;
                free_at.ceil() as u64
            }
            Model::Trace {
                times_ms,
                period_ms,
                scale,
                g,
                used,
            } => {
                let n = times_ms.len() as u64;
                let time_of =
                    |g: u64| ((g / n) * *period_ms + times_ms[(g % n) as usize]) * NS_PER_MS;
                if time_of(*g) < now {
                    *g = first_at_or_after(times_ms, *period_ms, now);
                    *used = 0;
                }
                loop {
                    if *used < packets_at(*g, *scale) {
                        *used += 1;
                        break time_of(*g);
                    }
                    *g += 1;
                    *used = 0;
                }
            }
            Model::Log {
                log,
                scale,
                free_at,
            } => {
                let start = free_at.max(now as f64);
                let target = log.bits_before(start) + f64::from(bytes) * 8.0 / *scale;
                *free_at = log.time_of_bits(target).max(start);
                free_at.ceil() as u64
            }
        };
        self.departures.push_back((dep, bytes));
        Some(dep)
    }

    /// Link capacity (bytes) over `[t0, t1)` ns.
    pub fn capacity_bytes(&self, t0: u64, t1: u64) -> f64 {
        if t1 <= t0 {
            return 0.0;
        }
        match &self.model {
            Model::Rate { steps, .. } => {
                let mut bits = 0.0;
                for (i, &(s, r)) in steps.iter().enumerate() {
                    let e = steps.get(i + 1).map_or(u64::MAX, |x| x.0);
                    let a = s.max(t0);
                    let b = e.min(t1);
                    if b > a {
                        bits += (b - a) as f64 * r;
                    }
                }
                bits / 8.0
            }
            Model::Trace {
                times_ms,
                period_ms,
                scale,
                ..
            } => {
                let g0 = first_at_or_after(times_ms, *period_ms, t0);
                let g1 = first_at_or_after(times_ms, *period_ms, t1);
                let pkts = scaled_prefix(g1, *scale) - scaled_prefix(g0, *scale);
                pkts as f64 * f64::from(PACKET_BYTES)
            }
            Model::Log { log, scale, .. } => {
                (log.bits_before(t1 as f64) - log.bits_before(t0 as f64)) * scale / 8.0
            }
        }
    }
}

/// What a bottleneck with this capacity offers over any span of simulated time, as the
/// simulator's link serves it (a trace's delivery opportunities times `scale`, a schedule's
/// steps): for a reward that measures a flow against its link (training only: no datapath
/// knows this). Built once per run.
pub struct CapacityMeter(Link);

impl CapacityMeter {
    pub fn new(cap: &Capacity) -> Self {
        CapacityMeter(Link::new(cap, 0))
    }

    /// Capacity (bytes) over `[t0_ns, t1_ns)`.
    pub fn bytes_between(&self, t0_ns: u64, t1_ns: u64) -> f64 {
        self.0.capacity_bytes(t0_ns, t1_ns)
    }
}

fn rate_at(steps: &[(u64, f64)], t: u64) -> f64 {
    let i = steps.partition_point(|s| s.0 <= t);
    steps[i.saturating_sub(1)].1
}

/// Packets carried by opportunities `0..g`.
fn scaled_prefix(g: u64, scale: f64) -> u64 {
    if scale == 1.0 {
        g
    } else {
        (g as f64 * scale).floor() as u64
    }
}

fn packets_at(g: u64, scale: f64) -> u64 {
    scaled_prefix(g + 1, scale) - scaled_prefix(g, scale)
}

/// Index of the first opportunity at or after `t` ns. Cycle `c` spans `c·P + T[0]` to
/// `(c+1)·P`, so the previous cycle's last lines may still lie at or after `t`.
fn first_at_or_after(times_ms: &[u64], period_ms: u64, t: u64) -> u64 {
    let n = times_ms.len() as u64;
    let period_ns = period_ms * NS_PER_MS;
    let c = t / period_ns;
    let first_in = |cycle: u64| -> u64 {
        let r = t.saturating_sub(cycle * period_ns);
        times_ms.partition_point(|&ms| ms * NS_PER_MS < r) as u64
    };
    if c > 0 {
        let i = first_in(c - 1);
        if i < n {
            return (c - 1) * n + i;
        }
    }
    c * n + first_in(c) // == n rolls into the next cycle's first line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::parse_trace;

    fn trace(text: &str, scale: f64) -> Capacity {
        Capacity::Trace {
            path: "t".into(),
            opportunities_ms: parse_trace(text).unwrap(),
            scale,
        }
    }

    #[test]
    fn constant_rate_serialises_back_to_back() {
        // 12 Mbit/s: a 1500-byte packet takes 1 ms
        let mut l = Link::new(
            &Capacity::Rate {
                steps: vec![(0.0, 12.0)],
            },
            100,
        );
        assert_eq!(l.enqueue(0, 1500), Some(1_000_000));
        assert_eq!(l.enqueue(0, 1500), Some(2_000_000));
        assert_eq!(l.backlog(1_500_000), 1);
        // idle link: service starts at arrival
        assert_eq!(l.enqueue(10_000_000, 1500), Some(11_000_000));
        assert!((l.capacity_bytes(0, 1_000_000_000) - 1.5e6).abs() < 1e-6);
    }

    #[test]
    fn counters_see_arrivals_drops_and_departures() {
        // 12 Mbit/s: 1000 packets/s. Offer 600 packets over one second, evenly: all leave.
        let cap = Capacity::Rate {
            steps: vec![(0.0, 12.0)],
        };
        let mut l = Link::new(&cap, 100);
        for i in 0..600u64 {
            l.enqueue(i * 1_000_000_000 / 600, 1500);
        }
        let c = l.counters(1_000_000_000);
        assert_eq!((c.arrived, c.departed), (600, 600));
        assert_eq!(c.departed_bytes, 600 * 1500);
        // then 1500 packets/s into a 100-packet buffer: 1000 leave, the rest queue or drop
        for i in 0..1500u64 {
            l.enqueue(1_000_000_000 + i * 1_000_000_000 / 1500, 1500);
        }
        let d = l.counters(2_000_000_000);
        assert_eq!(d.arrived - c.arrived, 1500);
        assert!((999..=1000).contains(&(d.departed - c.departed)), "{d:?}");
        // counting departures does not change the backlog
        assert!((99..=100).contains(&l.backlog(2_000_000_000)));
    }

    #[test]
    fn drop_tail_at_buffer_size() {
        let mut l = Link::new(
            &Capacity::Rate {
                steps: vec![(0.0, 12.0)],
            },
            3,
        );
        let got: Vec<_> = (0..5).map(|_| l.enqueue(0, 1500).is_some()).collect();
        assert_eq!(got, [true, true, true, false, false]);
        // one departs at 1 ms: room for exactly one more
        assert!(l.enqueue(1_000_000, 1500).is_some());
        assert!(l.enqueue(1_000_000, 1500).is_none());
    }

    #[test]
    fn rate_schedule_steps() {
        let cap = Capacity::Rate {
            steps: vec![(0.0, 12.0), (1.0, 24.0)],
        };
        let mut l = Link::new(&cap, 10);
        assert_eq!(l.enqueue(0, 1500), Some(1_000_000));
        assert_eq!(l.enqueue(2_000_000_000, 1500), Some(2_000_500_000));
        assert!((l.capacity_bytes(0, 2_000_000_000) - 4.5e6).abs() < 1e-3);
    }

    #[test]
    fn trace_wraps_and_wastes_idle_opportunities() {
        // opportunities at 0, 0, 3 ms; period 3 ms -> cycle 2 starts at 3 ms
        let mut l = Link::new(&trace("0\n0\n3\n", 1.0), 100);
        let deps: Vec<_> = (0..5)
            .map(|_| l.enqueue(0, 1500).unwrap() / NS_PER_MS)
            .collect();
        // 0, 0, 3 (cycle 0), then cycle 1: 3, 3, 6
        assert_eq!(deps, [0, 0, 3, 3, 3]);
        // idle until 100 ms: the next opportunity at or after 100 ms is cycle 33's first (99)?
        // no: 99 < 100, so cycle 33's last (102)
        assert_eq!(l.enqueue(100 * NS_PER_MS, 1500), Some(102 * NS_PER_MS));
        // a file with just "1" is 12 Mbit/s
        // (opportunities at 1, 2, ... ms: 999 of them in [0, 1 s), 1000 in [0, 1 s])
        let l = Link::new(&trace("1", 1.0), 10);
        assert_eq!(l.capacity_bytes(0, 1_000_000_000), 999.0 * 1500.0);
        assert_eq!(l.capacity_bytes(0, 1_000_000_001), 1000.0 * 1500.0);
    }

    fn tput(text: &str, scale: f64) -> Capacity {
        Capacity::Log {
            path: "t.tput".into(),
            log: Arc::new(crate::trace::parse_tput(text).unwrap()),
            scale,
        }
    }

    #[test]
    fn a_log_link_serves_its_rates_and_waits_out_outages() {
        // 12 Mbit/s for 1 s (1 ms a packet), then an outage of 1 s, then 24 Mbit/s for 1 s
        let cap = tput("0 12\n1 0\n2 24\n", 1.0);
        let mut l = Link::new(&cap, 10_000);
        assert_eq!(l.enqueue(0, 1500), Some(1_000_000));
        assert_eq!(l.enqueue(0, 1500), Some(2_000_000));
        // idle capacity is wasted: a packet at 0.5 s leaves 1 ms later
        assert_eq!(l.enqueue(500_000_000, 1500), Some(501_000_000));
        // offered at 0.9995 s: half of it fits before the outage, the rest after it at
        // 24 Mbit/s (0.25 ms)
        assert_eq!(l.enqueue(999_500_000, 1500), Some(2_000_250_000));
        assert!((l.capacity_bytes(0, 3_000_000_000) - 4.5e6).abs() < 1e-3);
        // the log repeats: its second period starts at 3 s
        assert_eq!(l.capacity_bytes(3_000_000_000, 4_000_000_000), 1.5e6);
        // trace_scale multiplies every rate
        let mut l = Link::new(&tput("0 12\n1 0\n2 24\n", 2.0), 100);
        assert_eq!(l.enqueue(0, 1500), Some(500_000));
        assert!((l.capacity_bytes(0, 3_000_000_000) - 9e6).abs() < 1e-3);
    }

    #[test]
    fn a_gigabit_log_carries_its_rate() {
        // 1.7 Gbit/s: 141,667 packets a second
        let mut l = Link::new(&tput("0 1700\n1 1700\n", 1.0), 1 << 20);
        let mut last = 0;
        for _ in 0..141_667 {
            last = l.enqueue(0, 1500).unwrap();
        }
        assert!((last as f64 - 1e9).abs() < 10_000.0, "{last}");
    }

    #[test]
    fn trace_scale_multiplies_capacity() {
        let mut l = Link::new(&trace("1", 2.5), 100);
        let cap = l.capacity_bytes(0, 1_000_000_000);
        assert!((cap / 1500.0 - 2500.0).abs() <= 3.0, "{cap}");
        // 2.5 packets per ms on average: 5 packets in 2 opportunities
        let deps: Vec<_> = (0..5)
            .map(|_| l.enqueue(0, 1500).unwrap() / NS_PER_MS)
            .collect();
        assert_eq!(deps, [1, 1, 2, 2, 2]);
    }
}
