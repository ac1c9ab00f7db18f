//! Adaptive spinning before a receive blocks (issue 45): busy-poll only while reports arrive.
//!
//! A thread asleep in `poll`/`recv` costs the wake-up when a datagram comes: the scheduler's
//! latency (tens of µs on an idle host, more with deep C-states) lands on every report the
//! agent answers. Spinning removes it but burns a core; spinning always would burn one for an
//! agent with no flows. The rule here spins only when the recent past says a datagram will
//! come within the spin:
//!
//! - `wait` is how long a receive that found nothing queued waited for its datagram, clamped
//!   to [`WAIT_CLAMP`] (4 ms); `est` is its exponentially weighted mean,
//!   `est ← est + (wait − est) / 4`. A receive that finds a datagram queued waits for nothing
//!   and is not counted: a backlog would pull `est` to 0, and the spin, sized on it, would
//!   end just before the datagram that comes once the backlog is gone.
//! - Before blocking, the receive polls without blocking for
//!   `window = clamp(2·est, SPIN_FLOOR, max)` when `est < max`, and not at all otherwise
//!   (`max` is the configured [`Spin::max`], 200 µs by default, 0 = never spin).
//! - A datagram within the window is a hit; otherwise the receive blocks as before and the
//!   time it then waited (window included) enters `est`. After [`PURE_SPIN`] (5 µs) the spin
//!   yields the core between polls: on a host with more runnable threads than cores, a spin
//!   that held its core would keep the very thread it waits for from running.
//!
//! What it reacts to: the gaps between datagrams as the receiver sees them. Reports every few
//! hundred µs or faster (a flow with a short RTT, many flows, a datapath answered one report at
//! a time) keep `est` under `max`: the agent spins and answers without a wake-up. Reports
//! rarer than that (a few long-RTT flows), or none (an idle agent), push `est` past `max`
//! within a few receives: the agent sleeps and spends no CPU. A burst after an idle spell
//! pays the wake-up until `est` comes down (each blocked wait of `w` < `max` moves it a
//! quarter of the way). It ignores everything else (which datapath sent, message types).
//!
//! The CPU it spends is counted ([`SpinStats`]): time spun, hits and misses, so that the
//! cost is reported beside the latency it buys (`cargo bench -p ccp-runtime --bench
//! agent_latency`, the agent's SIGUSR1 line).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The default longest spin (`--spin-max-us`).
pub const DEFAULT_MAX: Duration = Duration::from_micros(200);
/// The largest `--spin-max-us` accepted: beyond a few ms a sleeping thread's wake-up is
/// negligible against the wait, and spinning would only burn CPU.
pub const MAX_MAX: Duration = Duration::from_millis(2);
/// The shortest spin once spinning: a datapath's turnaround is rarely shorter.
pub const SPIN_FLOOR: Duration = Duration::from_micros(20);
/// How long a spin polls without yielding; after that it yields the core between polls
/// (`sched_yield`), so that on a host with more runnable threads than cores the spin does not
/// keep the thread it waits for (a datapath's) from running.
pub const PURE_SPIN: Duration = Duration::from_micros(5);
/// Longest wait one sample counts as (so that one idle second is forgotten in a dozen
/// receives once reports flow again). Above [`MAX_MAX`]: an idle receiver's mean is past
/// any max, so it never spins.
pub const WAIT_CLAMP: Duration = Duration::from_millis(4);

/// CPU spent spinning and what it bought; shared with the agent's statistics.
#[derive(Debug, Default)]
pub struct SpinStats {
    /// Nanoseconds spent polling without blocking.
    pub spun_ns: AtomicU64,
    /// Spins that ended with a datagram (no wake-up paid).
    pub hits: AtomicU64,
    /// Spins that ended without one (the receive then blocked).
    pub misses: AtomicU64,
}

impl SpinStats {
    /// `spun_ms hits misses` for a log line.
    pub fn snapshot(&self) -> (f64, u64, u64) {
        (
            self.spun_ns.load(Ordering::Relaxed) as f64 / 1e6,
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

/// One receiver's spin state (the portus thread's; atomics make it `Sync` for portus).
#[derive(Debug)]
pub struct Spin {
    max_ns: u64,
    /// The mean wait, ns (starts past any `max`: no spinning until datagrams come close).
    est_ns: AtomicU64,
    stats: Arc<SpinStats>,
}

/// Spin up to [`DEFAULT_MAX`] (the agent's default).
impl Default for Spin {
    fn default() -> Self {
        Self::with_max(DEFAULT_MAX)
    }
}

/// Why a `--spin-max-us` value was refused.
#[derive(Debug, thiserror::Error)]
#[error("--spin-max-us {got}: at most {} µs (0 never spins; the default {} µs spins only while reports arrive)", MAX_MAX.as_micros(), DEFAULT_MAX.as_micros())]
pub struct SpinError {
    got: u64,
}

impl Spin {
    /// Spin at most `max` (0: never); more than [`MAX_MAX`] is refused.
    pub fn new(max: Duration) -> Result<Self, SpinError> {
        if max > MAX_MAX {
            return Err(SpinError {
                got: max.as_micros() as u64,
            });
        }
        Ok(Self::with_max(max))
    }

    /// Never spin.
    pub fn off() -> Self {
        Self::with_max(Duration::ZERO)
    }

    fn with_max(max: Duration) -> Self {
        Self {
            max_ns: max.as_nanos() as u64,
            est_ns: AtomicU64::new(WAIT_CLAMP.as_nanos() as u64),
            stats: Arc::new(SpinStats::default()),
        }
    }

    /// The configured longest spin.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }

    /// Its statistics (shared).
    pub fn stats(&self) -> Arc<SpinStats> {
        self.stats.clone()
    }

    /// How long the next receive should spin before it blocks (zero: block at once).
    pub fn window(&self) -> Duration {
        let est = self.est_ns.load(Ordering::Relaxed);
        if self.max_ns == 0 || est >= self.max_ns {
            return Duration::ZERO;
        }
        let floor = (SPIN_FLOOR.as_nanos() as u64).min(self.max_ns);
        Duration::from_nanos(est.saturating_mul(2).clamp(floor, self.max_ns))
    }

    /// Record that a receive that found nothing queued waited `wait` for its datagram (or
    /// for its timeout).
    pub fn record(&self, wait: Duration) {
        let w = wait.min(WAIT_CLAMP).as_nanos() as i64;
        let est = self.est_ns.load(Ordering::Relaxed) as i64;
        let next = est + (w - est) / 4;
        self.est_ns.store(next.max(0) as u64, Ordering::Relaxed);
    }

    /// Poll `try_once` (a receive that does not block; `None` when nothing is there) for at
    /// most the current window. `Some` when it got something within the window; the time
    /// spun is counted. `started` is when the receive began (the wait is measured from it).
    pub fn spin<T>(&self, started: Instant, mut try_once: impl FnMut() -> Option<T>) -> Option<T> {
        let window = self.window();
        if window.is_zero() {
            return None;
        }
        let t0 = Instant::now();
        let got = loop {
            if let Some(x) = try_once() {
                break Some(x);
            }
            let spun = t0.elapsed();
            if spun >= window {
                break None;
            }
            if spun < PURE_SPIN {
                std::hint::spin_loop();
            } else {
                // let a thread waiting for this core (the datapath's, on a busy host) run
                std::thread::yield_now();
            }
        };
        let spun = t0.elapsed();
        self.stats
            .spun_ns
            .fetch_add(spun.as_nanos() as u64, Ordering::Relaxed);
        if got.is_some() {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            self.record(started.elapsed());
        } else {
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_receiver_does_not_spin_and_a_busy_one_does() {
        let s = Spin::new(DEFAULT_MAX).unwrap();
        assert_eq!(
            s.window(),
            Duration::ZERO,
            "no spinning before datagrams come"
        );
        // datagrams every 30 µs: est comes down below the max, the window covers 2x the gap
        for _ in 0..40 {
            s.record(Duration::from_micros(30));
        }
        let w = s.window();
        assert!(
            w >= Duration::from_micros(59) && w <= Duration::from_micros(62),
            "{w:?}"
        );
        // datapaths that answer within a few µs: the floor
        for _ in 0..40 {
            s.record(Duration::from_micros(2));
        }
        assert_eq!(s.window(), SPIN_FLOOR);
        // one idle second: spinning stops at once (est jumps past the max)...
        s.record(Duration::from_secs(1));
        assert_eq!(s.window(), Duration::ZERO);
        // ...and comes back within a few receives once datagrams come close again
        let mut n = 0;
        while s.window().is_zero() {
            s.record(Duration::from_micros(80));
            n += 1;
            assert!(n <= 16, "spinning never resumed");
        }
        assert!(s.window() <= DEFAULT_MAX);
    }

    #[test]
    fn an_idle_receiver_never_spins_even_at_the_largest_max() {
        let s = Spin::new(MAX_MAX).unwrap();
        assert_eq!(s.window(), Duration::ZERO);
        s.record(Duration::from_millis(250));
        assert_eq!(s.window(), Duration::ZERO);
    }

    #[test]
    fn off_never_spins_and_the_max_is_bounded() {
        let s = Spin::off();
        for _ in 0..20 {
            s.record(Duration::from_micros(1));
        }
        assert_eq!(s.window(), Duration::ZERO);
        assert!(s.spin(Instant::now(), || Some(())).is_none());
        assert!(Spin::new(MAX_MAX + Duration::from_nanos(1)).is_err());
        let e = Spin::new(Duration::from_secs(1)).unwrap_err().to_string();
        assert!(e.contains("--spin-max-us 1000000"), "{e}");
    }

    #[test]
    fn spin_counts_hits_misses_and_time() {
        let s = Spin::new(Duration::from_micros(100)).unwrap();
        for _ in 0..20 {
            s.record(Duration::from_micros(10));
        }
        let mut calls = 0;
        let got = s.spin(Instant::now(), || {
            calls += 1;
            (calls == 3).then_some(7)
        });
        assert_eq!(got, Some(7));
        assert!(s.spin(Instant::now(), || None::<u8>).is_none());
        let (ms, hits, misses) = s.stats().snapshot();
        assert_eq!((hits, misses), (1, 1));
        // the miss spun its whole window (2x est, floor 20 µs)
        assert!(ms >= 0.02, "{ms}");
    }
}
