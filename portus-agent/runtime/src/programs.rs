//! Start-up checks of every fold program before any datapath sees it.
//!
//! portus checks register and immediate limits only when its run loop serializes programs,
//! and then the agent thread just exits (defect 8); a 256-instruction program hangs libccp's
//! interpreter (defect 1); the 10th program overflows libccp's table (defect 3); program names
//! are global across algorithms (defect 4). So the agent compiles each program itself at
//! start-up and refuses to run with a clear error instead. The instruction limit is the one
//! the simulator and the algorithms' tests check too,
//! [`ccp_algs::signals::MAX_PROGRAM_INSTRUCTIONS`]. It also applies the kernel datapath's
//! program rules (`datapath/kernel/ccp_validate.c`), so that a program the kernel would refuse
//! is refused here first, by name: every DEF takes an immediate value, and a program has at
//! least one instruction besides its DEFs (libccp sets a report's field count there).

use std::collections::HashSet;

use ccp_algs::signals::MAX_PROGRAM_INSTRUCTIONS;
use ccp_algs::Registry;
/// Programs a libccp datapath can hold (its table of 10 has an off-by-one).
pub const MAX_PROGRAMS: usize = 9;

#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error("program {program} of algorithm {alg} does not compile: {msg}")]
    Compile {
        alg: &'static str,
        program: &'static str,
        msg: String,
    },
    #[error("program {program} of algorithm {alg} has {n} instructions; libccp runs at most {MAX_PROGRAM_INSTRUCTIONS} (256 hangs its interpreter)")]
    TooLong {
        alg: &'static str,
        program: &'static str,
        n: usize,
    },
    #[error("program {program} of algorithm {alg} does not declare its report field {field}")]
    MissingField {
        alg: &'static str,
        program: &'static str,
        field: String,
    },
    #[error("program name {program} is used by two algorithms; program names are global in portus, prefix them with the algorithm")]
    DuplicateName { program: &'static str },
    #[error("program {program} of algorithm {alg}: {why} (the kernel datapath refuses it; datapath/kernel/ccp_validate.c)")]
    KernelRule {
        alg: &'static str,
        program: &'static str,
        why: &'static str,
    },
    #[error("{n} programs registered; a libccp datapath holds at most {MAX_PROGRAMS}: register fewer algorithms")]
    TooMany { n: usize },
}

/// Compile and check every registered algorithm's program. Returns the instruction counts.
pub fn validate(registry: &Registry) -> Result<Vec<(&'static str, usize)>, ProgramError> {
    let mut names = HashSet::new();
    let mut out = Vec::new();
    for alg in registry.iter() {
        let p = alg.program();
        if !names.insert(p.name) {
            return Err(ProgramError::DuplicateName { program: p.name });
        }
        let (bin, scope) =
            portus::lang::compile(p.source.as_bytes(), &[]).map_err(|e| ProgramError::Compile {
                alg: alg.name(),
                program: p.name,
                msg: format!("{e:?}"),
            })?;
        if bin.instrs.len() > MAX_PROGRAM_INSTRUCTIONS {
            return Err(ProgramError::TooLong {
                alg: alg.name(),
                program: p.name,
                n: bin.instrs.len(),
            });
        }
        let rule = install_msg(&bin, scope.program_uid)
            .map_or(Some("does not serialize"), |m| kernel_rule(&m));
        if let Some(why) = rule {
            return Err(ProgramError::KernelRule {
                alg: alg.name(),
                program: p.name,
                why,
            });
        }
        for f in &p.fields {
            let field = format!("Report.{f}");
            if scope.get(&field).is_none() {
                return Err(ProgramError::MissingField {
                    alg: alg.name(),
                    program: p.name,
                    field,
                });
            }
        }
        out.push((p.name, bin.instrs.len()));
    }
    if out.len() > MAX_PROGRAMS {
        return Err(ProgramError::TooMany { n: out.len() });
    }
    Ok(out)
}

/// The INSTALL message of a compiled program, as the datapath receives it.
fn install_msg(bin: &portus::lang::Bin, uid: u32) -> Option<Vec<u8>> {
    portus::serialize::serialize(&portus::serialize::install::Msg {
        sid: 0,
        program_uid: uid,
        num_events: bin.events.len() as u32,
        num_instrs: bin.instrs.len() as u32,
        instrs: bin.clone(),
    })
    .ok()
}

/// The kernel validator's rules that portus does not enforce, on an INSTALL message in
/// libccp's framing (an 8-byte header, uid and counts, 16 bytes per expression, then 16 per
/// instruction: op, and three registers of a type byte and a u32): `None` when it passes.
fn kernel_rule(msg: &[u8]) -> Option<&'static str> {
    const DEF: u8 = 2;
    const IMMEDIATE_REG: u8 = 1;
    let nexpr = msg
        .get(12..16)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let at = 20 + 16 * nexpr as usize;
    let instrs: Vec<&[u8]> = msg.get(at..).unwrap_or_default().chunks(16).collect();
    if instrs
        .iter()
        .any(|i| i[0] == DEF && i.get(11) != Some(&IMMEDIATE_REG))
    {
        return Some("a DEF takes its value from a register, not an immediate");
    }
    if instrs.iter().all(|i| i[0] == DEF) {
        return Some("no instruction besides DEFs");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccp_algs::signals::FoldProgram;
    use ccp_algs::{Algorithm, Controller, FlowInfo};
    use std::sync::Arc;

    struct Bad(&'static str, String);
    impl Algorithm for Bad {
        fn name(&self) -> &'static str {
            self.0
        }
        fn program(&self) -> FoldProgram {
            FoldProgram {
                name: "bad_prog",
                source: self.1.clone(),
                fields: vec!["acked_bytes"],
                initial_interval_us: 10_000,
            }
        }
        fn new_flow(&self, _: &FlowInfo) -> Box<dyn Controller> {
            unreachable!("never started")
        }
    }

    /// Every implemented algorithm's program, learned ones included (as the agent registers
    /// them once their model loads), through the agent's start-up check, all at once (one
    /// datapath holds them all).
    #[test]
    fn every_algorithms_program_passes_learned_ones_included() {
        use ccp_algs::registry::{defaults, learned, ALGORITHMS};
        let cfg = ccp_algs::AlgsConfig::default();
        let mut r = Registry::from_config(&cfg);
        let learned = learned(&cfg);
        assert!(
            learned.iter().any(|a| a.name() == "mocc"),
            "MOCC is a learned algorithm"
        );
        for alg in learned {
            r.register(alg as Arc<dyn Algorithm>);
        }
        for name in ALGORITHMS {
            // implemented (a config table) means hosted: its program is checked below
            assert_eq!(
                r.get(name).is_some(),
                defaults(name).is_some(),
                "{name}: implemented but not in the checked registry, or the reverse"
            );
        }
        let counts = validate(&r).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(counts.len(), r.iter().count());
        for (program, n) in &counts {
            assert!(
                *n <= MAX_PROGRAM_INSTRUCTIONS,
                "{program}: {n} instructions"
            );
        }
        assert!(
            counts.iter().any(|(p, _)| p.starts_with("mocc")),
            "{counts:?}"
        );
    }

    /// The kernel's program rules on a real program's INSTALL message, and on the same
    /// message made to break each (portus itself never emits such a program).
    #[test]
    fn the_kernels_program_rules_hold_and_catch_what_they_name() {
        let src = "(def (Report (volatile acked_bytes 0))) \
                   (when true (:= Report.acked_bytes (+ Report.acked_bytes Ack.bytes_acked)) (report))";
        let (bin, scope) = portus::lang::compile(src.as_bytes(), &[]).expect("compiles");
        let msg = install_msg(&bin, scope.program_uid).expect("serializes");
        assert_eq!(kernel_rule(&msg), None);
        let nexpr = bin.events.len();
        let first = 20 + 16 * nexpr;
        assert_eq!(msg[first], 2, "the program opens with its DEF");
        // the DEF's value from a tmp register
        let mut m = msg.clone();
        m[first + 11] = 7;
        assert_eq!(
            kernel_rule(&m),
            Some("a DEF takes its value from a register, not an immediate")
        );
        // every instruction a DEF (with immediates)
        let mut m = msg.clone();
        for i in (first..m.len()).step_by(16) {
            m[i] = 2;
            m[i + 11] = 1;
        }
        assert_eq!(kernel_rule(&m), Some("no instruction besides DEFs"));
    }

    #[test]
    fn bad_programs_are_refused_with_reason() {
        let mut r = Registry::new();
        r.register(Arc::new(Bad("bad", "(def (Report (volatile acked_bytes 0))) (when true (:= Report.acked_bytes (+ Report.acked_bytes Ack.nosuch)))".into())));
        assert!(matches!(validate(&r), Err(ProgramError::Compile { .. })));

        let mut body = String::from("(def (Report (volatile acked_bytes 0)))\n(when true\n");
        for _ in 0..300 {
            body.push_str("  (:= Report.acked_bytes (+ Report.acked_bytes 1))\n");
        }
        body.push_str("  (report))");
        let mut r = Registry::new();
        r.register(Arc::new(Bad("long", body)));
        let e = validate(&r).unwrap_err();
        assert!(matches!(e, ProgramError::TooLong { .. }), "{e}");

        let mut r = Registry::new();
        r.register(Arc::new(Bad(
            "nofield",
            "(def (Report (volatile other 0))) (when true (report))".into(),
        )));
        assert!(matches!(
            validate(&r),
            Err(ProgramError::MissingField { .. })
        ));

        let mut r = Registry::builtin();
        r.register(Arc::new(Bad(
            "a",
            "(def (Report (volatile acked_bytes 0))) (when true (report))".into(),
        )));
        r.register(Arc::new(Bad(
            "b",
            "(def (Report (volatile acked_bytes 0))) (when true (report))".into(),
        )));
        assert!(matches!(
            validate(&r),
            Err(ProgramError::DuplicateName { .. })
        ));
    }
}
