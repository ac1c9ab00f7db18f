use super::core::*;
use super::*;
use crate::controller::Action;
use crate::signals::Interval;

const MSS: u32 = 1000;

fn info() -> FlowInfo {
    FlowInfo::for_test()
}

/// An epoch in which `pkts` packets were acked (and `lost` lost) at RTT `rtt_ms`, the last
/// ACK arriving at `last_ack_us`.
fn epoch(pkts: f64, lost: u64, rtt_ms: f64, last_ack_us: u64) -> Interval {
    Interval {
        acked_bytes: (pkts * f64::from(MSS)) as u64,
        acked_pkts: pkts as u64,
        lost_pkts: lost,
        rtt_min_us: Some((rtt_ms * 1000.0) as u64),
        rtt_mean_us: Some(rtt_ms * 1000.0),
        rtt_samples: 1,
        last_ack_us: Some(last_ack_us),
        interval_us: 50_000,
        ..Default::default()
    }
}

fn bps_to_pps(a: &Action) -> f64 {
    a.rate_bps.unwrap() as f64 / f64::from(MSS)
}

#[test]
fn program_is_prefixed_and_within_limits() {
    let p = Iris::default().program();
    assert_eq!(p.name, "iris_epoch");
    assert_eq!(p.initial_interval_us, 50_000);
    assert!(p.fields.len() <= crate::signals::MAX_REPORT_FIELDS);
    assert!(p.fields.contains(&fields::LAST_ACK_US));
    assert!(p.fields.contains(&fields::INFLIGHT_BYTES));
}

#[test]
fn config_takes_defaults_and_rejects_unknown_keys() {
    use serde::de::value::{Error, MapDeserializer};
    use serde::Deserialize;
    let c = IrisConfig::deserialize(MapDeserializer::<_, Error>::new(
        [("delta_ms", 2.0f64), ("queue_target_pkts", 20.0)].into_iter(),
    ))
    .unwrap();
    assert_eq!(c.delta_ms, 2.0);
    assert_eq!(c.queue_target_pkts, 20.0);
    assert_eq!(c.expansion, 100.0);
    assert_eq!(c.epoch_ms, 50);
    assert_eq!(c.target, IrisTarget::Min);
    let t = IrisConfig::deserialize(MapDeserializer::<_, Error>::new(
        [("target", "median")].into_iter(),
    ))
    .unwrap();
    assert_eq!(t.target, IrisTarget::Median);
    assert!(IrisConfig::deserialize(MapDeserializer::<_, Error>::new(
        [("bogus", 1u32)].into_iter()
    ))
    .is_err());
}

#[test]
fn cold_start_starts_at_100kbps_and_doubles_each_epoch_until_loss_rises() {
    let mut f = IrisFlow::new(IrisConfig::default(), &info());
    let a0 = f.initial_action();
    assert_eq!(a0.rate_bps, Some(12_500)); // 100 kbit/s
    assert_eq!(a0.report_interval_us, Some(50_000));
    let mut rate = bps_to_pps(&a0);
    let mut t = 0;
    // RTT 40 ms ≤ τ: the paper's setting, one doubling per epoch. Every packet sent is
    // acked, the queue stays empty.
    for i in 0..8 {
        t += 50_000;
        let a = f.on_report(&epoch(rate * 0.05, 0, 40.0, t));
        let next = bps_to_pps(&a);
        if i > 0 {
            assert!(
                (next / rate - 2.0).abs() < 1e-6,
                "epoch {i}: {rate} -> {next}"
            );
        }
        assert_eq!(f.phase(), IrisPhase::ColdStart);
        rate = next;
    }
    // a random loss at the cold start's own rate does not end it…
    t += 50_000;
    let a = f.on_report(&epoch(rate * 0.05, 1, 40.0, t));
    assert_eq!(f.phase(), IrisPhase::ColdStart);
    rate = bps_to_pps(&a);
    // …a rise of the loss rate does, and the first k exists afterwards
    t += 50_000;
    f.on_report(&epoch(
        rate * 0.05 * 0.7,
        (rate * 0.05 * 0.3) as u64,
        40.0,
        t,
    ));
    assert_ne!(f.phase(), IrisPhase::ColdStart);
    assert!(f.k().is_some_and(|k| k > 0.0));
    assert_eq!(
        f.iris_metrics().fits + f.iris_metrics().rejected_fits,
        1,
        "one (first) fit at cold-start exit"
    );
}

#[test]
fn cold_start_doubles_per_rtt_on_long_paths() {
    let mut f = IrisFlow::new(IrisConfig::default(), &info());
    let a0 = f.initial_action();
    let r0 = bps_to_pps(&a0);
    let mut t = 0;
    let mut rate = r0;
    // 400 ms RTT: eight epochs per RTT; the receiving rate lags one RTT behind
    let mut sent = vec![r0; 8];
    for _ in 0..16 {
        t += 50_000;
        let r_lag = sent[sent.len() - 8];
        let a = f.on_report(&epoch(r_lag * 0.05, 0, 400.0, t));
        rate = bps_to_pps(&a);
        sent.push(rate);
    }
    // two RTTs (16 epochs) at 2^(1/8) per epoch: ×4 (srtt converges from the samples)
    let growth = rate / r0;
    assert!(
        (3.5..=4.5).contains(&growth),
        "growth over 2 RTTs = {growth}"
    );
}

#[test]
fn sacked_and_cumulative_acks_count_each_packet_once() {
    let mut f = IrisFlow::new(IrisConfig::default(), &info());
    f.initial_action();
    let mut t = 50_000;
    f.on_report(&epoch(40.0, 0, 40.0, t));
    // a hole: 80 packets SACKed per epoch, the hole declared lost, then repaired by a
    // cumulative ACK that covers the retransmission and the 80 SACKed packets
    let mut rates = vec![];
    for (cum, sacked, lost) in [(0.0, 80, 1), (81.0, 80, 0), (80.0, 0, 0)] {
        t += 50_000;
        let mut iv = epoch(cum, lost, 40.0, t);
        iv.misordered_pkts = sacked;
        f.on_report(&iv);
        rates.push(f.last_recv_pps.unwrap());
    }
    for r in rates {
        assert!((r - 1600.0).abs() < 1.0, "80 packets per 50 ms, got {r}");
    }
}

#[test]
fn timeouts_keep_the_rate_and_the_cold_start() {
    let mut f = IrisFlow::new(IrisConfig::default(), &info());
    f.initial_action();
    f.on_report(&epoch(1.0, 0, 40.0, 50_000));
    let before = f.rate_pps();
    let a = f.on_report(&Interval {
        timeout: true,
        lost_pkts: 500,
        interval_us: 50_000,
        ..Default::default()
    });
    assert_eq!(f.phase(), IrisPhase::ColdStart);
    assert_eq!(
        bps_to_pps(&a),
        (before * f64::from(MSS)).floor() / f64::from(MSS)
    );
    assert_eq!(f.iris_metrics().timeouts, 1);
    assert_eq!(f.iris_metrics().random_loss, 0.0);
}

#[test]
fn cold_start_ends_when_the_link_receives_less_than_was_sent() {
    let mut f = IrisFlow::new(IrisConfig::default(), &info());
    f.initial_action();
    let mut t = 0;
    let mut sent = vec![];
    // RTT 40 ms, no queue visible, no loss: only the receiving rate tells
    for i in 0..12 {
        t += 50_000;
        let x_prev: f64 = sent.last().copied().unwrap_or(12.5);
        let r = x_prev.min(400.0); // the link carries 400 packets/s
        f.on_report(&epoch(r * 0.05, 0, 40.0, t));
        sent.push(f.rate_pps());
        if f.phase() != IrisPhase::ColdStart {
            assert!(i >= 6, "ended at epoch {i}");
            assert!(
                f.rate_pps() <= 450.0,
                "resumes near the link rate: {}",
                f.rate_pps()
            );
            return;
        }
    }
    panic!("cold start did not end: {sent:?}");
}

#[test]
fn least_squares_recovers_a_known_k() {
    // Δrtt = 0.03·(x − r) + 0.2 ms + bounded pseudo-noise
    let k_true = 0.03;
    let mut seed = 12345u64;
    let samples: Vec<(f64, f64)> = (0..200)
        .map(|i| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let noise = ((seed >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * 0.4;
            let u = ((i * 37) % 101) as f64 - 50.0; // −50..50 packets/s
            (u, k_true * u + 0.2 + noise)
        })
        .collect();
    let fit = fit_k(samples.iter().copied(), 10, 1e3, 0.3).unwrap();
    assert!((fit.k - k_true).abs() < 0.002, "k = {}", fit.k);
    assert!((fit.b - 0.2).abs() < 0.05, "b = {}", fit.b);
    assert!(fit.correlation > 0.9);
    assert_eq!(fit.samples, 200);
}

#[test]
fn fit_guards_reject_bad_fits() {
    let line = |k: f64| (0..50).map(move |i| (i as f64 - 25.0, k * (i as f64 - 25.0)));
    assert_eq!(
        fit_k(line(0.03).take(5), 10, 1e3, 0.3),
        Err(FitRejection::TooFewSamples)
    );
    assert_eq!(
        fit_k(line(-0.03), 10, 1e3, 0.3),
        Err(FitRejection::NonPositiveSlope)
    );
    assert_eq!(
        fit_k(line(0.0), 10, 1e3, 0.3),
        Err(FitRejection::NonPositiveSlope)
    );
    // every sample at the same x − r: the slope is not identifiable
    let same = (0..50).map(|i| (100.0, i as f64 * 0.01));
    assert_eq!(fit_k(same, 10, 1e3, 0.3), Err(FitRejection::IllConditioned));
    // nearly the same x − r far from 0: condition number ~ 4·10⁶
    let narrow = (0..50).map(|i| (1000.0 + (i % 2) as f64, (i % 2) as f64));
    assert_eq!(
        fit_k(narrow, 10, 1e3, 0.3),
        Err(FitRejection::IllConditioned)
    );
    // noise only: no correlation
    let noise = (0..50).map(|i| ((i % 7) as f64 - 3.0, ((i * 5) % 3) as f64 - 1.0));
    assert!(matches!(
        fit_k(noise, 10, 1e3, 0.3),
        Err(FitRejection::Uncorrelated | FitRejection::NonPositiveSlope)
    ));
    // NaN/inf samples are skipped, not propagated
    let mixed = line(0.03).chain([(f64::NAN, 1.0), (1.0, f64::INFINITY)]);
    assert!((fit_k(mixed, 10, 1e3, 0.3).unwrap().k - 0.03).abs() < 1e-9);
}

/// A flow that left cold start with k = τ/r on a 1000 packets/s link (0.05 ms/(pkt/s)).
fn steady_flow(cfg: IrisConfig) -> (IrisFlow, u64) {
    let mut f = IrisFlow::new(cfg, &info());
    f.initial_action();
    let mut t = 0;
    for _ in 0..3 {
        t += 50_000;
        f.on_report(&epoch(50.0, 0, 40.0, t));
    }
    t += 50_000;
    f.on_report(&epoch(50.0, 20, 40.0, t)); // loss rise
    if f.phase() == IrisPhase::Drain {
        t += 50_000;
        let mut iv = epoch(50.0, 0, 40.0, t);
        iv.inflight_bytes = Some(0);
        f.on_report(&iv);
    }
    assert_eq!(f.phase(), IrisPhase::Steady);
    (f, t)
}

#[test]
fn rejected_fits_keep_the_previous_k() {
    let (mut f, mut t) = steady_flow(IrisConfig::default());
    let k0 = f.k().unwrap();
    assert!((k0 - 0.05).abs() < 1e-9, "prior k = τ/r = {k0}");
    let rejected = f.iris_metrics().rejected_fits;
    // 6 s of epochs at constant rate and constant RTT: x − r ≈ const, Δrtt = 0
    for _ in 0..120 {
        t += 50_000;
        f.on_report(&epoch(50.0, 0, 46.0, t));
    }
    assert!(f.iris_metrics().rejected_fits > rejected);
    assert_eq!(f.k(), Some(k0));
    assert_eq!(f.iris_metrics().k, k0);
}

#[test]
fn u_and_d_follow_eqs_3_and_6() {
    // 1000 packets/s with 30 ms of queueing: 30 packets queued, B = 10 → U = 0.2
    let u = queue_load_objective(1000.0, 70.0, 40.0, 10.0, 100.0);
    assert!((u - 0.2).abs() < 1e-12);
    let d = expected_rtt_change(u, 3.0);
    assert!((d + 3.0 * 0.2f64.tanh()).abs() < 1e-12);
    assert!(d < 0.0, "above the queue-load target the RTT must fall");
    // empty queue: U = −B/M, d = +δ·tanh(0.1)
    let u0 = queue_load_objective(1000.0, 40.0, 40.0, 10.0, 100.0);
    assert!((u0 + 0.1).abs() < 1e-12);
    assert!(expected_rtt_change(u0, 3.0) > 0.0);
    // exactly B packets queued: no change
    let ub = queue_load_objective(1000.0, 50.0, 40.0, 10.0, 100.0);
    assert!(ub.abs() < 1e-12 && expected_rtt_change(ub, 3.0).abs() < 1e-12);
    // tanh saturates at ±δ
    assert!((expected_rtt_change(1e6, 3.0) + 3.0).abs() < 1e-9);
    assert!((expected_rtt_change(-1e6, 3.0) - 3.0).abs() < 1e-9);
}

#[test]
fn steady_rate_is_r_plus_d_over_k() {
    // no re-probe: the flow below sees an empty queue at capacity for 300 ms
    let (mut f, mut t) = steady_flow(IrisConfig {
        reprobe: false,
        ..Default::default()
    });
    let k = f.k().unwrap();
    let mut set = vec![];
    for _ in 0..6 {
        t += 50_000;
        f.on_report(&epoch(f.rate_pps() * 0.05, 0, 40.0, t));
        set.push(f.rate_pps());
    }
    // 100 ms of queue at 1000 packets/s: 100 packets ≫ B → the rate drops below r.
    // The acked packets left 140 ms + one epoch ago: x_i is 4/5 of the rate set four
    // reports back and 1/5 of the one set three reports back.
    t += 50_000;
    let n = set.len();
    let x_i = 0.8 * set[n - 4] + 0.2 * set[n - 3];
    let a = f.on_report(&epoch(50.0, 0, 140.0, t));
    // srtt is now above τ: r averages the last two epochs (each epoch acks what was
    // set one report earlier)
    let r = (set[n - 2] * 0.05 + 50.0) / 0.1;
    let u = queue_load_objective(x_i, 140.0, 40.0, 10.0, 100.0);
    assert!(u > 0.0);
    let expect = r + expected_rtt_change(u, 3.0) / k;
    assert!((bps_to_pps(&a) - expect).abs() < 1.0, "{a:?} vs {expect}");
    assert!(bps_to_pps(&a) < r);
    assert!((f.iris_metrics().last_u - u).abs() < 1e-9);
    // the cwnd does not bind: at least two rate·srtt
    let srtt = f.metrics().srtt_us / 1e6;
    assert!(f64::from(a.cwnd_bytes.unwrap()) >= 2.0 * expect * srtt * f64::from(MSS) * 0.99);
}

#[test]
fn rates_stay_bounded_for_absurd_inputs() {
    let cfg = IrisConfig::default();
    let lo = cfg.min_rate_kbps * 1000.0 / 8.0;
    let hi = cfg.max_rate_mbps * 1e6 / 8.0;
    let mut f = IrisFlow::new(cfg, &info());
    f.initial_action();
    let absurd = [
        Interval::default(),
        Interval {
            acked_bytes: u64::MAX / 2,
            lost_pkts: u64::MAX / 4,
            last_ack_us: Some(1),
            rtt_mean_us: Some(f64::NAN),
            ..Default::default()
        },
        Interval {
            acked_bytes: u64::MAX / 2,
            last_ack_us: Some(2),
            rtt_min_us: Some(1),
            rtt_mean_us: Some(f64::INFINITY),
            interval_us: 1,
            ..Default::default()
        },
        Interval {
            acked_bytes: 1,
            last_ack_us: Some(u64::MAX),
            rtt_min_us: Some(99_000_000),
            rtt_mean_us: Some(99_000_000.0),
            inflight_bytes: Some(u64::MAX),
            interval_us: u64::MAX / 8,
            ..Default::default()
        },
        Interval {
            timeout: true,
            ..Default::default()
        },
    ];
    for _ in 0..50 {
        for iv in &absurd {
            let a = f.on_report(iv);
            let r = a.rate_bps.unwrap() as f64;
            assert!(r >= lo.floor() && r <= hi, "rate {r}");
            assert!(a.cwnd_bytes.unwrap() >= 4 * MSS);
            assert_eq!(a.report_interval_us, Some(50_000));
            assert!(f.rate_pps().is_finite());
            assert!(f.k().is_none_or(|k| k.is_finite() && k > 0.0));
        }
    }
}

#[test]
fn iris_mid_uses_the_median_and_iris_min_the_minimum() {
    let rtts = [50.0, 80.0, 60.0, 200.0, 70.0];
    for (target, want) in [(IrisTarget::Min, 50.0), (IrisTarget::Median, 70.0)] {
        let cfg = IrisConfig {
            target,
            ..Default::default()
        };
        let mut f = IrisFlow::new(cfg, &info());
        let mut t = 0;
        for r in rtts {
            t += 50_000;
            f.on_report(&epoch(1.0, 0, r, t));
        }
        assert_eq!(f.target_ms(), Some(want), "{target:?}");
        assert_eq!(f.iris_metrics().target_ms, want);
    }
    // even count: mean of the two middle values
    let mut f = IrisFlow::new(
        IrisConfig {
            target: IrisTarget::Median,
            ..Default::default()
        },
        &info(),
    );
    for (i, r) in [40.0, 10.0, 30.0, 20.0].into_iter().enumerate() {
        f.on_report(&epoch(1.0, 0, r, 50_000 * (i as u64 + 1)));
    }
    assert_eq!(f.target_ms(), Some(25.0));
}

#[test]
fn target_window_forgets_old_minimum() {
    let cfg = IrisConfig {
        min_window_s: 10.0,
        ..Default::default()
    };
    let mut f = IrisFlow::new(cfg, &info());
    let mut t = 0;
    t += 50_000;
    f.on_report(&epoch(1.0, 0, 20.0, t));
    for _ in 0..250 {
        t += 50_000;
        f.on_report(&epoch(1.0, 0, 45.0, t));
    }
    // 12.5 s later the 20 ms sample left the 10 s window
    assert_eq!(f.target_ms(), Some(45.0));
}

/// Fluid model of one bottleneck: `capacity` packets/s, `base_ms` RTT, a drop-tail buffer.
/// Returns (mean rate over the last `tail_s`, mean queueing delay there, flow).
fn fluid_run(
    capacity: f64,
    base_ms: f64,
    buffer_pkts: f64,
    secs: f64,
    tail_s: f64,
) -> (f64, f64, IrisFlow) {
    let mut f = IrisFlow::new(IrisConfig::default(), &info());
    let mut rate = bps_to_pps(&f.initial_action());
    let dt = 1e-3;
    let half = (base_ms / 2.0) as usize; // ms
    let steps = (secs / dt) as usize;
    let mut sent = vec![0.0f64; steps + 1]; // sending rate per ms
    let mut dep = vec![0.0f64; steps + 1]; // bottleneck departures per ms (packets)
    let mut qd = vec![0.0f64; steps + 1]; // queueing delay at departure (ms)
    let mut lost = vec![0.0f64; steps + 1];
    let mut q = 0.0f64;
    let (mut acked, mut nlost, mut rtt_sum, mut rtt_n, mut rtt_min) =
        (0.0, 0.0, 0.0, 0.0, f64::MAX);
    let mut last_ack = None;
    let (mut tail_rate, mut tail_q, mut tail_n) = (0.0, 0.0, 0.0);
    let (mut inflight, mut since) = (0.0f64, 0usize);
    for s in 0..steps {
        sent[s] = rate * dt;
        inflight += sent[s];
        let arr = if s >= half { sent[s - half] } else { 0.0 };
        q += arr;
        let out = q.min(capacity * dt);
        q -= out;
        if q > buffer_pkts {
            lost[s] = q - buffer_pkts;
            q = buffer_pkts;
        }
        dep[s] = out;
        qd[s] = q / capacity * 1000.0;
        if s >= half {
            let a = dep[s - half];
            let l = lost[s - half];
            inflight -= a + l;
            if a > 0.0 {
                acked += a;
                let rtt = base_ms + qd[s - half];
                rtt_sum += rtt * a;
                rtt_n += a;
                rtt_min = f64::min(rtt_min, rtt);
                last_ack = Some(s as u64 * 1000);
            }
            nlost += l;
        }
        if s as f64 * dt >= secs - tail_s {
            tail_rate += dep[s] / dt;
            tail_q += qd[s];
            tail_n += 1.0;
        }
        since += 1;
        if since >= 50 && last_ack.is_some() {
            let iv = Interval {
                acked_bytes: (acked * f64::from(MSS)) as u64,
                lost_pkts: nlost as u64,
                rtt_min_us: Some((rtt_min * 1000.0) as u64),
                rtt_mean_us: Some(rtt_sum / rtt_n * 1000.0),
                rtt_samples: 1,
                last_ack_us: last_ack,
                inflight_bytes: Some((inflight.max(0.0) * f64::from(MSS)) as u64),
                interval_us: since as u64 * 1000,
                ..Default::default()
            };
            nlost -= nlost.floor();
            rate = bps_to_pps(&f.on_report(&iv));
            if std::env::var_os("IRIS_TRACE").is_some() {
                let m = f.iris_metrics();
                eprintln!(
                    "t={:.2} ph={:?} rtt={:.1} T={:.1} U={:.3} d={:.3} k={:.4} x={:.0} q={:.1}",
                    s as f64 * dt,
                    m.phase,
                    rtt_sum / rtt_n,
                    m.target_ms,
                    m.last_u,
                    m.last_d_ms,
                    m.k,
                    rate,
                    q
                );
            }
            (acked, rtt_sum, rtt_n, rtt_min, since) = (0.0, 0.0, 0.0, f64::MAX, 0);
        }
    }
    (tail_rate / tail_n, tail_q / tail_n, f)
}

#[test]
fn fluid_link_converges_to_capacity_with_b_packets_queued() {
    // 1000 packets/s (8 Mbit/s at 1000 B), 40 ms, 1 BDP of buffer
    let (rate, qdelay, f) = fluid_run(1000.0, 40.0, 40.0, 30.0, 10.0);
    let m = f.iris_metrics();
    assert!(rate > 900.0, "rate {rate}, {m:?}");
    // B = 10 packets at 1000 packets/s = 10 ms of queueing
    assert!(qdelay > 2.0 && qdelay < 25.0, "queueing {qdelay} ms, {m:?}");
    assert!(m.fits >= 1, "{m:?}");
    // the queue model's k = τ/C = 0.05 ms per packet/s. OLS with noise in the regressor
    // x − r (per-epoch r jitters with the ACK clock) is biased towards 0 (regression
    // dilution), so the fitted k is smaller: within a factor 4 here.
    assert!(m.k > 0.05 / 4.0 && m.k < 0.05 * 4.0, "{m:?}");
}
