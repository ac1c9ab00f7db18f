//! `ccp-runtime`: the agent's runtime library. It hosts every registered congestion-control
//! algorithm on portus; the `ccp-agent` binary (`portus-agent/src/main.rs`) is its command
//! line, the simulator's tests and the training bindings (`train/`) use it directly, so
//! there is one message loop for all of them.
//!
//! - [`agent`]: building the registry, validating programs, running portus.
//! - [`adapter`]: `Algorithm`/`Controller` → portus `CongAlg`/`Flow`.
//! - [`guard`]: the IPC wrapper that validates datapath messages before portus parses them.
//! - [`inline`]: the same agent answering synchronously in-process (training, fast runs).
//! - [`programs`]: start-up checks of fold programs against libccp's limits.
//! - [`simrun`]: `--sim`, the agent plus the simulated datapath in one process.
//! - [`wire`]: datapath messages as a datapath writes them (tests, benchmarks, tools).
//! - [`flowlog`]: the `--flow-log` JSON-lines writer.
//! - [`flows`]: the agent's bounded flow tables (requests and records).
//! - [`prefs`]: per-flow preferences: resolution at CREATE, per-socket entries, rules,
//!   mid-flow changes.
//! - [`control`]: the control plane on its own tokio thread: the control socket and the
//!   metrics endpoint.
//! - [`metrics`]: the counters in Prometheus's text format.
//! - [`netlink`]: the agent's netlink socket (`--ipc netlink`): only the kernel's datagrams.
//! - [`unix`]: the agent's unix datagram socket (`--ipc unix`): checked names, no stealing,
//!   bounded sends.
//! - [`files`]: reading operator files (models, cards, configs) without hanging.
//! - [`policy`]: the learned-policy runtime (ONNX models, model cards, `--models DIR`).

pub mod adapter;
pub mod agent;
pub mod control;
pub mod files;
pub mod flowlog;
pub mod flows;
pub mod guard;
pub mod inline;
pub mod metrics;
pub mod netlink;
pub mod policy;
pub mod portfolio;
pub mod prefs;
pub mod programs;
pub mod simrun;
pub mod unix;
pub mod wire;

pub use agent::{Agent, AgentOptions, ConfigError, RunningAgent};
