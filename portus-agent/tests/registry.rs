//! The registry (`algs/src/registry.rs`) is the one list of algorithms: the kernel module's
//! name table (`datapath/kernel/ccp_algs.h`) is written from it by `ccp-agent --list
//! --format c-header` and must not drift from it; `--list` names every learned algorithm,
//! with a model or without.

use std::path::PathBuf;
use std::process::{Command, Output};

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(args)
        .output()
        .expect("run ccp-agent")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// What `ccp-agent --list --format c-header` prints.
fn generated_header() -> String {
    let o = agent(&["--list", "--format", "c-header"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout(&o)
}

/// The names of a `CCPK_ALGORITHMS` header, in order.
fn header_names(h: &str) -> Vec<String> {
    h.lines()
        .filter_map(|l| l.trim().strip_prefix("X(\""))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_header_lists_the_registrys_datapath_names() {
    let h = generated_header();
    assert_eq!(header_names(&h), ccp_algs::registry::datapath_names());
    assert!(h.contains("#define CCPK_ALGORITHMS(X)"), "{h}");
}

/// Adding an algorithm to the registry without regenerating the header fails here.
#[test]
#[cfg_attr(
    feature = "toy",
    ignore = "the toy's build has one name more than the shipped header (tests/toy_algorithm.rs)"
)]
fn the_kernel_name_table_is_the_registrys() {
    let want = generated_header();
    let have = read("datapath/kernel/ccp_algs.h");
    assert!(
        have == want,
        "datapath/kernel/ccp_algs.h is not the registry's name table: regenerate it with\n  \
         cargo run -p ccp-agent -- --list --format c-header > datapath/kernel/ccp_algs.h\n\
         --- the file:\n{have}\n--- the registry's:\n{want}"
    );
    // and the module registers that table, no name of its own
    let c = read("datapath/kernel/tcp_ccp.c");
    assert!(c.contains("#include \"ccp_algs.h\""));
    assert!(c.contains("CCPK_ALGORITHMS(CCPK_OPS_ENTRY)"));
    assert!(c.contains("CCPK_ALGORITHMS(CCPK_ALIAS)"));
    assert!(!c.contains("CCPK_OPS(\"") && !c.contains("MODULE_ALIAS(\"tcp_ccp"));
}

#[test]
fn list_names_the_learned_algorithms_without_a_model() {
    let empty = std::env::temp_dir().join(format!("ccp-registry-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = agent(&["--list", "--models", empty.to_str().unwrap()]);
    std::fs::remove_dir_all(&empty).ok();
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    let line = |prefix: &str| -> Vec<String> {
        out.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in\n{out}"))
            .split(", ")
            .map(str::to_string)
            .collect()
    };
    let builtin = ccp_algs::Registry::builtin();
    assert_eq!(line("algorithms: "), builtin.names());
    assert_eq!(
        line("learned, without a model: "),
        ccp_algs::registry::learned_names()
    );
}
