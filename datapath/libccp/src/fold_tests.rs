//! Fold programs run by the real libccp interpreter the simulator compiles, one ACK at a
//! time, with the primitives and registers a test chooses: for programs that act on every ACK
//! themselves (Nuwa's window law), checked against their reference arithmetic.

use ccp_algs::nuwa::core::{law_step, reg, state, W_SCALE};
use ccp_algs::nuwa::{Nuwa, NuwaConfig};
use ccp_algs::signals::FoldProgram;
use ccp_algs::Algorithm;
use portus::lang::{Reg, Scope};
use portus::serialize;

use crate::datapath::{Datapath, Primitives};
use crate::proto;

/// One connection of a libccp datapath running one program, reporting at every ACK.
struct Harness {
    dp: Datapath,
    sid: u16,
    scope: Scope,
    uid: u32,
    now_ns: u64,
    fields: Vec<&'static str>,
}

impl Harness {
    /// Install `p`, start a flow (`init_cwnd`, `mss`) and point it at `p` with `regs` set
    /// and a report interval of 0 (a report at every ACK after the first, empty one).
    fn new(p: &FoldProgram, init_cwnd: u32, mss: u32, regs: &[(&'static str, u32)]) -> Self {
        let mut dp = Datapath::new(1, 0).expect("datapath");
        dp.take_outbox();
        let (bin, scope) = portus::lang::compile(p.source.as_bytes(), &[]).expect("compiles");
        let install = serialize::serialize(&serialize::install::Msg {
            sid: 0,
            program_uid: scope.program_uid,
            num_events: bin.events.len() as u32,
            num_instrs: bin.instrs.len() as u32,
            instrs: bin,
        })
        .expect("serializes");
        assert_eq!(dp.read_msg(&install), Ok(0));
        let sid = dp.connection_start(init_cwnd, mss, "nuwa").expect("a slot");
        dp.take_outbox();
        let mut h = Harness {
            dp,
            sid,
            uid: scope.program_uid,
            scope,
            now_ns: 0,
            fields: p.fields.clone(),
        };
        let mut all = vec![("Control.interval_us", 0)];
        all.extend_from_slice(regs);
        let fields = h.writable(&all);
        let m = serialize::serialize(&serialize::changeprog::Msg {
            sid: u32::from(sid),
            program_uid: h.uid,
            num_fields: fields.len() as u32,
            fields,
        })
        .expect("serializes");
        assert_eq!(h.dp.read_msg(&m), Ok(0));
        // libccp switches to the program at the next invoke and starts its clock there, so
        // that invoke cannot report yet: an ACK of nothing, without an RTT sample
        h.now_ns += 1_000_000;
        h.dp.set_now(h.now_ns);
        let prims = Primitives {
            snd_cwnd: init_cwnd,
            ..Default::default()
        };
        assert_eq!(h.dp.invoke(sid, &prims), 0);
        assert!(h.dp.take_outbox().is_empty());
        h
    }

    fn writable(&self, regs: &[(&'static str, u32)]) -> Vec<(Reg, u64)> {
        regs.iter()
            .map(|&(n, v)| match self.scope.get(n) {
                Some(r @ (Reg::Control(..) | Reg::Implicit(..))) => (r.clone(), u64::from(v)),
                other => panic!("{n} is not writable: {other:?}"),
            })
            .collect()
    }

    /// Stage register updates for the next ACK, as an agent's answer does.
    fn update(&mut self, regs: &[(&'static str, u32)]) {
        let fields = self.writable(regs);
        let m = serialize::serialize(&serialize::update_field::Msg {
            sid: u32::from(self.sid),
            num_fields: fields.len() as u8,
            fields,
        })
        .expect("serializes");
        assert_eq!(self.dp.read_msg(&m), Ok(0));
    }

    /// One ACK 1 ms after the last: `acked` bytes, an RTT sample, the datapath's current
    /// window fed back. Returns the report (every field by name) and the window libccp set.
    fn ack(&mut self, acked: u32, mss: u32, rtt_us: u32, lost: u32, timeout: bool) -> Report {
        self.now_ns += 1_000_000;
        self.dp.set_now(self.now_ns);
        let prims = Primitives {
            bytes_acked: acked,
            packets_acked: acked.div_ceil(mss.max(1)),
            rtt_sample_us: u64::from(rtt_us),
            lost_pkts_sample: lost,
            was_timeout: timeout,
            snd_cwnd: self.dp.cwnd(self.sid),
            ..Default::default()
        };
        assert_eq!(self.dp.invoke(self.sid, &prims), 0, "the invoke aborted");
        let out = self.dp.take_outbox();
        assert_eq!(out.len(), 1, "one report per ACK");
        let m = &out[0];
        assert_eq!(proto::header(m).map(|h| h.typ), Some(proto::MEASURE));
        let n = proto::measure_num_fields(m).expect("a report") as usize;
        let at = |i: usize| {
            let o = proto::HDR_LEN + 8 + 8 * i;
            u64::from_le_bytes(m[o..o + 8].try_into().expect("8 bytes"))
        };
        let values: Vec<(&'static str, u64)> = self
            .fields
            .iter()
            .map(|f| match self.scope.get(&format!("Report.{f}")) {
                Some(Reg::Report(i, _, _)) if (*i as usize) < n => (*f, at(*i as usize)),
                other => panic!("{f}: {other:?}"),
            })
            .collect();
        Report {
            values,
            cwnd: self.dp.cwnd(self.sid),
        }
    }
}

struct Report {
    values: Vec<(&'static str, u64)>,
    cwnd: u32,
}

impl Report {
    fn get(&self, f: &str) -> u64 {
        self.values
            .iter()
            .find(|(n, _)| *n == f)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no field {f}"))
    }
    fn w(&self) -> u64 {
        self.get(state::W.1)
    }
    fn ss(&self) -> u64 {
        self.get(state::SS.1)
    }
}

const MSS: u32 = 1500;

fn regs(k: u32) -> Vec<(&'static str, u32)> {
    vec![
        (reg::K, k),
        (reg::TARGET_US, 20_000),
        (reg::RHO_US, 10_000),
        (reg::BASE_US, 40_000),
        (reg::MSS, MSS),
        (reg::SS_EXIT_US, 10_000),
        (reg::CUT, 0),
    ]
}

/// Whole packets of a milli-byte window, as the program writes `Cwnd`.
fn cwnd_of(w: u64, mss: u64) -> u32 {
    (w / (mss * W_SCALE) * mss) as u32
}

/// A flow past slow start: slow start grows by the acknowledged bytes, ends when `D_c`
/// (55 − 40 ms) passes the exit delay (10 ms) and halves the window.
fn in_avoidance(k: u32) -> (Harness, u64) {
    let p = Nuwa::new(NuwaConfig::default()).program();
    let mut h = Harness::new(&p, 10 * MSS, MSS, &regs(k));
    let r = h.ack(MSS, MSS, 41_000, 0, false);
    // adopted 10 packets, plus one acknowledged
    assert_eq!(r.w(), u64::from(11 * MSS) * W_SCALE);
    assert_eq!(r.ss(), 1);
    assert_eq!(r.cwnd, 11 * MSS);
    let r = h.ack(2 * MSS, MSS, 42_000, 0, false);
    assert_eq!(r.w(), u64::from(13 * MSS) * W_SCALE);
    assert_eq!(r.ss(), 1);
    // the exit: +1 packet, then halved; the law then runs (D_c = 15 ms < T_d: it grows)
    let r = h.ack(MSS, MSS, 55_000, 0, false);
    assert_eq!(r.ss(), 0);
    let halved = u64::from(14 * MSS) * W_SCALE / 2;
    let want = law_step(halved, 20_000, 15_000, 10_000, u64::from(k), 1500, 1500);
    assert_eq!(r.w(), want);
    assert_eq!(r.cwnd, cwnd_of(want, 1500));
    (h, want)
}

#[test]
fn libccp_runs_nuwas_law_exactly_as_its_reference_on_every_ack() {
    let k = 2_000;
    let (mut h, mut w) = in_avoidance(k);
    // a queue that fills past the target and drains again, with stretch ACKs
    let mut grew = 0;
    let mut shrank = 0;
    let mut at_floor = 0;
    for i in 0..400u64 {
        let dc = (i * 137) % 40_000;
        let acked = MSS * (1 + (i % 3) as u32);
        let r = h.ack(acked, MSS, (40_000 + dc) as u32, 0, false);
        let want = law_step(w, 20_000, dc, 10_000, u64::from(k), 1500, u64::from(acked));
        assert_eq!(r.w(), want, "ACK {i}, D_c {dc}");
        assert_eq!(r.cwnd, cwnd_of(want, 1500));
        assert_eq!(r.get(state::CW.1), u64::from(r.cwnd));
        // and the reference is the paper's law: Δcwnd = tanh((T_d − D_c)/ρ)·k·mss·acked/cwnd,
        // within θ's error (2e-3) and the gain register's resolution (θ·k in 1/1000)
        let scale = 2.0 * 1500.0 * f64::from(acked) / (w as f64 / 1e3);
        let theta = ((20_000.0 - dc as f64) / 10_000.0).tanh();
        let (exact, got) = (theta * scale, (want as f64 - w as f64) / 1e3);
        let floor = 2 * 1500 * W_SCALE;
        at_floor += u32::from(want == floor);
        assert!(
            want == floor || (got - exact).abs() <= (2e-3 + 1e-3 / 2.0) * scale + 1e-3,
            "ACK {i}: {got} vs {exact}"
        );
        if want > w {
            grew += 1;
        } else if want < w {
            shrank += 1;
        }
        w = want;
    }
    assert!(grew > 100 && shrank > 100, "{grew} {shrank}");
    assert_eq!(at_floor, 0, "the comparison with tanh was skipped");
}

#[test]
fn the_gain_and_the_target_are_registers_the_agent_sets() {
    let (mut h, w) = in_avoidance(1_000);
    // k ×4 and a 30 ms target take effect at the next ACK
    h.update(&[(reg::K, 4_000), (reg::TARGET_US, 30_000)]);
    let r = h.ack(MSS, MSS, 65_000, 0, false); // D_c = 25 ms: below the new target
    assert_eq!(
        r.w(),
        law_step(w, 30_000, 25_000, 10_000, 4_000, 1500, 1500)
    );
    assert!(r.w() > w);
}

#[test]
fn a_cut_epoch_cuts_once_and_an_outside_window_is_adopted() {
    let (mut h, w) = in_avoidance(1_000);
    h.update(&[(reg::CUT, 1)]);
    // D_c = T_d: the law is still, only the cut moves the window (β = 717/1024)
    let r = h.ack(MSS, MSS, 60_000, 0, false);
    assert_eq!(r.w(), w * 717 / 1024);
    assert_eq!(r.get(state::CUT_SEEN.1), 1);
    // the same epoch again (every answer repeats it): no second cut
    h.update(&[(reg::CUT, 1)]);
    let r2 = h.ack(MSS, MSS, 60_000, 0, false);
    assert_eq!(r2.w(), r.w());
    // a window set from outside (an agent's Cwnd, an RTO) replaces the program's
    h.update(&[("Cwnd", 50 * MSS)]);
    let r3 = h.ack(MSS, MSS, 60_000, 0, false);
    assert_eq!(r3.w(), u64::from(50 * MSS) * W_SCALE);
    assert_eq!(r3.cwnd, 50 * MSS);
    // below two packets: two packets
    h.update(&[("Cwnd", MSS)]);
    let r4 = h.ack(MSS, MSS, 60_000, 0, false);
    assert_eq!(r4.cwnd, 2 * MSS);
}

#[test]
fn a_loss_ends_slow_start_and_a_timeout_restarts_it() {
    let p = Nuwa::default().program();
    let mut h = Harness::new(&p, 10 * MSS, MSS, &regs(1_000));
    assert_eq!(h.ack(MSS, MSS, 41_000, 0, false).ss(), 1);
    let r = h.ack(MSS, MSS, 41_000, 2, false);
    assert_eq!(r.ss(), 0);
    // no slow-start growth after it: the law (D_c = 1 ms, far below the target) adds little
    assert!(r.w() < u64::from(12 * MSS) * W_SCALE + 200_000, "{}", r.w());
    let r = h.ack(0, MSS, 41_000, 3, true);
    assert_eq!(r.ss(), 1);
    let before = r.w();
    let r = h.ack(4 * MSS, MSS, 41_000, 0, false);
    assert_eq!(r.w(), before + u64::from(4 * MSS) * W_SCALE);
}

#[test]
fn extreme_primitives_and_registers_never_abort_an_ack() {
    let p = Nuwa::default().program();
    let big_mss = 65_535;
    let mut regs = regs(100_000);
    regs.retain(|(n, _)| *n != reg::MSS);
    regs.push((reg::MSS, big_mss));
    let mut h = Harness::new(&p, 4 * big_mss, big_mss, &regs);
    for (acked, rtt, lost, to) in [
        (u32::MAX, 99_999_999, 0, false),
        (u32::MAX, 40_000, 0, false),
        (u32::MAX, 41_000, u32::MAX, false),
        (u32::MAX, 99_999_999, 0, false),
        (0, 0, 0, false), // no RTT sample (reads as u32::MAX)
        (u32::MAX, 40_001, 0, true),
        (u32::MAX, 40_001, 0, false),
        (u32::MAX, 99_999_999, 0, false),
    ] {
        let r = h.ack(acked, big_mss, rtt, lost, to);
        let w = r.w();
        assert!(
            (2 * u64::from(big_mss) * W_SCALE..=(1u64 << 30) * W_SCALE).contains(&w),
            "{w}"
        );
        assert!(r.cwnd >= 2 * big_mss && u64::from(r.cwnd) <= 1 << 30);
    }
    // a tiny ρ and the largest k at a 1-byte MSS
    let mut h = Harness::new(
        &p,
        10,
        1,
        &[
            (reg::K, 100_000),
            (reg::RHO_US, 1),
            (reg::MSS, 1),
            (reg::BASE_US, 1),
            (reg::SS_EXIT_US, 0),
        ],
    );
    for rtt in [2, 99_999_999, 3, 1_000_000] {
        let r = h.ack(u32::MAX, 1, rtt, 0, false);
        assert!(r.w() >= 2 * W_SCALE);
    }
}
