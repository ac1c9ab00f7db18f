//! `ccp-sim`: a packet-level network simulator whose senders are libccp datapaths.
//!
//! The model
//! ---------
//! A dumbbell with one bottleneck. Every flow is a bulk (infinite-backlog) sender whose
//! congestion control is a libccp connection, exactly as in the kernel module: the sender
//! loads measurement primitives and calls `ccp_invoke` on every ACK, the fold program the
//! agent installed runs on those primitives, and libccp's `set_cwnd`/`set_rate_abs`
//! callbacks set the window and the pacing rate the sender enforces. The agent (portus with
//! the portfolio's algorithms) sees the same CREATE and MEASURE messages it would see from a
//! kernel. Both compile the same C: libccp 1.2.0 with the project's patch
//! (`datapath/libccp/libccp-1.2.0.patch`, applied by the `ccp-libccp` crate's `build.rs`
//! here and by the kernel's Makefile there).
//!
//! ```text
//!   sender ──▶ [drop-tail FIFO] ══ bottleneck (rate | rate schedule | mahimahi trace) ══▶
//!     ▲            receiver: one ACK per packet, no delay; the ACK returns after the
//!     └──────────── flow's base RTT (propagation), i.e. ACK time = departure + rtt
//! ```
//!
//! What is simulated:
//! - packets of 1500 bytes; MSS = 1500 (no header overhead is modelled, so one mahimahi
//!   delivery opportunity carries exactly one packet and throughput is counted in the same
//!   bytes as capacity);
//! - per-flow base RTT (all propagation, placed after the bottleneck); the bottleneck
//!   sojourn time of each packet (queueing + transmission, "queue delay" in the results);
//! - a drop-tail buffer in packets (queued + in transmission), or in multiples of the BDP
//!   (smallest flow RTT × the link's mean rate; for a rate schedule its initial rate);
//! - random loss before the queue with a given probability per packet (seeded ChaCha8);
//! - ACK clocking; a cwnd limit (bytes in flight ≤ cwnd, at least one packet); pacing when a
//!   rate is set (packets spaced by MSS/rate); loss detection SACK/RACK-style (a
//!   transmission is lost once 3 transmissions sent after it were delivered, which also
//!   catches lost retransmissions); RTO per RFC 6298 (initial 1 s, min 200 ms, max 60 s,
//!   doubling backoff, Karn's rule), after which cwnd is one packet (as Linux's
//!   `tcp_enter_loss`) until the algorithm decides; retransmissions before new data;
//! - flows starting and stopping at given times;
//! - with `[netstats]`, the in-network statistics Owl reads, once per period: PNC =
//!   |packets offered to the bottleneck − packets that left it| and PNA = spare share of the
//!   capacity over the period, published to [`SimOptions::network_stats`] (an in-process
//!   agent reads the same cell).
//!
//! What is not: no header bytes, no delayed or lost ACKs, no SACK blocks on the wire (the
//! sender learns exactly which packet each ACK is for, which is what loss detection needs),
//! no receive window (but for a flow with `receiver = "nuwa"`: the sender keeps
//! `min(cwnd, rwnd)` in flight, `rwnd` from Nuwa's law at the receiver on each packet's
//! one-way delay, `ccp_algs::nuwa::ReceiverLaw`), no application limits, no ECN marking
//! (`ecn_*` = 0), no reordering, no cross traffic other than the scenario's flows, no
//! reverse-path queueing.
//!
//! Primitives per ACK (and the units the fold programs see):
//! `bytes_acked`/`packets_acked` = the cumulative ACK's advance (in-order delivery);
//! `bytes_misordered`/`packets_misordered` = a packet delivered above a hole (SACKed);
//! `lost_pkts_sample` = packets newly declared lost at this ACK; `was_timeout` = true only
//! on the invoke the simulator makes when an RTO fires (without an ACK, so the agent learns
//! of it at once); `rtt_sample_us` = this ACK's sample from the packet's send time (Karn:
//! none for retransmitted packets; then the previous sample is repeated, like the kernel's
//! srtt fallback); `rate_outgoing`/`rate_incoming` = Linux `tcp_rate`-style delivery rate
//! over the acked packet's flight (~1 RTT), bytes/s, by send and by ACK interval;
//! `bytes_in_flight`/`packets_in_flight` = sent, not delivered, not declared lost;
//! `snd_cwnd` = the cwnd being enforced (fed back every time: libccp overwrites its Cwnd
//! register with it, docs/upstream-defects.md, defect 7); `snd_rate` = the pacing rate;
//! `bytes_pending` = 2^30 (bulk sender).
//!
//! The lockstep protocol
//! ---------------------
//! The agent answers every CREATE with exactly one CHANGE_PROG for that socket id and every
//! MEASURE report with exactly one UPDATE_FIELDS, or one CHANGE_PROG when it switches the
//! flow to another algorithm's program (`ccp_auto`) (INSTALLs may come first, in answer to
//! READY or a first CREATE). After any libccp call that sent a CREATE or a report, the
//! simulator blocks (wall clock, [`SimOptions::agent_timeout`]) until the answer for that
//! socket id has arrived, handing every message it receives to `ccp_read_msg` in order.
//! Simulated time never advances while an answer is outstanding, so a seeded scenario gives
//! bit-identical results over any transport and at any agent speed. libccp applies staged
//! updates at the connection's next `ccp_invoke`, as in the kernel. A flow that stops is
//! freed with `ccp_connection_free` (its close message needs no answer). Messages libccp
//! refuses or that name unknown socket ids are counted in [`SimResults`], not fatal.
//! CREATE carries the flow's request in libccp's congAlg field (≤ 63 bytes): the scenario's
//! algorithm name or `ccp` (the agent's default), plus `;w=<thr>,<lat>,<loss>` when the flow
//! has a preference vector.
//!
//! Why libccp is compiled here
//! ---------------------------
//! The `libccp` crate's Rust wrapper reads the wall clock for `now/since_usecs/after_usecs`,
//! so fold programs' `Micros` and `Ack.now` would run in wall time while the simulator runs
//! many times faster than real time; it mallocs the connection table without zeroing it;
//! and its `send_msg` always reports success. The `ccp-libccp` crate (`datapath/libccp`)
//! therefore compiles the crate's C sources (`ccp.c ccp_priv.c machine.c serialize.c`,
//! byte-identical to what the kernel module compiles) with `cc` and generates bindings with
//! bindgen; its `Datapath` wraps every FFI call and supplies callbacks that read a
//! thread-local clock (here the simulated one), a zeroed connection table, and an outbox that
//! `send_msg` fills (returning 0).
//! Agent messages are validated before libccp sees them (libccp trusts register indices
//! and instruction counts; a 256-instruction program would hang it). Each [`Simulator`] runs on one thread;
//! several can run in parallel threads.
//!
//! The public API: [`Scenario`] / [`ScenarioError`] (TOML scenarios), [`SimOptions`],
//! [`Simulator::new`] and [`Simulator::run`] with a [`DatapathIpc`] ([`ChanIpc`] in-process,
//! [`UnixIpc`] to a separate agent process), [`SimResults`] (`write_csv`, `jain_window`).

mod link;
mod results;
mod scenario;
mod sim;
mod trace;

/// libccp and the agent IPC, hosted by `ccp-libccp` (re-exported: the simulator's API).
pub use ccp_libccp::{ipc, proto};
pub use ccp_libccp::{sim_clock_ns, ChanIpc, DatapathIpc, UnixIpc};
pub use ccp_libccp::{Datapath, LibccpError, Primitives, MAX_CONNECTIONS};
pub use ccp_libccp::{LIBCCP_FOUND_BY, LIBCCP_SOURCE_DIR};
pub use link::CapacityMeter;
pub use results::{jain, FlowResult, SimResults, TimePoint};
pub use scenario::{
    Buffer, Capacity, FlowSpec, LinkSpec, NetStatsSpec, ReceiverKind, Scenario, ScenarioError,
    MAX_BUFFER_PKTS, PACKET_BYTES,
};
pub use sim::{Session, SimError, SimOptions, Simulator};
pub use trace::{load_trace, parse_any, parse_tput, parse_trace, RateLog, TraceFile};
