//! `ccp-runtime`: the agent's runtime library. It hosts every registered congestion-control
//! algorithm on portus; the `ccp-agent` binary (`portus-agent/src/main.rs`) is its command
//! line, the simulator's tests and the training bindings (`train/`) use it directly, so
//! there is one message loop for all of them.
//!
//! The modules, grouped by concern (a folder per concern, the agent's own parts at the top
//! level), in layers: each imports only from those listed after it, tests included, so
//! there is no import loop (`python3 ops/import_cycles.py portus-agent/runtime/src` checks
//! it; `--depth 0` checks every file).
//!
//! - `simrun` (feature `sim`): `--sim`, the agent plus the simulated datapath in one process.
//! - [`agent`]: building the registry, validating programs, running portus.
//!   - [`agent::inline`]: the same agent answering synchronously in-process (training, fast
//!     runs): the agent's other form, whose test drives it through an [`Agent`].
//! - [`programs`]: start-up checks of fold programs against libccp's limits.
//! - [`control`]: the control plane on its own tokio thread: the control socket and the
//!   metrics endpoint.
//!   - [`control::metrics`]: the counters in Prometheus's text format.
//! - [`policy`]: the learned-policy runtime (ONNX models, model cards, `--models DIR`).
//! - [`sources`]: data from outside the agent, read without stalling it.
//!   - [`sources::files`]: reading operator files (models, cards, configs) without hanging.
//!   - [`sources::netstats`]: the in-network statistics poller (`--netstats-url`,
//!     `[netstats]`): an HTTP/JSON endpoint read every second on a tokio thread of its own,
//!     for Owl.
//! - [`adapter`]: `Algorithm`/`Controller` → portus `CongAlg`/`Flow`: each flow's driver.
//! - [`ipc`]: the datapath side.
//!   - [`ipc::guard`]: the IPC wrapper that validates datapath messages before portus parses
//!     them.
//!   - [`ipc::netlink`]: the agent's netlink socket (`--ipc netlink`): only the kernel's
//!     datagrams.
//!   - [`ipc::unix`]: the agent's unix datagram socket (`--ipc unix`): checked names, no
//!     stealing, bounded sends.
//!   - [`ipc::wire`]: datapath messages as a datapath writes them (tests, benchmarks, tools).
//! - [`flows`]: what the agent knows per flow: the bounded flow tables (requests and records).
//!   - [`flows::key`]: [`flows::key::FlowKey`], how the agent names a flow.
//!   - [`flows::decisions`]: the decision counters and latency histogram the drivers add to.
//!   - [`flows::flowlog`]: the `--flow-log` JSON-lines writer.
//!   - [`flows::prefs`]: per-flow preferences: resolution at CREATE, per-socket entries,
//!     rules, mid-flow changes.
//!   - [`flows::portfolio`]: `ccp_auto`, the portfolio's choice of an algorithm per flow.
//! - [`log_limit`]: rate-limited logging (one line per interval per call site), shared by the
//!   guard, the sockets, the adapter and the poller.

pub mod adapter;
pub mod agent;
pub mod control;
pub mod flows;
pub mod ipc;
pub mod log_limit;
pub mod policy;
pub mod programs;
#[cfg(feature = "sim")]
pub mod simrun;
pub mod sources;
pub mod testing;

pub use agent::{Agent, AgentOptions, ConfigError, RunningAgent};
