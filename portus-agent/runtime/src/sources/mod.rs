//! Data from outside the agent's own state, read without letting it stall the agent.
//!
//! - [`files`]: reading operator files (models, cards, configs) without hanging.
//! - [`netstats`]: the in-network statistics poller (`--netstats-url`, `[netstats]`): an
//!   HTTP/JSON endpoint read every second on a tokio thread of its own, for Owl.

pub mod files;
pub mod netstats;
