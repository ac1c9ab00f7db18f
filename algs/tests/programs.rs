//! Every algorithm's fold program, learned ones included, compiles with portus and stays
//! inside libccp's limits ([`MAX_PROGRAM_INSTRUCTIONS`], [`MAX_REPORT_FIELDS`], 9 programs).

use std::collections::HashSet;
use std::sync::Arc;

use ccp_algs::registry::{self, ALGORITHMS};
use ccp_algs::signals::{MAX_PROGRAM_INSTRUCTIONS, MAX_REPORT_FIELDS};
use ccp_algs::{Algorithm, AlgsConfig, Registry};

/// Every implemented algorithm: the built-in ones and the learned ones (unwrapped, as the
/// agent registers them with a model).
fn every_algorithm() -> Vec<Arc<dyn Algorithm>> {
    let cfg = AlgsConfig::default();
    let mut all: Vec<Arc<dyn Algorithm>> = Registry::from_config(&cfg).iter().cloned().collect();
    for l in registry::learned(&cfg) {
        all.push(l);
    }
    all
}

#[test]
fn programs_compile_within_libccp_limits() {
    let algs = every_algorithm();
    let mut names = HashSet::new();
    for alg in &algs {
        let p = alg.program();
        let (bin, scope) = portus::lang::compile(p.source.as_bytes(), &[])
            .unwrap_or_else(|e| panic!("{} failed to compile: {e:?}\n{}", p.name, p.source));
        assert!(
            bin.instrs.len() <= MAX_PROGRAM_INSTRUCTIONS,
            "{}: {} instructions, libccp runs at most {MAX_PROGRAM_INSTRUCTIONS}",
            p.name,
            bin.instrs.len()
        );
        assert!(p.fields.len() <= MAX_REPORT_FIELDS, "{}", p.name);
        for f in &p.fields {
            let name = format!("Report.{f}");
            assert!(
                scope.get(&name).is_some(),
                "{}: field {name} missing from scope",
                p.name
            );
        }
        assert!(scope.get(ccp_algs::signals::INTERVAL_REG).is_some());
        assert!(p.name.starts_with(alg.name()), "{} not prefixed", p.name);
        assert!(names.insert(p.name), "duplicate program name {}", p.name);
    }
    // every name of the registry table is covered, but the reserved ones
    let covered: HashSet<&str> = algs.iter().map(|a| a.name()).collect();
    for name in ALGORITHMS {
        assert_eq!(
            covered.contains(name),
            registry::defaults(name).is_some(),
            "{name}"
        );
    }
    assert!(covered.contains("mocc") && covered.contains("iris"));
    // libccp's program table holds 9 usable programs, shared by all algorithms
    assert!(algs.len() <= 9);
}

/// The limit is the compiled instruction count portus installs: a program of one more
/// instruction than allowed exists (the check can fail).
#[test]
fn the_instruction_limit_can_be_exceeded_and_is_caught() {
    let mut src = String::from("(def (Report (volatile x 0)))\n(when true\n");
    for i in 0..MAX_PROGRAM_INSTRUCTIONS {
        src.push_str(&format!("    (:= Report.x {i})\n"));
    }
    src.push_str("    (fallthrough)\n)\n");
    let (bin, _) = portus::lang::compile(src.as_bytes(), &[]).expect("compiles");
    assert!(
        bin.instrs.len() > MAX_PROGRAM_INSTRUCTIONS,
        "{}",
        bin.instrs.len()
    );
}
