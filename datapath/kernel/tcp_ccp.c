// SPDX-License-Identifier: GPL-2.0
/*
 * CCP (congestion control plane) datapath for Linux TCP.
 *
 * This module lets a user-space agent (ccp-agent, built on portus 0.9) run
 * the congestion control of Linux TCP flows.  It registers the congestion
 * control algorithms "ccp", "ccp_jury", "ccp_owl", "ccp_mocc", "ccp_iris",
 * "ccp_nuwa", "ccp_reno", "ccp_cubic", "ccp_bbr" and "ccp_auto" (the agent
 * picks the algorithm by the flow's preference): all share the code
 * below and differ only in the name, which is sent to the agent as the
 * congAlg of the flow's CREATE message.  The agent maps "ccp_<alg>" to its
 * algorithm <alg> and "ccp" to its default, so a socket picks its
 * controller with setsockopt(TCP_CONGESTION) or the
 * net.ipv4.tcp_congestion_control sysctl, and sockets of one host may use
 * different controllers at the same time.
 *
 * The agent talks to the datapath through libccp (the C library shipped by
 * the libccp crate, compiled into this module): the agent installs "fold
 * programs" once, points each flow at one of them, and the program runs in
 * the datapath on every ACK, folding per-ACK measurements into report
 * fields, sending a report when its conditions say so, and writing the
 * Cwnd and Rate registers.  The agent answers reports by updating
 * registers (UPDATE_FIELDS) or switching programs (CHANGE_PROG).
 *
 * On every ACK (cong_control, softirq or socket-backlog context):
 *  - if the flow is under agent control (ATTACHED), the libccp primitives
 *    are loaded from the kernel's rate sample and the socket: bytes/packets
 *    newly acked (tp->bytes_acked delta), SACKed-out-of-order packets
 *    (rs->acked_sacked beyond the cumulative ack), CE-marked packets
 *    (tp->delivered_ce delta), packets marked lost (rs->losses), whether an
 *    RTO happened (CA_EVENT_LOSS or TCP_CA_Loss), the RTT sample (rs->rtt_us,
 *    else srtt), send and receive rates (rs->delivered over the send and ack
 *    intervals), bytes/packets in flight, bytes not yet sent, the current
 *    cwnd in bytes and the agent-set pacing rate (0 if none);
 *    then ccp_invoke() runs the flow's program.  Feeding the current cwnd
 *    back is essential: libccp rewrites cwnd from this primitive on every
 *    invoke, so an agent-set window stays in place.  The program's Cwnd (in
 *    bytes) becomes snd_cwnd = Cwnd / mss, clamped to [2, snd_cwnd_clamp];
 *    a non-zero Rate becomes sk_pacing_rate (capped by sk_max_pacing_rate)
 *    (both whole u64 values: libccp passes them truncated to u32, see
 *    ccp_values.h; byte counts in primitives and CREATE saturate at u32)
 *    and switches sk_pacing_status to SK_PACING_NEEDED, so TCP's internal
 *    pacing (or fq) enforces it.  Without an agent rate, sk_pacing_rate is
 *    kept as the stack would (200%/120% of cwnd/srtt) for TSO autosizing.
 *  - otherwise (PENDING, FALLBACK, or no libccp slot) the flow runs the
 *    in-kernel Reno below: slow start and AIMD through tcp_slow_start() and
 *    tcp_cong_avoid_ai() in Open/Disorder/Loss, proportional rate reduction
 *    (RFC 6937, the kernel's own prr_* accounting) towards
 *    tcp_reno_ssthresh() in CWR/Recovery, and cwnd = ssthresh when a
 *    reduction completes (unless undone).  Because cong_control replaces
 *    all of the stack's cwnd logic, this fallback is complete on its own:
 *    a flow never stalls, whatever the agent does.
 *
 * Flow and agent state machine (all transitions under the datapath lock):
 *
 *   init ──agent up──> PENDING ──first CHANGE_PROG/UPDATE──> ATTACHED
 *     │                  │  ^                                   │
 *     │ agent down       │  └── READY probe reaches a listener, │
 *     v                  v      CREATE re-sent                  │
 *   FALLBACK <───────────┴──────── agent lost ──────────────────┘
 *
 *  - The agent is "lost" when a send finds no listener on the netlink group
 *    (-ESRCH; immediate after the agent dies) or when nothing at all has
 *    come back from it for agent_timeout_ms while a CREATE or a report is
 *    waiting for an answer (a hung agent).  libccp's own fallback timer is
 *    disabled (it only logs); every flow leaves agent control at once.
 *  - While the agent is lost and flows exist, a delayed work item sends a
 *    READY message every probe_interval_ms.  When one is delivered (a
 *    listener exists again) the agent is "found": the CREATE of every flow
 *    is re-sent, carrying the flow's current cwnd as init_cwnd (libccp never
 *    retries a CREATE by itself).  portus answers READY by re-installing its
 *    programs and CREATE with a CHANGE_PROG; the flow is ATTACHED again when
 *    that first message for it arrives.
 *  - The agent is also lost when its netlink socket is released (it exited
 *    or was killed; the kernel's NETLINK_URELEASE notification), at once.
 *  - libccp's program table belongs to one agent, the socket that installed
 *    the programs: it is emptied when that socket goes away, when a probe
 *    finds a listener again, and when another socket installs programs
 *    (every flow is then re-created under the new agent), and only that
 *    socket may update flows or change their programs.  Programs of an
 *    earlier agent never outlive it (see "the program table belongs to one
 *    agent" below for why libccp's own rule, uid 1, is not enough).
 *
 * The agent talks to the datapath over the generic netlink family "ccp"
 * (ccp_nl.c, ccp_genl.h): only CAP_NET_ADMIN may send to it or join its
 * multicast group, on which the datapath's messages go out.
 * Messages from user space (process context, genl input) are accepted
 * only from senders with CAP_NET_ADMIN (UPDATE_FIELDS and CHANGE_PROG only
 * from the agent's socket) and only after ccpk_validate() checked
 * type (INSTALL, UPDATE_FIELDS, CHANGE_PROG), declared against received
 * length, program size (< 256 instructions: 256 hangs libccp's interpreter),
 * expression ranges, register types and indices, update counts and fields,
 * and socket id; a CHANGE_PROG must name an installed program.  Rejected
 * messages are counted by reason and logged rate-limited.
 *
 * Locking: libccp is not thread safe.  One spinlock per datapath
 * (ccpk->lock, always taken with spin_lock_bh since ACKs are processed in
 * softirq and in process context) serializes ccp_invoke() on the ACK path,
 * ccp_read_msg() from netlink, connection start/free, and the probe work.
 * Sends to the agent happen under it with GFP_ATOMIC; nothing sleeps under
 * it.  A socket's fields are written only from its own callbacks (the ACK
 * path applies agent updates, which netlink merely stages), which the
 * socket lock serializes; the probe and /proc only read a few of them
 * (READ_ONCE), reaching the socket through the slot table under the
 * datapath lock, which release() takes before the slot (and later the
 * socket) goes away.
 *
 * Limits: max_flows connection slots (default 1024; more flows run the
 * in-kernel Reno); about 3 KiB of libccp state per flow, allocated with
 * GFP_ATOMIC when the flow starts; max_programs program slots shared by all
 * algorithms (libccp's table keeps one slot unusable); programs of at most
 * 255 instructions, 8 temporaries, 110 report/control registers.
 *
 * Module lifetime: each socket using one of these algorithms holds a
 * reference on the module through tcp_congestion_ops.owner, so the module
 * cannot be unloaded while any flow uses it (rmmod reports it in use);
 * switch the sysctl back and let the flows end first.  Unloading removes
 * the genl family first, which waits for agent messages being handled and
 * lets no more in (ccp_nl.c), then the probe work, /proc and the state.
 */
#define pr_fmt(fmt) "ccp: " fmt

#include <linux/module.h>
#include <linux/version.h>
#include <linux/math64.h>
#include <linux/ratelimit.h>
#include <linux/random.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <net/tcp.h>

#include "ccp_kernel.h"
#include "ccp_values.h"
#include "ccp_libccp.h"	/* libccp internals: last */

#define CCPK_VERSION "0.1.0"

unsigned int ccpk_agent_timeout_ms = 1000;
module_param_named(agent_timeout_ms, ccpk_agent_timeout_ms, uint, 0644);
MODULE_PARM_DESC(agent_timeout_ms,
		 "fall back to in-kernel Reno when the agent has not answered a CREATE or report for this long (ms, 0 = only on send failure)");

unsigned int ccpk_probe_interval_ms = 100;
module_param_named(probe_interval_ms, ccpk_probe_interval_ms, uint, 0644);
MODULE_PARM_DESC(probe_interval_ms,
		 "while the agent is gone, send a READY probe this often (ms)");

static unsigned int max_flows = 1024;
module_param(max_flows, uint, 0444);
MODULE_PARM_DESC(max_flows, "libccp connection slots (1..65535)");

static unsigned int max_programs = 16;
module_param(max_programs, uint, 0444);
MODULE_PARM_DESC(max_programs,
		 "libccp program slots shared by all algorithms (2..64; one is unusable)");

bool ccpk_debug;
module_param_named(debug, ccpk_debug, bool, 0644);
MODULE_PARM_DESC(debug, "log libccp info messages too (rate-limited)");

struct ccpk_datapath *ccpk;

/* per-socket state, in icsk_ca_priv */
struct ccpk_ca {
	u16 sid;		/* libccp socket id; 0: none, pure Reno */
	u8 ccp_ctl:1,		/* the last ACK was handled by the agent */
	   rate_set:1,		/* the agent set a pacing rate */
	   pacing_set:1,	/* we switched sk_pacing_status to NEEDED */
	   timeout:1;		/* RTO since the last invoke */
	u32 last_delivered_ce;
	u64 last_bytes_acked;
	u64 rate_out;		/* last valid send-rate sample, bytes/s */
	u64 rate_in;		/* last valid delivery-rate sample, bytes/s */
};

/* ---- libccp datapath callbacks ---------------------------------------- */

static u64 ccpk_now_us(void)
{
	return div_u64(ktime_get_ns(), NSEC_PER_USEC);
}

static u64 ccpk_since_us(u64 then)
{
	u64 now = ccpk_now_us();

	return now > then ? now - then : 0;
}

static u64 ccpk_after_us(u64 us)
{
	return ccpk_now_us() + us;
}

static DEFINE_RATELIMIT_STATE(ccpk_log_rs, 5 * HZ, 10);

static void ccpk_log(struct ccp_datapath *dp, enum ccp_log_level level,
		     const char *msg, int msg_size)
{
	int n = min(msg_size, 79);

	if (level >= WARN)
		ccpk_inc(libccp_warnings);
	else if (!ccpk_debug)
		return;
	while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\0'))
		n--;
	if (n > 0 && __ratelimit(&ccpk_log_rs))
		pr_info("libccp: %.*s\n", n, msg);
}

/*
 * libccp passes the Cwnd and Rate registers (u64) as u32: the whole value is
 * in the flow's registers (ccp_values.h).
 */
static u64 ccpk_impl_value(struct ccp_connection *conn, int reg, u32 passed)
{
	const struct ccp_priv_state *st = conn->state;

	return st ? ccpk_full_value(st->registers.impl_registers[reg], passed) : passed;
}

/* Agent-set cwnd, in bytes. */
static void ccpk_set_cwnd(struct ccp_connection *conn, u32 cwnd)
{
	struct sock *sk = conn->impl;
	struct tcp_sock *tp = tcp_sk(sk);
	u64 bytes = ccpk_impl_value(conn, CWND_REG, cwnd);

	tcp_snd_cwnd_set(tp, ccpk_cwnd_pkts(bytes, tp->mss_cache, tp->snd_cwnd_clamp));
}

/* Agent-set pacing rate, in bytes per second; 0 is no rate (ignored). */
static void ccpk_set_rate(struct ccp_connection *conn, u32 rate)
{
	struct sock *sk = conn->impl;
	struct ccpk_ca *ca = inet_csk_ca(sk);
	u64 bps = ccpk_pacing_rate(ccpk_impl_value(conn, RATE_REG, rate),
				   READ_ONCE(sk->sk_max_pacing_rate));

	if (!bps)
		return;
	ca->rate_set = 1;
	WRITE_ONCE(sk->sk_pacing_rate, bps);
	if (cmpxchg(&sk->sk_pacing_status, SK_PACING_NONE, SK_PACING_NEEDED) ==
	    SK_PACING_NONE)
		ca->pacing_set = 1;
}

/* ---- connection table ---------------------------------------------------- */

struct ccp_connection *ccpk_conn(u32 sid)
{
	return &ccpk->conns[sid - 1];
}

/* Take a slot and announce the flow (lock held).  Returns the sid or 0. */
static u16 ccpk_conn_start(struct sock *sk, const struct ccp_datapath_info *info)
{
	struct ccp_connection *conn;
	struct ccp_priv_state *st;
	struct ccpk_flow *fl;
	u32 i, slot = 0;

	ccpk_inc(flows_started);
	if (ccpk->shutting_down || ccpk->nflows >= ccpk->max_flows)
		goto noslot;
	for (i = 0; i < ccpk->max_flows; i++) {
		slot = (ccpk->hint + i) % ccpk->max_flows;
		if (!ccpk->conns[slot].index && !ccpk->flows[slot].sk)
			break;
	}
	if (i == ccpk->max_flows)
		goto noslot;
	/*
	 * libccp's ccp_connection_start() allocates with GFP_KERNEL, but
	 * init() runs in softirq for active opens: set the slot up here.
	 */
	st = kzalloc(sizeof(*st), GFP_ATOMIC);
	if (!st)
		goto noslot;
	st->sent_create = false;
	st->implicit_time_zero = ccpk->dp.time_zero;
	st->program_index = 0;
	st->staged_program_index = -1;

	conn = &ccpk->conns[slot];
	memset(conn, 0, sizeof(*conn));
	conn->index = slot + 1;
	conn->impl = sk;
	conn->flow_info = *info;
	conn->state = st;
	conn->datapath = &ccpk->dp;

	fl = &ccpk->flows[slot];
	memset(fl, 0, sizeof(*fl));
	fl->sk = sk;
	ccpk->nflows++;
	ccpk->hint = slot + 1;

	if (ccpk->agent_up) {
		fl->mode = CCPK_PENDING;
		if (send_conn_create(&ccpk->dp, conn) == 0)
			st->sent_create = true;
		/* a failed send moved the flow to FALLBACK already */
	} else {
		fl->mode = CCPK_FALLBACK;
		queue_delayed_work(system_wq, &ccpk->probe_work, 0);
	}
	return slot + 1;

noslot:
	ccpk_inc(flows_no_slot);
	return 0;
}

/* Re-send a flow's CREATE with its current window (lock held). */
static int ccpk_recreate(u32 slot)
{
	struct ccp_connection *conn = &ccpk->conns[slot];
	struct ccpk_flow *fl = &ccpk->flows[slot];
	const struct tcp_sock *tp = tcp_sk(fl->sk);
	struct ccp_priv_state *st = conn->state;
	u32 mss = max_t(u32, READ_ONCE(tp->mss_cache), 1);
	int ret;

	conn->flow_info.mss = mss;
	conn->flow_info.init_cwnd = ccpk_pkts_bytes(READ_ONCE(tp->snd_cwnd), mss);
	conn->last_create_msg_sent = 0;
	fl->mode = CCPK_PENDING;
	fl->update_pending = 0;
	fl->report_ns = 0;
	fl->reply_ns = 0;
	ret = send_conn_create(&ccpk->dp, conn);
	if (ret == 0) {
		st->sent_create = true;
		ccpk_inc(recreates);
	}
	return ret;
}

void ccpk_flow_attach(struct ccpk_flow *fl)
{
	fl->mode = CCPK_ATTACHED;
	if (fl->ever_attached)
		ccpk_inc(reattaches);
	else
		ccpk_inc(attaches);
	fl->ever_attached = 1;
	fl->report_ns = 0;
	fl->reply_ns = 0;
}

/* The agent is gone or hung: every flow falls back (lock held). */
void ccpk_agent_lost(enum ccpk_lost why)
{
	static const char *const what[] = {
		[CCPK_LOST_NOLISTENER] = "has no socket",
		[CCPK_LOST_TIMEOUT] = "stopped answering",
		[CCPK_LOST_CLOSED] = "closed its socket",
	};
	u32 i, n = 0;

	if (!ccpk->agent_up)
		return;
	ccpk->agent_up = false;
	ccpk->dp._in_fallback = true;	/* quiets libccp's send warnings */
	ccpk->pending = false;
	ccpk_inc(agent_lost);
	if (why == CCPK_LOST_TIMEOUT)
		ccpk_inc(agent_lost_timeout);
	else if (why == CCPK_LOST_CLOSED)
		ccpk_inc(agent_lost_closed);
	else
		ccpk_inc(agent_lost_nolistener);

	for (i = 0; i < ccpk->max_flows; i++) {
		struct ccpk_flow *fl = &ccpk->flows[i];

		if (!fl->sk || fl->mode == CCPK_FALLBACK)
			continue;
		if (fl->mode == CCPK_ATTACHED) {
			ccpk_inc(fallbacks);
			n++;
		}
		fl->mode = CCPK_FALLBACK;
		fl->update_pending = 0;
		fl->report_ns = 0;
	}
	pr_warn_ratelimited("agent %s: %u flows fall back to in-kernel Reno\n",
			    what[why], n);
	if (!ccpk->shutting_down)
		queue_delayed_work(system_wq, &ccpk->probe_work,
				   msecs_to_jiffies(ccpk_probe_interval_ms));
}

/*
 * ---- the program table belongs to one agent ----------------------------
 *
 * libccp keeps the programs of "the" agent in one table, shared by all
 * flows, and identifies them only by the uid the agent chose.  It empties
 * the table only when a program with uid 1 is installed (upstream portus
 * numbered a fresh process's programs from 1).  Our agent never sends uid
 * 1: portus numbers programs from a process-wide counter, the agent
 * compiles every program once to check it and once more to run it, and
 * the order follows a HashMap's.  So without more, a restarted agent's
 * programs were appended after the old agent's (filling the table), and a
 * CHANGE_PROG found the old agent's program with the same uid first: the
 * flow ran a program whose reports the new agent could not read, and
 * stayed at its initial window.
 *
 * The messages carry no agent identity, but the transport does: every
 * agent message arrives with the netlink port id of the socket that sent
 * it, and the kernel tells us when that socket is released.  So the
 * datapath ties its program table to one agent socket:
 *
 *  - the first INSTALL while no agent is known makes its sender the agent;
 *  - an INSTALL from another socket is a new agent: the table is emptied
 *    before it is installed, and every flow under (or waiting for) an
 *    agent is announced again, so that the new agent answers it with a
 *    CHANGE_PROG to one of its own programs;
 *  - when the agent's socket is released (NETLINK_URELEASE: the agent
 *    exited, or was killed), or when a READY probe finds a listener after
 *    the agent was lost, the table is emptied and the agent forgotten;
 *  - program uid 1 from the agent itself (libccp then empties the table)
 *    re-announces the flows as well;
 *  - UPDATE_FIELDS and CHANGE_PROG are accepted only from the agent's
 *    socket (rej_not_agent otherwise).
 *
 * Emptying the table also clears every flow's program index, staged
 * program and staged updates, so that no flow can run, or be attached to,
 * a slot that the next agent will fill with another program.
 */

/* Empty libccp's program table and forget the agent (lock held). */
static void ccpk_programs_reset(void)
{
	struct DatapathProgram *progs = ccpk->dp.programs;
	u32 i;

	/* a slot is free when its index is 0; lookups skip free slots */
	for (i = 0; i < ccpk->dp.max_programs; i++) {
		progs[i].index = 0;
		progs[i].program_uid = 0;
		progs[i].num_expressions = 0;
		progs[i].num_instructions = 0;
	}
	for (i = 0; i < ccpk->max_flows; i++) {
		struct ccp_priv_state *st = ccpk->conns[i].state;

		if (!ccpk->conns[i].index || !st)
			continue;
		st->program_index = 0;
		st->staged_program_index = -1;
		memset(&st->pending_update, 0, sizeof(st->pending_update));
		ccpk->flows[i].update_pending = 0;
	}
	ccpk->agent_known = false;
	ccpk->agent_portid = 0;
	ccpk_inc(program_resets);
}

/* Announce every flow under or waiting for the agent again (lock held). */
static u32 ccpk_reannounce(void)
{
	u32 i, n = 0;

	for (i = 0; i < ccpk->max_flows && ccpk->agent_up; i++) {
		struct ccpk_flow *fl = &ccpk->flows[i];

		if (!fl->sk || fl->mode == CCPK_FALLBACK)
			continue;
		if (fl->mode == CCPK_ATTACHED)
			ccpk_inc(fallbacks);
		ccpk_recreate(i);
		n++;
	}
	return n;
}

/*
 * An INSTALL from the socket with @portid passed every check and goes to
 * libccp next (lock held): see above.
 */
void ccpk_agent_install(u32 portid, u32 program_uid)
{
	u32 n;

	if (!ccpk->agent_known) {
		/* the table holds no agent's programs: this is the agent */
		ccpk->agent_known = true;
		ccpk->agent_portid = portid;
		return;
	}
	if (portid != ccpk->agent_portid) {
		u32 old = ccpk->agent_portid;

		ccpk_inc(agent_changes);
		ccpk_programs_reset();
		ccpk->agent_known = true;
		ccpk->agent_portid = portid;
		n = ccpk_reannounce();
		pr_info_ratelimited("new agent (netlink port %u, was %u): program table emptied, re-announced %u flows\n",
				    portid, old, n);
		return;
	}
	if (program_uid == 1) {
		/* libccp empties its table for uid 1: nothing a flow ran is left */
		ccpk_programs_reset();
		ccpk->agent_known = true;
		ccpk->agent_portid = portid;
		n = ccpk_reannounce();
		ccpk_inc(agent_restarts);
		if (n)
			pr_info_ratelimited("agent installs program uid 1 again: re-announced %u flows\n",
					    n);
	}
}

/* The netlink socket with @portid was released (lock held). */
void ccpk_agent_closed(u32 portid)
{
	if (!ccpk->agent_known || portid != ccpk->agent_portid)
		return;
	ccpk_inc(agent_closed);
	ccpk_agent_lost(CCPK_LOST_CLOSED);
	ccpk_programs_reset();
}

/* Programs in libccp's table (lock held). */
u32 ccpk_programs_installed(void)
{
	const struct DatapathProgram *progs = ccpk->dp.programs;
	u32 i, n = 0;

	for (i = 0; i < ccpk->dp.max_programs; i++)
		n += progs[i].index != 0;
	return n;
}

static void ccpk_probe_fn(struct work_struct *work)
{
	char msg[READY_MSG_SIZE];
	bool again = false;
	u32 i, n = 0;

	spin_lock_bh(&ccpk->lock);
	if (ccpk->agent_up || ccpk->shutting_down || !ccpk->nflows)
		goto out;
	ccpk_inc(probes_sent);
	if (write_ready_msg(msg, sizeof(msg), ccpk->id) < 0 ||
	    ccpk_nl_send(msg, READY_MSG_SIZE) != 0) {
		again = true;
		goto out;
	}
	ccpk->agent_up = true;
	ccpk->dp._in_fallback = false;
	ccpk->pending = false;
	ccpk_inc(agent_found);
	/*
	 * Whoever answers the READY installs its programs afresh (portus
	 * does on every READY), be it a new agent or the one that hung.
	 */
	ccpk_programs_reset();
	for (i = 0; i < ccpk->max_flows && ccpk->agent_up; i++) {
		if (ccpk->flows[i].sk && ccpk->flows[i].mode == CCPK_FALLBACK) {
			ccpk_recreate(i);
			n++;
		}
	}
	pr_info_ratelimited("agent found: re-announced %u flows\n", n);
out:
	spin_unlock_bh(&ccpk->lock);
	if (again)
		queue_delayed_work(system_wq, &ccpk->probe_work,
				   msecs_to_jiffies(max(ccpk_probe_interval_ms, 10U)));
}

/* A CREATE or report has waited too long for any answer (lock held). */
static void ccpk_watchdog(void)
{
	unsigned int tmo = READ_ONCE(ccpk_agent_timeout_ms);

	if (ccpk->pending && tmo && ccpk->agent_up &&
	    time_after(jiffies, ccpk->pending_since + msecs_to_jiffies(tmo)))
		ccpk_agent_lost(CCPK_LOST_TIMEOUT);
}

/* ---- per-ACK work --------------------------------------------------------- */

/* What the stack's tcp_update_pacing_rate() would set (for TSO sizing). */
static void ccpk_default_pacing(struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	const struct net *net = sock_net(sk);
	u32 cwnd = tcp_snd_cwnd(tp);
	u64 rate = (u64)tp->mss_cache * ((USEC_PER_SEC / 100) << 3);

	if (cwnd < tp->snd_ssthresh / 2)
		rate *= READ_ONCE(net->ipv4.sysctl_tcp_pacing_ss_ratio);
	else
		rate *= READ_ONCE(net->ipv4.sysctl_tcp_pacing_ca_ratio);
	rate *= max(cwnd, tp->packets_out);
	if (likely(tp->srtt_us))
		rate = div_u64(rate, tp->srtt_us);
	WRITE_ONCE(sk->sk_pacing_rate,
		   min_t(u64, rate, READ_ONCE(sk->sk_max_pacing_rate)));
}

static void ccpk_drop_agent_rate(struct sock *sk, struct ccpk_ca *ca)
{
	if (ca->pacing_set)
		cmpxchg(&sk->sk_pacing_status, SK_PACING_NEEDED, SK_PACING_NONE);
	ca->pacing_set = 0;
	ca->rate_set = 0;
}

/* Proportional rate reduction towards ssthresh (RFC 6937). */
static void ccpk_reno_reduce(struct sock *sk, u32 acked, int lost)
{
	struct tcp_sock *tp = tcp_sk(sk);
	u32 inflight = tcp_packets_in_flight(tp);
	int room = (int)tp->snd_ssthresh - (int)inflight;
	int sndcnt;

	if (!acked || !tp->prior_cwnd)
		return;
	tp->prr_delivered += acked;
	if (room < 0) {
		u64 allowed = div_u64((u64)tp->snd_ssthresh * tp->prr_delivered +
				      tp->prior_cwnd - 1, tp->prior_cwnd);
		sndcnt = (int)allowed - (int)tp->prr_out;
	} else {
		sndcnt = max_t(int, tp->prr_delivered - tp->prr_out, acked);
		sndcnt = min(room, sndcnt);
	}
	/* the first retransmission of the episode always goes out */
	sndcnt = max(sndcnt, tp->prr_out ? 0 : 1);
	tcp_snd_cwnd_set(tp, max(inflight + sndcnt, 2U));
}

/* The in-kernel fallback: Reno with the kernel's helpers. */
static void ccpk_reno(struct sock *sk, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	u32 acked = rs->acked_sacked;

	switch (inet_csk(sk)->icsk_ca_state) {
	case TCP_CA_CWR:
	case TCP_CA_Recovery:
		ccpk_reno_reduce(sk, acked, rs->losses);
		return;
	default:
		break;
	}
	if (!acked || !tcp_is_cwnd_limited(sk))
		return;
	if (tcp_in_slow_start(tp)) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	tcp_cong_avoid_ai(tp, tcp_snd_cwnd(tp), acked);
}

static void ccpk_load_prims(struct sock *sk, struct ccpk_ca *ca,
			    const struct rate_sample *rs,
			    struct ccp_primitives *p)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	u32 mss = max_t(u32, tp->mss_cache, 1);
	u64 acked = tp->bytes_acked - ca->last_bytes_acked;
	u32 pkts = (u32)div_u64(acked + mss - 1, mss);
	u32 ce = tp->delivered_ce - ca->last_delivered_ce;
	u32 inflight = tcp_packets_in_flight(tp);

	p->bytes_acked = (u32)min_t(u64, acked, U32_MAX);
	p->packets_acked = pkts;
	p->packets_misordered = rs->acked_sacked > pkts ? rs->acked_sacked - pkts : 0;
	p->bytes_misordered = ccpk_pkts_bytes(p->packets_misordered, mss);
	p->ecn_packets = ce;
	p->ecn_bytes = ccpk_pkts_bytes(ce, mss);
	p->lost_pkts_sample = rs->losses > 0 ? rs->losses : 0;
	p->was_timeout = ca->timeout ||
			 inet_csk(sk)->icsk_ca_state == TCP_CA_Loss;
	p->rtt_sample_us = rs->rtt_us > 0 ? rs->rtt_us : tp->srtt_us >> 3;
	if (rs->delivered > 0) {
		u64 bytes = (u64)rs->delivered * mss;

		if (rs->snd_interval_us)
			ca->rate_out = mul_u64_u32_div(bytes, USEC_PER_SEC,
						       rs->snd_interval_us);
		if (rs->rcv_interval_us)
			ca->rate_in = mul_u64_u32_div(bytes, USEC_PER_SEC,
						      rs->rcv_interval_us);
	}
	p->rate_outgoing = ca->rate_out;
	p->rate_incoming = ca->rate_in;
	p->bytes_in_flight = ccpk_pkts_bytes(inflight, mss);
	p->packets_in_flight = inflight;
	/* defect 7: keep the agent's cwnd */
	p->snd_cwnd = ccpk_pkts_bytes(tcp_snd_cwnd(tp), mss);
	p->snd_rate = ca->rate_set ? READ_ONCE(sk->sk_pacing_rate) : 0;
	p->bytes_pending = tp->write_seq - tp->snd_nxt;
}

static void ccpk_lat_record(struct ccpk_flow *fl, u64 now)
{
	if (fl->report_ns && fl->reply_ns && now >= fl->report_ns) {
		u32 i = ccpk->lat_count % CCPK_LAT_RING;

		ccpk->lat_reply_ns[i] = min_t(u64, fl->reply_ns - fl->report_ns, U32_MAX);
		ccpk->lat_apply_ns[i] = min_t(u64, now - fl->report_ns, U32_MAX);
		ccpk->lat_count++;
	}
	fl->report_ns = 0;
	fl->reply_ns = 0;
	fl->update_pending = 0;
	ccpk_inc(cwnd_updates);
}

/* Returns true when the agent's program handled this ACK (lock held). */
static bool ccpk_invoke(struct sock *sk, struct ccpk_ca *ca,
			struct ccpk_flow *fl, const struct rate_sample *rs)
{
	struct ccp_connection *conn = ccpk_conn(ca->sid);
	int ret;

	ccpk_load_prims(sk, ca, rs, &conn->prims);
	/* a staged agent update is applied by this invoke */
	if (fl->update_pending)
		ccpk_lat_record(fl, ktime_get_ns());
	ret = ccp_invoke(conn);
	ca->timeout = 0;
	if (unlikely(ret < 0))
		ccpk_inc(invoke_errors);
	return true;
}

static void ccpk_cong_control_common(struct sock *sk, const struct rate_sample *rs)
{
	struct ccpk_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	bool ctl = false;

	if (ca->sid) {
		struct ccpk_flow *fl = &ccpk->flows[ca->sid - 1];

		spin_lock_bh(&ccpk->lock);
		if (unlikely(fl->sk != sk)) {
			ca->sid = 0;
		} else {
			ccpk_watchdog();
			if (fl->mode == CCPK_ATTACHED)
				ctl = ccpk_invoke(sk, ca, fl, rs);
		}
		spin_unlock_bh(&ccpk->lock);
	}
	if (!ctl) {
		if (ca->rate_set)
			ccpk_drop_agent_rate(sk, ca);
		ccpk_reno(sk, rs);
		ca->timeout = 0;
	}
	ca->ccp_ctl = ctl;
	ca->last_bytes_acked = tp->bytes_acked;
	ca->last_delivered_ce = tp->delivered_ce;
	if (!ca->rate_set)
		ccpk_default_pacing(sk);
}

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 10, 0)
static void ccpk_cong_control(struct sock *sk, u32 ack, int flag,
			      const struct rate_sample *rs)
{
	ccpk_cong_control_common(sk, rs);
}
#else
static void ccpk_cong_control(struct sock *sk, const struct rate_sample *rs)
{
	ccpk_cong_control_common(sk, rs);
}
#endif

/* ---- other congestion-control callbacks --------------------------------- */

static void ccpk_init(struct sock *sk)
{
	struct ccpk_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	const struct inet_sock *inet = inet_sk(sk);
	struct ccp_datapath_info info = {};
	u32 mss = max_t(u32, tp->mss_cache, 1);

	memset(ca, 0, sizeof(*ca));
	ca->last_bytes_acked = tp->bytes_acked;
	ca->last_delivered_ce = tp->delivered_ce;

	info.init_cwnd = ccpk_pkts_bytes(tcp_snd_cwnd(tp), mss);
	info.mss = mss;
	info.src_ip = ntohl(inet->inet_saddr);
	info.src_port = ntohs(inet->inet_sport);
	info.dst_ip = ntohl(inet->inet_daddr);
	info.dst_port = ntohs(inet->inet_dport);
#if IS_ENABLED(CONFIG_IPV6)
	/*
	 * libccp's CREATE has room for IPv4 addresses only.  An IPv6 socket's
	 * IPv4 fields hold placeholders (127.0.0.6) unless it talks to a
	 * v4-mapped address: report no address (0) rather than a wrong one.
	 * /proc/net/ccp_flows shows the IPv6 addresses.
	 */
	if (sk->sk_family == AF_INET6 && !ipv6_addr_v4mapped(&sk->sk_v6_daddr)) {
		info.src_ip = 0;
		info.dst_ip = 0;
	}
#endif
	strscpy(info.congAlg, inet_csk(sk)->icsk_ca_ops->name,
		sizeof(info.congAlg));

	spin_lock_bh(&ccpk->lock);
	ca->sid = ccpk_conn_start(sk, &info);
	spin_unlock_bh(&ccpk->lock);
}

static void ccpk_release(struct sock *sk)
{
	struct ccpk_ca *ca = inet_csk_ca(sk);
	u32 sid = ca->sid;

	ccpk_drop_agent_rate(sk, ca);
	ca->sid = 0;
	if (!sid || sid > ccpk->max_flows)
		return;
	spin_lock_bh(&ccpk->lock);
	if (ccpk->flows[sid - 1].sk == sk) {
		ccp_connection_free(&ccpk->dp, sid);	/* sends the close */
		memset(&ccpk->flows[sid - 1], 0, sizeof(struct ccpk_flow));
		ccpk->nflows--;
		ccpk_inc(flows_closed);
	}
	spin_unlock_bh(&ccpk->lock);
}

/* Complete a cwnd reduction the way the stack would (fallback only). */
static void ccpk_set_state(struct sock *sk, u8 new_state)
{
	struct ccpk_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	u8 old = inet_csk(sk)->icsk_ca_state;

	if (ca->ccp_ctl || new_state != TCP_CA_Open)
		return;
	if ((old == TCP_CA_CWR || (old == TCP_CA_Recovery && tp->undo_marker)) &&
	    tp->snd_ssthresh < TCP_INFINITE_SSTHRESH)
		tcp_snd_cwnd_set(tp, max(tp->snd_ssthresh, 2U));
}

static void ccpk_cwnd_event(struct sock *sk, enum tcp_ca_event ev)
{
	struct ccpk_ca *ca = inet_csk_ca(sk);

	if (ev == CA_EVENT_LOSS)
		ca->timeout = 1;
}

#define CCPK_OPS(_name) {				\
	.init		= ccpk_init,			\
	.release	= ccpk_release,			\
	.ssthresh	= tcp_reno_ssthresh,		\
	.undo_cwnd	= tcp_reno_undo_cwnd,		\
	.cong_control	= ccpk_cong_control,		\
	.set_state	= ccpk_set_state,		\
	.cwnd_event	= ccpk_cwnd_event,		\
	.owner		= THIS_MODULE,			\
	.name		= _name,			\
}

static struct tcp_congestion_ops ccpk_ops[] __read_mostly = {
	CCPK_OPS("ccp"),
	CCPK_OPS("ccp_jury"),
	CCPK_OPS("ccp_owl"),
	CCPK_OPS("ccp_mocc"),
	CCPK_OPS("ccp_iris"),
	CCPK_OPS("ccp_nuwa"),
	CCPK_OPS("ccp_reno"),
	CCPK_OPS("ccp_cubic"),
	CCPK_OPS("ccp_bbr"),
	CCPK_OPS("ccp_auto"),	/* the agent chooses by the flow's preference */
};

/* ---- module ------------------------------------------------------------- */

static int __init ccpk_module_init(void)
{
	int i, ret;

	BUILD_BUG_ON(sizeof(struct ccpk_ca) > ICSK_CA_PRIV_SIZE);
	if (!max_flows || max_flows > 65535 || max_programs < 2 ||
	    max_programs > 64)
		return -EINVAL;

	ccpk = kvzalloc(sizeof(*ccpk), GFP_KERNEL);
	if (!ccpk)
		return -ENOMEM;
	spin_lock_init(&ccpk->lock);
	INIT_DELAYED_WORK(&ccpk->probe_work, ccpk_probe_fn);
	ccpk->max_flows = max_flows;
	ccpk->id = get_random_u32();
	ccpk->conns = kvcalloc(max_flows, sizeof(*ccpk->conns), GFP_KERNEL);
	ccpk->flows = kvcalloc(max_flows, sizeof(*ccpk->flows), GFP_KERNEL);
	ret = -ENOMEM;
	if (!ccpk->conns || !ccpk->flows)
		goto err_free;

	ccpk->dp.set_cwnd = ccpk_set_cwnd;
	ccpk->dp.set_rate_abs = ccpk_set_rate;
	ccpk->dp.send_msg = ccpk_dp_send;
	ccpk->dp.log = ccpk_log;
	ccpk->dp.now = ccpk_now_us;
	ccpk->dp.since_usecs = ccpk_since_us;
	ccpk->dp.after_usecs = ccpk_after_us;
	ccpk->dp.max_connections = max_flows;
	ccpk->dp.ccp_active_connections = ccpk->conns;
	ccpk->dp.max_programs = max_programs;
	/* libccp's fallback timer only logs: disable it, ours replaces it */
	ccpk->dp.fto_us = 1ULL << 62;
	ccpk->dp.impl = ccpk;

	/* the READY inside ccp_init() is not sent: IPC is not up yet */
	ret = ccp_init(&ccpk->dp, ccpk->id);
	if (ret < 0 || !ccpk->dp.programs) {
		ret = -ENOMEM;
		goto err_free;
	}

	ret = ccpk_nl_init();
	if (ret)
		goto err_ccp;

	/*
	 * No agent can listen yet: the group did not exist a moment ago (and
	 * ccpk_nl_init() made sure nobody joined it in advance).  The first
	 * flow starts the READY probe; an agent started after this finds the
	 * family and joins its group, and the probe finds it.
	 */
	spin_lock_bh(&ccpk->lock);
	ccpk->ready = true;
	ccpk->agent_up = false;
	ccpk->dp._in_fallback = true;
	spin_unlock_bh(&ccpk->lock);

	ret = ccpk_proc_init();
	if (ret)
		goto err_nl;

	for (i = 0; i < ARRAY_SIZE(ccpk_ops); i++) {
		ret = tcp_register_congestion_control(&ccpk_ops[i]);
		if (ret) {
			pr_err("cannot register %s: %d\n", ccpk_ops[i].name, ret);
			while (--i >= 0)
				tcp_unregister_congestion_control(&ccpk_ops[i]);
			goto err_proc;
		}
	}
	pr_info("datapath %s loaded: %u flow slots, %u program slots, agent %s\n",
		CCPK_VERSION, max_flows, max_programs,
		ccpk->agent_up ? "listening" : "not running (in-kernel Reno until it is)");
	return 0;

err_proc:
	ccpk_proc_exit();
err_nl:
	ccpk_nl_exit();		/* sets shutting_down: no work is queued again */
	cancel_delayed_work_sync(&ccpk->probe_work);
err_ccp:
	ccp_free(&ccpk->dp);
err_free:
	kvfree(ccpk->flows);
	kvfree(ccpk->conns);
	kvfree(ccpk);
	ccpk = NULL;
	return ret;
}

static void __exit ccpk_module_exit(void)
{
	int i;

	/* no socket uses us (module refcount), so no ACK path runs */
	for (i = ARRAY_SIZE(ccpk_ops) - 1; i >= 0; i--)
		tcp_unregister_congestion_control(&ccpk_ops[i]);
	/*
	 * The family goes first: once ccpk_nl_exit() returns no agent message
	 * is handled or will be, no release notification runs, nothing is
	 * sent, and shutting_down keeps the probe work from being queued
	 * again (see ccp_nl.c).  Then the work, /proc, and the state.
	 */
	ccpk_nl_exit();
	cancel_delayed_work_sync(&ccpk->probe_work);
	ccpk_proc_exit();
	ccp_free(&ccpk->dp);
	kvfree(ccpk->flows);
	kvfree(ccpk->conns);
	kvfree(ccpk);
	ccpk = NULL;
	pr_info("datapath unloaded\n");
}

module_init(ccpk_module_init);
module_exit(ccpk_module_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("CCP datapath: TCP congestion control from a user-space agent, with in-kernel Reno fallback");
MODULE_VERSION(CCPK_VERSION);
MODULE_ALIAS("tcp_ccp");
MODULE_ALIAS("tcp_ccp_jury");
MODULE_ALIAS("tcp_ccp_owl");
MODULE_ALIAS("tcp_ccp_mocc");
MODULE_ALIAS("tcp_ccp_iris");
MODULE_ALIAS("tcp_ccp_nuwa");
MODULE_ALIAS("tcp_ccp_reno");
MODULE_ALIAS("tcp_ccp_cubic");
MODULE_ALIAS("tcp_ccp_bbr");
MODULE_ALIAS("tcp_ccp_auto");
