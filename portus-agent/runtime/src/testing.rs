//! Test support shared by the workspace's tests: how a test that cannot run here says so.
//!
//! A test whose precondition is missing on this machine (no generic netlink socket, not
//! root, no rtnetlink, the kernel module loaded where it must not be) calls [`skip`] (or
//! [`skip_test!`](crate::skip_test)) and returns. The line `SKIP <test>: <reason>` goes to
//! the process's stderr past the test harness's output capture, so `cargo test` shows it
//! for a test that "passed", and `ops/test.sh` counts such lines in its summary. With
//! `CCP_NO_SKIPS=1` in the environment a skip is a failure instead (a panic naming the
//! test and the reason): for a machine that has what every test needs.

use std::fmt::Display;
use std::io::Write;

/// The environment variable that turns a skip into a failure (value `1`).
pub const NO_SKIPS_ENV: &str = "CCP_NO_SKIPS";

/// Whether skips are failures here (`CCP_NO_SKIPS=1`).
pub fn skips_fail() -> bool {
    std::env::var_os(NO_SKIPS_ENV).is_some_and(|v| v == "1")
}

/// The line a skipped test prints.
pub fn skip_line(test: &str, reason: impl Display) -> String {
    format!("SKIP {test}: {reason}")
}

/// Report that `test` cannot run here for `reason`: print `SKIP <test>: <reason>` on stderr
/// (uncaptured); the caller then returns. With `CCP_NO_SKIPS=1`, panic instead.
#[track_caller]
pub fn skip(test: &str, reason: impl Display) {
    report(test, reason, skips_fail())
}

#[track_caller]
fn report(test: &str, reason: impl Display, fail: bool) {
    let line = skip_line(test, reason);
    if fail {
        panic!("{line} ({NO_SKIPS_ENV}=1: a skipped test is a failure)");
    }
    // libtest captures print!/eprint!, not writes to the stream itself; one write, with a
    // newline before it in case the harness left a line open ("test x ... ")
    let _ = std::io::stderr().write_all(format!("\n{line}\n").as_bytes());
}

/// `skip_test!("reason {x}")`: [`skip`] with the calling function's path as the test's name
/// (e.g. `ccp_runtime::ipc::netlink::tests::the_controller_is_asked_for_real`).
#[macro_export]
macro_rules! skip_test {
    ($($arg:tt)*) => {{
        fn here() {}
        let name = ::std::any::type_name_of_val(&here);
        let name = name.strip_suffix("::here").unwrap_or(name);
        $crate::testing::skip(name, ::std::format_args!($($arg)*))
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_macro_names_the_calling_function() {
        fn here() {}
        let name = std::any::type_name_of_val(&here);
        assert_eq!(
            name,
            "ccp_runtime::testing::tests::the_macro_names_the_calling_function::here"
        );
        assert_eq!(
            skip_line("a::b", format_args!("no {} here", "socket")),
            "SKIP a::b: no socket here"
        );
    }

    #[test]
    #[should_panic(expected = "SKIP a::b: not root (CCP_NO_SKIPS=1: a skipped test is a failure)")]
    fn with_no_skips_a_skip_fails() {
        report("a::b", "not root", true);
    }
}
