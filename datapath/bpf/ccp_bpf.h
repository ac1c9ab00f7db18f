/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The CCP BPF datapath's interface between its BPF programs (ccp.bpf.c)
 * and user space (ccp-bpf.c, later the agent's --ipc bpf backend): the
 * algorithm ids, the report records on the ring buffer "reports", the
 * decisions in the hash map "decisions", the counters in "stats".
 *
 * Fixed-size little-endian records of __u32/__u64 only, no pointers, so
 * the layout is the same in BPF and on x86-64/arm64 user space.  Bump
 * CCPB_ABI on any change; the loader refuses an object of another ABI.
 */
#ifndef CCP_BPF_H
#define CCP_BPF_H

#define CCPB_ABI		4

/* The names the datapath registers, in the order of the module's table
 * (datapath/kernel/ccp_algs.h): index = algorithm id. */
#define CCPB_ALGORITHMS(X)	\
	X(0, ccp)		\
	X(1, ccp_reno)		\
	X(2, ccp_cubic)		\
	X(3, ccp_bbr)		\
	X(4, ccp_jury)		\
	X(5, ccp_owl)		\
	X(6, ccp_mocc)		\
	X(7, ccp_iris)		\
	X(8, ccp_nuwa)		\
	X(9, ccp_auto)
#define CCPB_NR_ALGS		10

/* report kinds */
#define CCPB_CREATE		1	/* a flow started (init) */
#define CCPB_REPORT		2	/* one measurement interval ended */
#define CCPB_CLOSE		3	/* the flow ended or left ccp_* (release):
					 * a REPORT's fields for the last, partial
					 * interval; seq is the last REPORT's */

/* flow modes, in a report */
#define CCPB_MODE_FALLBACK	0	/* the in-BPF fallback: no fresh decision */
#define CCPB_MODE_AGENT		1	/* the last decision is fresh and applied */

/* A decision is fresh while it answers one of the flow's last
 * CCPB_STALE_REPORTS reports (one report per interval, about one RTT), or
 * the report it answers is less than CCPB_STALE_MIN_NS old (an agent on a
 * busy host may lag a few short RTTs; CCPB_STALE_RING reports back at
 * most): after that the flow runs the in-BPF fallback from its current
 * window. */
#define CCPB_STALE_REPORTS	3
#define CCPB_STALE_MIN_NS	200000000ULL
#define CCPB_STALE_RING		8	/* report times kept per flow, a power of 2 */

/* shortest measurement interval (an interval is one smoothed RTT) */
#define CCPB_MIN_INTERVAL_US	10000
/* largest window and rate a decision may set (bytes, bytes/s): beyond
 * any link this datapath drives; a larger value is refused, not clamped */
#define CCPB_MAX_CWND_BYTES	(1U << 30)
#define CCPB_MAX_RATE		(1ULL << 40)

#define CCPB_MAX_FLOWS		65536	/* entries of "decisions" */
#define CCPB_RINGBUF_BYTES	(1U << 22)

struct ccpb_report {
	__u32 kind;		/* CCPB_CREATE / CCPB_REPORT / CCPB_CLOSE */
	__u32 flow;		/* flow id, never 0; the key of "decisions" */
	__u32 seq;		/* report number of this flow, from 1 */
	__u32 alg;		/* algorithm id (CCPB_ALGORITHMS) */
	__u64 now_ns;		/* bpf_ktime_get_ns() (CLOCK_MONOTONIC) */
	/* CREATE: the connection (IPv4 host order; 0 for an IPv6 socket) */
	__u32 mss;
	__u32 init_cwnd;	/* bytes */
	__u32 src_ip;
	__u32 dst_ip;
	__u32 src_port;
	__u32 dst_port;
	/* REPORT: the interval's measurements, what the fold programs fold
	 * (the module's primitives, datapath/kernel/tcp_ccp.c) */
	__u64 interval_us;	/* length of the interval */
	__u64 bytes_acked;	/* newly cumulatively acked */
	__u32 packets_acked;
	__u32 packets_misordered;	/* SACKed beyond the cumulative ACK */
	__u32 lost_pkts;	/* marked lost (rate sample losses) */
	__u32 ecn_packets;	/* CE-marked (delivered_ce delta) */
	__u32 acks;		/* ACKs folded into this report */
	__u32 timeouts;		/* RTOs (CA_EVENT_LOSS) */
	__u32 rtt_min_us;	/* RTT samples of the interval; 0: none */
	__u32 rtt_max_us;
	__u32 rtt_last_us;	/* last sample, else srtt */
	__u32 rtt_samples;
	__u64 rtt_sum_us;
	__u64 rate_outgoing;	/* bytes/s, the last rate sample's send rate */
	__u64 rate_incoming;	/* bytes/s, its ack rate */
	__u64 delivered_bytes;	/* delivered (tp->delivered delta x mss) */
	__u32 snd_cwnd;		/* bytes, at the interval's end */
	__u32 bytes_in_flight;
	__u32 packets_in_flight;
	__u32 bytes_pending;	/* written, not yet sent */
	__u64 snd_rate;		/* the pacing rate a decision set; 0 none */
	__u32 mode;		/* CCPB_MODE_* during the interval's last ACK */
	__u32 lost_reports;	/* reports of this flow the ring dropped */
};

/* "decisions": key __u32 flow id -> value; written by the agent only */
struct ccpb_decision {
	__u32 seq;		/* the report answered: 1 <= seq <= flow's */
	__u32 cwnd_bytes;	/* 0: keep the window (rate-only decision) */
	__u64 rate;		/* pacing rate, bytes/s; 0: none */
};

/*
 * "policy": one entry (key 0), written by ccp-bpf (load, policy).  Which
 * sockets get a slot: only a socket with one is announced to the agent and
 * reports; one without runs the in-BPF fallback alone.  As the module's
 * parameters of the same names, with the same defaults.
 */
struct ccpb_policy {
	__u32 max_flows;	/* slots in all, 1..CCPB_MAX_FLOWS (1024) */
	__u32 netns_quota;	/* each namespace other than the initial one (0) */
	__u32 netns_total;	/* all other namespaces together (512) */
	__u32 loopback;		/* 1: loopback connections get a slot too (0) */
	__u64 init_netns;	/* the initial namespace's inode (/proc/1/ns/net) */
	__u32 uid_share;	/* percent of max_flows one user's sockets may hold (50; >= 1 slot; 100: no limit) */
	__u32 create_rate;	/* CREATEs per second at most, all flows together (5000; 0: no limit) */
};

#define CCPB_DEF_MAX_FLOWS	1024
#define CCPB_DEF_NETNS_TOTAL	512
#define CCPB_DEF_UID_SHARE	50
#define CCPB_DEF_CREATE_RATE	5000
/* a flow whose CREATE create_rate held back (or the full ring lost) runs
 * the in-BPF fallback and tries again this much later */
#define CCPB_CREATE_RETRY_NS	100000000ULL
#define CCPB_MAX_NETNS		4096	/* namespaces holding slots at once */

/* "slots": one entry (key 0), slots held now */
struct ccpb_slots {
	__u32 used;		/* all */
	__u32 other_netns;	/* by sockets outside the initial namespace */
};

/* "stats": one entry (key 0), per CPU (BPF_MAP_TYPE_PERCPU_ARRAY since ABI
 * 4): a counter is the sum of the CPUs' copies; abi is the same in each */
struct ccpb_stats {
	__u64 flows_started;
	__u64 flows_closed;
	__u64 no_storage;	/* init could not get its per-flow state */
	__u64 reports;
	__u64 creates;
	__u64 ring_full;	/* records the ring could not take */
	__u64 decisions_applied;	/* ACKs under a fresh decision */
	__u64 decisions_refused;	/* out-of-range or future decisions */
	__u64 stale_fallbacks;	/* flows that left a decision gone stale */
	__u64 fallback_acks;	/* ACKs run by the in-BPF Reno */
	__u64 abi;		/* CCPB_ABI of the loaded object: at offset 80 in every ABI */
	__u64 no_slot_full;	/* flows refused a slot: max_flows or netns_total reached */
	__u64 no_slot_netns;	/* ... their namespace's netns_quota reached (or none) */
	__u64 no_slot_loopback;	/* ... loopback connections (policy loopback 0) */
	__u64 no_slot_uid;	/* ... their user holds uid_share of max_flows */
	__u64 creates_throttled;	/* CREATEs create_rate held back (each tried again later) */
};

/* the layout user space parses by offset (datapath/bpf/bridge/src/record.rs) */
_Static_assert(sizeof(struct ccpb_report) == 168, "struct ccpb_report changed: bump CCPB_ABI");
_Static_assert(sizeof(struct ccpb_decision) == 16, "struct ccpb_decision changed: bump CCPB_ABI");
_Static_assert(sizeof(struct ccpb_stats) == 128, "struct ccpb_stats changed: bump CCPB_ABI");
_Static_assert(__builtin_offsetof(struct ccpb_stats, abi) == 80, "abi must stay at offset 80");
_Static_assert(sizeof(struct ccpb_policy) == 32, "struct ccpb_policy changed: bump CCPB_ABI");

#endif /* CCP_BPF_H */
