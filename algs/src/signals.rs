//! Interval signals: what a fold program measures in the datapath and how a report becomes a
//! typed [`Interval`].
//!
//! Every algorithm owns its fold program ([`FoldProgram`]), but all programs speak one
//! vocabulary of report fields, listed in [`fields`]. A reader finds every signal here: its
//! field name, what the datapath folds into it per ACK, and its unit. Programs are built with
//! [`ProgramBuilder`], which emits only the fields an algorithm asks for (libccp allows at most
//! 16 report fields) and one of the report triggers below.
//!
//! Fold-language limits respected by construction (see `docs/upstream-defects.md`): every
//! expression is at most two operators deep (libccp has 8 temporaries and no bounds check),
//! programs stay within [`MAX_PROGRAM_INSTRUCTIONS`] (checked in tests and again by the agent
//! before install), immediates are < 2^31, and names are prefixed by the algorithm because program
//! names are global in portus.
//!
//! A program may also act on every ACK itself (Nuwa's window law): the builder takes control
//! registers the agent sets ([`ProgramBuilder::control`], updated with every answer through
//! [`crate::Controller::control_registers`]), registers the program keeps across reports
//! ([`ProgramBuilder::state`], reported like fields and decoded into [`Interval::state`]) and
//! statements of its own, run on every ACK ([`ProgramBuilder::on_ack`], after the folds),
//! on every valid RTT sample ([`ProgramBuilder::on_rtt_sample`], after the RTT folds) and
//! last ([`ProgramBuilder::after`], before the report triggers). Such statements follow the
//! same rules; the builder cannot check them, the algorithm's tests must (compile them, count
//! them, and run them through libccp).

use std::fmt::Write as _;

/// Canonical report field names (without the `Report.` prefix) and their per-ACK fold.
pub mod fields {
    /// Σ `Ack.bytes_acked` over the interval (bytes).
    pub const ACKED_BYTES: &str = "acked_bytes";
    /// Σ `Ack.packets_acked` (packets).
    pub const ACKED_PKTS: &str = "acked_pkts";
    /// Σ `Ack.lost_pkts_sample` (packets the datapath declared lost).
    pub const LOST_PKTS: &str = "lost_pkts";
    /// `Flow.was_timeout` seen during the interval (bool).
    pub const TIMEOUT: &str = "timeout";
    /// min `Flow.rtt_sample_us` (µs); `+infinity` if no sample.
    pub const RTT_MIN_US: &str = "rtt_min_us";
    /// Σ `Flow.rtt_sample_us` (µs), with [`RTT_CNT`] gives the mean.
    pub const RTT_SUM_US: &str = "rtt_sum_us";
    /// number of RTT samples folded into [`RTT_SUM_US`].
    pub const RTT_CNT: &str = "rtt_cnt";
    /// the last `Flow.rtt_sample_us` (µs).
    pub const RTT_LAST_US: &str = "rtt_last_us";
    /// `Flow.bytes_in_flight` at the last ACK (bytes).
    pub const INFLIGHT_BYTES: &str = "inflight_bytes";
    /// `Flow.rate_outgoing` at the last ACK (bytes/s).
    pub const SEND_RATE: &str = "send_rate";
    /// `Flow.rate_incoming` at the last ACK (bytes/s).
    pub const RECV_RATE: &str = "recv_rate";
    /// `Ack.now` of the first ACK of the interval (µs, datapath clock).
    pub const FIRST_ACK_US: &str = "first_ack_us";
    /// `Ack.now` of the last ACK of the interval (µs, datapath clock).
    pub const LAST_ACK_US: &str = "last_ack_us";
    /// `Micros` when the report fired: the interval's length (µs).
    pub const INTERVAL_US: &str = "interval_us";
    /// Σ `Ack.ecn_packets` (packets).
    pub const ECN_PKTS: &str = "ecn_pkts";
    /// `Cwnd` register at the last ACK: the window the datapath enforces (bytes).
    pub const CWND_BYTES: &str = "cwnd_bytes";
    /// Σ `Ack.packets_misordered` (SACKed / out-of-order packets).
    pub const MISORDERED_PKTS: &str = "misordered_pkts";
    /// max over the interval's ACKs of min(`Flow.rate_outgoing`, `Flow.rate_incoming`)
    /// (bytes/s): the best delivery-rate sample, each sample taken over one packet's flight
    /// (Linux `tcp_rate`: delivered / max(send interval, ack interval), which is exactly
    /// BBR's bandwidth sample); 0 if no ACK carried a sample.
    pub const DELIVERY_RATE_MAX: &str = "delivery_rate_max";

    /// Every canonical field, in the order [`super::Interval::from_fields`] understands.
    pub const ALL: [&str; 18] = [
        ACKED_BYTES,
        ACKED_PKTS,
        LOST_PKTS,
        TIMEOUT,
        RTT_MIN_US,
        RTT_SUM_US,
        RTT_CNT,
        RTT_LAST_US,
        INFLIGHT_BYTES,
        SEND_RATE,
        RECV_RATE,
        FIRST_ACK_US,
        LAST_ACK_US,
        INTERVAL_US,
        ECN_PKTS,
        CWND_BYTES,
        MISORDERED_PKTS,
        DELIVERY_RATE_MAX,
    ];
}

/// Maximum number of report fields libccp accepts per program.
pub const MAX_REPORT_FIELDS: usize = 16;

/// The most instructions a compiled fold program may have, the one limit the agent, the
/// simulator and the tests check. libccp 1.2 sizes its program table for
/// `MAX_INSTRUCTIONS` = 256 (`libccp/serialize.h`) and refuses more, but its register loops
/// over a program's instructions count with a `u8` (`reset_state`, `init_register_state` in
/// `libccp/machine.c`), which never reaches 256: a 256-instruction program hangs the
/// datapath. So at most 255; a program with more is refused.
pub const MAX_PROGRAM_INSTRUCTIONS: usize = 255;

/// Name of the control register that holds the report interval (µs) in every program the
/// builder emits; an [`crate::Action`] with `report_interval_us` updates it.
pub const INTERVAL_REG: &str = "Control.interval_us";

/// `Flow.rtt_sample_us` reads as `u32::MAX` when the datapath has no sample (libccp quirk);
/// samples at or above this bound are ignored by the programs and by [`Interval`].
pub const RTT_SAMPLE_CEILING_US: u64 = 100_000_000;

/// Most registers a program may keep across reports ([`ProgramBuilder::state`]).
pub const MAX_STATE_REGS: usize = 4;

/// Initial value `+infinity` of a control register ([`ProgramBuilder::control`]): libccp
/// stores it as `u32::MAX`.
pub const INFINITY: u64 = u64::MAX;

/// Largest immediate portus serializes (values must be below it, `+infinity` aside).
pub const MAX_IMMEDIATE: u64 = 1 << 31;

/// One datapath program: a unique (algorithm-prefixed) name, its source text, and the report
/// fields it declares, in the order the controller reads them (canonical fields, then the
/// program's state registers, [`ProgramBuilder::state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldProgram {
    pub name: &'static str,
    pub source: String,
    pub fields: Vec<&'static str>,
    /// Initial value of [`INTERVAL_REG`] (µs).
    pub initial_interval_us: u32,
}

/// When a program reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Every `Control.interval_us` µs of datapath time.
    Interval,
    /// Every interval, and at once on a timeout or any loss (window algorithms that must
    /// react to loss within an RTT, e.g. Reno and Cubic).
    IntervalOrLoss,
}

/// Builds a fold program from canonical fields.
#[derive(Debug, Clone)]
pub struct ProgramBuilder {
    name: &'static str,
    fields: Vec<&'static str>,
    trigger: Trigger,
    interval_us: u32,
    /// `(name, initial value)` of the program's own report registers (not reset per report).
    state: Vec<(&'static str, u64)>,
    /// `(name, initial value)` of the control registers besides [`INTERVAL_REG`].
    controls: Vec<(&'static str, u64)>,
    on_ack: String,
    on_rtt_sample: String,
    after: String,
}

impl ProgramBuilder {
    /// `name` must be unique across every algorithm in the agent: prefix it with the
    /// algorithm's name (portus shares programs by name across algorithms).
    pub fn new(name: &'static str, interval_us: u32) -> Self {
        Self {
            name,
            fields: Vec::new(),
            trigger: Trigger::Interval,
            interval_us,
            state: Vec::new(),
            controls: Vec::new(),
            on_ack: String::new(),
            on_rtt_sample: String::new(),
            after: String::new(),
        }
    }

    pub fn trigger(mut self, t: Trigger) -> Self {
        self.trigger = t;
        self
    }

    /// Add canonical fields (duplicates are ignored). Unknown names panic in debug builds:
    /// field lists are compile-time constants of each algorithm.
    pub fn fields(mut self, fs: &[&'static str]) -> Self {
        for f in fs {
            debug_assert!(fields::ALL.contains(f), "unknown canonical field {f}");
            if !self.fields.contains(f) {
                self.fields.push(f);
            }
        }
        self
    }

    /// A register the program keeps across reports (`Report.<name>`, non-volatile: set to
    /// `init` when the program starts, never reset): reported after the fields, in the order
    /// declared, and decoded into [`Interval::state`]. At most [`MAX_STATE_REGS`]; `name`
    /// must not be a canonical field, `init` below [`MAX_IMMEDIATE`].
    pub fn state(mut self, name: &'static str, init: u64) -> Self {
        assert!(
            !fields::ALL.contains(&name),
            "state register {name} shadows a canonical field"
        );
        assert!(
            init < MAX_IMMEDIATE,
            "state register {name}: init {init} too big"
        );
        self.state.push((name, init));
        self
    }

    /// A control register `Control.<name>` the agent sets ([`crate::Controller::
    /// control_registers`]), starting at `init` ([`INFINITY`] for `+infinity`, else below
    /// [`MAX_IMMEDIATE`]).
    pub fn control(mut self, name: &'static str, init: u64) -> Self {
        assert!(
            init == INFINITY || init < MAX_IMMEDIATE,
            "control register {name}: init {init} too big"
        );
        self.controls.push((name, init));
        self
    }

    /// Statements run on every ACK, after the per-ACK folds (the report fields hold this
    /// ACK's values; `Report.cwnd_bytes` the window before these statements).
    pub fn on_ack(mut self, statements: &str) -> Self {
        self.on_ack.push_str(statements);
        self
    }

    /// Statements run on every ACK that carries a valid RTT sample, after the RTT folds
    /// (`Report.rtt_min_us`, if declared, includes this sample). Needs an RTT field.
    pub fn on_rtt_sample(mut self, statements: &str) -> Self {
        self.on_rtt_sample.push_str(statements);
        self
    }

    /// Statements run on every ACK after everything else, before the report triggers.
    pub fn after(mut self, statements: &str) -> Self {
        self.after.push_str(statements);
        self
    }

    pub fn build(mut self) -> FoldProgram {
        use fields::*;
        // The interval length is always reported, and the loss trigger needs its fields.
        self = self.fields(&[INTERVAL_US]);
        if self.trigger == Trigger::IntervalOrLoss {
            self = self.fields(&[LOST_PKTS, TIMEOUT]);
        }
        assert!(
            self.state.len() <= MAX_STATE_REGS,
            "program {} keeps {} state registers, at most {MAX_STATE_REGS}",
            self.name,
            self.state.len()
        );
        assert!(
            self.fields.len() + self.state.len() <= MAX_REPORT_FIELDS,
            "program {} declares {} report fields and {} state registers, libccp allows \
             {MAX_REPORT_FIELDS} in all",
            self.name,
            self.fields.len(),
            self.state.len()
        );
        let has = |f: &str| self.fields.contains(&f);
        let mut s = String::new();
        s.push_str("(def (Report");
        for f in &self.fields {
            let init = match *f {
                RTT_MIN_US => "+infinity",
                TIMEOUT => "false",
                _ => "0",
            };
            let _ = write!(s, " (volatile {f} {init})");
        }
        for (name, init) in &self.state {
            let _ = write!(s, " ({name} {init})");
        }
        let _ = write!(s, ") ({INTERVAL_REG} {})", self.interval_us);
        for (name, init) in &self.controls {
            if *init == INFINITY {
                let _ = write!(s, " (Control.{name} +infinity)");
            } else {
                let _ = write!(s, " (Control.{name} {init})");
            }
        }
        s.push_str(")\n");

        // Per-ACK folds. One `when true ... (fallthrough)` block keeps every update shallow.
        s.push_str("(when true\n");
        let sum = |s: &mut String, f: &str, src: &str| {
            let _ = writeln!(s, "  (:= Report.{f} (+ Report.{f} {src}))");
        };
        let set = |s: &mut String, f: &str, src: &str| {
            let _ = writeln!(s, "  (:= Report.{f} {src})");
        };
        if has(ACKED_BYTES) {
            sum(&mut s, ACKED_BYTES, "Ack.bytes_acked");
        }
        if has(ACKED_PKTS) {
            sum(&mut s, ACKED_PKTS, "Ack.packets_acked");
        }
        if has(LOST_PKTS) {
            sum(&mut s, LOST_PKTS, "Ack.lost_pkts_sample");
        }
        if has(ECN_PKTS) {
            sum(&mut s, ECN_PKTS, "Ack.ecn_packets");
        }
        if has(MISORDERED_PKTS) {
            sum(&mut s, MISORDERED_PKTS, "Ack.packets_misordered");
        }
        if has(TIMEOUT) {
            // sticky within the interval: || keeps a timeout seen by an earlier ACK
            set(&mut s, TIMEOUT, "(|| Report.timeout Flow.was_timeout)");
        }
        if has(INFLIGHT_BYTES) {
            set(&mut s, INFLIGHT_BYTES, "Flow.bytes_in_flight");
        }
        if has(SEND_RATE) {
            set(&mut s, SEND_RATE, "Flow.rate_outgoing");
        }
        if has(RECV_RATE) {
            set(&mut s, RECV_RATE, "Flow.rate_incoming");
        }
        if has(LAST_ACK_US) {
            set(&mut s, LAST_ACK_US, "Ack.now");
        }
        if has(CWND_BYTES) {
            set(&mut s, CWND_BYTES, "Cwnd");
        }
        if has(DELIVERY_RATE_MAX) {
            // two operators deep: max(field, min(out, in))
            set(
                &mut s,
                DELIVERY_RATE_MAX,
                "(max Report.delivery_rate_max (min Flow.rate_outgoing Flow.rate_incoming))",
            );
        }
        set(&mut s, INTERVAL_US, "Micros");
        s.push_str(&self.on_ack);
        s.push_str("  (fallthrough))\n");

        if has(FIRST_ACK_US) {
            let _ = writeln!(
                s,
                "(when (== Report.first_ack_us 0)\n  (:= Report.first_ack_us Ack.now)\n  (fallthrough))"
            );
        }
        // RTT folds only for valid samples (0 reads as u32::MAX in libccp).
        let rtt_fields = [RTT_MIN_US, RTT_SUM_US, RTT_CNT, RTT_LAST_US];
        assert!(
            self.on_rtt_sample.is_empty() || rtt_fields.iter().any(|f| has(f)),
            "program {}: statements on RTT samples need an RTT field",
            self.name
        );
        if rtt_fields.iter().any(|f| has(f)) {
            let _ = writeln!(
                s,
                "(when (&& (> Flow.rtt_sample_us 0) (< Flow.rtt_sample_us {RTT_SAMPLE_CEILING_US}))"
            );
            if has(RTT_MIN_US) {
                set(
                    &mut s,
                    RTT_MIN_US,
                    "(min Report.rtt_min_us Flow.rtt_sample_us)",
                );
            }
            if has(RTT_SUM_US) {
                sum(&mut s, RTT_SUM_US, "Flow.rtt_sample_us");
            }
            if has(RTT_CNT) {
                sum(&mut s, RTT_CNT, "1");
            }
            if has(RTT_LAST_US) {
                set(&mut s, RTT_LAST_US, "Flow.rtt_sample_us");
            }
            s.push_str(&self.on_rtt_sample);
            s.push_str("  (fallthrough))\n");
        }
        if !self.after.is_empty() {
            s.push_str("(when true\n");
            s.push_str(&self.after);
            s.push_str("  (fallthrough))\n");
        }
        if self.trigger == Trigger::IntervalOrLoss {
            s.push_str(
                "(when (|| Report.timeout (> Report.lost_pkts 0))\n  (report)\n  (:= Micros 0))\n",
            );
        }
        let _ = writeln!(
            s,
            "(when (> Micros {INTERVAL_REG})\n  (report)\n  (:= Micros 0))"
        );
        let mut fields = self.fields;
        fields.extend(self.state.iter().map(|(n, _)| *n));
        FoldProgram {
            name: self.name,
            source: s,
            fields,
            initial_interval_us: self.interval_us,
        }
    }
}

/// A report decoded into typed interval signals. Fields the program did not declare are
/// `None` (or 0 for counters), so each algorithm reads exactly what its program measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Interval {
    pub acked_bytes: u64,
    pub acked_pkts: u64,
    pub lost_pkts: u64,
    pub timeout: bool,
    pub ecn_pkts: u64,
    pub misordered_pkts: u64,
    /// Minimum valid RTT sample in the interval (µs).
    pub rtt_min_us: Option<u64>,
    /// Mean of valid RTT samples (µs).
    pub rtt_mean_us: Option<f64>,
    pub rtt_samples: u64,
    pub rtt_last_us: Option<u64>,
    pub inflight_bytes: Option<u64>,
    pub send_rate_bps: Option<u64>,
    pub recv_rate_bps: Option<u64>,
    pub first_ack_us: Option<u64>,
    pub last_ack_us: Option<u64>,
    /// Length of the interval (µs); 0 means unknown.
    pub interval_us: u64,
    pub cwnd_bytes: Option<u64>,
    /// Best per-ACK delivery-rate sample of the interval (bytes/s,
    /// [`fields::DELIVERY_RATE_MAX`]); `None` if not declared or no ACK carried a sample.
    pub delivery_rate_max_bps: Option<u64>,
    /// The program's own registers at the report ([`ProgramBuilder::state`]), in the order
    /// declared; `None` past the ones it declares.
    pub state: [Option<u64>; MAX_STATE_REGS],
}

impl Interval {
    /// Decode `values`, which are in the order of `names` (a program's `fields`): canonical
    /// names into their fields, the others, in order, into [`Interval::state`] (those beyond
    /// [`MAX_STATE_REGS`] are ignored).
    pub fn from_fields(names: &[&str], values: &[u64]) -> Self {
        use fields::*;
        let get = |f: &str| {
            names
                .iter()
                .position(|n| *n == f)
                .and_then(|i| values.get(i).copied())
        };
        let valid_rtt = |v: u64| (v > 0 && v < RTT_SAMPLE_CEILING_US).then_some(v);
        let mut state = [None; MAX_STATE_REGS];
        let own = names
            .iter()
            .zip(values)
            .filter(|(n, _)| !ALL.contains(*n))
            .map(|(_, v)| *v);
        for (slot, v) in state.iter_mut().zip(own) {
            *slot = Some(v);
        }
        let rtt_cnt = get(RTT_CNT).unwrap_or(0);
        let rtt_mean_us = match (get(RTT_SUM_US), rtt_cnt) {
            (Some(sum), n) if n > 0 => Some(sum as f64 / n as f64),
            _ => None,
        };
        Interval {
            acked_bytes: get(ACKED_BYTES).unwrap_or(0),
            acked_pkts: get(ACKED_PKTS).unwrap_or(0),
            lost_pkts: get(LOST_PKTS).unwrap_or(0),
            timeout: get(TIMEOUT).unwrap_or(0) != 0,
            ecn_pkts: get(ECN_PKTS).unwrap_or(0),
            misordered_pkts: get(MISORDERED_PKTS).unwrap_or(0),
            rtt_min_us: get(RTT_MIN_US).and_then(valid_rtt),
            rtt_mean_us,
            rtt_samples: rtt_cnt,
            rtt_last_us: get(RTT_LAST_US).and_then(valid_rtt),
            inflight_bytes: get(INFLIGHT_BYTES),
            send_rate_bps: get(SEND_RATE),
            recv_rate_bps: get(RECV_RATE),
            first_ack_us: get(FIRST_ACK_US).filter(|&v| v > 0),
            last_ack_us: get(LAST_ACK_US).filter(|&v| v > 0),
            interval_us: get(INTERVAL_US).unwrap_or(0),
            cwnd_bytes: get(CWND_BYTES),
            delivery_rate_max_bps: get(DELIVERY_RATE_MAX).filter(|&v| v > 0),
            state,
        }
    }

    /// Delivery rate over the interval (bytes/s), from acked bytes and interval length.
    pub fn delivery_rate_bps(&self) -> Option<f64> {
        (self.interval_us > 0).then(|| self.acked_bytes as f64 * 1e6 / self.interval_us as f64)
    }

    /// Fraction of packets lost among those acked or lost in the interval.
    pub fn loss_fraction(&self) -> f64 {
        let total = self.acked_pkts.saturating_add(self.lost_pkts);
        if total == 0 {
            0.0
        } else {
            self.lost_pkts as f64 / total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_decodes_named_fields_and_ignores_bogus_rtt() {
        let names = [
            fields::ACKED_BYTES,
            fields::RTT_MIN_US,
            fields::RTT_SUM_US,
            fields::RTT_CNT,
            fields::INTERVAL_US,
        ];
        let iv = Interval::from_fields(&names, &[15000, 40_000, 90_000, 2, 10_000]);
        assert_eq!(iv.acked_bytes, 15000);
        assert_eq!(iv.rtt_min_us, Some(40_000));
        assert_eq!(iv.rtt_mean_us, Some(45_000.0));
        assert_eq!(iv.delivery_rate_bps(), Some(1.5e6));
        // +infinity / u32::MAX RTTs are not samples
        let iv = Interval::from_fields(&names, &[0, u64::MAX, 0, 0, 0]);
        assert_eq!(iv.rtt_min_us, None);
        assert_eq!(iv.rtt_mean_us, None);
        assert_eq!(iv.delivery_rate_bps(), None);
    }

    #[test]
    fn delivery_rate_max_folds_the_best_min_of_send_and_receive_rates() {
        let p = ProgramBuilder::new("test_rate", 10_000)
            .fields(&[fields::DELIVERY_RATE_MAX])
            .build();
        assert!(p.source.contains("(volatile delivery_rate_max 0)"));
        assert!(p.source.contains(
            "(:= Report.delivery_rate_max (max Report.delivery_rate_max (min Flow.rate_outgoing Flow.rate_incoming)))"
        ));
        let names = [fields::DELIVERY_RATE_MAX, fields::INTERVAL_US];
        let iv = Interval::from_fields(&names, &[6_250_000, 10_000]);
        assert_eq!(iv.delivery_rate_max_bps, Some(6_250_000));
        // 0: no ACK of the interval carried a rate sample
        let iv = Interval::from_fields(&names, &[0, 10_000]);
        assert_eq!(iv.delivery_rate_max_bps, None);
        assert!(fields::ALL.contains(&fields::DELIVERY_RATE_MAX));
    }

    #[test]
    fn state_registers_controls_and_statements_land_where_documented() {
        let p = ProgramBuilder::new("test_own", 10_000)
            .fields(&[fields::ACKED_BYTES, fields::RTT_MIN_US])
            .state("w", 7)
            .state("flag", 1)
            .control("gain", 1000)
            .control("base_us", INFINITY)
            .on_ack("  (:= Report.w (+ Report.w 1))\n")
            .on_rtt_sample("  (:= Report.flag 0)\n")
            .after("  (:= Cwnd Report.w)\n")
            .build();
        assert_eq!(
            p.fields,
            vec![
                fields::ACKED_BYTES,
                fields::RTT_MIN_US,
                fields::INTERVAL_US,
                "w",
                "flag"
            ]
        );
        assert!(p.source.contains(" (w 7) (flag 1))"), "{}", p.source);
        assert!(p.source.contains(
            "(Control.interval_us 10000) (Control.gain 1000) (Control.base_us +infinity))"
        ));
        let (ack, rtt, after) = (
            p.source.find("(:= Report.w (+ Report.w 1))").unwrap(),
            p.source.find("(:= Report.flag 0)").unwrap(),
            p.source.find("(:= Cwnd Report.w)").unwrap(),
        );
        let (fold, rtt_fold, trigger) = (
            p.source.find("(:= Report.interval_us Micros)").unwrap(),
            p.source
                .find("(min Report.rtt_min_us Flow.rtt_sample_us)")
                .unwrap(),
            p.source.find("(when (> Micros").unwrap(),
        );
        assert!(fold < ack && ack < rtt_fold && rtt_fold < rtt && rtt < after && after < trigger);
        let (_, scope) = portus::lang::compile(p.source.as_bytes(), &[]).expect("compiles");
        assert!(matches!(
            scope.get("Report.w"),
            Some(portus::lang::Reg::Report(_, _, false))
        ));
        assert!(matches!(
            scope.get("Control.gain"),
            Some(portus::lang::Reg::Control(..))
        ));
        // own registers decode into `state`, in order, after the canonical fields
        let iv = Interval::from_fields(&p.fields, &[1500, 40_000, 10_000, 9, 0]);
        assert_eq!(iv.acked_bytes, 1500);
        assert_eq!(iv.state, [Some(9), Some(0), None, None]);
        assert_eq!(
            Interval::from_fields(&[], &[]).state,
            [None; MAX_STATE_REGS]
        );
    }

    #[test]
    #[should_panic(expected = "shadows a canonical field")]
    fn a_state_register_cannot_shadow_a_field() {
        let _ = ProgramBuilder::new("test_bad", 10_000).state(fields::CWND_BYTES, 0);
    }

    #[test]
    fn builder_emits_declared_fields_only() {
        let p = ProgramBuilder::new("test_prog", 10_000)
            .fields(&[fields::ACKED_BYTES, fields::RTT_MIN_US])
            .trigger(Trigger::IntervalOrLoss)
            .build();
        assert_eq!(
            p.fields,
            vec![
                fields::ACKED_BYTES,
                fields::RTT_MIN_US,
                fields::INTERVAL_US,
                fields::LOST_PKTS,
                fields::TIMEOUT
            ]
        );
        assert!(p.source.contains("(volatile rtt_min_us +infinity)"));
        assert!(!p.source.contains("rtt_sum_us"));
        assert!(p.source.contains("(Control.interval_us 10000)"));
    }
}
