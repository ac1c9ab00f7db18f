//! Every registered algorithm's fold program compiles with portus and stays inside libccp's
//! limits (< 256 instructions: a 256-instruction program hangs libccp's interpreter).

use ccp_algs::Registry;

#[test]
fn programs_compile_within_libccp_limits() {
    let reg = Registry::builtin();
    let mut total = 0;
    for alg in reg.iter() {
        let p = alg.program();
        let (bin, scope) = portus::lang::compile(p.source.as_bytes(), &[])
            .unwrap_or_else(|e| panic!("{} failed to compile: {e:?}\n{}", p.name, p.source));
        assert!(
            bin.instrs.len() < 200,
            "{}: {} instructions",
            p.name,
            bin.instrs.len()
        );
        assert!(p.fields.len() <= 16);
        for f in &p.fields {
            let name = format!("Report.{f}");
            assert!(
                scope.get(&name).is_some(),
                "{}: field {name} missing from scope",
                p.name
            );
        }
        assert!(scope.get(ccp_algs::signals::INTERVAL_REG).is_some());
        total += 1;
    }
    assert!(total >= 2);
    // the model-free algorithms are all covered
    for name in ["reno", "cubic", "bbr", "iris"] {
        assert!(
            reg.get(name).is_some(),
            "{name} not in the built-in registry"
        );
    }
    // libccp's program table holds 9 usable programs, shared by all algorithms
    assert!(total <= 9);
}
