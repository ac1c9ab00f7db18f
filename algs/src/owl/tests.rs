//! Owl's unit tests: the spec and layout, features and state masking on hand-made intervals,
//! the window's phases and the action map, bad inputs, and eq. 7 on hand-computed values.

use super::core::{COUNT_LOG2_MAX, INFLATION_LOG2_MAX, RTT_LOG2_MAX};
use super::*;
use crate::learned::LearnedAlgorithm;
use crate::netstats::NetStats;
use crate::signals::Interval;

const MSS: u32 = 1000;

fn info() -> FlowInfo {
    FlowInfo {
        sock_id: 1,
        mss: MSS,
        init_cwnd_bytes: 10 * MSS,
        preference: Default::default(),
    }
}

/// An interval of `ms` acking `pkts` packets at mean and min RTT `rtt_ms`, `lost` lost, 20
/// packets in flight, a 10 Mbit/s delivery-rate sample.
fn iv(pkts: u64, lost: u64, rtt_ms: f64, ms: u64) -> Interval {
    Interval {
        acked_bytes: pkts * u64::from(MSS),
        acked_pkts: pkts,
        lost_pkts: lost,
        rtt_min_us: Some((rtt_ms * 1000.0) as u64),
        rtt_mean_us: Some(rtt_ms * 1000.0),
        rtt_samples: pkts.max(1),
        inflight_bytes: Some(20 * u64::from(MSS)),
        interval_us: ms * 1000,
        delivery_rate_max_bps: Some(1_250_000),
        ..Default::default()
    }
}

fn core(config: OwlConfig) -> OwlCore {
    OwlCore::new(config, &info())
}

fn buffers(c: &OwlCore) -> (Vec<f32>, Vec<f32>) {
    (vec![9.0; c.spec().obs_dim], vec![9.0; c.spec().obs_dim])
}

fn at(f: usize, j: usize) -> usize {
    f * 5 + j
}

/// Slow start 10 → 20 packets, a loss (cwnd = ssthresh = 14), one recovery interval, then
/// congestion avoidance: the policy is due.
fn to_avoidance(c: &mut OwlCore) {
    let (mut obs, mut mask) = buffers(c);
    assert!(!c.observe(&iv(10, 0, 40.0, 40), &mut obs, &mut mask));
    assert_eq!(c.phase(), Phase::SlowStart);
    assert_eq!(c.cwnd_bytes(), 20_000.0);
    assert!(!c.observe(&iv(0, 2, 40.0, 5), &mut obs, &mut mask));
    assert_eq!(c.phase(), Phase::Recovery);
    assert_eq!((c.cwnd_bytes(), c.ssthresh_bytes()), (14_000.0, 14_000.0));
    // 40 ms later 14 of the 20 packets outstanding at the loss are acknowledged: same episode
    assert!(!c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask));
    assert_eq!(c.phase(), Phase::Recovery);
    assert_eq!(c.cwnd_bytes(), 14_000.0);
    assert!(c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask));
    assert_eq!(c.phase(), Phase::CongestionAvoidance);
}

#[test]
fn the_spec_is_a_masked_discrete_policy_over_k_intervals() {
    let owl = Owl::default();
    let s = owl.spec();
    assert_eq!(s.algorithm, "owl");
    assert_eq!(s.obs_dim, 50);
    assert_eq!(
        (s.act_dim, s.act_low.clone(), s.act_high.clone()),
        (1, vec![0.0], vec![6.0])
    );
    assert!(s.masked && s.recurrent_hidden.is_none());
    assert_eq!(owl.discrete_actions(), Some(7));
    assert_eq!(ACTIONS, [-10.0, -3.0, -1.0, 0.0, 1.0, 3.0, 10.0]);
    assert_eq!(ACTIONS[HOLD_ACTION], 0.0);
    assert_eq!(owl.obs_layout(), vec![("e2e", 0..35), ("network", 35..50)]);
    let d = owl.dynamics();
    assert!(d.contains_key("history") && d.contains_key("stats_stale_ms"));
    assert!(!d.contains_key("delta") && !d.contains_key("beta"));
    assert!(!d.contains_key("reward_rate_unit_mbps"));
    assert_eq!(d.len(), 8);
    let p = owl.program();
    assert!(p.name.starts_with("owl"));
    assert!(p.fields.len() <= crate::signals::MAX_REPORT_FIELDS);
    assert!(p.source.contains("Report.inflight_bytes"));
    // a longer history is a longer observation
    let o = Owl::new(OwlConfig {
        history: 8,
        ..Default::default()
    });
    assert_eq!(o.spec().obs_dim, 80);
    assert_eq!(o.obs_layout()[1], ("network", 56..80));
}

#[test]
fn config_defaults_are_the_papers_and_ranges_are_checked() {
    let c = OwlConfig::default();
    c.validate().unwrap();
    assert_eq!(
        (c.history, c.delta, c.beta, c.window_s),
        (5, 0.5, 0.5, 10.0)
    );
    assert_eq!(c.loss_decrease, 0.7);
    let l = OwlConfig::owl_loss();
    assert_eq!((l.beta, l.delta), (0.0, 0.5));
    l.validate().unwrap();
    let e = OwlConfig {
        loss_decrease: 1.0,
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.knob, "loss_decrease");
    assert!(serde_json::from_str::<OwlConfig>(r#"{"histroy": 5}"#).is_err());
}

#[test]
fn features_are_feature_major_oldest_first_and_padding_is_masked() {
    use feature::*;
    let mut c = core(OwlConfig::default());
    let (mut obs, mut mask) = buffers(&c);
    // slow start: no decision, but the row is kept
    assert!(!c.observe(&iv(10, 0, 40.0, 40), &mut obs, &mut mask));
    // RTT doubles over the 40 ms minimum, 1 of 41 resolved packets lost
    let mut second = iv(40, 1, 80.0, 40);
    second.rtt_min_us = Some(80_000);
    c.observe(&second, &mut obs, &mut mask);
    let (obs, mask) = c.features();
    // two intervals seen: slots 0..3 are padding (zero, masked)
    for f in 0..FEATURES_PER_INTERVAL {
        for j in 0..3 {
            assert_eq!((obs[at(f, j)], mask[at(f, j)]), (0.0, 0.0), "f {f} j {j}");
        }
    }
    // the first interval: after slow start the window is 20 packets
    let log = |n: f64| ((1.0 + n).log2() / COUNT_LOG2_MAX) as f32;
    assert_eq!(obs[at(CWND, 3)], log(20.0));
    assert_eq!(
        obs[at(RTT, 3)],
        ((1.0f64 + 40.0).log2() / RTT_LOG2_MAX) as f32
    );
    assert_eq!(obs[at(RTT_INFLATION, 3)], 0.0);
    assert_eq!(obs[at(DELIVERED, 3)], log(10.0));
    // the second: a loss in slow start cuts the window to 0.7 × 20 = 14 packets
    assert_eq!(obs[at(CWND, 4)], log(14.0));
    assert_eq!(
        obs[at(RTT, 4)],
        ((1.0f64 + 80.0).log2() / RTT_LOG2_MAX) as f32
    );
    assert_eq!(obs[at(RTT_INFLATION, 4)], (1.0 / INFLATION_LOG2_MAX) as f32);
    // ΔRTT = 40 ms over RTT_min 40 ms: the bound
    assert_eq!(obs[at(RTT_VARIATION, 4)], 1.0);
    // 40 packets in 40 ms at an 80 ms RTT: 80 per RTT
    assert_eq!(obs[at(DELIVERED, 4)], log(80.0));
    assert_eq!(obs[at(LOSS, 4)], (1.0f64 / 41.0) as f32);
    assert_eq!(obs[at(INFLIGHT, 4)], log(20.0));
    for f in 0..E2E_FEATURES {
        assert_eq!((mask[at(f, 3)], mask[at(f, 4)]), (1.0, 1.0), "f {f}");
    }
}

#[test]
fn absent_network_statistics_are_masked_and_the_known_share_is_zero() {
    use feature::*;
    let mut c = core(OwlConfig::default());
    to_avoidance(&mut c);
    let (mut obs, mut mask) = buffers(&c);
    assert!(c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask));
    for j in 0..5 {
        assert_eq!((obs[at(PNC, j)], mask[at(PNC, j)]), (0.0, 0.0));
        assert_eq!((obs[at(PNA, j)], mask[at(PNA, j)]), (0.0, 0.0));
        assert_eq!(
            (obs[at(KNOWN_SHARE, j)], mask[at(KNOWN_SHARE, j)]),
            (0.0, 1.0)
        );
    }
    // what observe wrote is what features() says
    assert_eq!((obs, mask), c.features());
}

#[test]
fn fresh_statistics_are_unmasked_and_stale_ones_masked() {
    use feature::*;
    let mut c = core(OwlConfig::default());
    assert!(c.wants_network_stats());
    to_avoidance(&mut c);
    let (mut obs, mut mask) = buffers(&c);
    let s = NetStats::new(255.0, 0.25, 0.4, 1, 0).unwrap();
    c.network_stats(Some(&s));
    assert!(c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask));
    assert_eq!(obs[at(PNC, 4)], (8.0 / COUNT_LOG2_MAX) as f32);
    assert_eq!(obs[at(PNA, 4)], 0.25);
    assert_eq!(obs[at(KNOWN_SHARE, 4)], 0.4);
    assert_eq!((mask[at(PNC, 4)], mask[at(PNA, 4)]), (1.0, 1.0));
    // the older rows were built without a sample and stay masked
    assert_eq!(mask[at(PNC, 3)], 0.0);
    // 2.4 s more without a new sample: still fresh (2.44 s old, the bound is 2.5 s)
    for _ in 0..60 {
        c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask);
    }
    assert_eq!(mask[at(PNA, 4)], 1.0);
    c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask);
    c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask);
    // 2.52 s: stale, masked, nothing known
    assert_eq!((obs[at(PNA, 4)], mask[at(PNA, 4)]), (0.0, 0.0));
    assert_eq!(
        (obs[at(KNOWN_SHARE, 4)], mask[at(KNOWN_SHARE, 4)]),
        (0.0, 1.0)
    );
    // the row before still carries the sample as it was then
    assert_eq!((obs[at(PNA, 3)], mask[at(PNA, 3)]), (0.25, 1.0));
    // a new sample unmasks at once
    let s2 = NetStats::new(0.0, 0.9, 1.0, 2, 0).unwrap();
    c.network_stats(Some(&s2));
    c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask);
    assert_eq!((obs[at(PNA, 4)], mask[at(PNA, 4)]), (0.9, 1.0));
    assert_eq!((obs[at(PNC, 4)], mask[at(PNC, 4)]), (0.0, 1.0));
    // the source has none any more: masked at the next report
    c.network_stats(None);
    c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask);
    assert_eq!(mask[at(PNA, 4)], 0.0);
    // a sample that was already 3 s old when it arrived is stale on arrival
    let old = NetStats::new(10.0, 0.5, 1.0, 3, 3_000_000).unwrap();
    c.network_stats(Some(&old));
    c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask);
    assert_eq!(mask[at(PNA, 4)], 0.0);
}

#[test]
fn actions_move_the_window_by_the_papers_steps_in_congestion_avoidance() {
    let mut c = core(OwlConfig::default());
    to_avoidance(&mut c);
    c.apply(&[6.0]);
    assert_eq!(c.cwnd_bytes(), 24_000.0);
    let w = c.cwnd_bytes();
    for (i, d) in ACTIONS.iter().enumerate() {
        let before = c.cwnd_bytes();
        let a = c.apply(&[i as f32]);
        assert_eq!(c.cwnd_bytes(), before + d * f64::from(MSS), "action {i}");
        assert_eq!(a.cwnd_bytes, Some(c.cwnd_bytes() as u32));
        assert_eq!(c.last_delta_pkts(), *d);
        // one RTT (40 ms) between decisions
        assert_eq!(a.report_interval_us, Some(40_000));
        assert!(a.rate_bps.is_none());
    }
    // −10 −3 −1 +0 +1 +3 +10 sums to 0
    assert_eq!(c.cwnd_bytes(), w);
    // a decrease lowers ssthresh with it (the loop went down to 10 packets): the next report
    // is no slow start
    assert_eq!(c.ssthresh_bytes(), 10_000.0);
    c.apply(&[0.0]);
    assert_eq!(c.cwnd_bytes(), 14_000.0);
    c.apply(&[0.0]);
    assert_eq!(c.cwnd_bytes(), 4_000.0);
    assert_eq!(c.ssthresh_bytes(), 4_000.0);
    let (mut obs, mut mask) = buffers(&c);
    assert!(c.observe(&iv(4, 0, 40.0, 40), &mut obs, &mut mask));
    assert_eq!(c.cwnd_bytes(), 4_000.0);
    // the floor: min_cwnd_pkts (2)
    for _ in 0..10 {
        c.apply(&[0.0]);
    }
    assert_eq!(c.cwnd_bytes(), 2_000.0);
    assert_eq!(c.counts(), (20, 0));
}

#[test]
fn slow_start_and_loss_recovery_are_standard_tcp_without_the_policy() {
    let mut c = core(OwlConfig::default());
    let (mut obs, mut mask) = buffers(&c);
    // slow start doubles per window of ACKs
    for w in [20.0, 40.0, 80.0] {
        assert!(!c.observe(&iv(w as u64 / 2, 0, 40.0, 40), &mut obs, &mut mask));
        assert_eq!(c.cwnd_bytes(), w * 1000.0);
    }
    // a loss: ssthresh = cwnd = 0.7 × 80
    assert!(!c.observe(&iv(0, 3, 40.0, 5), &mut obs, &mut mask));
    assert_eq!((c.cwnd_bytes(), c.ssthresh_bytes()), (56_000.0, 56_000.0));
    // more losses in the episode change nothing, and the window holds in recovery
    assert!(!c.observe(&iv(30, 2, 40.0, 20), &mut obs, &mut mask));
    assert_eq!(c.cwnd_bytes(), 56_000.0);
    assert_eq!(c.phase(), Phase::Recovery);
    // the episode ends: congestion avoidance, the policy decides
    assert!(c.observe(&iv(56, 0, 40.0, 40), &mut obs, &mut mask));
    assert_eq!(c.phase(), Phase::CongestionAvoidance);
    // a loss in avoidance is a new episode
    c.apply(&[6.0]);
    assert_eq!(c.cwnd_bytes(), 66_000.0);
    assert!(!c.observe(&iv(10, 1, 40.0, 10), &mut obs, &mut mask));
    assert_eq!(c.cwnd_bytes(), (66_000.0f64 * 0.7).round());
    // a timeout: one packet, slow start back to ssthresh
    let mut t = iv(0, 0, 40.0, 300);
    t.timeout = true;
    let mut c = core(OwlConfig::default());
    assert!(!c.observe(&iv(10, 0, 40.0, 40), &mut obs, &mut mask));
    assert!(!c.observe(&t, &mut obs, &mut mask));
    assert_eq!((c.cwnd_bytes(), c.ssthresh_bytes()), (1_000.0, 14_000.0));
    assert_eq!(c.phase(), Phase::SlowStart);
    assert!(!c.observe(&iv(1, 0, 40.0, 40), &mut obs, &mut mask));
    assert_eq!(c.cwnd_bytes(), 2_000.0);
    // slow start stops at ssthresh: the rest is the policy's
    assert!(!c.observe(&iv(100, 0, 40.0, 40), &mut obs, &mut mask));
    assert_eq!(c.cwnd_bytes(), 14_000.0);
}

#[test]
fn no_decision_without_acks_or_an_rtt() {
    let mut c = core(OwlConfig::default());
    to_avoidance(&mut c);
    let (mut obs, mut mask) = buffers(&c);
    assert!(!c.observe(&iv(0, 0, 40.0, 40), &mut obs, &mut mask));
    // a fresh flow in avoidance-like state has no RTT: nothing to decide on
    let mut fresh = core(OwlConfig::default());
    let no_rtt = Interval {
        rtt_min_us: None,
        rtt_mean_us: None,
        ..iv(0, 1, 40.0, 10)
    };
    assert!(!fresh.observe(&no_rtt, &mut obs, &mut mask));
    assert!(!fresh.observe(
        &Interval {
            rtt_min_us: None,
            rtt_mean_us: None,
            ..iv(20, 0, 40.0, 200)
        },
        &mut obs,
        &mut mask
    ));
    // without a sample the RTT features are absent, not zero
    let (_, m) = fresh.features();
    assert_eq!(m[at(feature::RTT, 4)], 0.0);
    assert_eq!(m[at(feature::CWND, 4)], 1.0);
}

#[test]
fn a_bad_index_holds_the_window() {
    let mut c = core(OwlConfig::default());
    to_avoidance(&mut c);
    let w = c.cwnd_bytes();
    for bad in [
        &[f32::NAN][..],
        &[f32::INFINITY],
        &[f32::NEG_INFINITY],
        &[7.0],
        &[-1.0],
        &[1e30],
        &[],
    ] {
        c.apply(bad);
        assert_eq!(c.cwnd_bytes(), w, "{bad:?}");
        assert_eq!(c.last_delta_pkts(), 0.0);
    }
    assert_eq!(c.counts(), (7, 7));
    // close enough to an index is that index
    assert_eq!(action_delta(Some(5.6)), (10.0, true));
    assert_eq!(action_delta(Some(-0.4)), (-10.0, true));
    assert_eq!(action_delta(Some(6.6)), (0.0, false));
}

#[test]
fn bad_datapath_values_stay_bounded() {
    let mut c = core(OwlConfig::default());
    to_avoidance(&mut c);
    let (mut obs, mut mask) = buffers(&c);
    let wild = [
        Interval {
            acked_bytes: u64::MAX,
            acked_pkts: u64::MAX,
            lost_pkts: u64::MAX,
            rtt_min_us: Some(0),
            rtt_mean_us: Some(f64::NAN),
            rtt_last_us: Some(u64::MAX),
            inflight_bytes: Some(u64::MAX),
            interval_us: 0,
            delivery_rate_max_bps: Some(u64::MAX),
            ..Default::default()
        },
        Interval {
            acked_pkts: 5,
            acked_bytes: 5000,
            rtt_min_us: Some(1),
            rtt_mean_us: Some(f64::INFINITY),
            interval_us: u64::MAX,
            ..Default::default()
        },
        Interval {
            acked_pkts: 5,
            acked_bytes: 5000,
            rtt_min_us: Some(1),
            rtt_mean_us: Some(0.0),
            interval_us: 1,
            ..Default::default()
        },
        Interval {
            acked_pkts: 5,
            acked_bytes: 5000,
            rtt_min_us: Some(1),
            rtt_mean_us: Some(99_999_999.0),
            interval_us: 1,
            ..Default::default()
        },
    ];
    for w in &wild {
        c.observe(w, &mut obs, &mut mask);
        let (o, m) = c.features();
        assert!(
            o.iter().all(|v| v.is_finite() && (-1.0..=1.0).contains(v)),
            "{w:?}: {o:?}"
        );
        assert!(m.iter().all(|v| *v == 0.0 || *v == 1.0));
        assert!(c.reward().is_finite(), "{w:?}");
        assert!(c.cwnd_bytes().is_finite() && c.cwnd_bytes() >= 1000.0);
        let a = c.apply(&[6.0]);
        assert!(a.report_interval_us.is_some_and(|i| i >= 1));
    }
}

#[test]
fn utility_is_eq_7() {
    let u = |l, p, r| utility(l, p, r, 0.5, 0.5);
    assert_eq!(u(1.0, 0.0, 1.0), 0.5);
    // 0.8 − 0.5·0.8/0.8 − 0.5·log10(2)
    assert!((u(0.8, 0.2, 2.0) - (0.3 - 0.5 * 2f64.log10())).abs() < 1e-12);
    assert!((u(0.8, 0.2, 2.0) - 0.149_485_002_168_009_4).abs() < 1e-12);
    // Owl-Loss: no delay term
    assert!((utility(0.8, 0.2, 2.0, 0.5, 0.0) - 0.3).abs() < 1e-12);
    // an RTT below the minimum is no bonus; p is bounded; bad numbers are finite
    assert_eq!(u(1.0, 0.0, 0.5), 0.5);
    assert!((u(1.0, 1.0, 1.0) - (1.0 - 0.5 / (1.0 - 0.99))).abs() < 1e-9);
    for (l, p, r) in [
        (f64::NAN, 0.0, 1.0),
        (1.0, f64::NAN, 1.0),
        (1.0, 0.0, f64::INFINITY),
    ] {
        assert!(u(l, p, r).is_finite());
    }
    // §V: one sender on a tail-drop link (p = 1 − C/λ above C): with δ = 0.5 the utility
    // peaks at λ = C (eq. 9 with n = 1)
    let best = (1..400)
        .map(|i| f64::from(i) / 100.0)
        .map(|l| {
            let p = if l > 1.0 { 1.0 - 1.0 / l } else { 0.0 };
            (l, utility(l, p, 1.0, 0.5, 0.0))
        })
        .fold((0.0, f64::MIN), |b, x| if x.1 > b.1 { x } else { b });
    assert_eq!(best.0, 1.0);
}

#[test]
fn the_cores_reward_measures_cwnd_over_rtt_in_its_best_delivery_rate() {
    let mut c = core(OwlConfig::default());
    assert_eq!(c.reward(), 0.0);
    to_avoidance(&mut c);
    let (mut obs, mut mask) = buffers(&c);
    // window 14 packets = 14 kB over 40 ms = 350 kB/s; best rate 1.25 MB/s: λ = 0.28
    c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask);
    let lambda = 14_000.0 / 0.04 / 1_250_000.0;
    assert!((c.reward() - 0.5 * lambda).abs() < 1e-12, "{}", c.reward());
    // RTT doubles, 1 in 10 lost (a new loss episode: the reward sees the window before it)
    let mut r = iv(9, 1, 80.0, 40);
    r.rtt_min_us = Some(80_000);
    c.observe(&r, &mut obs, &mut mask);
    let lambda = 14_000.0 / 0.08 / 1_250_000.0;
    let want = lambda - 0.5 * lambda / 0.9 - 0.5 * 2f64.log10();
    assert!(
        (c.reward() - want).abs() < 1e-12,
        "{} vs {want}",
        c.reward()
    );
    // Owl-Loss on the same interval
    let mut l = core(OwlConfig::owl_loss());
    to_avoidance(&mut l);
    l.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask);
    l.observe(&r, &mut obs, &mut mask);
    assert!((l.reward() - (lambda - 0.5 * lambda / 0.9)).abs() < 1e-12);
}

#[test]
fn a_configured_rate_unit_pays_for_filling_the_link() {
    // the same interval as above (14 kB over 40 ms = 350 kB/s, best rate 1.25 MB/s), λ now
    // in units of a 5.6 Mbit/s = 700 kB/s link: half of it, whatever the flow's best rate
    let mut c = core(OwlConfig {
        reward_rate_unit_mbps: 5.6,
        ..Default::default()
    });
    to_avoidance(&mut c);
    let (mut obs, mut mask) = buffers(&c);
    c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask);
    assert!((c.reward() - 0.5 * 0.5).abs() < 1e-12, "{}", c.reward());
    // the same window over half the RTT (a path twice as fast): twice the throughput term
    c.observe(&iv(14, 0, 20.0, 40), &mut obs, &mut mask);
    assert!((c.reward() - 0.5 * 1.0).abs() < 1e-12, "{}", c.reward());
    let bad = OwlConfig {
        reward_rate_unit_mbps: -1.0,
        ..Default::default()
    };
    assert!(bad.validate().is_err());
}

#[test]
fn the_interval_capacity_is_the_rate_unit_when_given() {
    // the interval above (350 kB/s): against 700 kB/s offered, λ = 0.5; against twice that,
    // 0.25; a link that offered nothing pays nothing for sending; a bad capacity keeps the
    // core's own unit
    let mut c = core(OwlConfig::default());
    to_avoidance(&mut c);
    let (mut obs, mut mask) = buffers(&c);
    c.observe(&iv(14, 0, 40.0, 40), &mut obs, &mut mask);
    assert!((c.reward_in_capacity(700_000.0) - 0.5 * 0.5).abs() < 1e-12);
    assert!((c.reward_in_capacity(1_400_000.0) - 0.5 * 0.25).abs() < 1e-12);
    assert_eq!(c.reward_in_capacity(0.0), 0.0);
    assert_eq!(c.reward_in_capacity(f64::NAN), c.reward());
    assert_eq!(c.reward_in_capacity(-1.0), c.reward());
}

#[test]
fn the_rtt_minimum_is_over_the_last_window() {
    let mut c = core(OwlConfig {
        window_s: 1.0,
        ..Default::default()
    });
    to_avoidance(&mut c);
    let (mut obs, mut mask) = buffers(&c);
    // the path's RTT rises to 80 ms for good: after 1 s the minimum is 80 ms, no inflation
    let mut r = iv(14, 0, 80.0, 40);
    c.observe(&r, &mut obs, &mut mask);
    assert_eq!(obs[at(feature::RTT_INFLATION, 4)], 0.25);
    for _ in 0..30 {
        c.observe(&r, &mut obs, &mut mask);
    }
    assert_eq!(obs[at(feature::RTT_INFLATION, 4)], 0.0);
    r.rtt_mean_us = Some(160_000.0);
    c.observe(&r, &mut obs, &mut mask);
    assert_eq!(obs[at(feature::RTT_INFLATION, 4)], 0.25);
}

#[test]
fn a_bare_owl_holds_its_window_in_avoidance_and_takes_network_statistics() {
    let owl = Owl::default();
    let mut f = owl.new_flow(&info());
    assert!(f.wants_network_stats());
    let a = f.initial_action();
    assert_eq!(a.cwnd_bytes, Some(10_000));
    assert_eq!(a.report_interval_us, Some(10_000));
    f.on_report(&iv(10, 0, 40.0, 40));
    let a = f.on_report(&iv(0, 2, 40.0, 5));
    assert_eq!(a.cwnd_bytes, Some(14_000));
    let s = NetStats::new(1.0, 0.5, 1.0, 1, 0).unwrap();
    f.network_stats(Some(&s));
    for _ in 0..50 {
        let a = f.on_report(&iv(14, 0, 40.0, 40));
        assert_eq!(a.cwnd_bytes, Some(14_000));
    }
    let m = f.metrics();
    assert_eq!((m.reports, m.clamped_outputs, m.policy_errors), (52, 0, 0));
    // the controller wrapper forwards statistics only to cores that want them: Jury's don't
    let jury = crate::jury::Jury::default().new_flow(&info());
    assert!(!jury.wants_network_stats());
}
