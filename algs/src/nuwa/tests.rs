use super::core::{reg, state, K_SCALE, THETA_ONE, W_SCALE, X_MAX};
use super::*;
use crate::controller::{Algorithm, FlowInfo};
use crate::learned::{LearnedAlgorithm, LearnedCore};
use crate::pref::Preference;
use crate::signals::{Interval, MAX_PROGRAM_INSTRUCTIONS, MAX_REPORT_FIELDS};

const MSS: u32 = 1500;

fn info() -> FlowInfo {
    FlowInfo {
        sock_id: 1,
        mss: MSS,
        init_cwnd_bytes: 10 * MSS,
        preference: Preference::default(),
    }
}

/// A report: `pkts` acknowledged over `ms`, RTTs `rtt_ms` (min) and `last_ms`, the datapath's
/// window `cwnd_pkts`, slow start `ss`.
fn iv(pkts: u64, lost: u64, rtt_ms: f64, last_ms: f64, cwnd_pkts: u64, ss: bool) -> Interval {
    let mut s = [None; crate::signals::MAX_STATE_REGS];
    s[state::W.0] = Some(cwnd_pkts * u64::from(MSS) * W_SCALE);
    s[state::CW.0] = Some(cwnd_pkts * u64::from(MSS));
    s[state::SS.0] = Some(u64::from(ss));
    s[state::CUT_SEEN.0] = Some(0);
    Interval {
        acked_bytes: pkts * u64::from(MSS),
        acked_pkts: pkts,
        lost_pkts: lost,
        rtt_min_us: Some((rtt_ms * 1e3) as u64),
        rtt_mean_us: Some(last_ms * 1e3),
        rtt_samples: pkts.max(1),
        rtt_last_us: Some((last_ms * 1e3) as u64),
        interval_us: (last_ms * 1e3) as u64,
        cwnd_bytes: Some(cwnd_pkts * u64::from(MSS)),
        state: s,
        ..Default::default()
    }
}

fn core() -> NuwaCore {
    NuwaCore::new(NuwaConfig::default(), &info())
}

fn regs(c: &NuwaCore) -> std::collections::HashMap<&'static str, u32> {
    c.control_registers().into_iter().collect()
}

// ---- the law and its approximation --------------------------------------------------------

#[test]
fn the_rational_tracks_tanh_within_its_stated_bound() {
    let mut worst: f64 = 0.0;
    for i in 0..=20_000 {
        let x = f64::from(i) / 1000.0; // 0..20
        for x in [x, -x] {
            let e = (tanh_approx(x) - x.tanh()).abs();
            worst = worst.max(e);
        }
        // monotone and within [-1, 1]
        let next = f64::from(i + 1) / 1000.0;
        assert!(tanh_approx(next) >= tanh_approx(x), "not monotone at {x}");
        assert!(tanh_approx(x) <= 1.0);
    }
    assert!(worst <= 1.4e-3, "worst error {worst}");
    // the bound is tight: the error is there (the test can fail)
    assert!(worst >= 1.3e-3, "worst error {worst}");
    assert_eq!(tanh_approx(0.0), 0.0);
    assert_eq!(tanh_approx(-0.7), -tanh_approx(0.7));
}

#[test]
fn the_programs_fixed_point_theta_is_within_2e3_of_tanh() {
    let mut worst: f64 = 0.0;
    for rho_us in [1u64, 7, 500, 5_000, 10_000, 123_457] {
        for target_us in [1_000u64, 20_000, 33_333] {
            for step in 0..4_000u64 {
                let dc = step * (target_us * 3 + rho_us * 6) / 4_000;
                let (th, up) = theta_fixed(target_us, dc, rho_us);
                let got = th as f64 / THETA_ONE as f64 * if up { 1.0 } else { -1.0 };
                let want = ((target_us as f64 - dc as f64) / rho_us as f64).tanh();
                let e = (got - want).abs();
                assert!(
                    e <= 2e-3,
                    "T={target_us} D={dc} ρ={rho_us}: {got} vs {want}"
                );
                worst = worst.max(e);
            }
        }
    }
    assert!(worst > 1e-3, "{worst}");
    // D_c = T_d is exactly θ = 0, and the direction follows the sign
    assert_eq!(theta_fixed(20_000, 20_000, 10_000), (0, false));
    assert!(theta_fixed(20_000, 5_000, 10_000).1);
    assert!(!theta_fixed(20_000, 45_000, 10_000).1);
    assert_eq!(theta_fixed(20_000, 0, 1).0, THETA_ONE);
}

#[test]
fn one_ack_moves_the_window_by_theta_k_mss_acked_over_cwnd() {
    // 100 packets, k = 2, one packet acknowledged: Δcwnd = θ·2·1500·1500/150000 = 30·θ bytes
    let cwnd = 100 * u64::from(MSS);
    let w = cwnd * W_SCALE;
    let k = core::k_register(2.0) as u64;
    for (dc, rho) in [
        (0u64, 10_000u64),
        (10_000, 10_000),
        (35_000, 10_000),
        (20_000, 10_000),
    ] {
        let after = law_step(w, 20_000, dc, rho, k, u64::from(MSS), u64::from(MSS));
        let got = (after as f64 - w as f64) / W_SCALE as f64;
        let theta = ((20_000.0 - dc as f64) / rho as f64).tanh();
        let want = theta * 2.0 * 1500.0 * 1500.0 / cwnd as f64;
        assert!((got - want).abs() <= 0.1, "D={dc}: {got} vs {want}");
    }
    // the window never goes below two packets, however large the step
    let tiny = 2 * u64::from(MSS) * W_SCALE + 5;
    let after = law_step(
        tiny,
        1_000,
        90_000,
        1,
        100_000,
        u64::from(MSS),
        2 * 1024 * 1024,
    );
    assert_eq!(after, 2 * u64::from(MSS) * W_SCALE);
}

#[test]
fn a_large_window_still_moves_in_milli_bytes() {
    // 10 000 packets, θ ≈ 0.1, k = 1: 0.015 bytes per ACK, kept in the milli-byte window
    let w = 10_000 * u64::from(MSS) * W_SCALE;
    let after = law_step(
        w,
        20_000,
        19_000,
        10_000,
        1_000,
        u64::from(MSS),
        u64::from(MSS),
    );
    assert!(after > w && after - w < 20, "{}", after - w);
}

// ---- the fold program ----------------------------------------------------------------------

#[test]
fn the_program_compiles_within_every_limit_and_declares_what_the_core_sends() {
    use portus::lang::Reg;
    let p = Nuwa::default().program();
    let (bin, scope) = portus::lang::compile(p.source.as_bytes(), &[])
        .unwrap_or_else(|e| panic!("{e:?}\n{}", p.source));
    // the count the closing note quotes; a change to the program changes it
    assert_eq!(bin.instrs.len(), PROGRAM_INSTRUCTIONS, "{}", p.source);
    assert!(bin.instrs.len() <= MAX_PROGRAM_INSTRUCTIONS);
    assert!(p.fields.len() <= MAX_REPORT_FIELDS);
    assert!(p.name.starts_with("nuwa"));
    let mut locals = std::collections::HashSet::new();
    for i in &bin.instrs {
        for r in [&i.res, &i.left, &i.right] {
            match r {
                // libccp has 8 temporaries and no bounds check
                Reg::Tmp(t, _) => assert!(*t < 8, "temporary {t}"),
                // portus serializes 6 locals
                Reg::Local(l, _) => {
                    locals.insert(*l);
                    assert!(*l < 6, "local {l}");
                }
                Reg::ImmNum(n) => assert!(*n < (1 << 31) || *n == u64::MAX, "immediate {n}"),
                _ => {}
            }
        }
    }
    assert_eq!(locals.len(), 5);
    // it serializes (portus checks register indices and immediates there)
    assert!(bin.serialize().is_ok());
    // every register the core sends is a control register of the program
    for name in reg::ALL {
        assert!(
            matches!(scope.get(name), Some(Reg::Control(_, _, false))),
            "{name} is not a control register of the program"
        );
        // the index on the wire is the one the simulator's receiver reads it by
        let Some(Reg::Control(i, _, _)) = scope.get(name) else {
            unreachable!()
        };
        assert_eq!(reg::control_index(name), Some(u32::from(*i)), "{name}");
    }
    assert!(matches!(
        scope.get("Control.interval_us"),
        Some(Reg::Control(0, _, _))
    ));
    assert_eq!(reg::control_index("Control.interval_us"), None);
    let sent: Vec<&str> = core().control_registers().iter().map(|(n, _)| *n).collect();
    assert_eq!(sent, reg::ALL);
    // the state registers are reported after the fields, in the order `state` numbers them
    let n = p.fields.len();
    assert_eq!(
        &p.fields[n - 4..],
        [state::W.1, state::CW.1, state::SS.1, state::CUT_SEEN.1]
    );
    for f in &p.fields {
        assert!(
            matches!(scope.get(&format!("Report.{f}")), Some(Reg::Report(..))),
            "{f}"
        );
    }
    assert!(matches!(
        scope.get("Report.nuwa_w"),
        Some(Reg::Report(_, _, false))
    ));
    // the initial registers follow the config
    let c = NuwaConfig {
        k_init: 2.5,
        target_delay_ms: 30.0,
        ..Default::default()
    };
    let p = Nuwa::new(c).program();
    assert!(p.source.contains("(Control.nuwa_k 2500)"), "{}", p.source);
    assert!(p.source.contains("(Control.nuwa_td_us 30000)"));
    assert!(p.source.contains("(Control.nuwa_rho_us 15000)"));
    assert!(p.source.contains("(Control.nuwa_base_us +infinity)"));
    assert!(p.source.contains("(nuwa_ss 1)"));
    // β = 0.7 as 717/1024
    assert!(p.source.contains("(* Report.nuwa_w 717) 1024"));
}

/// The instruction count of Nuwa's fold program with the default config.
const PROGRAM_INSTRUCTIONS: usize = 136;

// ---- actions, registers, observation -------------------------------------------------------

#[test]
fn actions_multiply_k_within_its_bounds() {
    assert_eq!(ACTIONS, [0.25, 1.0, 1.05, 1.25, 2.85]);
    assert_eq!(action_gain(Some(0.0)), (0.25, true));
    assert_eq!(action_gain(Some(4.0)), (2.85, true));
    assert_eq!(action_gain(Some(2.4)), (1.05, true));
    for bad in [
        None,
        Some(f32::NAN),
        Some(f32::INFINITY),
        Some(-1.0),
        Some(5.0),
    ] {
        assert_eq!(action_gain(bad), (1.0, false), "{bad:?}");
    }
    let mut c = core();
    assert_eq!(c.k(), 1.0);
    c.apply(&[4.0]);
    assert!((c.k() - 2.85).abs() < 1e-12);
    c.apply(&[3.0]);
    assert!((c.k() - 2.85 * 1.25).abs() < 1e-12);
    c.apply(&[0.0]);
    assert!((c.k() - 2.85 * 1.25 * 0.25).abs() < 1e-12);
    for _ in 0..20 {
        c.apply(&[4.0]);
    }
    assert_eq!(c.k(), 64.0);
    for _ in 0..20 {
        c.apply(&[0.0]);
    }
    assert_eq!(c.k(), 1.0 / 64.0);
    c.apply(&[f32::NAN]);
    assert_eq!(c.k(), 1.0 / 64.0);
    assert_eq!(c.counts(), (44, 1));
}

#[test]
fn the_registers_carry_each_periods_gain_and_the_flows_path() {
    let mut c = core();
    let r = regs(&c);
    assert_eq!(r[reg::K], 1000);
    assert_eq!(r[reg::TARGET_US], 20_000);
    assert_eq!(r[reg::RHO_US], 10_000);
    assert_eq!(r[reg::BASE_US], u32::MAX, "no RTT yet");
    assert_eq!(r[reg::MSS], MSS);
    assert_eq!(r[reg::SS_EXIT_US], 10_000);
    assert_eq!(r[reg::CUT], 0);
    let (mut obs, mut mask) = ([0.0; OBS_DIM], [1.0; OBS_DIM]);
    c.observe(&iv(20, 0, 41.0, 50.0, 30, false), &mut obs, &mut mask);
    c.observe(&iv(20, 0, 40.0, 45.0, 30, false), &mut obs, &mut mask);
    c.observe(&iv(20, 0, 42.0, 45.0, 30, false), &mut obs, &mut mask);
    assert_eq!(regs(&c)[reg::BASE_US], 40_000, "the flow's minimum");
    // each decision's gain is in the registers of the answer that follows
    c.apply(&[4.0]);
    assert_eq!(regs(&c)[reg::K], 2850);
    c.apply(&[3.0]);
    assert_eq!(regs(&c)[reg::K], 3563); // 2.85 · 1.25 = 3.5625
    c.apply(&[1.0]);
    assert_eq!(regs(&c)[reg::K], 3563);
    // the window is the datapath's: no action sets it
    let a = c.apply(&[2.0]);
    assert_eq!(a.cwnd_bytes, None);
    assert_eq!(a.rate_bps, None);
    assert!(a.report_interval_us.is_some());
}

#[test]
fn one_cut_per_loss_episode_and_none_for_a_timeout() {
    let mut c = core();
    let (mut obs, mut mask) = ([0.0; OBS_DIM], [1.0; OBS_DIM]);
    c.observe(&iv(20, 0, 40.0, 40.0, 30, false), &mut obs, &mut mask);
    assert_eq!(c.cut_epoch(), 0);
    c.observe(&iv(20, 2, 40.0, 40.0, 30, false), &mut obs, &mut mask);
    assert_eq!(c.cut_epoch(), 1);
    assert_eq!(regs(&c)[reg::CUT], 1);
    // more losses within the episode (1.25 RTT): no second cut
    c.observe(&iv(5, 1, 40.0, 10.0, 21, false), &mut obs, &mut mask);
    assert_eq!(c.cut_epoch(), 1);
    // a new episode later
    for _ in 0..10 {
        c.observe(&iv(20, 0, 40.0, 40.0, 21, false), &mut obs, &mut mask);
    }
    c.observe(&iv(20, 1, 40.0, 40.0, 21, false), &mut obs, &mut mask);
    assert_eq!(c.cut_epoch(), 2);
    // a timeout that opens an episode: the datapath is at one packet already
    for _ in 0..10 {
        c.observe(&iv(20, 0, 40.0, 40.0, 21, false), &mut obs, &mut mask);
    }
    let to = Interval {
        timeout: true,
        ..iv(0, 3, 40.0, 40.0, 1, true)
    };
    c.observe(&to, &mut obs, &mut mask);
    assert_eq!(c.cut_epoch(), 2);
    // loss_decrease = 1 ignores losses
    let mut c = NuwaCore::new(
        NuwaConfig {
            loss_decrease: 1.0,
            ..Default::default()
        },
        &info(),
    );
    c.observe(&iv(20, 2, 40.0, 40.0, 30, false), &mut obs, &mut mask);
    assert_eq!(c.cut_epoch(), 0);
}

#[test]
fn the_observation_is_the_papers_state_in_units_that_travel() {
    let mut c = core();
    let (mut obs, mut mask) = ([9.0; OBS_DIM], [1.0; OBS_DIM]);
    // slow start: no decision
    assert!(!c.observe(&iv(10, 0, 40.0, 40.0, 20, true), &mut obs, &mut mask));
    assert!(c.in_slow_start());
    assert_eq!(obs, [9.0; OBS_DIM], "untouched when not due");
    // under the law: 31 packets acknowledged, 63 in the window, RTT 50 ms over 40 ms
    assert!(c.observe(&iv(31, 0, 40.0, 50.0, 63, false), &mut obs, &mut mask));
    assert!(!c.in_slow_start());
    assert!((obs[feature::RCV_DATA] - 5.0 / 24.0).abs() < 1e-6);
    assert!((obs[feature::WINDOW] - 6.0 / 24.0).abs() < 1e-6);
    // D_c = 10 ms of T_d = 20 ms: half the budget is free
    assert!((obs[feature::SPACE] - 0.5).abs() < 1e-6);
    assert!((obs[feature::RTT] - (51.0f32).log2() / 14.0).abs() < 1e-6);
    // k = 1 is the middle of [1/64, 64] on a log scale
    assert!((obs[feature::GAIN] - 0.5).abs() < 1e-6);
    // twice the target or more: −1
    assert!(c.observe(&iv(31, 0, 40.0, 100.0, 63, false), &mut obs, &mut mask));
    assert_eq!(obs[feature::SPACE], -1.0);
    c.apply(&[4.0]);
    assert!(c.observe(&iv(31, 0, 40.0, 40.0, 63, false), &mut obs, &mut mask));
    assert_eq!(obs[feature::SPACE], 1.0);
    assert!(obs[feature::GAIN] > 0.6);
    // no ACKs, or no RTT: no decision
    assert!(!c.observe(&iv(0, 0, 40.0, 40.0, 63, false), &mut obs, &mut mask));
    let no_rtt = Interval {
        rtt_min_us: None,
        rtt_mean_us: None,
        rtt_last_us: None,
        ..iv(10, 0, 40.0, 40.0, 63, false)
    };
    assert!(!c.observe(&no_rtt, &mut obs, &mut mask));
}

#[test]
fn wild_reports_give_bounded_features_and_a_finite_reward() {
    let mut c = core();
    let (mut obs, mut mask) = ([0.0; OBS_DIM], [1.0; OBS_DIM]);
    let mut s = [Some(u64::MAX); crate::signals::MAX_STATE_REGS];
    s[state::SS.0] = Some(0);
    let wild = [
        Interval {
            acked_bytes: u64::MAX,
            acked_pkts: u64::MAX,
            lost_pkts: u64::MAX,
            rtt_min_us: Some(1),
            rtt_mean_us: Some(f64::NAN),
            rtt_last_us: Some(u64::MAX),
            interval_us: 0,
            cwnd_bytes: Some(u64::MAX),
            state: s,
            ..Default::default()
        },
        Interval {
            acked_pkts: 5,
            acked_bytes: 5000,
            rtt_min_us: Some(0),
            rtt_mean_us: Some(f64::INFINITY),
            rtt_last_us: Some(99_999_999),
            interval_us: u64::MAX,
            cwnd_bytes: Some(0),
            state: s,
            ..Default::default()
        },
        Interval {
            acked_pkts: 5,
            acked_bytes: 5000,
            rtt_min_us: Some(1),
            rtt_mean_us: Some(0.0),
            rtt_last_us: Some(1),
            interval_us: 1,
            state: s,
            ..Default::default()
        },
    ];
    for w in &wild {
        c.observe(w, &mut obs, &mut mask);
        let f = c.features(w);
        assert!(
            f.iter().all(|v| v.is_finite() && (-1.0..=1.0).contains(v)),
            "{w:?}: {f:?}"
        );
        assert!(c.reward().is_finite(), "{w:?}");
        assert!(c.cwnd_bytes().is_finite() && c.cwnd_bytes() > 0.0);
        for (_, v) in c.control_registers() {
            let _ = v; // u32 by type; the gain stays a valid register
        }
        assert!(regs(&c)[reg::K] >= 1);
    }
}

// ---- reward --------------------------------------------------------------------------------

/// The relative form of eq. 10's throughput (`x` in units of the flow's best rate).
fn relative() -> NuwaConfig {
    NuwaConfig {
        reward_rate_unit_mbps: 0.0,
        ..Default::default()
    }
}

#[test]
fn eq_10_against_hand_computed_values() {
    let cfg = relative();
    // full rate at the minimum RTT, no loss: γ·(1/0.4) − θ·(1/0.4) = 0
    assert!(utility(1.0, 1.0, 0.0, &cfg).abs() < 1e-12);
    // 0.5^0.4 − 2^0.4 − 0.2·0.1 = 0.757858 − 1.319508 − 0.02
    assert!((utility(0.5, 2.0, 0.1, &cfg) - (-0.581_649_627_517_695)).abs() < 1e-12);
    // 2^0.4 − 1 − 0.2·0.05
    assert!((utility(2.0, 1.0, 0.05, &cfg) - 0.309_507_910_772_894).abs() < 1e-12);
    // α = 1 is the log: −0.4·ln 1.5
    let log = NuwaConfig {
        alpha: 1.0,
        ..relative()
    };
    assert!((utility(1.0, 1.5, 0.0, &log) - (-0.162_186_043_243_266)).abs() < 1e-12);
    assert_eq!(alpha_fair(std::f64::consts::E, 1.0), 1.0);
    // bad inputs are bounded: finite, and no better than the bounds
    assert!(utility(f64::NAN, f64::NAN, f64::NAN, &cfg).is_finite());
    assert!(utility(0.0, 1.0, 0.0, &log).is_finite());
    assert_eq!(utility(1e9, 1.0, 0.0, &cfg), utility(4.0, 1.0, 0.0, &cfg));
    assert_eq!(utility(1.0, 0.5, 0.0, &cfg), utility(1.0, 1.0, 0.0, &cfg));
    assert_eq!(utility(1.0, 1.0, -3.0, &cfg), utility(1.0, 1.0, 0.0, &cfg));
    // in Mbit/s (the default) x is not capped at 4: 100 Mbit/s is worth more than 4
    let abs = NuwaConfig::default();
    assert!(utility(100.0, 1.0, 0.0, &abs) > utility(4.0, 1.0, 0.0, &abs));
    assert_eq!(utility(1e9, 1.0, 0.0, &abs), utility(1e6, 1.0, 0.0, &abs));
    assert!(utility(f64::NAN, f64::NAN, f64::NAN, &abs).is_finite());
}

#[test]
fn the_reward_measures_rate_against_the_best_and_rtt_against_the_minimum() {
    let mut c = NuwaCore::new(relative(), &info());
    let (mut obs, mut mask) = ([0.0; OBS_DIM], [1.0; OBS_DIM]);
    assert_eq!(c.reward(), 0.0, "nothing measured yet");
    // 40 packets in 40 ms at the minimum RTT: the best rate so far, x = 1, τ = 1
    c.observe(&iv(40, 0, 40.0, 40.0, 40, false), &mut obs, &mut mask);
    let m = c.measured().unwrap();
    assert!((m.x - 1.0).abs() < 1e-12 && (m.tau - 1.0).abs() < 1e-12);
    assert!(c.reward().abs() < 1e-12);
    // half the packets over an interval as long (RTT 80 ms, interval 80 ms): x = 0.25, τ = 2
    c.observe(&iv(20, 0, 40.0, 80.0, 40, false), &mut obs, &mut mask);
    let m = c.measured().unwrap();
    assert!((m.x - 0.25).abs() < 1e-12, "{m:?}");
    assert!((m.tau - 2.0).abs() < 1e-12);
    let want = utility(0.25, 2.0, 0.0, &relative());
    assert!((c.reward() - want).abs() < 1e-12);
}

#[test]
fn the_reward_measures_rate_in_its_unit_by_default() {
    let mut c = core();
    let (mut obs, mut mask) = ([0.0; OBS_DIM], [1.0; OBS_DIM]);
    // 40 packets of 1500 bytes in 40 ms: 12 Mbit/s, x = 12 in units of 1 Mbit/s
    c.observe(&iv(40, 0, 40.0, 40.0, 40, false), &mut obs, &mut mask);
    let m = c.measured().unwrap();
    assert!((m.x - 12.0).abs() < 1e-9, "{m:?}");
    // a steady rate twice as high is worth more: the flow's own best no longer sets the unit
    let mut fast = core();
    fast.observe(&iv(80, 0, 40.0, 40.0, 80, false), &mut obs, &mut mask);
    assert!(fast.reward() > c.reward());
    let cfg = NuwaConfig::default();
    assert!((c.reward() - utility(12.0, 1.0, 0.0, &cfg)).abs() < 1e-12);
}

/// The delay term counting only the queue beyond `T_d` (`reward_delay_over_target`).
fn over_target() -> NuwaConfig {
    NuwaConfig {
        reward_delay_over_target: true,
        ..Default::default()
    }
}

#[test]
fn over_the_target_the_delay_term_charges_only_the_excess_queue() {
    let (paper, over) = (NuwaConfig::default(), over_target());
    assert!(
        !paper.reward_delay_over_target,
        "eq. 10 as the paper by default"
    );
    // RTT_min 10 ms, T_d 20 ms: any queue up to the target is worth an empty one
    for rtt_ms in [10.0, 15.0, 25.0, 30.0] {
        assert_eq!(delay_ratio(rtt_ms * 1e3, 10e3, &over), 1.0, "{rtt_ms}");
    }
    assert_eq!(
        delay_ratio(30e3, 10e3, &paper),
        3.0,
        "the paper's τ charges the target"
    );
    // beyond it, each millisecond of queue costs what it costs in the paper's τ
    assert!((delay_ratio(35e3, 10e3, &over) - 1.5).abs() < 1e-12);
    assert!((delay_ratio(50e3, 10e3, &over) - 3.0).abs() < 1e-12);
    for (a, b) in [(35.0, 50.0), (40.0, 90.0)] {
        let d_over = delay_ratio(b * 1e3, 10e3, &over) - delay_ratio(a * 1e3, 10e3, &over);
        let d_paper = delay_ratio(b * 1e3, 10e3, &paper) - delay_ratio(a * 1e3, 10e3, &paper);
        assert!((d_over - d_paper).abs() < 1e-12, "{a}..{b} ms");
    }
    // the core measures it with the flow's T_d and minimum RTT; the reward is eq. 10's
    for (cfg, rtt_ms, want) in [(&over, 30.0, 1.0), (&over, 50.0, 3.0), (&paper, 30.0, 3.0)] {
        let mut c = NuwaCore::new(cfg.clone(), &info());
        let (mut obs, mut mask) = ([0.0; OBS_DIM], [1.0; OBS_DIM]);
        c.observe(&iv(40, 0, 10.0, rtt_ms, 40, false), &mut obs, &mut mask);
        let m = c.measured().unwrap();
        assert!((m.tau - want).abs() < 1e-12, "{rtt_ms} ms: {m:?}");
        assert!((c.reward() - utility(m.x, want, 0.0, cfg)).abs() < 1e-12);
    }
    // holding the target at a rate is worth the rate alone: θ·U(1) is the floor of the term
    let at_target = utility(12.0, delay_ratio(30e3, 10e3, &over), 0.0, &over);
    assert_eq!(at_target, utility(12.0, 1.0, 0.0, &over));
    assert!(at_target > utility(12.0, delay_ratio(30e3, 10e3, &paper), 0.0, &paper));
    // a larger target makes the same RTT free; T_d is the flow's (set per episode in training)
    let wide = NuwaConfig {
        target_delay_ms: 40.0,
        ..over_target()
    };
    assert_eq!(delay_ratio(50e3, 10e3, &wide), 1.0);
    assert!(delay_ratio(50e3, 10e3, &wide) < delay_ratio(50e3, 10e3, &over));
}

// ---- the algorithm -------------------------------------------------------------------------

#[test]
fn a_bare_nuwa_holds_k_and_sends_its_registers_through_the_controller() {
    let alg = Nuwa::default();
    let mut flow = alg.new_flow(&info());
    let a0 = flow.initial_action();
    assert_eq!(a0.cwnd_bytes, None);
    assert_eq!(a0.report_interval_us, Some(20_000));
    let ctl: std::collections::HashMap<_, _> = flow.control_registers().into_iter().collect();
    assert_eq!(ctl[reg::K], 1000);
    for i in 0..50 {
        let a = flow.on_report(&iv(20, 0, 40.0, 40.0 + f64::from(i % 5), 30, i < 3));
        assert_eq!(a.cwnd_bytes, None);
    }
    let ctl: std::collections::HashMap<_, _> = flow.control_registers().into_iter().collect();
    assert_eq!(ctl[reg::K], (1.0 * K_SCALE) as u32, "×1 every time");
    assert_eq!(ctl[reg::BASE_US], 40_000);
    let m = flow.metrics();
    assert_eq!(m.reports, 50);
    assert_eq!(m.cwnd_bytes, 30 * u64::from(MSS));
    assert_eq!(m.policy_errors, 0);
    // the report clock follows srtt
    let a = flow.on_report(&iv(20, 0, 40.0, 40.0, 30, false));
    assert!((40_000..=45_000).contains(&a.report_interval_us.unwrap()));
}

#[test]
fn spec_dynamics_and_config() {
    let alg = Nuwa::default();
    let s = LearnedAlgorithm::spec(&alg);
    assert_eq!((s.obs_dim, s.act_dim), (OBS_DIM, 1));
    assert_eq!((s.act_low[0], s.act_high[0]), (0.0, 4.0));
    assert_eq!(s.recurrent_hidden, Some(64));
    assert!(!s.masked);
    assert_eq!(alg.discrete_actions(), Some(5));
    // the layout names every feature once, in the observation's order
    let layout = alg.obs_layout();
    assert_eq!(layout.len(), OBS_DIM);
    for (i, (_, r)) in layout.iter().enumerate() {
        assert_eq!(*r, i..i + 1);
    }
    let at = |n: &str| layout.iter().find(|(m, _)| *m == n).unwrap().1.start;
    assert_eq!((at("space"), at("gain")), (feature::SPACE, feature::GAIN));
    let d = alg.dynamics();
    for knob in REWARD_KNOBS.iter().chain(&NOT_DYNAMICS) {
        assert!(!d.contains_key(*knob), "{knob}");
    }
    for knob in [
        "rho",
        "k_min",
        "k_max",
        "slow_start_exit",
        "loss_decrease",
        "interval_rtts",
    ] {
        assert!(d.contains_key(knob), "{knob}");
    }
    assert!(NuwaConfig::default().validate().is_ok());
    let bad = |f: &dyn Fn(&mut NuwaConfig)| {
        let mut c = NuwaConfig::default();
        f(&mut c);
        c.validate().unwrap_err().knob
    };
    assert_eq!(bad(&|c| c.target_delay_ms = 0.0), "target_delay_ms");
    assert_eq!(bad(&|c| c.target_delay_ms = f64::NAN), "target_delay_ms");
    assert_eq!(bad(&|c| c.rho = 0.0), "rho");
    assert_eq!(bad(&|c| c.k_max = 101.0), "k_max");
    assert_eq!(bad(&|c| c.k_min = 0.0), "k_min");
    assert_eq!(bad(&|c| c.k_min = 65.0), "k_min");
    assert_eq!(bad(&|c| c.k_init = 0.01), "k_min");
    assert_eq!(bad(&|c| c.k_init = 65.0), "k_init");
    assert_eq!(bad(&|c| c.slow_start_exit = -1.0), "slow_start_exit");
    assert_eq!(bad(&|c| c.loss_decrease = 0.0), "loss_decrease");
    assert_eq!(bad(&|c| c.loss_decrease = 1.5), "loss_decrease");
    assert_eq!(bad(&|c| c.interval_rtts = 0.0), "interval_rtts");
    assert_eq!(bad(&|c| c.min_interval_ms = 0.5), "min_interval_ms");
    assert_eq!(bad(&|c| c.initial_interval_ms = 1e9), "initial_interval_ms");
    assert_eq!(bad(&|c| c.window_s = 0.0), "window_s");
    assert_eq!(bad(&|c| c.lstm_hidden = 0), "lstm_hidden");
    assert_eq!(bad(&|c| c.reward_throughput = -1.0), "reward_throughput");
    assert_eq!(bad(&|c| c.reward_delay = f64::INFINITY), "reward_delay");
    assert_eq!(bad(&|c| c.reward_loss = -0.1), "reward_loss");
    assert_eq!(bad(&|c| c.alpha = 0.0), "alpha");
}

// ---- the receiver-side law ------------------------------------------------------------------

fn rx() -> ReceiverLaw {
    ReceiverLaw::new(&NuwaConfig::default(), 10 * MSS, MSS)
}

fn idx(name: &str) -> u32 {
    reg::control_index(name).expect("a Nuwa control register")
}

/// Feed in-order packets from `seq` with one-way delays `owd_ms` (constant); returns the
/// next sequence number.
fn feed(r: &mut ReceiverLaw, seq: u64, n: u64, owd_ms: f64) -> u64 {
    for s in seq..seq + n {
        r.on_packet(s, (owd_ms * 1e6) as u64, MSS);
    }
    seq + n
}

#[test]
fn the_receiver_slow_starts_then_halves_once_the_one_way_delay_passes_the_exit() {
    let mut r = rx();
    // the first packet sets the minimum (25 ms of propagation: D_c = 0)
    assert_eq!(r.on_packet(0, 25_000_000, MSS), 11 * MSS);
    let s = feed(&mut r, 1, 9, 25.0);
    assert!(r.in_slow_start());
    assert_eq!(r.window(), 20 * MSS);
    // D_c = 10 ms = the exit (½ of the default 20 ms target): not past it yet
    let s = feed(&mut r, s, 1, 35.0);
    assert!(r.in_slow_start());
    assert_eq!(r.window(), 21 * MSS);
    // past it: one more packet's growth, then halved
    r.on_packet(s, 35_100_000, MSS);
    assert!(!r.in_slow_start());
    assert_eq!(r.window_milli(), u64::from(22 * MSS) * W_SCALE / 2);
}

#[test]
fn a_hole_ends_the_receivers_slow_start_without_a_cut() {
    let mut r = rx();
    let s = feed(&mut r, 0, 5, 30.0);
    let w = r.window_milli();
    r.on_packet(s + 2, 30_000_000, MSS); // packets s, s+1 missing
    assert!(!r.in_slow_start());
    // the law, not slow start: D_c = 0, far below the target, grows by θ·k·mss²/w
    let after = r.window_milli();
    assert!(
        after > w && after < w + u64::from(MSS) * W_SCALE,
        "{w} {after}"
    );
}

#[test]
fn under_the_law_the_receiver_steps_exactly_as_the_program() {
    let mut r = rx();
    let mut s = feed(&mut r, 0, 1, 40.0);
    r.on_packet(s + 5, 40_000_000, MSS); // a hole: out of slow start
    s += 6;
    let (k, td, rho) = r.registers();
    assert_eq!((k, td, rho), (1_000, 20_000, 10_000));
    for owd_ms in [40.0f64, 45.0, 55.0, 60.0, 75.0, 100.0, 59.0] {
        let before = r.window_milli();
        r.on_packet(s, (owd_ms * 1e6) as u64, MSS);
        s += 1;
        let dc = ((owd_ms - 40.0) * 1e3).round() as u64;
        let want = law_step(before, td, dc, rho, k, u64::from(MSS), u64::from(MSS));
        assert_eq!(r.window_milli(), want, "D_c = {dc} µs");
    }
}

#[test]
fn the_receivers_delay_is_relative_so_a_clock_offset_changes_nothing() {
    let owds = [30.0, 31.0, 38.0, 52.0, 45.0, 29.5, 60.0, 33.0];
    let run = |offset_ms: f64| {
        let mut r = rx();
        let mut out = Vec::new();
        for (i, &o) in owds.iter().cycle().take(400).enumerate() {
            out.push(r.on_packet(i as u64, ((o + offset_ms) * 1e6) as u64, MSS));
        }
        out
    };
    assert_eq!(run(0.0), run(3_600_000.0));
}

#[test]
fn the_agents_registers_reach_the_receiver_by_their_index_and_are_bounded() {
    let mut a = rx();
    let mut b = rx();
    for r in [&mut a, &mut b] {
        let s = feed(r, 0, 1, 40.0);
        r.on_packet(s + 5, 40_000_000, MSS);
    }
    b.set_control(idx(reg::K), 8_000);
    let (wa, wb) = (a.window_milli(), b.window_milli());
    a.on_packet(10, 40_000_000, MSS);
    b.on_packet(10, 40_000_000, MSS);
    // an empty queue: θ ≈ 0.96 either way, so the growth scales with k
    let (da, db) = (a.window_milli() - wa, b.window_milli() - wb);
    assert!(db > 7 * da && db < 9 * da, "{da} {db}");
    // the target: D_c = 25 ms is below a 30 ms target, above the 20 ms default
    b.set_control(idx(reg::TARGET_US), 30_000);
    let w = b.window_milli();
    b.on_packet(11, 65_000_000, MSS);
    assert!(b.window_milli() > w);
    // wild values are bounded as the program's use of them is; unknown indices are ignored
    b.set_control(idx(reg::K), u64::MAX);
    b.set_control(idx(reg::RHO_US), 0);
    b.set_control(idx(reg::MSS), 0);
    b.set_control(0, 7); // Control.interval_us
    b.set_control(99, u64::MAX);
    let (k, td, rho) = b.registers();
    assert_eq!(
        (k, td, rho),
        ((config::K_LIMIT * K_SCALE) as u64, 30_000, 1)
    );
    for s in 12..2_000 {
        let w = b.on_packet(s, 1_000_000_000 + s * 7_919 % 50_000_000, u32::MAX);
        assert!(w >= 2 && u64::from(w) <= 1 << 30, "{w}");
    }
}

#[test]
fn the_kalman_step_passes_through_without_noise_and_smooths_with_it() {
    use super::core::kalman_step;
    // r = 0: the sample itself
    assert_eq!(kalman_step(5_000, 0, 12_000, 500, 0).0, 12_000);
    assert_eq!(kalman_step(12_000, 0, 5_000, 500, 0).0, 5_000);
    // a constant sample: the estimate converges to it, the variance to the steady state
    let (mut x, mut p) = (0, 25_000_000);
    for _ in 0..200 {
        (x, p) = kalman_step(x, p, 20_000, 500, 5_000);
    }
    // (within the integer step's dead band, 4096/gain ≈ 11 µs)
    assert!(x.abs_diff(20_000) <= 12, "{x}");
    // steady gain ≈ q/r = 0.1 for q ≪ r: p∞ ≈ q·r
    let gain = (p + 500 * 500) as f64 / (p + 500 * 500 + 5_000 * 5_000) as f64;
    assert!((gain - 0.095).abs() < 0.01, "{gain}");
    // iid noise of ±5 ms around 20 ms: the estimate's spread is a fraction of the sample's
    let (mut x, mut p) = (20_000, 25_000_000);
    let mut worst = 0;
    for i in 0..5_000u64 {
        let z = if i % 2 == 0 { 25_000 } else { 15_000 };
        (x, p) = kalman_step(x, p, z, 500, 5_000);
        if i > 100 {
            worst = worst.max(x.abs_diff(20_000));
        }
    }
    assert!(worst < 1_000, "{worst}");
    // extremes: no overflow, the estimate stays between the old estimate and the sample
    for (x0, z) in [(0, 100_000_000), (100_000_000, 0), (0, 0), (7, u64::MAX)] {
        for (p, q, r) in [(u64::MAX, u64::MAX, u64::MAX), (0, 0, 0), (u64::MAX, 0, 1)] {
            let (x1, p1) = kalman_step(x0, p, z, q, r);
            assert!(x1 >= x0.min(z) && x1 <= x0.max(z).min(100_000_000));
            assert!(p1 <= 3_000_000_000_000, "{p1}");
        }
    }
}

#[test]
fn the_receivers_kalman_filter_slows_the_law_on_a_delay_spike() {
    let run = |kalman: bool| {
        let mut r = rx();
        if kalman {
            r = r.with_kalman(500, 5_000);
        }
        let s = feed(&mut r, 0, 1, 40.0);
        r.on_packet(s + 5, 40_000_000, MSS); // out of slow start
        feed(&mut r, s + 6, 400, 60.0); // D_c = T_d: still
        let w = r.window_milli();
        feed(&mut r, s + 406, 3, 70.0); // three packets 10 ms later than the rest
        w - r.window_milli()
    };
    let (raw, filtered) = (run(false), run(true));
    // raw: three steps at θ = −tanh 1; filtered: the estimate has moved a third of the way
    assert!(filtered > 0 && filtered * 2 < raw, "{raw} {filtered}");
}

/// `--reward-unit capacity`: `x` is the flow's share of what the link offered.
#[test]
fn in_the_capacity_unit_a_filled_link_pays_the_same_at_any_rate() {
    let cfg = over_target();
    let (mut obs, mut mask) = ([0.0; OBS_DIM], [1.0; OBS_DIM]);
    // 40 packets of 1500 bytes in 40 ms at the minimum RTT: 1.5 MB/s delivered
    let mut c = NuwaCore::new(cfg.clone(), &info());
    c.observe(&iv(40, 0, 40.0, 40.0, 40, false), &mut obs, &mut mask);
    let m = c.measured().unwrap();
    assert!((m.rate_bps - 1.5e6).abs() < 1e-6, "{m:?}");
    let full = c.reward_in_capacity(1.5e6);
    assert!((full - utility_in_capacity(1.0, 1.0, 0.0, &cfg)).abs() < 1e-12);
    // the same share of a link ten times as fast pays the same
    let mut fast = NuwaCore::new(cfg.clone(), &info());
    fast.observe(&iv(400, 0, 40.0, 40.0, 400, false), &mut obs, &mut mask);
    assert!((fast.reward_in_capacity(15e6) - full).abs() < 1e-12);
    // half the link pays less, at any rate; eq. 10 in Mbit/s would pay the fast flow more
    let half = c.reward_in_capacity(3e6);
    assert!(half < full && (fast.reward_in_capacity(30e6) - half).abs() < 1e-12);
    assert!(
        fast.reward() > c.reward(),
        "eq. 10 in Mbit/s grows with the rate"
    );
    // an outage charges nothing for throughput: as if the flow had used the whole link
    assert_eq!(c.reward_in_capacity(0.0), full);
    // a bad capacity falls back to the core's own unit; the reward is always finite
    for bad in [f64::NAN, f64::INFINITY, -1.0] {
        assert_eq!(c.reward_in_capacity(bad), c.reward(), "{bad}");
    }
    assert!(utility_in_capacity(f64::NAN, f64::NAN, f64::NAN, &cfg).is_finite());
    assert_eq!(
        utility_in_capacity(100.0, 1.0, 0.0, &cfg),
        utility_in_capacity(X_MAX, 1.0, 0.0, &cfg),
        "bounded: ACKs lagging the link's service can read above its capacity"
    );
    // the delay term is the same as the reward's: queue beyond T_d costs
    let mut late = NuwaCore::new(cfg.clone(), &info());
    late.observe(&iv(40, 0, 10.0, 50.0, 40, false), &mut obs, &mut mask);
    assert!(late.reward_in_capacity(1.5e6) < full);
}
