//! MOCC's unit tests: the core and the governors, one at a time and together.

use std::sync::Arc;

use super::governors::peers::PeerSlot;
use super::*;
use crate::policy::{Policy, PolicyError};
use crate::pref::Preference;
use crate::signals::Interval;

const MSS: u32 = 1000;

fn info() -> FlowInfo {
    FlowInfo::for_test()
}

/// Eq. 1 alone: no start-up, no additive increase, no rate floor in packets, no share
/// probe (each tested on its own).
fn no_startup() -> MoccConfig {
    MoccConfig {
        startup: false,
        ..pure()
    }
}

/// The defaults without the additive increase, the rate floor in packets and the probe.
fn pure() -> MoccConfig {
    MoccConfig {
        additive_increase_pkts: 0.0,
        min_rate_pkts: 0.0,
        share_probe_every_mis: 0,
        ..Default::default()
    }
}

/// Start-up, then eq. 1 alone.
fn eq1_only() -> Mocc {
    Mocc::new(pure())
}

/// An MI of `len_ms` in which `acked` bytes were acked (`acked/MSS` packets) at mean RTT
/// `rtt_ms`, ending with `inflight` bytes in flight.
fn mi(acked: u64, inflight: u64, rtt_ms: f64, len_ms: f64) -> Interval {
    Interval {
        acked_bytes: acked,
        acked_pkts: acked / u64::from(MSS),
        rtt_min_us: Some((rtt_ms * 1000.0) as u64),
        rtt_mean_us: Some(rtt_ms * 1000.0),
        rtt_samples: 1 + acked / u64::from(MSS),
        inflight_bytes: Some(inflight),
        interval_us: (len_ms * 1000.0) as u64,
        ..Default::default()
    }
}

fn observe(c: &mut MoccCore, iv: &Interval) -> (bool, [f32; OBS_DIM]) {
    let mut obs = [f32::NAN; OBS_DIM];
    let mut mask = [1.0; OBS_DIM];
    let d = c.observe(iv, &mut obs, &mut mask);
    (d, obs)
}

fn newest(obs: &[f32; OBS_DIM]) -> [f32; 3] {
    [obs[27], obs[28], obs[29]]
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn program_is_prefixed_and_reads_the_needed_fields() {
    let p = Mocc::default().program();
    assert_eq!(p.name, "mocc_mi");
    assert_eq!(p.initial_interval_us, 100_000);
    assert!(p.fields.len() <= crate::signals::MAX_REPORT_FIELDS);
    for f in [
        fields::ACKED_BYTES,
        fields::ACKED_PKTS,
        fields::LOST_PKTS,
        fields::TIMEOUT,
        fields::RTT_MIN_US,
        fields::RTT_SUM_US,
        fields::RTT_CNT,
        fields::INFLIGHT_BYTES,
        fields::SEND_RATE,
        fields::INTERVAL_US,
    ] {
        assert!(p.fields.contains(&f), "missing {f}");
    }
    // a report in program order decodes into what the core reads
    let vals: Vec<u64> = p
        .fields
        .iter()
        .map(|f| match *f {
            fields::ACKED_BYTES => 5000,
            fields::INFLIGHT_BYTES => 7000,
            fields::RTT_SUM_US => 80_000,
            fields::RTT_CNT => 2,
            _ => 1,
        })
        .collect();
    let iv = Interval::from_fields(&p.fields, &vals);
    assert_eq!(iv.acked_bytes, 5000);
    assert_eq!(iv.inflight_bytes, Some(7000));
    assert_eq!(iv.rtt_mean_us, Some(40_000.0));
}

#[test]
fn config_takes_defaults_and_rejects_unknown_keys() {
    use serde::de::value::{Error, MapDeserializer};
    use serde::Deserialize;
    let c = MoccConfig::deserialize(MapDeserializer::<_, Error>::new(
        [("alpha", 0.05f64), ("max_mi_ms", 200.0)].into_iter(),
    ))
    .unwrap();
    assert_eq!(c.alpha, 0.05);
    assert_eq!(c.max_mi_ms, 200.0);
    assert_eq!(c.min_mi_ms, 5.0);
    assert!(c.startup);
    assert_eq!(MoccConfig::default().alpha, 0.025);
    assert!(MoccConfig::deserialize(MapDeserializer::<_, Error>::new(
        [("bogus", 1u32)].into_iter()
    ))
    .is_err());
}

#[test]
fn spec_declares_the_layout() {
    let m = Mocc::default();
    let s = LearnedAlgorithm::spec(&m);
    assert_eq!(s.algorithm, "mocc");
    assert_eq!(s.algorithm, m.name());
    assert_eq!(s.feature_version, 1);
    assert_eq!(s.obs_dim, 33);
    assert_eq!(s.act_dim, 1);
    assert_eq!(s.act_low, vec![-5.0]);
    assert_eq!(s.act_high, vec![5.0]);
    assert_eq!(s.recurrent_hidden, None);
    assert!(!s.masked);
    assert_eq!(m.new_core(&info()).spec(), &s);
}

#[test]
fn sending_ratio_by_conservation_and_fallbacks() {
    let mut c = MoccCore::new(no_startup(), &info());
    let x0 = c.rate_bps();
    // first MI: no previous inflight → rate × MI length
    let (d, o) = observe(&mut c, &mi(10_000, 20_000, 40.0, 40.0));
    assert!(d);
    let s = *c.last_sample().unwrap();
    assert!(close(s.sent_bytes, x0 * 0.04));
    assert!(close(s.l, x0 * 0.04 / 10_000.0));
    assert_eq!(o[27], (s.l - 1.0) as f32);
    // inflight grows by 5000 while 10000 are acked: sent 15000, l = 1.5
    let (_, o) = observe(&mut c, &mi(10_000, 25_000, 40.0, 40.0));
    assert_eq!(c.last_sample().unwrap().sent_bytes, 15_000.0);
    assert_eq!(o[27], 0.5);
    // losses count as sent: 2 packets lost, inflight −2000: sent 10000, l = 1
    let mut iv = mi(10_000, 23_000, 40.0, 40.0);
    iv.lost_pkts = 2;
    let (_, o) = observe(&mut c, &iv);
    assert_eq!(c.last_sample().unwrap().sent_bytes, 10_000.0);
    assert_eq!(o[27], 0.0);
    // draining: inflight falls by 5000: sent 5000, l = 0.5
    let (_, o) = observe(&mut c, &mi(10_000, 18_000, 40.0, 40.0));
    assert_eq!(o[27], -0.5);
    // nothing acked: l at its bound
    let mut stall = mi(0, 0, 40.0, 40.0);
    stall.rtt_mean_us = None;
    stall.rtt_min_us = None;
    stall.rtt_samples = 0;
    stall.inflight_bytes = Some(0); // volatile field of an MI without ACKs
    let (_, o) = observe(&mut c, &stall);
    assert_eq!(c.last_sample().unwrap().l, L_MAX);
    assert_eq!(o[27], 3.0);
    // the untrusted inflight of the stall is not used next: fallback to rate × MI
    let x = c.rate_bps();
    observe(&mut c, &mi(10_000, 18_000, 40.0, 40.0));
    assert!(close(c.last_sample().unwrap().sent_bytes, x * 0.04));
    // huge ratios are clamped
    observe(&mut c, &mi(1000, 1_000_000, 40.0, 40.0));
    assert_eq!(c.last_sample().unwrap().l, L_MAX);
}

#[test]
fn latency_ratio_against_min_mean_and_gradient_sign() {
    let mut c = MoccCore::new(no_startup(), &info());
    let (_, o) = observe(&mut c, &mi(10_000, 10_000, 40.0, 40.0));
    assert_eq!(newest(&o)[1], 0.0); // p = 1
    assert_eq!(newest(&o)[2], 0.0); // no previous MI
    let (_, o) = observe(&mut c, &mi(10_000, 10_000, 60.0, 40.0));
    assert_eq!(newest(&o)[1], 0.5); // p = 60/40
    assert_eq!(newest(&o)[2], 0.5); // +20 ms over a 40 ms MI
    let (_, o) = observe(&mut c, &mi(10_000, 10_000, 50.0, 40.0));
    assert_eq!(newest(&o)[1], 0.25);
    assert_eq!(newest(&o)[2], -0.25);
    // a new minimum mean resets the ratio to 1
    let (_, o) = observe(&mut c, &mi(10_000, 10_000, 30.0, 40.0));
    assert_eq!(newest(&o)[1], 0.0);
    assert_eq!(newest(&o)[2], -0.5);
    // an MI without RTT samples keeps p and has q = 0
    observe(&mut c, &mi(10_000, 10_000, 45.0, 40.0));
    let mut iv = mi(10_000, 10_000, 45.0, 40.0);
    iv.rtt_mean_us = None;
    iv.rtt_min_us = None;
    let (_, o) = observe(&mut c, &iv);
    assert_eq!(newest(&o)[1], 0.5);
    assert_eq!(newest(&o)[2], 0.0);
    // bounds: p ≤ 5, |q| ≤ 1
    let (_, o) = observe(&mut c, &mi(10_000, 10_000, 1000.0, 40.0));
    assert_eq!(newest(&o)[1], 4.0);
    assert_eq!(newest(&o)[2], 1.0);
    let (_, o) = observe(&mut c, &mi(10_000, 10_000, 30.0, 40.0));
    assert_eq!(newest(&o)[2], -1.0);
    assert!(o.iter().all(|v| v.is_finite()));
}

#[test]
fn history_pads_neutral_shifts_oldest_first_and_ends_with_w() {
    let mut c = MoccCore::new(no_startup(), &info());
    let (_, o) = observe(&mut c, &mi(10_000, 10_000, 40.0, 40.0));
    // one MI: 9 neutral (zero) MIs first, then the measured one
    assert!(o[..27].iter().all(|v| *v == 0.0));
    assert_eq!(&o[30..], &[0.4f32, 0.5, 0.1]);
    // MI k has mean RTT 40 + k ms (p − 1 = k/40), 12 MIs in all
    let mut last = o;
    for k in 1..12 {
        let (_, o) = observe(&mut c, &mi(10_000, 10_000, 40.0 + k as f64, 40.0));
        // the previous newest moved one slot towards the front
        assert_eq!(&o[24..27], &last[27..30]);
        assert_eq!(o[28], (k as f32) / 40.0);
        last = o;
    }
    // oldest first: slot i holds MI 2 + i
    for i in 0..HISTORY {
        assert!((last[3 * i + 1] - (2 + i) as f32 / 40.0).abs() < 1e-6);
    }
    assert_eq!(c.features(), last);
}

#[test]
fn startup_doubles_per_mi_then_hands_over_on_loss() {
    let mut c = MoccCore::new(MoccConfig::default(), &info());
    let a0 = c.initial_action();
    // 10 packets per 100 ms
    assert_eq!(a0.rate_bps, Some(100_000));
    assert_eq!(a0.report_interval_us, Some(100_000));
    assert_eq!(c.phase(), MoccPhase::Startup);
    // an MI without any feedback holds
    let (d, _) = observe(
        &mut c,
        &Interval {
            interval_us: 100_000,
            ..Default::default()
        },
    );
    assert!(!d);
    assert_eq!(c.hold().rate_bps, Some(100_000));
    let mut rate = 100_000.0;
    for _ in 0..4 {
        let (d, _) = observe(&mut c, &mi(4000, 8000, 40.0, 40.0));
        assert!(!d);
        rate *= 2.0;
        assert_eq!(c.hold().rate_bps, Some(rate as u64));
    }
    assert_eq!(c.rate_bps(), 1_600_000.0);
    // a loss ends start-up at the MI's delivery rate (1 MB/s)
    let mut iv = mi(40_000, 8000, 40.0, 40.0);
    iv.lost_pkts = 1;
    let (d, o) = observe(&mut c, &iv);
    assert!(d);
    assert_eq!(c.phase(), MoccPhase::Policy);
    assert_eq!(c.rate_bps(), 1_000_000.0);
    assert_eq!(o[30..], [0.4f32, 0.5, 0.1]);
    // the policy decides every MI from now on
    assert!(observe(&mut c, &mi(40_000, 8000, 40.0, 40.0)).0);
}

#[test]
fn startup_hands_over_at_the_capacity_estimate_not_the_exit_mis_throughput() {
    let mut c = MoccCore::new(MoccConfig::default(), &info());
    for _ in 0..4 {
        let mut iv = mi(4000, 8000, 40.0, 40.0);
        iv.send_rate_bps = Some(3_000_000);
        iv.recv_rate_bps = Some(1_000_000); // the bottleneck: 1 MB/s
        assert!(!observe(&mut c, &iv).0);
    }
    assert_eq!(c.rate_bps(), 1_600_000.0);
    // the first losses: a hole holds the cumulative ACK, 200 kB/s acknowledged
    let mut iv = mi(8000, 8000, 40.0, 40.0);
    iv.lost_pkts = 20;
    assert!(observe(&mut c, &iv).0);
    assert_eq!(c.rate_bps(), 1_000_000.0);
}

#[test]
fn startup_hands_over_on_latency_rise_or_timeout() {
    let mut c = MoccCore::new(MoccConfig::default(), &info());
    assert!(!observe(&mut c, &mi(4000, 0, 40.0, 40.0)).0);
    assert!(!observe(&mut c, &mi(8000, 0, 58.0, 40.0)).0); // p = 1.45
    assert_eq!(c.rate_bps(), 400_000.0);
    assert!(observe(&mut c, &mi(8000, 0, 62.0, 40.0)).0); // p = 1.55
    assert_eq!(c.phase(), MoccPhase::Policy);
    // never above the current rate: delivery 200 kB/s
    assert_eq!(c.rate_bps(), 200_000.0);

    let mut c = MoccCore::new(MoccConfig::default(), &info());
    assert!(!observe(&mut c, &mi(4000, 0, 40.0, 40.0)).0);
    let (d, _) = observe(
        &mut c,
        &Interval {
            timeout: true,
            interval_us: 40_000,
            ..Default::default()
        },
    );
    assert!(d);
    // nothing delivered: half the rate
    assert_eq!(c.rate_bps(), 100_000.0);
    // nothing delivered, nothing measured, a timeout: every term is 0
    assert_eq!(c.objectives(), [0.0, 0.0, 0.0]);
    assert_eq!(c.reward(), 0.0);
}

#[test]
fn initial_rate_knob_sets_the_first_rate_within_bounds() {
    let rate = |r: Option<f64>| {
        let cfg = MoccConfig {
            initial_rate_mbps: r,
            ..no_startup()
        };
        MoccCore::new(cfg, &info()).rate_bps()
    };
    let default = MoccCore::new(no_startup(), &info()).rate_bps();
    let init_cwnd = f64::from(info().init_cwnd_bytes);
    assert!(close(default, init_cwnd / 0.1));
    assert!(close(rate(Some(4.0)), 500_000.0));
    // below the minimum rate, negative or NaN: the minimum (100 kbit/s)
    for bad in [0.01, -3.0, f64::NAN] {
        assert!(close(rate(Some(bad)), 12_500.0), "{bad}");
    }
}

#[test]
fn rate_update_follows_eq_1() {
    let x = 1_000_000.0;
    assert!(close(rate_update(x, 2.0, 0.025), 1_050_000.0));
    assert!(close(rate_update(x, -2.0, 0.025), x / 1.05));
    assert!(close(rate_update(x, 4.0, 0.05), 1_200_000.0));
    assert_eq!(rate_update(x, 0.0, 0.025), x);
    for a in [0.3, 1.0, 5.0] {
        assert!(close(rate_update(rate_update(x, a, 0.025), -a, 0.025), x));
    }
    // through the core, with the configured α
    let mut c = MoccCore::new(
        MoccConfig {
            alpha: 0.1,
            ..no_startup()
        },
        &info(),
    );
    let x0 = c.rate_bps();
    c.apply(&[1.0]);
    assert!(close(c.rate_bps(), x0 * 1.1));
    c.apply(&[-1.0]);
    assert!(close(c.rate_bps(), x0));
}

#[test]
fn additive_increase_can_skip_decreasing_decisions() {
    let mut c = MoccCore::new(
        MoccConfig {
            additive_increase_pkts: 0.5,
            additive_increase_cap: 0.1,
            additive_increase_min_action: 0.0,
            initial_rate_mbps: Some(8.0),
            ..no_startup()
        },
        &info(),
    );
    observe(&mut c, &mi(40_000, 40_000, 40.0, 40.0));
    let add = c.additive_increase();
    assert!(close(add, 12_500.0));
    let x0 = c.rate_bps();
    // a decrease is eq. 1 alone
    c.apply(&[-2.0]);
    assert!(close(c.rate_bps(), x0 / 1.05));
    // a hold or an increase gets the term
    let x1 = c.rate_bps();
    c.apply(&[0.0]);
    assert!(close(c.rate_bps(), x1 + add));
    let x2 = c.rate_bps();
    c.apply(&[2.0]);
    assert!(close(c.rate_bps(), x2 * 1.05 + add));
    // the default skips decreases, as the shipped model was trained
    assert_eq!(MoccConfig::default().additive_increase_min_action, 0.0);
}

#[test]
fn additive_increase_adds_packets_per_rtt_up_to_its_cap() {
    // on every decision (the gate is tested on its own)
    let cfg = |k: f64, cap: f64| MoccConfig {
        additive_increase_pkts: k,
        additive_increase_cap: cap,
        additive_increase_min_action: -f64::from(ACTION_BOUND),
        initial_rate_mbps: Some(8.0),
        ..no_startup()
    };
    // 0.1 packet per RTT by default, as the shipped model was trained
    // (portus-agent/tests/mocc.rs checks the default against its card)
    assert_eq!(MoccConfig::default().additive_increase_pkts, 0.1);
    // nothing before the first RTT sample
    let mut c = MoccCore::new(cfg(0.5, 0.1), &info());
    let x0 = c.rate_bps();
    c.apply(&[0.0]);
    assert_eq!(c.rate_bps(), x0);
    // srtt 40 ms: 0.5 packet per 40 ms = 12_500 B/s per MI, on top of eq. 1
    observe(&mut c, &mi(40_000, 40_000, 40.0, 40.0));
    assert!(close(c.additive_increase(), 0.5 * f64::from(MSS) / 0.04));
    c.apply(&[0.0]);
    assert!(close(c.rate_bps(), x0 + 12_500.0));
    let x1 = c.rate_bps();
    c.apply(&[-2.0]);
    assert!(close(c.rate_bps(), x1 / 1.05 + 12_500.0));
    // capped at a fraction of the rate: a slow flow gains at most that fraction
    let mut c = MoccCore::new(
        MoccConfig {
            initial_rate_mbps: Some(0.2),
            ..cfg(0.5, 0.025)
        },
        &info(),
    );
    observe(&mut c, &mi(1000, 1000, 40.0, 40.0));
    let x0 = c.rate_bps();
    c.apply(&[0.0]);
    assert!(close(c.rate_bps(), x0 * 1.025));
    // an equal additive term under equal multiplicative actions shrinks the ratio of two
    // flows' rates (Chiu-Jain), which eq. 1 alone keeps
    let mut big = MoccCore::new(cfg(0.5, 0.1), &info());
    let mut small = MoccCore::new(
        MoccConfig {
            initial_rate_mbps: Some(2.0),
            ..cfg(0.5, 0.1)
        },
        &info(),
    );
    for f in [&mut big, &mut small] {
        observe(f, &mi(40_000, 40_000, 40.0, 40.0));
    }
    let r0 = big.rate_bps() / small.rate_bps();
    for _ in 0..200 {
        let (b, s) = (big.additive_increase(), small.additive_increase());
        assert!(close(b, s), "same srtt, both uncapped: {b} vs {s}");
        big.apply(&[-0.5]);
        small.apply(&[-0.5]);
    }
    let r1 = big.rate_bps() / small.rate_bps();
    assert!(r0 > 3.9 && r1 < 1.2, "ratio {r0} -> {r1}");
    // non-finite or negative knobs add nothing
    for k in [f64::NAN, f64::INFINITY, -1.0] {
        let mut c = MoccCore::new(cfg(k, 0.1), &info());
        observe(&mut c, &mi(40_000, 40_000, 40.0, 40.0));
        assert_eq!(c.additive_increase(), 0.0);
    }
}

#[test]
fn rates_stay_bounded_for_extreme_and_nan_actions() {
    let mut c = MoccCore::new(no_startup(), &info());
    let x0 = c.rate_bps();
    let a = c.apply(&[f32::NAN]);
    assert_eq!(c.rate_bps(), x0);
    assert_eq!(a.rate_bps, Some(x0 as u64));
    c.apply(&[]);
    assert_eq!(c.rate_bps(), x0);
    // beyond the bound acts as the bound
    c.apply(&[1e9]);
    assert!(close(c.rate_bps(), x0 * 1.125));
    c.apply(&[f32::NEG_INFINITY]);
    assert!(close(c.rate_bps(), x0));
    for _ in 0..1000 {
        c.apply(&[5.0]);
    }
    assert_eq!(c.rate_bps(), 10_000.0 * 1e6 / 8.0);
    let a = c.apply(&[f32::INFINITY]);
    assert_eq!(a.rate_bps, Some(1_250_000_000));
    assert!(a.cwnd_bytes.unwrap() > 0);
    for _ in 0..1000 {
        c.apply(&[-5.0]);
    }
    assert_eq!(c.rate_bps(), 100.0 * 1000.0 / 8.0);
}

#[test]
fn reward_weights_throughput_latency_and_loss() {
    let w = |a, b, d| Preference::new(a, b, d).unwrap();
    let capacity = 1_000_000u64; // bytes/s
    let full = |rtt_ms: f64| {
        let mut iv = mi(40_000, 40_000, rtt_ms, 40.0);
        iv.send_rate_bps = Some(capacity + 50_000);
        iv.recv_rate_bps = Some(capacity);
        iv
    };
    let mut c = MoccCore::new(no_startup(), &info());
    c.set_preference(w(1.0, 0.0, 0.0));
    observe(&mut c, &full(40.0));
    assert_eq!(c.capacity_bps(), 1e6);
    assert_eq!(c.reward(), 1.0); // a full pipe
    observe(&mut c, &mi(20_000, 40_000, 40.0, 40.0));
    // half of it
    assert_eq!(c.reward(), 0.5);
    // a hole-filling cumulative ACK does not raise the capacity estimate
    let mut burst = full(40.0);
    burst.acked_bytes = 120_000;
    observe(&mut c, &burst);
    assert_eq!(c.capacity_bps(), 1e6);
    assert_eq!(c.reward(), 1.0);

    // pure latency: base RTT 40 ms
    c.set_preference(w(0.0, 1.0, 0.0));
    observe(&mut c, &full(40.0));
    assert_eq!(c.reward(), 1.0);
    let mut iv = full(80.0);
    iv.rtt_min_us = Some(70_000);
    observe(&mut c, &iv);
    assert_eq!(c.reward(), 0.5);
    assert_eq!(c.base_rtt_us(), Some(40_000.0));

    // loss: 4 of 40 packets revealed lost
    c.set_preference(w(0.0, 0.0, 1.0));
    let mut iv = full(40.0);
    iv.acked_pkts = 36;
    iv.lost_pkts = 4;
    observe(&mut c, &iv);
    assert!(close(c.reward(), 0.9));
    let o = c.objectives();
    assert!(o.iter().all(|v| (0.0..=1.0).contains(v)));

    // the headline preference mixes the three
    c.set_preference(w(0.4, 0.5, 0.1));
    let mut iv = mi(20_000, 40_000, 80.0, 40.0);
    iv.rtt_min_us = Some(80_000);
    iv.acked_pkts = 18;
    iv.lost_pkts = 2;
    observe(&mut c, &iv);
    assert!(close(c.reward(), 0.4 * 0.5 + 0.5 * 0.5 + 0.1 * 0.9));
}

#[test]
fn preference_change_reaches_the_next_observation_and_reward() {
    let mut c = MoccCore::new(no_startup(), &info());
    let (_, o) = observe(&mut c, &mi(10_000, 10_000, 40.0, 40.0));
    assert_eq!(o[30..], [0.4f32, 0.5, 0.1]);
    let r_old = c.reward();
    c.set_preference(Preference::new(0.8, 0.1, 0.1).unwrap());
    // the reward of an observed MI keeps the preference it was observed with
    assert_eq!(c.reward(), r_old);
    let (_, o) = observe(&mut c, &mi(10_000, 10_000, 40.0, 40.0));
    assert_eq!(o[30..], [0.8f32, 0.1, 0.1]);
    assert_eq!(c.last_sample().unwrap().w, [0.8, 0.1, 0.1]);
    // and through the controller, to the policy's next input
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let m = Mocc::new(no_startup());
    let mut f = LearnedController::new(m.new_core(&info()), Box::new(Recorder(seen.clone())));
    f.on_report(&mi(10_000, 10_000, 40.0, 40.0));
    assert_eq!(seen.lock().unwrap()[30..], [0.4f32, 0.5, 0.1]);
    f.set_preference(Preference::new(0.1, 0.6, 0.3).unwrap());
    f.on_report(&mi(10_000, 10_000, 40.0, 40.0));
    assert_eq!(seen.lock().unwrap()[30..], [0.1f32, 0.6, 0.3]);
}

/// A policy that keeps a copy of its last observation and answers 0.
struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<f32>>>);

impl Policy for Recorder {
    fn obs_dim(&self) -> usize {
        OBS_DIM
    }
    fn act_dim(&self) -> usize {
        1
    }
    fn act(
        &mut self,
        obs: &[f32],
        _mask: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), PolicyError> {
        *self.0.lock().unwrap() = obs.to_vec();
        out[0] = 0.0;
        Ok(())
    }
}

#[test]
fn rate_floor_is_packets_per_rtt_above_the_kbps_floor() {
    let cfg = MoccConfig {
        min_rate_pkts: 4.0,
        initial_rate_mbps: Some(0.1),
        ..no_startup()
    };
    let mut c = MoccCore::new(cfg, &info());
    // before an RTT sample only min_rate_kbps (100 kbit/s) holds
    c.apply(&[-5.0]);
    assert!(close(c.rate_bps(), 12_500.0), "{}", c.rate_bps());
    // srtt 40 ms: 4 packets of 1000 B per 40 ms = 100 kB/s, even for a = -5
    observe(&mut c, &mi(1000, 1000, 40.0, 40.0));
    c.apply(&[-5.0]);
    assert!(close(c.rate_bps(), 100_000.0), "{}", c.rate_bps());
}

/// A fluid FIFO bottleneck of capacity `cap` (B/s) with a neighbour sending `other` (B/s)
/// and a 40 ms base RTT, fed by one MOCC core whose policy holds (a = 0): each
/// 40 ms MI reports the RTT its packets of the MI before met (base + queue / cap). The
/// first 5 MIs run at 10x the rate on an empty queue (a past peak: `Ĉ` high, `p` = 1
/// at the base RTT); then the queue starts at `q0` bytes. Returns the core after `mis` MIs,
/// or at the first decision with the guard on if `until_guard`.
fn fifo_run(cap: f64, other: f64, q0: f64, mis: usize, until_guard: bool) -> MoccCore {
    fifo_run_beside(cap, other, q0, mis, until_guard, Arc::default(), 0.5)
}

/// [`fifo_run`] for a flow of an agent whose MOCC flows are `peers`, with
/// `share_peers_fair` = `fair`.
fn fifo_run_beside(
    cap: f64,
    other: f64,
    q0: f64,
    mis: usize,
    until_guard: bool,
    peers: Arc<Peers>,
    fair: f64,
) -> MoccCore {
    let cfg = MoccConfig {
        share_probe_every_mis: MoccConfig::default().share_probe_every_mis,
        share_peers_fair: fair,
        initial_rate_mbps: Some(1.0),
        ..no_startup()
    };
    let mut c = MoccCore::with_peers(cfg, &info(), peers);
    let x0 = c.rate_bps();
    for _ in 0..5 {
        observe(&mut c, &mi((10.0 * x0 * 0.04) as u64, 0, 40.0, 40.0));
        c.apply(&[0.0]);
    }
    fifo(c, x0, cap, other, q0, mis, until_guard)
}

/// `mis` policy MIs of 40 ms (the policy holds) through a FIFO of capacity `cap` that a
/// neighbour feeds at `other`, from a queue of `q0` bytes; the flow sent `sent_rate`
/// last.
fn fifo(
    mut c: MoccCore,
    mut sent_rate: f64,
    cap: f64,
    other: f64,
    q0: f64,
    mis: usize,
    until_guard: bool,
) -> MoccCore {
    let len = 0.04;
    let (mut q, mut rtt_ms) = (q0, 40.0 + 1e3 * q0 / cap);
    for _ in 0..mis {
        let acked = (sent_rate * len) as u64;
        let (d, obs) = observe(&mut c, &mi(acked, 0, rtt_ms, 40.0));
        assert!(d && obs.iter().all(|v| v.is_finite()));
        if until_guard && c.share_guard() {
            break;
        }
        let act = c.apply(&[0.0]);
        sent_rate = act.rate_bps.unwrap_or(0) as f64;
        let q1 = (q + (sent_rate + other - cap) * len).max(0.0);
        rtt_ms = 40.0 + 1e3 * (q + q1) / 2.0 / cap;
        q = q1;
    }
    c
}

/// A flow with the default start-up that doubles `doublings` times on an empty 40 ms
/// path (delivering what it sends), then meets a loss: it hands over at its rate.
fn after_startup(doublings: usize, early_doublings: u32) -> MoccCore {
    let cfg = MoccConfig {
        initial_rate_mbps: Some(1.0),
        share_probe_early_doublings: early_doublings,
        ..MoccConfig::default()
    };
    let mut c = MoccCore::new(cfg, &info());
    for _ in 0..doublings {
        let acked = (c.rate_bps() * 0.04) as u64;
        let (decide, _) = observe(&mut c, &mi(acked, 0, 40.0, 40.0));
        assert!(!decide && c.phase() == MoccPhase::Startup);
    }
    let lossy = Interval {
        lost_pkts: 1,
        ..mi((c.rate_bps() * 0.04) as u64, 0, 40.0, 40.0)
    };
    let (decide, _) = observe(&mut c, &lossy);
    assert!(decide && c.phase() == MoccPhase::Policy);
    c.apply(&[0.0]);
    c
}

#[test]
fn share_probe_tells_an_own_queue_from_a_neighbours() {
    // 1 Mbit/s; alone in a capacity fade (cap = own rate, a 60 ms standing queue, deeper
    // than a trial's ±40 ms): the trials move the queue, the share is near 1, no guard
    let x0 = 125_000.0;
    let alone = fifo_run(x0, 0.0, 0.06 * x0, 200, false);
    let m = alone.share_probe();
    assert!(m.trials >= 3, "{m:?}");
    assert!(m.share.is_some_and(|s| s > 0.6), "{m:?}");
    assert!(!alone.share_guard() && m.guarded_decisions == 0, "{m:?}");
    // beside a neighbour sending cap - 1 Mbit/s on a 20x larger link, a 20 ms queue:
    // the trials barely move it, the share is near 1/20, the guard comes on and lifts the
    // rate (the policy holds: it would keep 1 Mbit/s)
    let cap = 20.0 * x0;
    let shared = fifo_run(cap, cap - x0, 0.02 * cap, 200, false);
    let m = shared.share_probe();
    assert!(m.trials >= 3, "{m:?}");
    assert!(m.share.is_some_and(|s| s.abs() < 0.15), "{m:?}");
    assert!(m.guarded_decisions > 0, "{m:?}");
    // ... multiplicatively (a >= +2: x1.05 per MI), not by the packets alone
    assert!(shared.rate_bps() > 4.0 * x0, "{}", shared.rate_bps());
    // at a decision with the guard on: a = -5 is raised to +2 (plus the guard's packets)
    let guarded = fifo_run(cap, cap - x0, 0.02 * cap, 200, true);
    assert!(guarded.share_guard());
    let mut cut = guarded.clone();
    let x = cut.rate_bps();
    cut.apply(&[-5.0]);
    assert!(
        cut.rate_bps() >= x * (1.0 + 2.0 * 0.025),
        "{x} -> {}",
        cut.rate_bps()
    );
    // a loss: the next decision is one cut by the loss factor, whatever the policy
    // says, and the guard stays on (only a trial turns it off)
    let mut lossy = guarded.clone();
    let iv = Interval {
        lost_pkts: 3,
        ..mi(5000, 0, 60.0, 40.0)
    };
    observe(&mut lossy, &iv);
    assert!(lossy.share_guard());
    let x = lossy.rate_bps();
    lossy.apply(&[5.0]);
    let want = x * MoccConfig::default().share_guard_loss_factor;
    assert!(
        (lossy.rate_bps() - want).abs() < 1.0,
        "{x} -> {}",
        lossy.rate_bps()
    );
    assert!(lossy.share_guard());
    lossy.apply(&[5.0]);
    assert!(lossy.rate_bps() > want, "one cut per loss");
}

#[test]
fn local_peers_veto_the_guard_only_for_a_flow_they_do_not_starve() {
    // the victim of `share_probe_tells_an_own_queue_from_a_neighbours`: 1 Mbit/s beside
    // 19 Mbit/s of others that keep a 20 ms queue on a 20 Mbit/s link
    let x0 = 125_000.0;
    let cap = 20.0 * x0;
    let run = |others: &[(f64, f64)], fair: f64| {
        let peers = Arc::new(Peers::default());
        let slots: Vec<PeerSlot> = others
            .iter()
            .map(|&(thr, c)| {
                let s = PeerSlot::new(Arc::clone(&peers));
                s.publish(thr, Some(c));
                s
            })
            .collect();
        let f = fifo_run_beside(cap, cap - x0, 0.02 * cap, 200, false, peers, fair);
        (f.share_probe(), f.rate_bps(), slots)
    };
    // the others are 19 MOCC flows of this agent at 1 Mbit/s each: a crowd of equals,
    // whatever the trials read the guard stays off and the rate where the policy holds it
    let (m, x, _) = run(&[(x0, cap); 19], 0.5);
    assert!(m.trials >= 3 && m.share.is_some_and(|s| s < 0.1), "{m:?}");
    assert!(m.peer_vetoes > 0 && m.guarded_decisions == 0, "{m:?}");
    assert!(x < 1.5 * x0, "{x}");
    // one local flow of 19 Mbit/s: it is starving this one, the guard lifts it (until it
    // has half the two flows' mean, when the veto ends the guard)
    let (m, x, _) = run(&[(cap - x0, cap)], 0.5);
    assert!(m.guarded_decisions > 0 && x > 4.0 * x0, "{m:?} {x}");
    // one local flow of 1 Mbit/s, the 18 Mbit/s that keep the queue from elsewhere: the
    // two local flows do not fill the link, the guard lifts this one (until they do)
    let (m, x, _) = run(&[(x0, cap)], 0.5);
    assert!(m.guarded_decisions > 0 && x > 4.0 * x0, "{m:?} {x}");
    // `share_peers_fair` = 0 ignores the peers
    let (m, _, _) = run(&[(x0, cap); 19], 0.0);
    assert!(m.peer_vetoes == 0 && m.guarded_decisions > 0, "{m:?}");
    // a flow leaves the table when it is dropped (the victim already has)
    let (_, _, slots) = run(&[(x0, cap); 3], 0.5);
    let peers = Arc::clone(&slots[0].peers);
    assert_eq!(peers.len(), 3);
    drop(slots);
    assert!(peers.is_empty());
}

#[test]
fn share_probe_distrusts_the_capacity_estimate_of_an_early_startup() {
    // a latecomer: start-up met a loss after 2 doublings (4 Mbit/s), so `Ĉ` = its rate and
    // by `Ĉ` it is not starved; beside a neighbour that keeps a 20 ms queue on a 100 Mbit/s
    // link it probes anyway, reads a small share and is guarded
    let late = after_startup(2, MoccConfig::default().share_probe_early_doublings);
    let x = late.rate_bps();
    assert!(
        x >= 0.5 * late.capacity_bps(),
        "{x} vs {}",
        late.capacity_bps()
    );
    let cap = 25.0 * x;
    let late = fifo(late, x, cap, cap - x, 0.02 * cap, 200, false);
    let m = late.share_probe();
    assert!(m.trials >= 3 && m.guarded_decisions > 0, "{m:?}");
    assert!(late.rate_bps() > 2.0 * x, "{x} -> {}", late.rate_bps());
    // the same flow after 6 doublings (64 Mbit/s: its `Ĉ` saw a large link) trusts `Ĉ`:
    // at its own rate it runs no trial
    let full = after_startup(6, MoccConfig::default().share_probe_early_doublings);
    let x = full.rate_bps();
    let cap = 25.0 * x;
    let full = fifo(full, x, cap, cap - x, 0.02 * cap, 200, false);
    let m = full.share_probe();
    assert_eq!((m.trials, m.dropped_trials), (0, 0), "{m:?}");
    // alone on a small link (its rate is the capacity, a standing queue of 60 ms): the
    // early flow's trials read a share near 1 and it stops probing
    let small = after_startup(2, MoccConfig::default().share_probe_early_doublings);
    let x = small.rate_bps();
    let small = fifo(small, x, x, 0.0, 0.06 * x, 300, false);
    let m = small.share_probe();
    assert!(m.share.is_some_and(|s| s > 0.5), "{m:?}");
    assert!(m.trials <= 4 && m.guarded_decisions == 0, "{m:?}");
    // 0 switches the rule off: the latecomer trusts its `Ĉ` and stays where it is
    let off = after_startup(2, 0);
    let x = off.rate_bps();
    let cap = 25.0 * x;
    let off = fifo(off, x, cap, cap - x, 0.02 * cap, 200, false);
    let m = off.share_probe();
    assert_eq!((m.trials, m.dropped_trials), (0, 0), "{m:?}");
    assert!(off.rate_bps() < 1.5 * x, "{x} -> {}", off.rate_bps());
}

#[test]
fn the_rate_cap_never_binds_a_paced_flow() {
    // the rate cap alone (the delivery bound off): what the models before issue 23 ran
    let rate_cap_only = MoccConfig {
        cwnd_cap_delivery_gain: 0.0,
        ..no_startup()
    };
    let mut c = MoccCore::new(rate_cap_only, &info());
    // before any RTT sample: 1 s assumed
    let a = c.initial_action();
    assert!(f64::from(a.cwnd_bytes.unwrap()) >= c.rate_bps() * 1.0);
    for (rtt_ms, action) in [(10.0, 5.0), (40.0, 5.0), (200.0, -5.0), (600.0, 5.0)] {
        for _ in 0..20 {
            observe(&mut c, &mi(10_000, 10_000, rtt_ms, rtt_ms.min(500.0)));
            let a = c.apply(&[action]);
            let cap = f64::from(a.cwnd_bytes.unwrap());
            let srtt_s = c.metrics().srtt_us / 1e6;
            let rate = a.rate_bps.unwrap() as f64;
            assert!(cap >= rate * srtt_s, "cap {cap} < {rate} × {srtt_s}");
            assert!(cap >= rate * rtt_ms / 1e3);
            assert!(cap >= 4.0 * f64::from(MSS));
        }
    }
}

#[test]
fn mi_follows_srtt_within_bounds() {
    let mut c = MoccCore::new(no_startup(), &info());
    assert_eq!(c.mi_us(), 100_000);
    observe(&mut c, &mi(1000, 1000, 40.0, 40.0));
    assert_eq!(c.hold().report_interval_us, Some(40_000));
    let mut c = MoccCore::new(no_startup(), &info());
    observe(&mut c, &mi(1000, 1000, 1.0, 5.0));
    assert_eq!(c.mi_us(), 5_000);
    let mut c = MoccCore::new(no_startup(), &info());
    observe(&mut c, &mi(1000, 1000, 2000.0, 500.0));
    assert_eq!(c.mi_us(), 500_000);
}

#[test]
fn metrics_follow_reports_and_decisions() {
    let mut c = MoccCore::new(no_startup(), &info());
    c.initial_action();
    let mut iv = mi(10_000, 10_000, 40.0, 40.0);
    iv.lost_pkts = 1;
    observe(&mut c, &iv);
    let a = c.apply(&[2.0]);
    let m = c.metrics();
    assert_eq!(m.reports, 1);
    assert_eq!(m.loss_events, 1);
    assert_eq!(m.min_rtt_us, 40_000);
    assert_eq!(m.srtt_us, 40_000.0);
    assert_eq!(Some(m.rate_bps), a.rate_bps);
    assert_eq!(Some(m.cwnd_bytes as u32), a.cwnd_bytes);
}

/// A policy that always answers the same action.
struct Constant(f32);

impl Policy for Constant {
    fn obs_dim(&self) -> usize {
        OBS_DIM
    }
    fn act_dim(&self) -> usize {
        1
    }
    fn act(
        &mut self,
        obs: &[f32],
        _mask: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), PolicyError> {
        if obs.len() != OBS_DIM {
            return Err(PolicyError::ObsShape {
                expected: OBS_DIM,
                got: obs.len(),
            });
        }
        out[0] = self.0;
        Ok(())
    }
}

#[test]
fn learned_controller_raises_the_rate_by_alpha_per_mi_after_startup() {
    let m = eq1_only();
    let mut f = LearnedController::new(m.new_core(&info()), Box::new(Constant(1.0)));
    let a0 = f.initial_action();
    assert_eq!(a0.rate_bps, Some(100_000));
    // start-up: the policy is not consulted, the rate doubles
    let a = f.on_report(&mi(4000, 4000, 40.0, 40.0));
    assert_eq!(a.rate_bps, Some(200_000));
    let a = f.on_report(&mi(8000, 8000, 40.0, 40.0));
    assert_eq!(a.rate_bps, Some(400_000));
    // a loss hands over at the delivery rate (300 kB/s); the policy's +1 applies at once
    let mut iv = mi(12_000, 12_000, 40.0, 40.0);
    iv.lost_pkts = 1;
    let a = f.on_report(&iv);
    let mut expect = 300_000.0 * 1.025;
    assert_eq!(a.rate_bps, Some(expect as u64));
    for _ in 0..20 {
        let a = f.on_report(&mi(12_000, 12_000, 40.0, 40.0));
        expect *= 1.025;
        let got = a.rate_bps.unwrap() as f64;
        assert!((got - expect).abs() <= 2.0, "{got} vs {expect}");
    }
    assert_eq!(f.metrics().policy_errors, 0);
    assert_eq!(f.metrics().clamped_outputs, 0);
    assert_eq!(f.metrics().reports, 23);
}

#[test]
fn out_of_range_policy_outputs_are_clamped_and_counted() {
    let m = Mocc::new(no_startup());
    let mut f = LearnedController::new(m.new_core(&info()), Box::new(Constant(f32::NAN)));
    let x0 = f.initial_action().rate_bps.unwrap();
    // NaN → the midpoint of [−5, 5]: hold
    assert_eq!(f.on_report(&mi(4000, 4000, 40.0, 40.0)).rate_bps, Some(x0));
    assert_eq!(f.metrics().clamped_outputs, 1);
    let mut f = LearnedController::new(m.new_core(&info()), Box::new(Constant(100.0)));
    f.initial_action();
    let a = f.on_report(&mi(4000, 4000, 40.0, 40.0));
    assert_eq!(a.rate_bps, Some((x0 as f64 * 1.125) as u64));
    assert_eq!(f.metrics().clamped_outputs, 1);
}

#[test]
fn bare_mocc_starts_up_then_holds() {
    let mut f = eq1_only().new_flow(&info());
    f.initial_action();
    f.on_report(&mi(4000, 4000, 40.0, 40.0));
    let mut iv = mi(8000, 8000, 40.0, 40.0);
    iv.lost_pkts = 1;
    let a = f.on_report(&iv);
    assert_eq!(a.rate_bps, Some(200_000));
    for _ in 0..10 {
        let a = f.on_report(&mi(8000, 8000, 40.0, 40.0));
        assert_eq!(a.rate_bps, Some(200_000));
        assert!(a.cwnd_bytes.is_some());
    }
    assert_eq!(f.metrics().policy_errors, 0);
}

/// A fluid bottleneck (capacity `c` bytes/s, base RTT, FIFO queue) driven by the core
/// and a hand-written rule on the features: the features mean what the header says.
#[test]
fn features_track_a_fluid_bottleneck() {
    let c_bps = 1_000_000.0;
    let base_s = 0.04;
    let mut core = MoccCore::new(no_startup(), &info());
    let mut queue = 0.0f64; // bytes
    let mut prev_rtt_s = base_s;
    let mut x = c_bps * 1.2; // 20 % above capacity
    core.flow.rate = x;
    for step in 0..40 {
        let len = 0.04;
        let sent = x * len;
        let delivered = (queue + sent).min(c_bps * len);
        queue = (queue + sent - delivered).max(0.0);
        let rtt_s = base_s + queue / c_bps;
        let iv = Interval {
            acked_bytes: delivered as u64,
            acked_pkts: (delivered / 1000.0) as u64,
            rtt_min_us: Some((prev_rtt_s.min(rtt_s) * 1e6) as u64),
            rtt_mean_us: Some(rtt_s * 1e6),
            rtt_samples: 10,
            inflight_bytes: Some((x * base_s + queue) as u64),
            interval_us: (len * 1e6) as u64,
            send_rate_bps: Some(x as u64),
            recv_rate_bps: Some(delivered as u64 * 25),
            ..Default::default()
        };
        prev_rtt_s = rtt_s;
        let (_, o) = observe(&mut core, &iv);
        let [fl, fp, fq] = newest(&o);
        if (1..10).contains(&step) {
            // overdriven: sending ratio ≈ 1.2, queue (and p) grows at q ≈ 0.2
            assert!((fl - 0.2).abs() < 0.01, "step {step}: l−1 = {fl}");
            assert!((fq - 0.2).abs() < 0.01, "step {step}: q = {fq}");
            assert!(fp > 0.0);
        }
        // rule: back off while the queue grows, hold otherwise
        let a = if fq > 0.0 || fp > 0.05 { -5.0 } else { 0.0 };
        if step == 10 {
            x = c_bps * 0.9;
            core.flow.rate = x;
        } else if step > 10 {
            core.apply(&[a]);
            x = core.rate_bps();
        }
        if step > 25 {
            // drained and below capacity: neutral features, low-latency reward
            assert!(queue == 0.0);
            assert!(fl.abs() < 0.02 && fp.abs() < 0.02 && fq.abs() < 0.02);
            assert!(core.objectives()[1] > 0.97);
        }
    }
}

#[test]
fn dynamics_are_the_config_but_the_episode_start() {
    use crate::learned::{check_dynamics, DynamicsError};
    let d = Mocc::default().dynamics();
    assert_eq!(d["alpha"], serde_json::json!(0.025));
    assert_eq!(d["share_probe_every_mis"], serde_json::json!(10));
    assert!(!d.contains_key("startup") && !d.contains_key("initial_rate_mbps"));
    let all = serde_json::to_value(MoccConfig::default()).unwrap();
    assert_eq!(
        d.len() + EPISODE_START_KNOBS.len(),
        all.as_object().unwrap().len()
    );
    // the episode start does not change the dynamics
    let m = Mocc::new(MoccConfig {
        startup: false,
        initial_rate_mbps: Some(3.0),
        ..MoccConfig::default()
    });
    assert_eq!(m.dynamics(), d);
    // a card written as JSON and read back passes
    let card: crate::learned::Dynamics =
        serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
    assert_eq!(check_dynamics("mocc", &card, &d), Ok(()));
    // α differs: named with the fix
    let served = Mocc::new(MoccConfig {
        alpha: 0.05,
        ..MoccConfig::default()
    })
    .dynamics();
    let e = check_dynamics("mocc", &served, &d).unwrap_err();
    assert!(matches!(&e, DynamicsError::Mismatch { knob, .. } if knob == "alpha"));
    assert!(
        e.to_string().contains("set alpha = 0.05 under [algs.mocc]"),
        "{e}"
    );
}

/// 10 MIs delivering 10 Mbit/s at a 40 ms base RTT, then 6 delivering 1 Mbit/s while the
/// policy holds its rate and the queue grows (RTT 400 ms); the cwnd cap before the drop.
fn capacity_drop(c: &mut MoccCore) -> u32 {
    let fast = Interval {
        send_rate_bps: Some(1_250_000),
        recv_rate_bps: Some(1_250_000),
        ..mi(50_000, 50_000, 40.0, 40.0)
    };
    let slow = Interval {
        send_rate_bps: Some(125_000),
        recv_rate_bps: Some(125_000),
        ..mi(5_000, 100_000, 400.0, 40.0)
    };
    for _ in 0..10 {
        observe(c, &fast);
        c.apply(&[0.0]);
    }
    let before = c.cwnd_cap_bytes();
    for _ in 0..6 {
        observe(c, &slow);
        c.apply(&[0.0]);
    }
    before
}

#[test]
fn the_delivery_bound_makes_the_cap_follow_a_capacity_drop() {
    // 10 Mbit/s delivered at a 40 ms base RTT, then 1 Mbit/s while the policy holds its rate
    // and the queue grows (RTT 400 ms): the rate cap grows with the RTT, the delivery bound
    // falls to 2·d̂·D̂ + headroom once the 10 Mbit/s samples leave its window.
    // issue 23's bound: one gain for every preference
    let with = |gain: f64| MoccConfig {
        cwnd_cap_delivery_gain: gain,
        cwnd_cap_delivery_mis: 4,
        cwnd_cap_delivery_w_power: 0.0,
        ..no_startup()
    };
    let headroom = 10.0 * f64::from(MSS);
    let mut caps = Vec::new();
    for gain in [0.0, 2.0] {
        let mut c = MoccCore::new(with(gain), &info());
        let before = capacity_drop(&mut c);
        caps.push((before, c.cwnd_cap_bytes(), c.rate_bps()));
    }
    let (off_before, off_after, x) = caps[0];
    // the rate cap: 2·x·rtt, larger as the queue grows
    assert!(f64::from(off_after) > f64::from(off_before), "{caps:?}");
    assert!(f64::from(off_after) >= 2.0 * x * 0.4 * 0.9, "{caps:?}");
    let (on_before, on_after, _) = caps[1];
    // before the drop: 2 × 10 Mbit/s × 40 ms + headroom (or the rate cap, if lower)
    let bdp_fast = 2.0 * 1_250_000.0 * 0.040 + headroom;
    assert!(f64::from(on_before) <= bdp_fast + 1.0, "{caps:?}");
    // after it: 2 × 1 Mbit/s × 40 ms + headroom
    let bdp_slow = 2.0 * 125_000.0 * 0.040 + headroom;
    assert!(
        (f64::from(on_after) - bdp_slow).abs() <= 1.0,
        "{caps:?} want {bdp_slow}"
    );
    // a knob out of range is refused
    let bad = MoccConfig {
        cwnd_cap_delivery_mis: 0,
        ..no_startup()
    };
    assert!(bad.validate().is_err());
}

#[test]
fn the_preference_dependent_bound_is_tighter_the_less_a_flow_weighs_throughput() {
    // issue 40: g(w) = g₀ / (w_lat + w_loss)^k. The same capacity drop as above, under five
    // preferences: the cap after the drop is ordered by w_thr, the latency-leaning flow's is
    // g₀/(0.9)·d̂·D̂, and the throughput-only flow has no bound at all.
    let cfg = |power: f64| MoccConfig {
        cwnd_cap_delivery_gain: 1.25,
        cwnd_cap_delivery_mis: 4,
        cwnd_cap_delivery_w_power: power,
        ..no_startup()
    };
    let run = |power: f64, w: Preference| {
        let mut c = MoccCore::new(cfg(power), &info());
        c.set_preference(w);
        capacity_drop(&mut c);
        (c.delivery_gain(), c.cwnd_cap_bytes())
    };
    let w = |t: f64, l: f64, s: f64| Preference::new(t, l, s).unwrap();
    let ladder = [
        w(0.0, 0.5, 0.5),
        w(0.1, 0.8, 0.1),
        w(0.4, 0.5, 0.1),
        w(0.8, 0.1, 0.1),
        w(1.0, 0.0, 0.0),
    ];
    let runs: Vec<_> = ladder.iter().map(|w| run(1.0, *w)).collect();
    let headroom = 10.0 * f64::from(MSS);
    let slow_bdp = 125_000.0 * 0.040;
    // g₀ itself where nothing is weighed on throughput, g₀/0.9 at <0.1,0.8,0.1>
    assert!((runs[0].0 - 1.25).abs() < 1e-12, "{runs:?}");
    assert!((runs[1].0 - 1.25 / 0.9).abs() < 1e-12, "{runs:?}");
    let want = 1.25 / 0.9 * slow_bdp + headroom;
    assert!(
        (f64::from(runs[1].1) - want).abs() <= 1.0,
        "{runs:?} want {want}"
    );
    // monotone: more weight on throughput, a looser bound and a larger cap
    for pair in runs.windows(2) {
        assert!(pair[0].0 < pair[1].0 || pair[1].0 == 0.0, "{runs:?}");
        assert!(pair[0].1 <= pair[1].1, "{runs:?}");
    }
    // throughput only: no bound, the rate cap alone (as with g₀ = 0)
    assert_eq!(runs[4].0, 0.0, "{runs:?}");
    let off = {
        let mut c = MoccCore::new(
            MoccConfig {
                cwnd_cap_delivery_gain: 0.0,
                ..cfg(1.0)
            },
            &info(),
        );
        c.set_preference(ladder[4]);
        capacity_drop(&mut c);
        c.cwnd_cap_bytes()
    };
    assert_eq!(runs[4].1, off, "{runs:?}");
    // k = 0 is issue 23's bound: one gain for every w
    for w in ladder {
        assert_eq!(run(0.0, w).0, 1.25);
    }
    // a preference that changes mid-flow changes the bound at the next decision
    let mut c = MoccCore::new(cfg(1.0), &info());
    c.set_preference(ladder[3]);
    let loose = c.delivery_gain();
    c.set_preference(ladder[1]);
    assert!(c.delivery_gain() < loose);
    // out of range is refused
    assert!(MoccConfig {
        cwnd_cap_delivery_w_power: 5.0,
        ..no_startup()
    }
    .validate()
    .is_err());
    assert!(MoccConfig {
        cwnd_cap_delivery_w_power: f64::NAN,
        ..no_startup()
    }
    .validate()
    .is_err());
}
