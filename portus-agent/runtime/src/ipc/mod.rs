//! The datapath side: what reaches the agent from a datapath, and how.
//!
//! - [`chan`]: the in-process channel (the simulator's peer, the benchmarks).
//! - [`guard`]: the IPC wrapper that validates datapath messages before portus parses them,
//!   and the message layout it checks.
//! - [`netlink`]: the agent's netlink socket (`--ipc netlink`): only the kernel's datagrams.
//! - [`unix`]: the agent's unix datagram socket (`--ipc unix`): checked names, no stealing,
//!   bounded sends.
//! - [`spin`]: the adaptive spin before a receive blocks (every transport above).
//! - [`wire`]: datapath messages as a datapath writes them (tests, benchmarks, tools).

pub mod chan;
pub mod guard;
pub mod netlink;
pub mod spin;
pub mod unix;
pub mod wire;
