//! Jury's unit tests: the paper's formulas one at a time, the core on hand-made intervals,
//! and the whole pipeline (eq. 5 with its lag, eq. 6) on a fluid bottleneck.

use super::core::{D_MAX, Q_MAX};
use super::*;
use crate::learned::LearnedAlgorithm;
use crate::signals::Interval;

const MSS: u32 = 1000;

fn info(sock_id: u32, init_cwnd_bytes: u32) -> FlowInfo {
    FlowInfo {
        sock_id,
        mss: MSS,
        init_cwnd_bytes,
        preference: Default::default(),
    }
}

/// A 30 ms interval acking `pkts` packets at mean (and min) RTT `rtt_ms`, `lost` lost.
fn iv(pkts: u64, lost: u64, rtt_ms: f64) -> Interval {
    Interval {
        acked_bytes: pkts * u64::from(MSS),
        acked_pkts: pkts,
        lost_pkts: lost,
        rtt_min_us: Some((rtt_ms * 1000.0) as u64),
        rtt_mean_us: Some(rtt_ms * 1000.0),
        rtt_samples: pkts.max(1),
        interval_us: 30_000,
        ..Default::default()
    }
}

fn core(config: JuryConfig) -> JuryCore {
    JuryCore::new(config, &info(1, 10 * MSS))
}

#[test]
fn occupancy_inverts_eq_4() {
    // eq. 4: a flow with share s that multiplies its rate by a sees g = a / (1 + (a − 1)s)
    for &s in &[0.0, 0.1, 0.25, 0.5, 0.9, 1.0] {
        for &a in &[1.025, 0.975, 1.1, 0.9] {
            let g = a / (1.0 + (a - 1.0) * s);
            let r = occupancy(a, g, 0.01).expect("a is far enough from 1");
            assert!((r - s).abs() < 1e-9, "s {s} a {a}: got {r}");
        }
    }
    // an idle link answers a rate change in full: no share; a full one not at all: all of it
    assert_eq!(occupancy(1.025, 1.025, 0.01), Some(0.0));
    assert_eq!(occupancy(1.025, 1.0, 0.01), Some(1.0));
    // noise is clamped into [0, 1]
    assert_eq!(occupancy(1.025, 1.2, 0.01), Some(0.0));
    assert_eq!(occupancy(1.025, 0.8, 0.01), Some(1.0));
}

#[test]
fn occupancy_refuses_tiny_probes_and_bad_numbers() {
    assert_eq!(occupancy(1.005, 1.0, 0.01), None);
    assert_eq!(occupancy(1.0, 1.0, 0.01), None);
    for (a, g) in [
        (f64::NAN, 1.0),
        (1.1, f64::INFINITY),
        (1.1, 0.0),
        (-1.0, 1.0),
    ] {
        assert_eq!(occupancy(a, g, 0.01), None, "a {a} g {g}");
    }
}

#[test]
fn the_fit_weighs_probes_by_their_size_and_holds_without_them() {
    let mut fit = OccupancyFit::new(8, 0.01);
    // probes below the threshold: no estimate yet
    assert_eq!(fit.push(1.002, 1.002), None);
    // a real probe on a half-share flow: exact
    let s = 0.5;
    let g = |a: f64| a / (1.0 + (a - 1.0) * s);
    let e = fit.push(1.025, g(1.025)).expect("probe large enough");
    assert!((e - s).abs() < 0.01, "{e}");
    // a noisy tiny probe (its eq. 5 alone would read 1.0) barely moves the fit
    let alone = occupancy(1.001, 1.0, 0.0).expect("no threshold");
    assert_eq!(alone, 1.0);
    let e2 = fit.push(1.001, 1.0).expect("holds");
    assert!((e2 - s).abs() < 0.01, "{e2}");
    // bad numbers are ignored
    assert_eq!(fit.push(f64::NAN, 1.0), Some(e2));
    assert_eq!(fit.push(1.1, 0.0), Some(e2));
    // the window forgets: a full window of saturated-link probes reads 1
    for _ in 0..8 {
        fit.push(1.025, 1.0);
    }
    assert_eq!(fit.estimate(), Some(1.0));
}

#[test]
fn post_processing_is_eq_6() {
    assert_eq!(post_process(0.2, 0.5, 0.0), 0.7);
    assert_eq!(post_process(0.2, 0.5, 1.0), -0.3);
    assert_eq!(post_process(0.2, 0.5, 0.5), 0.2);
    // a larger share never gets a larger action
    let a: Vec<f64> = (0..=10)
        .map(|i| post_process(0.0, 0.8, f64::from(i) / 10.0))
        .collect();
    assert!(a.windows(2).all(|w| w[1] <= w[0]));
    // not clipped to [−1, 1]: at μ = ±1 flows on one side still differ
    assert!((post_process(0.9, 1.0, 0.0) - 1.9).abs() < 1e-12);
    assert!((post_process(-1.0, 0.5, 0.8) - -1.3).abs() < 1e-12);
    assert!(post_process(-1.0, 0.5, 0.2) > post_process(-1.0, 0.5, 0.8));
}

#[test]
fn window_update_is_eq_7_and_symmetric() {
    assert!((window_update(100.0, 1.0, 0.025) - 102.5).abs() < 1e-12);
    assert!((window_update(102.5, -1.0, 0.025) - 100.0).abs() < 1e-12);
    assert_eq!(window_update(100.0, 0.0, 0.025), 100.0);
}

#[test]
fn too_few_packets_increase_at_the_largest_action_without_the_policy() {
    let mut c = core(JuryConfig::default());
    let w0 = c.base_cwnd_bytes();
    let (mut obs, mut mask) = (vec![0.0; c.spec().obs_dim], vec![1.0; c.spec().obs_dim]);
    for k in 1..=5 {
        assert!(!c.observe(&iv(7, 0, 50.0), &mut obs, &mut mask));
        let want = w0 * 1.025f64.powi(k);
        assert!(
            (c.base_cwnd_bytes() - want).abs() < 1e-6 * want,
            "interval {k}"
        );
    }
    assert_eq!(c.counts(), (0, 5, 0));
    // enough packets: the policy decides
    assert!(c.observe(&iv(8, 0, 50.0), &mut obs, &mut mask));
    // an interval without an RTT sample yet is not significant either
    let mut fresh = core(JuryConfig::default());
    let no_rtt = Interval {
        rtt_min_us: None,
        rtt_mean_us: None,
        ..iv(100, 0, 50.0)
    };
    assert!(!fresh.observe(&no_rtt, &mut obs, &mut mask));
}

#[test]
fn observation_is_the_queues_change_delivery_and_standing_size() {
    let cfg = JuryConfig::default();
    let mut c = core(cfg.clone());
    let n = c.spec().obs_dim;
    let (mut obs, mut mask) = (vec![9.0; n], vec![1.0; n]);
    assert!(c.observe(&iv(50, 0, 40.0), &mut obs, &mut mask));
    // one interval seen: nine zero-padded, then no change, no loss, no queue
    assert!(obs.iter().all(|&v| v == 0.0), "{obs:?}");
    // RTT up 3 ms over 30 ms: d = 0.1 (a 10 % overload); 10 % of 50 packets lost after none:
    // l = 0.9/1 − 1 = −0.1; queue 3 ms = 0.1 intervals; each SMA over 3 with earlier zeros
    assert!(c.observe(&iv(45, 5, 43.0), &mut obs, &mut mask));
    let last = &obs[n - 3..];
    assert!(
        (f64::from(last[0]) - 0.1 / 2.0 / D_MAX).abs() < 1e-6,
        "{last:?}"
    );
    assert!(
        (f64::from(last[1]) - (-0.1 / 2.0) / 0.5).abs() < 1e-6,
        "{last:?}"
    );
    assert!((f64::from(last[2]) - 0.1 / Q_MAX).abs() < 1e-6, "{last:?}");
    assert_eq!(&obs[n - 6..n - 3], &[0.0, 0.0, 0.0]);
    // bounded: an absurd RTT jump reads as the bound
    assert!(c.observe(&iv(45, 0, 4000.0), &mut obs, &mut mask));
    assert!(obs.iter().all(|v| (-1.0..=1.0).contains(v)));
    assert_eq!(obs[n - 1], 1.0);
}

/// A box where the policy's `μ` is the action (`δ` may be 0), without the trials (the
/// window is eq. 7's alone): for tests of what follows eq. 6.
fn free_box() -> JuryConfig {
    JuryConfig {
        mu_bound: 1.0,
        min_delta: 0.0,
        probe: Probe::Rate,
        ..Default::default()
    }
}

/// §3.1's estimator (eq. 5 on the whole rate change), the datapath getting eq. 7's window.
fn paper() -> JuryConfig {
    JuryConfig {
        probe: Probe::Rate,
        ..Default::default()
    }
}

#[test]
fn exploration_replaces_small_actions_by_plus_or_minus_one_evenly() {
    let mut c = core(free_box());
    let (mut obs, mut mask) = (vec![0.0; 30], vec![1.0; 30]);
    assert!(c.observe(&iv(50, 0, 40.0), &mut obs, &mut mask));
    let (mut up, mut down) = (0i64, 0i64);
    for _ in 0..2000 {
        c.apply(&[0.05, 0.0]);
        let a = c.last_action();
        if a == 1.0 {
            up += 1;
        } else if a == -1.0 {
            down += 1;
        } else {
            assert_eq!(a, f64::from(0.05f32));
        }
    }
    let explored = up + down;
    assert_eq!(c.counts().2, explored as u64);
    assert!(
        (1700..=1900).contains(&explored),
        "p = 0.9: {explored} of 2000"
    );
    assert!((up - down).abs() < 150, "up {up} down {down}");
    // outside the band nothing changes
    c.apply(&[0.5, 0.0]);
    assert_eq!(c.last_action(), 0.5);
}

#[test]
fn the_same_socket_explores_the_same_way() {
    let run = |sock| {
        let mut c = JuryCore::new(free_box(), &info(sock, 10 * MSS));
        let (mut obs, mut mask) = (vec![0.0; 30], vec![1.0; 30]);
        c.observe(&iv(50, 0, 40.0), &mut obs, &mut mask);
        (0..50)
            .map(|_| {
                c.apply(&[0.0, 0.0]);
                c.last_action()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn bad_policy_outputs_are_bounded() {
    let mut c = core(JuryConfig {
        explore_band: 0.0,
        ..free_box()
    });
    let w = c.cwnd_bytes();
    c.apply(&[f32::NAN, f32::INFINITY]);
    assert_eq!(c.last_action(), 0.0);
    assert_eq!(c.cwnd_bytes(), w);
    c.apply(&[1e9, 1e9]);
    assert_eq!(c.last_action(), 2.0); // μ + δ at ratio_bw = 0
    c.apply(&[]);
    assert_eq!(c.last_action(), 0.0);
    for _ in 0..10_000 {
        c.apply(&[-1.0, 0.0]);
    }
    assert_eq!(c.cwnd_bytes(), 4.0 * f64::from(MSS));
    // the default box: |μ| ≤ 0.25, δ ≥ 0.5 whatever the policy says
    let mut c = core(JuryConfig {
        explore_band: 0.0,
        ..paper()
    });
    c.apply(&[1e9, 1e9]);
    assert_eq!(c.last_action(), 1.25);
    c.apply(&[-1e9, -1e9]);
    assert_eq!(c.last_action(), 0.25); // −0.25 + (1 − 0)·0.5: a flow with no share speeds up
}

#[test]
fn the_window_stays_within_four_bdps_of_what_the_path_delivered() {
    let mut c = core(JuryConfig {
        explore_band: 0.0,
        ..paper()
    });
    let (mut obs, mut mask) = (vec![0.0; 30], vec![1.0; 30]);
    // a delivery-rate sample of 3.33 MB/s at 40 ms min RTT: 133 kB delivered per RTT; an
    // interval whose ACKs say ten times more (a hole filled) does not move the bound
    c.observe(
        &Interval {
            delivery_rate_max_bps: Some(100 * u64::from(MSS) * 100 / 3),
            ..iv(1000, 0, 40.0)
        },
        &mut obs,
        &mut mask,
    );
    for _ in 0..2000 {
        c.apply(&[1.0, 0.0]);
    }
    let bdp = 100.0 * f64::from(MSS) / 0.03 * 0.04;
    assert!((c.cwnd_bytes() - (4.0 * bdp + 4.0 * f64::from(MSS))).abs() < 1.0);
    assert!(c.rate_bps() <= c.cwnd_bytes() / 0.04 + 1.0);
}

#[test]
fn reward_is_eq_9() {
    let cfg = paper();
    let mut c = core(cfg.clone());
    let (mut obs, mut mask) = (vec![0.0; 30], vec![1.0; 30]);
    assert_eq!(c.reward(), 0.0);
    c.observe(&iv(50, 0, 40.0), &mut obs, &mut mask);
    // no occupancy estimate yet: ratio 0, reward 0
    assert_eq!(c.reward(), 0.0);
    // hand the core an estimate: rate +25 %, throughput unchanged -> ratio 1
    let mut c = core(JuryConfig {
        explore_band: 0.0,
        ..cfg.clone()
    });
    c.observe(&iv(50, 0, 40.0), &mut obs, &mut mask);
    for _ in 0..9 {
        c.apply(&[1.0, 0.0]); // +2.5 % per decision
    }
    for _ in 0..4 {
        c.observe(&iv(50, 0, 40.0), &mut obs, &mut mask);
    }
    assert_eq!(c.ratio_bw(), 1.0);
    // queue 10 ms, 2 % loss, L_min 0: 1 − (1e-5·10 000 + 5·(1 − 0.98)) = 1 − (0.1 + 0.1)
    c.observe(&iv(49, 1, 50.0), &mut obs, &mut mask);
    let want = 1.0 - (1e-5 * 10_000.0 + 5.0 * 0.02);
    assert!((c.reward() - want).abs() < 1e-9, "{} vs {want}", c.reward());
    // as printed: the delivery ratio is a bonus, 1 − (0.1 − 5·0.98)
    let mut printed = core(JuryConfig {
        explore_band: 0.0,
        printed_loss_term: true,
        ..cfg.clone()
    });
    printed.observe(&iv(50, 0, 40.0), &mut obs, &mut mask);
    for _ in 0..9 {
        printed.apply(&[1.0, 0.0]);
    }
    for _ in 0..4 {
        printed.observe(&iv(50, 0, 40.0), &mut obs, &mut mask);
    }
    printed.observe(&iv(49, 1, 50.0), &mut obs, &mut mask);
    let want = 1.0 - (1e-5 * 10_000.0 - 5.0 * 0.98);
    assert!(
        (printed.reward() - want).abs() < 1e-9,
        "{}",
        printed.reward()
    );
}

#[test]
fn config_ranges_and_dynamics() {
    assert!(JuryConfig::default().validate().is_ok());
    for (bad, knob) in [
        (
            JuryConfig {
                zeta: 1.0,
                ..Default::default()
            },
            "zeta",
        ),
        (
            JuryConfig {
                interval_ms: 0.0,
                ..Default::default()
            },
            "interval_ms",
        ),
        (
            JuryConfig {
                history: 0,
                ..Default::default()
            },
            "history",
        ),
        (
            JuryConfig {
                alpha: f64::NAN,
                ..Default::default()
            },
            "alpha",
        ),
    ] {
        let e = bad.validate().expect_err(knob).to_string();
        assert!(e.contains(&format!("algs.jury.{knob}")), "{e}");
    }
    let d = Jury::default().dynamics();
    assert!(d.contains_key("alpha") && d.contains_key("history"));
    for k in REWARD_KNOBS.iter().chain(&EPISODE_START_KNOBS) {
        assert!(!d.contains_key(*k), "{k} is not dynamics");
    }
    let c = JuryCore::new(
        JuryConfig {
            initial_cwnd_pkts: Some(40.0),
            ..Default::default()
        },
        &info(1, 10 * MSS),
    );
    assert_eq!(c.cwnd_bytes(), 40.0 * f64::from(MSS));
    let spec = Jury::default().spec();
    assert_eq!((spec.obs_dim, spec.act_dim), (30, 2));
    assert_eq!(Jury::default().program().initial_interval_us, 30_000);
}

/// A fluid bottleneck: `c` bytes/s, base RTT `rtt_s`, a FIFO of `buf` bytes. Each 30 ms
/// interval every flow sends at its pacing rate (or window/RTT if smaller); ACKs come back
/// `lag` intervals later.
struct Fluid {
    c: f64,
    rtt_s: f64,
    buf: f64,
    q: f64,
}

impl Fluid {
    /// Bytes delivered and lost per flow, and the RTT, for one interval of sending.
    fn interval(&mut self, send: &[f64], dt: f64) -> (Vec<f64>, Vec<f64>, f64) {
        let x: f64 = send.iter().sum();
        let mut q = self.q + (x - self.c) * dt;
        let dropped = (q - self.buf).max(0.0);
        q = q.clamp(0.0, self.buf);
        let busy = q > 0.0 || x > self.c;
        let out = if busy { self.c * dt } else { x * dt };
        self.q = q;
        let share = |s: f64| if x > 0.0 { s / x } else { 0.0 };
        (
            send.iter().map(|&s| share(s) * out).collect(),
            send.iter().map(|&s| share(s) * dropped).collect(),
            self.rtt_s + q / self.c,
        )
    }
}

/// Two Jury flows, 15:1 at start, on a fluid 50 Mbit/s, 60 ms link for 90 s under `policy`:
/// (Jain index, utilization) over the last 30 s.
fn two_flows_on_a_fluid_link(
    policy: impl Fn(&[f32]) -> [f32; 2],
    config: JuryConfig,
) -> (f64, f64) {
    two_flows_on_a_fluid_path(policy, config, 60)
}

/// Two intervals' ACKs reported as one 30 ms interval.
fn merge(a: Interval, b: Interval) -> Interval {
    let n = (a.rtt_samples + b.rtt_samples).max(1);
    let mean = |x: &Interval| x.rtt_mean_us.unwrap_or(0.0) * x.rtt_samples as f64;
    Interval {
        acked_bytes: a.acked_bytes + b.acked_bytes,
        acked_pkts: a.acked_pkts + b.acked_pkts,
        lost_pkts: a.lost_pkts + b.lost_pkts,
        rtt_min_us: a
            .rtt_min_us
            .min(b.rtt_min_us)
            .or(a.rtt_min_us.or(b.rtt_min_us)),
        rtt_mean_us: Some((mean(&a) + mean(&b)) / n as f64),
        rtt_samples: n,
        ..a
    }
}

/// When a fluid interval's ACKs come back.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Acks {
    /// After the base RTT, whatever the queue (the first fluid: its reports' RTT includes the
    /// queue, so a core that pairs ACKs with the rate one reported RTT earlier looks up to a
    /// buffer's delay, 1 BDP, too far back).
    Base,
    /// After the base RTT plus the queueing delay the interval's packets met, rounded to
    /// intervals; ACKs due in the same interval are one report (as a fold program's are).
    Queued,
    /// As `Queued`, but an interval's ACKs are split between the two intervals its delay
    /// falls between, in proportion (a delay of 4.3 intervals: 70 % after 4, 30 % after 5),
    /// as a packet link's ACK stream is spread: rounding lumps two intervals' ACKs into one
    /// report and leaves the interval before empty whenever the queue grows past half an
    /// interval, a step no link has.
    Spread,
}

/// [`two_flows_on_a_fluid_link`] at base RTT `rtt_ms` (a multiple of 30), with a 1-BDP buffer
/// and the ACK lag scaled with it; ACKs after the base RTT ([`Acks::Base`]).
fn two_flows_on_a_fluid_path(
    policy: impl Fn(&[f32]) -> [f32; 2],
    config: JuryConfig,
    rtt_ms: u32,
) -> (f64, f64) {
    fluid_run(policy, config, rtt_ms, Acks::Base)
}

/// Two flows 15:1 at start on a 50 Mbit/s fluid link at base RTT `rtt_ms` (a multiple of 30),
/// a 1-BDP buffer, 90 s: (Jain, utilization) over the last 30 s.
fn fluid_run(
    policy: impl Fn(&[f32]) -> [f32; 2],
    config: JuryConfig,
    rtt_ms: u32,
    acks: Acks,
) -> (f64, f64) {
    let dt = 0.03;
    let rtt_s = f64::from(rtt_ms) / 1000.0;
    let mut link = Fluid {
        c: 6.25e6,
        rtt_s,
        buf: 6.25e6 * rtt_s,
        q: 0.0,
    };
    let lag = (rtt_ms / 30).max(1);
    let mut flows = [
        JuryCore::new(config.clone(), &info(1, 300_000)),
        JuryCore::new(config, &info(2, 20_000)),
    ];
    // per flow: (interval its ACKs are reported in, what they say), in order
    let mut pending: Vec<std::collections::VecDeque<(usize, Interval)>> =
        vec![Default::default(); 2];
    let mut rtt = link.rtt_s;
    let mut got = [0.0f64; 2];
    let steps = 3000; // 90 s
    for k in 0..steps {
        let send: Vec<f64> = flows
            .iter()
            .map(|f| f.rate_bps().min(f.cwnd_bytes() / rtt))
            .collect();
        let (delivered, lost, r) = link.interval(&send, dt);
        rtt = r;
        // (due interval, share of the interval's ACKs)
        let dues = match acks {
            Acks::Base => [(k + lag as usize, 1.0), (k, 0.0)],
            // the queue drains at most one interval's worth per interval: never earlier than
            // the interval before's
            Acks::Queued => [(k + (r / dt).round() as usize, 1.0), (k, 0.0)],
            Acks::Spread => {
                let f = r / dt;
                let lo = f.floor();
                [
                    (k + lo as usize, 1.0 - (f - lo)),
                    (k + lo as usize + 1, f - lo),
                ]
            }
        };
        for i in 0..2 {
            for (due, part) in dues {
                if part <= 0.0 {
                    continue;
                }
                let pkts = (part * delivered[i] / f64::from(MSS)).round() as u64;
                pending[i].push_back((
                    due,
                    Interval {
                        acked_bytes: (part * delivered[i]) as u64,
                        acked_pkts: pkts,
                        lost_pkts: (part * lost[i] / f64::from(MSS)).round() as u64,
                        rtt_min_us: Some((r * 1e6) as u64),
                        rtt_mean_us: Some(r * 1e6),
                        rtt_samples: pkts,
                        interval_us: 30_000,
                        ..Default::default()
                    },
                ));
            }
            pending[i].make_contiguous().sort_by_key(|(d, _)| *d);
            if k >= 2 * steps / 3 {
                got[i] += delivered[i];
            }
        }
        for i in 0..2 {
            let mut report: Option<Interval> = None;
            while pending[i].front().is_some_and(|(d, _)| *d <= k) {
                let Some((_, x)) = pending[i].pop_front() else {
                    break;
                };
                report = Some(match report {
                    None => x,
                    Some(m) => merge(m, x),
                });
            }
            if let Some(report) = report {
                let mut obs = vec![0.0; 30];
                let mut mask = vec![1.0; 30];
                if flows[i].observe(&report, &mut obs, &mut mask) {
                    flows[i].apply(&policy(&obs));
                }
            }
        }
    }
    let jain = (got[0] + got[1]).powi(2) / (2.0 * (got[0].powi(2) + got[1].powi(2)));
    let util = (got[0] + got[1]) / (link.c * dt * (steps / 3) as f64);
    (jain, util)
}

#[test]
fn post_processing_alone_converges_two_unequal_flows_to_fair_shares() {
    // a hand policy that knows nothing of shares: up while the queue is small, down while it
    // stands; eq. 5 and 6 alone must make the larger flow give way
    let policy = |obs: &[f32]| {
        let q = obs[obs.len() - 1];
        if q < 0.05 {
            [0.3f32, 0.7]
        } else {
            [-0.3, 0.7]
        }
    };
    let (jain, util) = two_flows_on_a_fluid_link(policy, paper());
    assert!(jain > 0.95, "Jain {jain:.3}");
    assert!(util > 0.8, "utilization {util:.3}");
}

#[test]
fn the_range_floor_keeps_a_bang_bang_policy_fair() {
    // the policy r4 learnt: full steps up on an empty link, down under a queue, δ = 0. In a
    // box of `μ ∈ [−1, 1]`, `δ ∈ [0, 1]` every flow takes the same step and the 15:1 start
    // persists (MIMD: eq. 5 reads the common change as each flow's own, the same estimate
    // for both); the default box (`|μ| ≤ 0.5 ≤ δ`) makes eq. 6 act whatever the policy asks.
    let policy = |obs: &[f32]| {
        let q = obs[obs.len() - 1];
        if q < 0.05 {
            [1.0f32, 0.0]
        } else {
            [-1.0, 0.0]
        }
    };
    let mimd = JuryConfig {
        mu_bound: 1.0,
        min_delta: 0.0,
        ..paper()
    };
    let (jain0, _) = two_flows_on_a_fluid_link(policy, mimd);
    let (jain, util) = two_flows_on_a_fluid_link(policy, paper());
    assert!(jain0 < 0.8, "without the floor: Jain {jain0:.3}");
    assert!(jain > 0.85, "with the floor: Jain {jain:.3}");
    assert!(util > 0.8, "utilization {util:.3}");
}

#[test]
fn only_a_probe_of_its_own_tells_a_flow_its_share_at_long_rtts() {
    // a policy whose centre follows the queue moves both flows together; at 120 ms and more
    // eq. 5 on the whole rate change reads that common step as each flow's own (both get the
    // same estimate) and the 15:1 start persists; fitted on the exploration's random ±1
    // alone, each flow sees its own share
    let policy = |obs: &[f32]| {
        if obs[obs.len() - 1] < 0.05 {
            [0.3f32, 0.7]
        } else {
            [-0.3, 0.7]
        }
    };
    let with = |probe| JuryConfig {
        probe,
        ..JuryConfig::default()
    };
    for rtt in [120, 210] {
        let (rate, _) = two_flows_on_a_fluid_path(policy, with(Probe::Rate), rtt);
        let (explore, util) = two_flows_on_a_fluid_path(policy, with(Probe::Explore), rtt);
        assert!(rate < 0.7, "{rtt} ms, rate probe: Jain {rate:.3}");
        assert!(explore > 0.95, "{rtt} ms, explore probe: Jain {explore:.3}");
        assert!(util > 0.9, "{rtt} ms, explore probe: utilization {util:.3}");
    }
}

/// Bang-bang policies by the queue: `(±mu, delta)`.
fn by_queue(o: &[f32], mu: f32, delta: f32) -> [f32; 2] {
    if o[o.len() - 1] < 0.05 {
        [mu, delta]
    } else {
        [-mu, delta]
    }
}

#[test]
fn a_trial_of_its_own_makes_bang_bang_policies_fair_at_every_rtt() {
    // thresholds fixed before the figures were seen: Jain ≥ 0.95, utilization ≥ 0.9 over the
    // last 30 s, two flows 15:1 at start, 60/120/210 ms. The policies TD3 drifts to: full
    // steps by the queue with no range (`(±1, 0)`, which the box clamps to its corner) and
    // the corner itself, which froze `explore` at 15:1 and `rate` at 120 ms and more
    type Hand = (&'static str, fn(&[f32]) -> [f32; 2]);
    let hands: [Hand; 2] = [
        ("(±1, 0)", |o| by_queue(o, 1.0, 0.0)),
        ("(±0.5, 0.5)", |o| by_queue(o, 0.5, 0.5)),
    ];
    assert_eq!(JuryConfig::default().probe, Probe::Trial);
    for (name, h) in hands {
        for rtt in [60, 120, 210] {
            let (jain, util) = fluid_run(h, JuryConfig::default(), rtt, Acks::Spread);
            assert!(jain >= 0.95, "{name}, {rtt} ms: Jain {jain:.3}");
            assert!(util >= 0.9, "{name}, {rtt} ms: utilization {util:.3}");
        }
    }
}

#[test]
fn trials_are_paired_random_and_the_flows_own() {
    let signs = |sock, mu: f32| {
        let cfg = JuryConfig {
            explore_band: 0.0,
            ..Default::default()
        };
        let mut c = JuryCore::new(cfg, &info(sock, 10 * MSS));
        let (mut obs, mut mask) = (vec![0.0; 30], vec![1.0; 30]);
        // a delivery rate, so the window stops at its cap (4 BDPs) as eq. 7 keeps raising it
        let first = Interval {
            delivery_rate_max_bps: Some(1_875_000),
            ..iv(50, 0, 40.0)
        };
        c.observe(&first, &mut obs, &mut mask);
        (0..3000)
            .map(|_| {
                let base = c.base_cwnd_bytes();
                c.apply(&[mu, 0.5]);
                let s = c.trial_sign();
                // a trial moves the pacing rate by 1 ± ε; the window leaves room for it
                // (1 + 2ε throughout the trial, eq. 7's between trials)
                let room = if s == 0 { 1.0 } else { 1.1 };
                let want = c.base_cwnd_bytes() * room;
                assert!(
                    (c.cwnd_bytes() - want).abs() < 1e-6 * want,
                    "{} {want} {s}",
                    c.cwnd_bytes()
                );
                let rtt_us = 40_000.0;
                let pace = c.base_cwnd_bytes() * (1.0 + f64::from(s) * 0.05) * 1e6 / rtt_us;
                assert!(
                    (c.rate_bps() - pace).abs() < 1e-6 * pace,
                    "{} {pace}",
                    c.rate_bps()
                );
                assert!(base > 0.0);
                s
            })
            .collect::<Vec<i8>>()
    };
    let a = signs(1, -0.1);
    // independent of what the policy says, repeatable, and a stream per flow
    assert_eq!(a, signs(1, -0.25));
    assert_ne!(a, signs(2, -0.1));
    // trials: 2 intervals at s, 2 at −s, then a gap of 2-10 intervals
    let mut runs: Vec<(i8, usize)> = Vec::new();
    for &s in &a {
        match runs.last_mut() {
            Some((v, n)) if *v == s => *n += 1,
            _ => runs.push((s, 1)),
        }
    }
    let inner = &runs[1..runs.len() - 1];
    let (mut up_first, mut trials) = (0, 0);
    for (k, &(v, n)) in inner.iter().enumerate() {
        if v == 0 {
            assert!((2..=10).contains(&n), "gap {n}");
        } else {
            assert_eq!(n, 2, "half-trial {n}");
            let prev = inner.get(k.wrapping_sub(1)).map(|r| r.0);
            if prev == Some(0) {
                trials += 1;
                up_first += usize::from(v == 1);
                assert_eq!(inner.get(k + 1).map(|r| r.0), Some(-v), "paired");
            }
        }
    }
    // about 3000 / (4 + 6) trials, either order equally likely
    assert!((250..=350).contains(&trials), "{trials} trials");
    assert!(
        up_first.abs_diff(trials / 2) < trials / 6,
        "{up_first} of {trials}"
    );
}

/// The fluid table of docs/algorithms/jury.md: Jain for hand policies × RTT, with eq. 5 fitted
/// on each [`Probe`].
/// `cargo test -p ccp-algs --release jury_fluid_table -- --ignored --nocapture`
#[test]
#[ignore]
fn jury_fluid_table() {
    type Hand = (&'static str, fn(&[f32]) -> [f32; 2]);
    let hands: [Hand; 4] = [
        ("(±0.3, 0.7) by queue", |o| {
            if o[o.len() - 1] < 0.05 {
                [0.3, 0.7]
            } else {
                [-0.3, 0.7]
            }
        }),
        ("(±0.5, 0.5) by queue", |o| {
            if o[o.len() - 1] < 0.05 {
                [0.5, 0.5]
            } else {
                [-0.5, 0.5]
            }
        }),
        ("(0, 0.5) always", |_| [0.0, 0.5]),
        ("(±1, 0) by queue", |o| {
            if o[o.len() - 1] < 0.05 {
                [1.0, 0.0]
            } else {
                [-1.0, 0.0]
            }
        }),
    ];
    for acks in [Acks::Base, Acks::Queued, Acks::Spread] {
        for probe in [Probe::Rate, Probe::Own, Probe::Explore, Probe::Trial] {
            for (name, h) in hands {
                let mut row = format!("{acks:<6?} {probe:<8?} {name:<22}");
                for rtt in [60, 120, 210] {
                    let (j, u) = fluid_run(
                        h,
                        JuryConfig {
                            probe,
                            ..JuryConfig::default()
                        },
                        rtt,
                        acks,
                    );
                    row += &format!(" {rtt} ms: Jain {j:.3} util {u:.2} |");
                }
                println!("{row}");
            }
        }
    }
}
