//! Start-up checks of every fold program before any datapath sees it.
//!
//! portus checks register and immediate limits only when its run loop serializes programs,
//! and then the agent thread just exits (defect 8); a 256-instruction program hangs libccp's
//! interpreter (defect 1); the 10th program overflows libccp's table (defect 3); program names
//! are global across algorithms (defect 4). So the agent compiles each program itself at
//! start-up and refuses to run with a clear error instead. The instruction limit is the one
//! the simulator and the algorithms' tests check too,
//! [`ccp_algs::signals::MAX_PROGRAM_INSTRUCTIONS`].

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
