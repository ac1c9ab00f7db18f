//! libccp in user space: the C datapath library that evaluates the agent's fold programs
//! (libccp 1.2.0 with `libccp-1.2.0.patch`, the same files and patch the kernel module
//! compiles), hosted for the project's user-space datapaths: the simulator (`datapath/sim`,
//! whose clock is simulated) and the BPF datapath's bridge (`datapath/bpf/bridge`, whose
//! clock is the records'). Its own crate so that a datapath can host libccp without the
//! simulator: the agent built for the service (`--no-default-features --features bpf`) links
//! this and not `ccp-sim`.
//!
//! - [`Datapath`]: one libccp datapath (program table, connections, outbox), the only
//!   `unsafe` (its invariants in `src/datapath.rs`), [`Primitives`] per ACK.
//! - [`proto`]: the wire format's header and the checks every agent message passes before
//!   libccp reads it (libccp trusts the agent).
//! - [`ipc`]: the datapath's side of the agent IPC: [`ChanIpc`] (in-process), [`UnixIpc`].

mod datapath;
#[cfg(test)]
mod fold_tests;
pub mod ipc;
pub mod proto;

/// The C bindings `build.rs` generates (for the simulator's connection table).
pub use datapath::ffi;
pub use datapath::{sim_clock_ns, Datapath, LibccpError, Primitives, MAX_CONNECTIONS};
pub use ipc::{ChanIpc, DatapathIpc, UnixIpc};

/// Where `build.rs` found the libccp C sources it compiled, and how.
pub const LIBCCP_SOURCE_DIR: &str = env!("CCP_LIBCCP_DIR_USED");
/// `cargo metadata`, `registry glob` or `CCP_LIBCCP_DIR`.
pub const LIBCCP_FOUND_BY: &str = env!("CCP_LIBCCP_FOUND_BY");

#[cfg(test)]
mod tests {
    #[test]
    fn libccp_sources_come_from_the_libccp_crate() {
        let dir = std::path::Path::new(super::LIBCCP_SOURCE_DIR);
        assert!(dir.join("ccp.c").is_file(), "{}", dir.display());
        assert!(
            dir.parent()
                .and_then(|p| p.file_name())
                .is_some_and(|n| n.to_string_lossy().starts_with("libccp-1.2.")),
            "{} ({})",
            dir.display(),
            super::LIBCCP_FOUND_BY
        );
    }
}
