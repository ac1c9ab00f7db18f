//! The datapath side: what reaches the agent from a datapath, and how.
//!
//! - [`guard`]: the IPC wrapper that validates datapath messages before portus parses them,
//!   and the message layout it checks.
//! - [`netlink`]: the agent's netlink socket (`--ipc netlink`): only the kernel's datagrams.
//! - [`unix`]: the agent's unix datagram socket (`--ipc unix`): checked names, no stealing,
//!   bounded sends.
//! - [`wire`]: datapath messages as a datapath writes them (tests, benchmarks, tools).

pub mod guard;
pub mod netlink;
pub mod unix;
pub mod wire;
