// SPDX-License-Identifier: GPL-2.0
/*
 * CCP (congestion control plane) datapath for Linux TCP.
 *
 * This module lets a user-space agent (ccp-agent, built on portus 0.9) run
 * the congestion control of Linux TCP flows.  It registers one congestion
 * control algorithm per name of ccp_algs.h, which is generated from the
 * agent's registry: "ccp", "ccp_<alg>" for every algorithm the agent knows
 * and "ccp_auto" (the agent picks the algorithm by the flow's preference).
 * All share the code below and differ only in the name, which is sent to
 * the agent as the congAlg of the flow's CREATE message.  The agent maps "ccp_<alg>" to its
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
 *  - a lockless check decides whether the flow needs anything beyond the
 *    in-kernel Reno (ccpk_flow_due(): its agent state is stale, it is
 *    attached, or a CREATE is due); a flow in fallback or waiting for an
 *    answer takes no lock at all;
 *  - if the flow is under agent control (ATTACHED), under the flow's own
 *    lock (and an RCU read section, see "program table" below) the libccp
 *    primitives are loaded from the kernel's rate sample and the socket:
 *    bytes/packets newly acked (tp->bytes_acked delta), SACKed-out-of-order
 *    packets (rs->acked_sacked beyond the cumulative ack), CE-marked
 *    packets (tp->delivered_ce delta), packets marked lost (rs->losses),
 *    whether an RTO happened (CA_EVENT_LOSS or TCP_CA_Loss), the RTT
 *    sample (rs->rtt_us, else srtt), send and receive rates (rs->delivered
 *    over the send and ack intervals), bytes/packets in flight, bytes not
 *    yet sent, the current cwnd in bytes and the agent-set pacing rate (0
 *    if none); then ccp_invoke() runs the flow's program.  Feeding the
 *    current cwnd back is essential: libccp rewrites cwnd from this
 *    primitive on every invoke, so an agent-set window stays in place.
 *    The program's Cwnd (in bytes) becomes snd_cwnd = Cwnd / mss, clamped
 *    to [2, snd_cwnd_clamp]; a non-zero Rate becomes sk_pacing_rate
 *    (capped by sk_max_pacing_rate) (both whole u64 values: libccp passes
 *    them truncated to u32, see ccp_values.h; byte counts in primitives
 *    and CREATE saturate at u32) and switches sk_pacing_status to
 *    SK_PACING_NEEDED, so TCP's internal pacing (or fq) enforces it.
 *    Without an agent rate, sk_pacing_rate is kept as the stack would
 *    (200%/120% of cwnd/srtt) for TSO autosizing;
 *  - otherwise (PENDING, FALLBACK, or no libccp slot) the flow runs the
 *    in-kernel Reno below: slow start and AIMD through tcp_slow_start() and
 *    tcp_cong_avoid_ai() in Open/Disorder/Loss, proportional rate reduction
 *    (RFC 6937, the kernel's own prr_* accounting) towards
 *    tcp_reno_ssthresh() in CWR/Recovery, and cwnd = ssthresh when a
 *    reduction completes (unless undone).  Because cong_control replaces
 *    all of the stack's cwnd logic, this fallback is complete on its own:
 *    a flow never stalls, whatever the agent does.
 *
 * Flow state machine (per flow, under the flow's lock):
 *
 *   init ──agent up──> PENDING ──first CHANGE_PROG/UPDATE──> ATTACHED
 *     │                 │  ^ │ unanswered for                  │
 *     │ agent down      │  │ └ agent_timeout_ms x 2^tries:     │ fault_limit
 *     v                 v  │   CREATE re-sent (ACK path)       │ faults in
 *   FALLBACK <──────────┴──┴── agent lost or replaced ─────────┤ a row
 *      │  ^                                                    │
 *      │  └────────────────────────────────────────────────────┘
 *      └── agent up and retry_at reached: CREATE (re-)sent ──> PENDING
 *
 *  - Agent events (lost, found, replaced, program table emptied) do not
 *    walk the flows under a lock.  They bump the agent generation
 *    ccpk->gen (under ccpk->lock) and queue the sweep.  A flow whose gen
 *    differs belongs to an agent that is gone: on its next ACK, or when
 *    the sweep reaches it, whichever comes first, it drops its program
 *    state and falls back (counted in "fallbacks" if it was attached), and
 *    if an agent is up it announces itself (CREATE with its current cwnd
 *    as init_cwnd).  So every flow leaves a lost agent on its very next
 *    ACK, and no agent message can act on a flow of an older generation
 *    (such answers are dropped, rx_stale).
 *  - The sweep (a work item, process context) walks the slots and brings
 *    every due flow in line, one flow lock at a time, with cond_resched()
 *    after every CCPK_SWEEP_BATCH flows and a short sleep after every
 *    CCPK_SWEEP_BATCH CREATEs sent, so a re-announcement of thousands of
 *    flows neither holds a lock nor keeps bottom halves off for long, and
 *    gives the agent time to read.  A CREATE that fails with -EAGAIN (the
 *    agent's receive buffer is full, ccp_nl.c) pauses the sweep for 5 ms,
 *    doubled up to 100 ms while the buffer is still full after a pause; the
 *    flow stays PENDING (below).  Busy flows do not wait for the sweep: each
 *    announces itself on its next ACK.
 *  - No flow stays stuck: a PENDING flow whose CREATE was not answered
 *    sends it again from its own ACK path after agent_timeout_ms, then
 *    after twice that, and so on up to 64 times (ccpk_retry_ms()); one
 *    whose CREATE found the agent's buffer full, after an eighth of
 *    agent_timeout_ms, then twice that, up to agent_timeout_ms
 *    (ccpk_create_wait_ms()).  Such retries come from the flow's ACKs and
 *    from the sweep's passes.
 *  - The agent is "lost" when a send finds its socket gone
 *    (-ECONNREFUSED; immediate after the agent dies), when nothing at all has
 *    come back from it for agent_timeout_ms while a CREATE or a report is
 *    waiting for an answer (a hung agent), or when its netlink socket is
 *    released (it exited or was killed; the kernel's NETLINK_URELEASE
 *    notification).  The first two are noticed where a lock cannot be
 *    taken (the ACK path) and handled by event_work.  libccp's own
 *    fallback timer is disabled (it only logs).
 *  - While the agent is lost, flows exist and an agent socket is
 *    registered, a delayed work item sends a READY message to it every
 *    probe_interval_ms.  When one is delivered the agent is "found" (a
 *    socket registering, CCP_CMD_AGENT_HELLO, queues the probe at once;
 *    see "registered agent sockets" below): the generation is bumped
 *    and the sweep announces every flow.  portus answers READY by
 *    re-installing its programs and CREATE with a CHANGE_PROG; the flow is
 *    ATTACHED again when that first message for it arrives.
 *  - Program faults: ccp_invoke() < 0 (division by zero, overflow or
 *    underflow, a program slot gone) leaves the ACK to the program's
 *    last window.  After fault_limit faulting ACKs in a row the flow falls
 *    back at once (logged, counted in fault_fallbacks) and sends a fresh
 *    CREATE; if the agent hands it a faulting program again, the next
 *    fresh CREATE waits 1, 2, 4 ... 64 agent timeouts (the flow runs Reno
 *    meanwhile) until the program reports without a fault.
 *  - libccp's program table belongs to one agent, the socket that installed
 *    the programs: it is emptied when that socket goes away, when a probe
 *    finds an agent again, and when another socket registers (every flow
 *    is then re-created under the new agent), and only the registered
 *    socket may install programs, update flows or change their programs.  Programs of an
 *    earlier agent never outlive it (see "the program table belongs to one
 *    agent" below for why libccp's own rule, uid 1, is not enough).
 *
 * The agent talks to the datapath over the generic netlink family "ccp"
 * (ccp_nl.c, ccp_genl.h): only CAP_NET_ADMIN may send to it or register as
 * the agent, and the datapath's messages go to the registered socket alone
 * (unicast).  Messages from user space (process context, genl input) are
 * accepted only from senders with CAP_NET_ADMIN (INSTALL, UPDATE_FIELDS and
 * CHANGE_PROG only from the registered agent's socket) and only after
 * ccpk_validate() checked
 * type (INSTALL, UPDATE_FIELDS, CHANGE_PROG), declared against received
 * length, program size (< 256 instructions: 256 hangs libccp's interpreter)
 * and work per ACK (CCPK_MAX_PROG_WORK), expression ranges, register types
 * and indices, update counts and fields, and socket id; a CHANGE_PROG must
 * name an installed program.  Rejected messages are counted by reason
 * (per-CPU counters, no lock) and logged rate-limited.
 *
 * Locking.  libccp is not thread safe; its state is of two kinds:
 *  - per flow (struct ccp_connection and its ccp_priv_state: registers,
 *    staged updates, the program it runs): protected by the flow's lock
 *    (ccpk_flow.lock), taken by the flow's ACK path (attached flows, or
 *    when a CREATE is due), by agent messages for that flow, by the
 *    sweep, by /proc/net/ccp_flows and by release();
 *  - shared (the program table, the connection table's allocation, the
 *    agent's identity and state): protected by the datapath lock
 *    (ccpk->lock), taken by netlink input, agent events, the probe,
 *    connection start and release, never on the ACK path.
 *  Order: ccpk->lock, then one flow's lock; never two flow locks.  Both
 *  are taken with bottom halves off (ACKs are processed in softirq and in
 *  process context).  Nothing sleeps under them; sends to the agent use
 *  GFP_ATOMIC.  The ACK path reads the shared agent state (gen, agent_up)
 *  with READ_ONCE and counts in per-CPU counters.
 *
 *  The program table is read by ccp_invoke() under the flow lock only,
 *  while INSTALL writes it under ccpk->lock.  Safe because: a slot is
 *  written only while it is free (index 0); an attached flow of the
 *  current generation only points at installed slots; a slot becomes free
 *  only when the whole table is emptied, which bumps the generation (so
 *  no ACK that starts afterwards runs an old program) and the program
 *  epoch; and before libccp writes the table again, ccpk_install_lock()
 *  waits for an RCU grace period (ACKs run programs inside
 *  rcu_read_lock()), so an ACK that started before the table was emptied
 *  has finished.  INSTALL comes from the agent's send (process context),
 *  where that wait may sleep.
 *
 *  A socket's fields are written only from its own callbacks (the ACK
 *  path applies agent updates, which netlink merely stages), which the
 *  socket lock serializes; the sweep, the probe and /proc read a few of
 *  them (READ_ONCE) under the flow's lock, which release() takes before
 *  the slot (and later the socket) goes away.  libccp's global fallback
 *  timer fields (last_msg_sent, _in_fallback) are touched by libccp
 *  without a lock; with the timer disabled and _in_fallback kept false
 *  they carry no meaning.
 *
 * Namespaces: the agent runs in the initial network namespace, and so, by
 * default, must the flows it controls.  Inside an unprivileged user and
 * network namespace any user may select a ccp algorithm (TCP_CONGESTION
 * needs CAP_NET_ADMIN over the socket's namespace only), so a socket of
 * another namespace gets a slot only while its namespace holds fewer than
 * netns_quota slots (default 0: none) and all other namespaces together
 * fewer than netns_total.  A socket refused a slot works normally on the
 * in-kernel Reno, and the agent never hears of it (flows_netns_refused).
 *
 * Limits: max_flows connection slots (default 1024; more flows run the
 * in-kernel Reno); about 3 KiB of libccp state per flow, allocated with
 * GFP_ATOMIC when the flow starts; max_programs program slots shared by all
 * algorithms (libccp's table keeps one slot unusable); programs of at most
 * 255 instructions and CCPK_MAX_PROG_WORK steps per ACK, 8 temporaries,
 * 110 report/control registers.
 *
 * Module lifetime: each socket using one of these algorithms holds a
 * reference on the module through tcp_congestion_ops.owner, so the module
 * cannot be unloaded while any flow uses it (rmmod reports it in use);
 * switch the sysctl back and let the flows end first.  Unloading stops the
 * work items (the sweep, the probe, agent events) first, so that nothing
 * sends while the family goes away, then removes the genl family, which
 * waits for agent messages being handled and lets no more in (ccp_nl.c),
 * then the state.
 */
#define pr_fmt(fmt) "ccp: " fmt

#include <linux/module.h>
#include <linux/version.h>
#include <linux/delay.h>
#include <linux/math64.h>
#include <linux/ratelimit.h>
#include <linux/random.h>
#include <linux/rcupdate.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <net/net_namespace.h>
#include <net/netns/generic.h>
#include <net/tcp.h>

#include "ccp_kernel.h"
#include "ccp_algs.h"
#include "ccp_values.h"
#include "ccp_libccp.h"	/* libccp internals: last */

#define CCPK_VERSION "0.1.0"

/*
 * The sweep: flows per batch, and its pause after a CREATE hit a full
 * buffer (doubled while the buffer is found full at once after a pause)
 */
#define CCPK_SWEEP_BATCH	64
#define CCPK_SWEEP_PAUSE_MS	5
#define CCPK_SWEEP_PAUSE_MAX_MS	100

/* grace periods an INSTALL waits for the program table at most */
#define CCPK_INSTALL_WAITS	4

unsigned int ccpk_agent_timeout_ms = 1000;
module_param_named(agent_timeout_ms, ccpk_agent_timeout_ms, uint, 0644);
MODULE_PARM_DESC(agent_timeout_ms,
		 "fall back to in-kernel Reno when the agent has not answered a CREATE or report for this long (ms, 0 = only on send failure); an unanswered CREATE is re-sent after this long (doubling)");

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

static unsigned int netns_quota;
module_param(netns_quota, uint, 0644);
MODULE_PARM_DESC(netns_quota,
		 "connection slots each network namespace other than the initial one may hold (0 = none: their flows run the in-kernel Reno)");

static unsigned int netns_total = 512;
module_param(netns_total, uint, 0644);
MODULE_PARM_DESC(netns_total,
		 "connection slots all namespaces other than the initial one may hold together");

static unsigned int fault_limit = 8;
module_param(fault_limit, uint, 0644);
MODULE_PARM_DESC(fault_limit,
		 "consecutive ACKs on which a flow's program faults before the flow falls back and is announced afresh (0 = never)");

static unsigned int uid_share = 50;
module_param(uid_share, uint, 0644);
MODULE_PARM_DESC(uid_share,
		 "percent of max_flows the sockets of one user may hold together, in every namespace (at least one slot; 100 = no limit): no user can take every slot");

static unsigned int create_rate = 5000;
module_param(create_rate, uint, 0644);
MODULE_PARM_DESC(create_rate,
		 "CREATEs sent to the agent per second at most, all flows together (0 = no limit); a flow over it runs the in-kernel Reno and tries again 100 ms later: connection churn cannot flood the agent");

static bool loopback;
module_param(loopback, bool, 0644);
MODULE_PARM_DESC(loopback,
		 "give loopback connections (to 127/8, ::1, or routed over a loopback device) a slot too (N, the default: they run the in-kernel Reno, and local connections cannot take the slots of real paths)");

bool ccpk_debug;
module_param_named(debug, ccpk_debug, bool, 0644);
MODULE_PARM_DESC(debug, "log libccp info messages too (rate-limited)");

struct ccpk_datapath *ccpk;

/* libccp's per-flow state (registers: ~4 KiB), one per slot */
static struct kmem_cache *ccpk_state_cache;

/* per-namespace state: slots held by the namespace's sockets (ccpk->lock) */
struct ccpk_net {
	u32 flows;
};

static unsigned int ccpk_net_id __read_mostly;

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


/* ---- counters -------------------------------------------------------------- */

void ccpk_ctr_read(u64 *out)
{
	int cpu, i;

	memset(out, 0, sizeof(u64) * CCPK_CTR_MAX);
	for_each_possible_cpu(cpu) {
		const struct ccpk_pcpu *p = per_cpu_ptr(ccpk->pcpu, cpu);

		for (i = 0; i < CCPK_CTR_MAX; i++)
			out[i] += READ_ONCE(p->ctr[i]);
	}
}

/* ---- work items -------------------------------------------------------------- */

static void ccpk_queue_sweep(unsigned long delay)
{
	if (READ_ONCE(ccpk->shutting_down))
		return;
	if (delay)
		queue_delayed_work(system_wq, &ccpk->sweep_work, delay);
	else
		mod_delayed_work(system_wq, &ccpk->sweep_work, 0);
}

static void ccpk_queue_probe(unsigned long delay)
{
	if (!READ_ONCE(ccpk->shutting_down))
		queue_delayed_work(system_wq, &ccpk->probe_work, delay);
}

/* Flows must leave the agent they were announced to (lock held). */
static void ccpk_gen_bump(void)
{
	WRITE_ONCE(ccpk->gen, ccpk->gen + 1);
	ccpk_queue_sweep(0);
}

/* ---- connection table ---------------------------------------------------- */

struct ccp_connection *ccpk_conn(u32 sid)
{
	return &ccpk->conns[sid - 1];
}

bool ccpk_flow_current(const struct ccpk_flow *fl)
{
	return READ_ONCE(fl->gen) == READ_ONCE(ccpk->gen);
}

u8 ccpk_flow_mode(const struct ccpk_flow *fl)
{
	return ccpk_mode_shown(READ_ONCE(fl->mode), !ccpk_flow_current(fl),
			       READ_ONCE(ccpk->agent_up));
}

/* Forget the flow's program, staged program and updates (flow lock held). */
static void ccpk_flow_detach(u32 slot, struct ccpk_flow *fl)
{
	struct ccp_priv_state *st = ccpk->conns[slot].state;

	if (st) {
		st->program_index = 0;
		st->staged_program_index = -1;
		memset(&st->pending_update, 0, sizeof(st->pending_update));
	}
	fl->update_pending = 0;
	fl->report_ns = 0;
	fl->reply_ns = 0;
	fl->faults = 0;
}

/*
 * Send (again) the CREATE of the flow in @slot with its current window
 * (flow lock held): PENDING until the agent answers, or until
 * ccpk_retry_ms() passes and it is sent again.
 */
static int ccpk_announce(u32 slot, struct ccpk_flow *fl)
{
	struct ccp_connection *conn = &ccpk->conns[slot];
	const struct tcp_sock *tp = tcp_sk(fl->sk);
	u32 mss = max_t(u32, READ_ONCE(tp->mss_cache), 1);
	bool count_try;
	u32 wait;
	int ret;

	if (fl->mode == CCPK_PENDING)
		ccpk_inc(create_retries);
	else if (fl->announced)
		ccpk_inc(recreates);
	/* a fresh CREATE starts over: nothing staged for the flow survives */
	ccpk_flow_detach(slot, fl);
	conn->flow_info.mss = mss;
	conn->flow_info.init_cwnd = ccpk_pkts_bytes(READ_ONCE(tp->snd_cwnd), mss);
	conn->last_create_msg_sent = 0;	/* libccp's own 100 ms throttle */
	WRITE_ONCE(fl->mode, CCPK_PENDING);
	ret = send_conn_create(&ccpk->dp, conn);
	if (ret == 0 || ret == -EAGAIN)
		fl->announced = 1;
	wait = ccpk_create_wait_ms(READ_ONCE(ccpk_agent_timeout_ms), fl->tries,
				   ret == -EAGAIN ? fl->busy + 1 : 0, &count_try);
	WRITE_ONCE(fl->retry_at, jiffies + msecs_to_jiffies(wait));
	if (count_try && fl->tries < U8_MAX)
		fl->tries++;
	if (ret != -EAGAIN)
		fl->busy = 0;
	else if (fl->busy < U8_MAX)
		fl->busy++;
	return ret;
}

/* a throttled CREATE is tried again this much later */
#define CCPK_CREATE_THROTTLE_MS	100

/*
 * May a CREATE go out now (create_rate per second, any context)?  The
 * kernel's ratelimit: at most create_rate in each second's window; a busy
 * lock counts as "no" (the flow tries again later).
 */
static bool ccpk_create_allowed(void)
{
	static DEFINE_RATELIMIT_STATE(rs, HZ, 0);
	unsigned int rate = READ_ONCE(create_rate);

	if (!rate)
		return true;
	if (READ_ONCE(rs.burst) != rate) {
		WRITE_ONCE(rs.burst, rate);
		ratelimit_set_flags(&rs, RATELIMIT_MSG_ON_RELEASE);	/* never print */
	}
	return __ratelimit(&rs);
}

/*
 * Bring the flow in @slot in line with the agent's state (flow lock held):
 * leave an agent that is gone or replaced, (re-)announce when due.
 * Returns the result of the CREATE sent, or 1 when none was sent.
 */
static int ccpk_flow_sync(u32 slot, struct ccpk_flow *fl)
{
	u32 gen = READ_ONCE(ccpk->gen);
	bool up = READ_ONCE(ccpk->agent_up);

	if (fl->gen != gen) {
		if (fl->mode == CCPK_ATTACHED)
			ccpk_inc(fallbacks);
		ccpk_flow_detach(slot, fl);
		WRITE_ONCE(fl->mode, CCPK_FALLBACK);
		WRITE_ONCE(fl->gen, gen);
		WRITE_ONCE(fl->retry_at, jiffies);
		fl->tries = 0;
		fl->busy = 0;
		fl->fault_streak = 0;
	}
	if (!ccpk_flow_due(fl->mode, false, up, jiffies, fl->retry_at, false))
		return 1;
	if (!ccpk_create_allowed()) {
		ccpk_inc(creates_throttled);
		WRITE_ONCE(fl->retry_at, jiffies + msecs_to_jiffies(CCPK_CREATE_THROTTLE_MS));
		return 1;
	}
	return ccpk_announce(slot, fl);
}

void ccpk_flow_attach(struct ccpk_flow *fl)
{
	WRITE_ONCE(fl->mode, CCPK_ATTACHED);
	if (fl->ever_attached)
		ccpk_inc(reattaches);
	else
		ccpk_inc(attaches);
	fl->ever_attached = 1;
	fl->tries = 0;
	fl->busy = 0;
	fl->faults = 0;
	fl->report_ns = 0;
	fl->reply_ns = 0;
}

/*
 * Take a slot for @sk (lock held): the namespace policy, then the oldest
 * free slot (FIFO, so a socket id is reused as late as possible and a late
 * answer for an ended flow rarely finds a new one).  @st is the flow's
 * libccp state, owned by the slot on success.  Returns the sid or 0.
 */
static u16 ccpk_slot_take(struct sock *sk, const struct ccp_datapath_info *info,
			  struct ccp_priv_state *st)
{
	u32 uid = __kuid_val(sk->sk_uid);
	struct net *net = sock_net(sk);
	bool other = !net_eq(net, &init_net);
	struct ccpk_net *cn = NULL;
	struct ccp_connection *conn;
	struct ccpk_flow *fl;
	u32 slot;

	if (ccpk->shutting_down || !ccpk->nfree)
		goto noslot;
	if (other) {
		cn = net_generic(net, ccpk_net_id);
		if (!ccpk_netns_admit(false, cn->flows, READ_ONCE(netns_quota),
				      ccpk->nflows_other_netns, READ_ONCE(netns_total))) {
			ccpk_inc(flows_netns_refused);
			return 0;
		}
	}
	if (!ccpk_uid_take(ccpk->uids, ccpk->uid_mask, uid,
			   ccpk_uid_quota(ccpk->max_flows, READ_ONCE(uid_share)))) {
		ccpk_inc(flows_uid_refused);
		return 0;
	}
	slot = ccpk->free_slots[ccpk->free_head];
	ccpk->free_head = (ccpk->free_head + 1) % ccpk->max_flows;
	ccpk->nfree--;

	st->sent_create = true;	/* CREATEs are ours: libccp must not send any */
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
	spin_lock(&fl->lock);
	fl->ever_attached = 0;
	fl->announced = 0;
	fl->other_netns = other;
	fl->uid = uid;
	fl->tries = 0;
	fl->busy = 0;
	fl->fault_streak = 0;
	ccpk_flow_detach(slot, fl);
	WRITE_ONCE(fl->gen, ccpk->gen);
	WRITE_ONCE(fl->mode, CCPK_FALLBACK);
	WRITE_ONCE(fl->retry_at, jiffies);
	WRITE_ONCE(fl->sk, sk);
	spin_unlock(&fl->lock);

	ccpk->nflows++;
	if (other) {
		cn->flows++;
		ccpk->nflows_other_netns++;
	}
	return slot + 1;

noslot:
	ccpk_inc(flows_no_slot);
	return 0;
}

/* Release the slot of the flow in @slot (lock and flow lock held). */
static void ccpk_slot_free(u32 slot, struct ccpk_flow *fl)
{
	struct ccp_connection *conn = &ccpk->conns[slot];

	/* the close: a MEASURE with no fields, as libccp sends it */
	if (fl->announced && READ_ONCE(ccpk->agent_up)) {
		char msg[CCPK_HDR_LEN + 8] = {};

		msg[0] = MEASURE;
		msg[2] = sizeof(msg);
		msg[4] = (slot + 1) & 0xff;	/* socket id, little endian */
		msg[5] = ((slot + 1) >> 8) & 0xff;
		ccpk_dp_send(&ccpk->dp, msg, sizeof(msg));
	}
	if (fl->other_netns) {
		struct ccpk_net *cn = net_generic(sock_net(fl->sk), ccpk_net_id);

		cn->flows--;
		ccpk->nflows_other_netns--;
	}
	ccpk_uid_put(ccpk->uids, ccpk->uid_mask, fl->uid);
	kmem_cache_free(ccpk_state_cache, conn->state);
	conn->state = NULL;
	conn->impl = NULL;
	conn->index = 0;
	ccpk_flow_detach(slot, fl);
	WRITE_ONCE(fl->mode, CCPK_FREE);
	WRITE_ONCE(fl->sk, NULL);
	ccpk->free_slots[(ccpk->free_head + ccpk->nfree) % ccpk->max_flows] = slot;
	ccpk->nfree++;
	ccpk->nflows--;
	ccpk_inc(flows_closed);
}

/* The agent is gone or hung: every flow falls back (lock held). */
void ccpk_agent_lost(enum ccpk_lost why)
{
	static const char *const what[] = {
		[CCPK_LOST_NOLISTENER] = "has no socket any more",
		[CCPK_LOST_TIMEOUT] = "stopped answering",
		[CCPK_LOST_CLOSED] = "closed its socket",
	};

	if (!ccpk->agent_up)
		return;
	WRITE_ONCE(ccpk->agent_up, false);
	WRITE_ONCE(ccpk->pending_since, 0);
	ccpk_inc(agent_lost);
	if (why == CCPK_LOST_TIMEOUT)
		ccpk_inc(agent_lost_timeout);
	else if (why == CCPK_LOST_CLOSED)
		ccpk_inc(agent_lost_closed);
	else
		ccpk_inc(agent_lost_nolistener);
	/* each flow leaves the agent on its next ACK, or in the sweep */
	ccpk_gen_bump();
	pr_warn_ratelimited("agent %s: %u flows fall back to in-kernel Reno\n",
			    what[why], ccpk->nflows);
	ccpk_queue_probe(msecs_to_jiffies(ccpk_probe_interval_ms));
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
 *  - INSTALLs come only from the registered socket (ccp_nl.c); the first
 *    while no agent is known makes its sender the agent;
 *  - another socket registering is a new agent: the table is emptied, and
 *    every flow under (or waiting for) an agent is announced again, so
 *    that the new agent answers it with a CHANGE_PROG to one of its own
 *    programs (an INSTALL from a socket other than the agent's would do
 *    the same; with registration it cannot arrive);
 *  - when the agent's socket is released (NETLINK_URELEASE: the agent
 *    exited, or was killed), or when a READY probe finds an agent after
 *    the agent was lost, the table is emptied and the agent forgotten;
 *  - program uid 1 from the agent itself (libccp then empties the table)
 *    re-announces the flows as well, unless the table is empty already;
 *  - UPDATE_FIELDS and CHANGE_PROG are accepted only from the agent's
 *    socket (rej_not_agent otherwise).
 *
 * Emptying the table bumps the agent generation: no flow runs, or can be
 * attached to, a slot that the next agent will fill with another program;
 * each flow drops its program, staged program and staged updates when it
 * catches up.  And it bumps the program epoch: libccp writes the table
 * again only after an RCU grace period (ccpk_install_lock()).
 */

/* Empty libccp's program table and forget the agent (lock held). */
static void ccpk_programs_reset(void)
{
	struct DatapathProgram *progs = ccpk->dp.programs;
	u32 i;

	/*
	 * A slot is free when its index is 0; lookups skip free slots.  An
	 * ACK still running one of these programs reads at most fewer
	 * expressions and instructions; the instructions themselves stay
	 * until the next INSTALL, which waits for such ACKs to end.
	 */
	for (i = 0; i < ccpk->dp.max_programs; i++) {
		WRITE_ONCE(progs[i].index, 0);
		progs[i].program_uid = 0;
		WRITE_ONCE(progs[i].num_expressions, 0);
		WRITE_ONCE(progs[i].num_instructions, 0);
	}
	ccpk->prog_epoch++;
	WRITE_ONCE(ccpk->agent_known, false);
	WRITE_ONCE(ccpk->agent_portid, 0);
	ccpk_inc(program_resets);
	ccpk_gen_bump();
}

/*
 * An INSTALL from the socket with @portid passed every check and goes to
 * libccp next (lock held): see above.
 */
static void ccpk_agent_install(u32 portid, u32 program_uid)
{
	if (!ccpk->agent_known) {
		/* the table holds no agent's programs: this is the agent */
		WRITE_ONCE(ccpk->agent_known, true);
		WRITE_ONCE(ccpk->agent_portid, portid);
		return;
	}
	if (portid != ccpk->agent_portid) {
		u32 old = ccpk->agent_portid;

		ccpk_inc(agent_changes);
		ccpk_programs_reset();
		WRITE_ONCE(ccpk->agent_known, true);
		WRITE_ONCE(ccpk->agent_portid, portid);
		pr_info_ratelimited("new agent (netlink port %u, was %u): program table emptied, re-announcing %u flows\n",
				    portid, old, ccpk->nflows);
		return;
	}
	if (program_uid == 1 && ccpk_programs_installed()) {
		/* libccp empties its table for uid 1: nothing a flow ran is left */
		ccpk_programs_reset();
		WRITE_ONCE(ccpk->agent_known, true);
		WRITE_ONCE(ccpk->agent_portid, portid);
		ccpk_inc(agent_restarts);
		pr_info_ratelimited("agent installs program uid 1 again: re-announcing %u flows\n",
				    ccpk->nflows);
	}
}

/* a is later than b, wrap-safe */
static bool ccpk_epoch_after(u32 a, u32 b)
{
	return (s32)(a - b) > 0;
}

/*
 * Take ccpk->lock for an INSTALL from @portid (process context: the
 * agent's send), with libccp's program table safe to write: the agent
 * rules above applied (a new agent empties the table), and no ACK still
 * running a program installed before the table was last emptied (an RCU
 * grace period has passed since).  Returns 0 with the lock held, or
 * -EBUSY without it when another socket became the agent while this one
 * waited (or the table kept being emptied): the newest installer is the
 * agent, and a displaced one must not write into its table.  Without
 * that rule, sockets installing at once (agents racing, or a root
 * flood of INSTALLs from many sockets) emptied the table for each other
 * after every grace period and never got through; a handler looping here
 * holds the genl core's cb_lock for reading, so rmmod waited on them.
 */
int ccpk_install_lock(u32 portid, u32 program_uid)
{
	u32 ep, waits = 0;

	might_sleep();
	spin_lock_bh(&ccpk->lock);
	for (;;) {
		/* another socket registered meanwhile: it is the agent now */
		if (ccpk->listener != portid) {
			spin_unlock_bh(&ccpk->lock);
			return -EBUSY;
		}
		if (waits && ccpk->agent_known && ccpk->agent_portid != portid) {
			spin_unlock_bh(&ccpk->lock);
			return -EBUSY;
		}
		/*
		 * First pass: a new agent empties the table.  Later passes:
		 * claims a table emptied meanwhile (agent gone), else nothing.
		 */
		ccpk_agent_install(portid, program_uid);
		if (ccpk->prog_epoch == ccpk->prog_synced)
			return 0;
		if (waits++ == CCPK_INSTALL_WAITS) {
			spin_unlock_bh(&ccpk->lock);
			return -EBUSY;
		}
		ep = ccpk->prog_epoch;
		spin_unlock_bh(&ccpk->lock);
		/* ACKs run programs under rcu_read_lock() */
		synchronize_rcu();
		spin_lock_bh(&ccpk->lock);
		if (ccpk_epoch_after(ep, ccpk->prog_synced))
			ccpk->prog_synced = ep;
	}
}

/*
 * ---- registered agent sockets (CCP_CMD_AGENT_HELLO) ----------------------
 *
 * The datapath sends to one socket, the newest registered one
 * (ccpk->listener).  Registering another socket is an agent change: the
 * old agent's programs go (the generation is bumped, every flow falls
 * back), the agent counts as away until a READY probe reaches the new one,
 * which then gets every flow announced.  A registered socket that is
 * released leaves the list; if it was the newest, the one registered
 * before it gets the flows back the same way (the agent sockets started
 * beside each other by hand, or by a restart that overlapped).  The list
 * is bounded: a HELLO beyond CCPK_MAX_LISTENERS forgets the oldest.
 */

/* Is @portid a registered socket?  (any context; a racy hint) */
bool ccpk_is_listener(u32 portid)
{
	u32 i, n = min_t(u32, READ_ONCE(ccpk->nlisteners), CCPK_MAX_LISTENERS);

	for (i = 0; i < n; i++)
		if (READ_ONCE(ccpk->listeners[i]) == portid)
			return true;
	return false;
}

/* Remove @portid from the list; was it there?  (lock held) */
static bool ccpk_listener_remove(u32 portid)
{
	u32 i, j;

	for (i = 0; i < ccpk->nlisteners; i++) {
		if (ccpk->listeners[i] != portid)
			continue;
		for (j = i; j + 1 < ccpk->nlisteners; j++)
			WRITE_ONCE(ccpk->listeners[j], ccpk->listeners[j + 1]);
		WRITE_ONCE(ccpk->nlisteners, ccpk->nlisteners - 1);
		WRITE_ONCE(ccpk->listeners[ccpk->nlisteners], 0);
		return true;
	}
	return false;
}

/*
 * The newest registered socket is now @top (0: none; lock held): if it
 * changed, the agent changed.
 */
static void ccpk_listener_set(u32 top, bool lost, enum ccpk_lost why)
{
	u32 old = ccpk->listener;

	if (top == old)
		return;
	WRITE_ONCE(ccpk->listener, top);
	if (lost) {
		ccpk_agent_lost(why);		/* counted; flows fall back */
	} else if (ccpk->agent_up) {
		/* replaced, not lost: away until the probe reaches the new one */
		WRITE_ONCE(ccpk->agent_up, false);
		WRITE_ONCE(ccpk->pending_since, 0);
	}
	if (old && top)
		ccpk_inc(agent_changes);
	if (ccpk->agent_known || ccpk_programs_installed())
		ccpk_programs_reset();
	else
		ccpk_gen_bump();
	if (top) {
		pr_info_ratelimited("agent at netlink port %u (was %u): %u flows re-announced to it\n",
				    top, old, ccpk->nflows);
		ccpk_queue_probe(0);
	}
}

/* CCP_CMD_AGENT_HELLO from the socket @portid (lock held). */
void ccpk_agent_hello(u32 portid)
{
	ccpk_inc(agent_hellos);
	ccpk_listener_remove(portid);	/* again: it moves to the top */
	if (ccpk->nlisteners == CCPK_MAX_LISTENERS) {
		ccpk_listener_remove(ccpk->listeners[0]);
		ccpk_inc(listeners_dropped);
	}
	WRITE_ONCE(ccpk->listeners[ccpk->nlisteners], portid);
	WRITE_ONCE(ccpk->nlisteners, ccpk->nlisteners + 1);
	ccpk_listener_set(portid, false, CCPK_LOST_CLOSED);
}

/* The newest registered socket that is left, or 0 (lock held). */
static u32 ccpk_listener_top(void)
{
	return ccpk->nlisteners ? ccpk->listeners[ccpk->nlisteners - 1] : 0;
}

/*
 * The netlink socket with @portid was released (lock held; from the
 * notifier, or from a send that found no socket with that port id, which
 * comes first when the release is still on its way to the notifier): it
 * leaves the list; if it was the agent, the agent is gone and its programs
 * with it.  The second word of the same release finds nothing to do.
 */
void ccpk_agent_closed(u32 portid)
{
	bool agent = ccpk->agent_known && portid == ccpk->agent_portid;

	if (agent) {
		ccpk_inc(agent_closed);
		ccpk_agent_lost(CCPK_LOST_CLOSED);
		ccpk_programs_reset();
	}
	if (ccpk_listener_remove(portid))
		ccpk_listener_set(ccpk_listener_top(), true, CCPK_LOST_CLOSED);
}

/* Programs in libccp's table (a snapshot; any context). */
u32 ccpk_programs_installed(void)
{
	const struct DatapathProgram *progs = ccpk->dp.programs;
	u32 i, n = 0;

	for (i = 0; i < ccpk->dp.max_programs; i++)
		n += READ_ONCE(progs[i].index) != 0;
	return n;
}

static void ccpk_probe_fn(struct work_struct *work)
{
	char msg[READY_MSG_SIZE];
	bool again = false;
	u32 to;
	int ret;

	spin_lock_bh(&ccpk->lock);
	/* no agent registered: its HELLO queues the probe */
	to = ccpk->listener;
	if (ccpk->agent_up || ccpk->shutting_down || !ccpk->nflows || !to)
		goto out;
	ccpk_inc(probes_sent);
	ret = write_ready_msg(msg, sizeof(msg), ccpk->id);
	if (ret >= 0)
		ret = ccpk_nl_send(msg, READY_MSG_SIZE);
	if (ret == -ECONNREFUSED && ccpk_is_listener(to)) {
		/* released before the notifier said so: the one before, if any */
		ccpk_agent_closed(to);
		again = ccpk->listener != 0;
		goto out;
	}
	if (ret) {
		again = true;
		goto out;
	}
	WRITE_ONCE(ccpk->agent_up, true);
	WRITE_ONCE(ccpk->pending_since, 0);
	ccpk_inc(agent_found);
	/*
	 * Whoever answers the READY installs its programs afresh (portus
	 * does on every READY), be it a new agent or the one that hung.
	 * Emptying the table bumps the generation: the sweep announces
	 * every flow.
	 */
	ccpk_programs_reset();
	pr_info_ratelimited("agent found: re-announcing %u flows\n", ccpk->nflows);
out:
	spin_unlock_bh(&ccpk->lock);
	if (again)
		ccpk_queue_probe(msecs_to_jiffies(max(ccpk_probe_interval_ms, 10U)));
}

/*
 * The sweep: bring every flow that is due in line with the agent's state,
 * one flow lock at a time (see the top of this file).
 */
static void ccpk_sweep_fn(struct work_struct *work)
{
	/* only this work item touches these */
	static u32 pause_ms = CCPK_SWEEP_PAUSE_MS;
	static bool nobufs_seen;
	u32 i, seen = 0, sent = 0;
	bool paused = false;

	ccpk_inc(sweeps);
	for (i = 0; i < ccpk->max_flows; i++) {
		struct ccpk_flow *fl = &ccpk->flows[i];
		int ret = 1;

		if ((i & 1023) == 1023)
			cond_resched();
		if (!READ_ONCE(fl->sk) ||
		    !ccpk_flow_due(READ_ONCE(fl->mode), !ccpk_flow_current(fl),
				   READ_ONCE(ccpk->agent_up), jiffies,
				   READ_ONCE(fl->retry_at), false))
			continue;
		spin_lock_bh(&fl->lock);
		if (fl->sk)
			ret = ccpk_flow_sync(i, fl);
		spin_unlock_bh(&fl->lock);
		if (ret == -EAGAIN) {
			/* the agent's buffer is full: let it read */
			paused = true;
			break;
		}
		/* batches: give the agent time to read, and the CPU back */
		if (ret <= 0 && ++sent % CCPK_SWEEP_BATCH == 0)
			usleep_range(1000, 2000);
		if (++seen % CCPK_SWEEP_BATCH == 0)
			cond_resched();
	}
	if (!paused) {
		pause_ms = CCPK_SWEEP_PAUSE_MS;
		if (nobufs_seen) {
			bool unused;

			/* one more pass for the CREATEs that found the buffer full */
			nobufs_seen = false;
			ccpk_queue_sweep(msecs_to_jiffies(ccpk_create_wait_ms(
				READ_ONCE(ccpk_agent_timeout_ms), 0, 1, &unused)) + 1);
		}
		return;
	}
	nobufs_seen = true;
	/* full again right after a pause: wait longer, up to 100 ms */
	ccpk_queue_sweep(max(msecs_to_jiffies(pause_ms), 1UL));
	if (!sent)
		pause_ms = min(pause_ms * 2, CCPK_SWEEP_PAUSE_MAX_MS);
}

/* Did the agent leave a CREATE or report unanswered for too long? */
static bool ccpk_watchdog_expired(void)
{
	unsigned long since = READ_ONCE(ccpk->pending_since);
	unsigned int tmo = READ_ONCE(ccpk_agent_timeout_ms);

	return since && tmo && READ_ONCE(ccpk->agent_up) &&
	       time_after(jiffies, since + msecs_to_jiffies(tmo));
}

/* ACK path: no lock; event_work declares the agent lost */
static void ccpk_watchdog(void)
{
	if (likely(!READ_ONCE(ccpk->pending_since)))
		return;
	if (ccpk_watchdog_expired() &&
	    !test_and_set_bit(CCPK_EV_TIMEOUT, &ccpk->events))
		queue_work(system_wq, &ccpk->event_work);
}

/* Agent events noticed where ccpk->lock cannot be taken. */
static void ccpk_event_fn(struct work_struct *work)
{
	spin_lock_bh(&ccpk->lock);
	if (test_and_clear_bit(CCPK_EV_NOLISTENER, &ccpk->events)) {
		u32 gone = READ_ONCE(ccpk->refused_port);

		/*
		 * no socket has that port id: it was released, and the
		 * notifier's word is still on its way (netlink_release() frees
		 * the port id first): the same news, handled the same way
		 */
		if (gone && ccpk_is_listener(gone))
			ccpk_agent_closed(gone);
		else if (READ_ONCE(ccpk->nolistener_gen) == ccpk->gen)
			ccpk_agent_lost(CCPK_LOST_NOLISTENER);
	}
	if (test_and_clear_bit(CCPK_EV_TIMEOUT, &ccpk->events) &&
	    ccpk_watchdog_expired())
		ccpk_agent_lost(CCPK_LOST_TIMEOUT);
	spin_unlock_bh(&ccpk->lock);
}

/*
 * Bookkeeping of a message sent to the agent (ccpk_dp_send(); any
 * context; for a report, the flow's lock is held).  @gen: the generation
 * when it was sent.
 */
void ccpk_tx_done(u16 type, u32 sid, u32 nfields, u32 gen, int ret)
{
	if (ret == 0) {
		bool wants_answer = type == CREATE || (type == MEASURE && nfields);

		if (type == CREATE)
			ccpk_inc(creates_sent);
		else if (type == MEASURE && nfields)
			ccpk_inc(reports_sent);
		else if (type == MEASURE)
			ccpk_inc(closes_sent);
		if (wants_answer && !READ_ONCE(ccpk->pending_since))
			cmpxchg(&ccpk->pending_since, 0, jiffies ?: 1);
		if (type == MEASURE && nfields && sid && sid <= ccpk->max_flows) {
			struct ccpk_flow *fl = &ccpk->flows[sid - 1];

			if (!fl->report_ns)
				fl->report_ns = ktime_get_ns();
			fl->reported = 1;
		}
	} else if (ret == -ECONNREFUSED) {
		WRITE_ONCE(ccpk->nolistener_gen, gen);
		if (!test_and_set_bit(CCPK_EV_NOLISTENER, &ccpk->events))
			queue_work(system_wq, &ccpk->event_work);
	} else if (ret == -EAGAIN) {
		ccpk_inc(tx_busy);
	} else {
		ccpk_inc(tx_errors);
	}
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
		u64 n = atomic64_inc_return(&ccpk->lat_count) - 1;
		u32 i = (u32)n & (CCPK_LAT_RING - 1);

		WRITE_ONCE(ccpk->lat_reply_ns[i],
			   min_t(u64, fl->reply_ns - fl->report_ns, U32_MAX));
		WRITE_ONCE(ccpk->lat_apply_ns[i],
			   min_t(u64, now - fl->report_ns, U32_MAX));
	}
	fl->report_ns = 0;
	fl->reply_ns = 0;
	fl->update_pending = 0;
	ccpk_inc(cwnd_updates);
}

/*
 * The program of the flow in @slot faulted on fault_limit ACKs in a row
 * (flow lock held, in an RCU read section): fall back, and announce the
 * flow afresh, at once the first time, later after a growing pause.
 */
static void ccpk_fault_fallback(u32 slot, struct ccpk_flow *fl, int err)
{
	const struct ccp_priv_state *st = ccpk->conns[slot].state;
	const struct DatapathProgram *progs = ccpk->dp.programs;
	u32 uid = 0, streak, wait;
	u16 idx = st ? st->program_index : 0;

	if (idx && idx <= ccpk->dp.max_programs)
		uid = READ_ONCE(progs[idx - 1].program_uid);
	ccpk_inc(fault_fallbacks);
	if (fl->fault_streak < U8_MAX)
		fl->fault_streak++;
	streak = fl->fault_streak;
	wait = ccpk_fault_backoff_ms(READ_ONCE(ccpk_agent_timeout_ms), streak);
	pr_warn_ratelimited("flow %u (%s): program uid %u faulted on %u ACKs in a row (libccp error %d): in-kernel Reno, new CREATE %s%u ms\n",
			    slot + 1, ccpk->conns[slot].flow_info.congAlg, uid,
			    fl->faults, err, wait ? "in " : "now, ", wait);
	ccpk_flow_detach(slot, fl);
	WRITE_ONCE(fl->mode, CCPK_FALLBACK);
	WRITE_ONCE(fl->retry_at, jiffies + msecs_to_jiffies(wait));
	fl->tries = 0;
}

/*
 * Run the flow's program on this ACK (flow lock held, RCU read section).
 * Returns true when the program handled the ACK, false when the in-kernel
 * Reno must (the flow just fell back).
 */
static bool ccpk_invoke(struct sock *sk, struct ccpk_ca *ca, u32 slot,
			struct ccpk_flow *fl, const struct rate_sample *rs)
{
	struct ccp_connection *conn = &ccpk->conns[slot];
	int ret;

	ccpk_load_prims(sk, ca, rs, &conn->prims);
	/* a staged agent update is applied by this invoke */
	if (fl->update_pending)
		ccpk_lat_record(fl, ktime_get_ns());
	fl->reported = 0;
	ret = ccp_invoke(conn);
	ca->timeout = 0;
	if (likely(ret >= 0)) {
		fl->faults = 0;
		if (fl->reported)
			fl->fault_streak = 0;
		return true;
	}
	ccpk_inc(invoke_errors);
	if (fl->faults < U16_MAX)
		fl->faults++;
	if (!ccpk_fault_exceeded(fl->faults, READ_ONCE(fault_limit)))
		return true;
	ccpk_fault_fallback(slot, fl, ret);
	return false;
}

/* The locked part of an ACK of a flow with a slot; true: the agent's. */
static bool ccpk_flow_ack(struct sock *sk, struct ccpk_ca *ca,
			  const struct rate_sample *rs)
{
	u32 slot = ca->sid - 1;
	struct ccpk_flow *fl = &ccpk->flows[slot];
	bool ctl = false;

	rcu_read_lock();	/* programs: see ccpk_install_lock() */
	spin_lock_bh(&fl->lock);
	if (unlikely(fl->sk != sk)) {
		ca->sid = 0;
		goto out;
	}
	ccpk_flow_sync(slot, fl);
	if (fl->mode == CCPK_ATTACHED) {
		ctl = ccpk_invoke(sk, ca, slot, fl, rs);
		if (!ctl)	/* fell back: a fresh CREATE when due */
			ccpk_flow_sync(slot, fl);
	}
out:
	spin_unlock_bh(&fl->lock);
	rcu_read_unlock();
	return ctl;
}

static void ccpk_cong_control_common(struct sock *sk, const struct rate_sample *rs)
{
	struct ccpk_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	bool ctl = false;

	if (ca->sid) {
		const struct ccpk_flow *fl = &ccpk->flows[ca->sid - 1];

		ccpk_watchdog();
		/* in fallback, or waiting for the agent: no lock at all */
		if (ccpk_flow_due(READ_ONCE(fl->mode), !ccpk_flow_current(fl),
				  READ_ONCE(ccpk->agent_up), jiffies,
				  READ_ONCE(fl->retry_at), true))
			ctl = ccpk_flow_ack(sk, ca, rs);
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

/* Does @sk talk over a loopback path (an address, or a loopback device)? */
static bool ccpk_is_loopback(struct sock *sk)
{
	struct dst_entry *dst;
	bool lo;

	if (sk->sk_family == AF_INET && ipv4_is_loopback(inet_sk(sk)->inet_daddr))
		return true;
#if IS_ENABLED(CONFIG_IPV6)
	if (sk->sk_family == AF_INET6 &&
	    (ipv6_addr_loopback(&sk->sk_v6_daddr) ||
	     (ipv6_addr_v4mapped(&sk->sk_v6_daddr) &&
	      ipv4_is_loopback(sk->sk_v6_daddr.s6_addr32[3]))))
		return true;
#endif
	dst = sk_dst_get(sk);
	lo = dst && dst->dev && (dst->dev->flags & IFF_LOOPBACK);
	dst_release(dst);
	return lo;
}

/*
 * Admission before any lock or allocation: what refuses a socket for sure
 * (a loopback path unless loopback=1, a namespace with no quota, no free
 * slot) is read without ccpk->lock; ccpk_slot_take() decides again under it.
 */
static bool ccpk_admit_unlocked(struct sock *sk)
{
	if (!READ_ONCE(loopback) && ccpk_is_loopback(sk)) {
		ccpk_inc(flows_loopback);
		return false;
	}
	if (!net_eq(sock_net(sk), &init_net) &&
	    (!READ_ONCE(netns_quota) || !READ_ONCE(netns_total))) {
		ccpk_inc(flows_netns_refused);
		return false;
	}
	if (!READ_ONCE(ccpk->nfree) || READ_ONCE(ccpk->shutting_down)) {
		ccpk_inc(flows_no_slot);
		return false;
	}
	return true;
}

static void ccpk_init(struct sock *sk)
{
	struct ccpk_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	const struct inet_sock *inet = inet_sk(sk);
	struct ccp_datapath_info info = {};
	u32 mss = max_t(u32, tp->mss_cache, 1);
	struct ccp_priv_state *st;
	struct ccpk_flow *fl;
	u16 sid;

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

	ccpk_inc(flows_started);
	if (!ccpk_admit_unlocked(sk))
		return;		/* pure Reno, no slot */
	/*
	 * libccp's ccp_connection_start() allocates with GFP_KERNEL, but
	 * init() runs in softirq for active opens: set the slot up here.
	 */
	st = kmem_cache_zalloc(ccpk_state_cache, GFP_ATOMIC);
	if (!st) {
		ccpk_inc(flows_no_slot);
		return;
	}
	spin_lock_bh(&ccpk->lock);
	sid = ccpk_slot_take(sk, &info, st);
	if (sid && !ccpk->agent_up)
		ccpk_queue_probe(0);
	spin_unlock_bh(&ccpk->lock);
	if (!sid) {
		kmem_cache_free(ccpk_state_cache, st);
		return;
	}
	ca->sid = sid;
	/* announce it now if an agent is up */
	fl = &ccpk->flows[sid - 1];
	spin_lock_bh(&fl->lock);
	if (fl->sk == sk)
		ccpk_flow_sync(sid - 1, fl);
	spin_unlock_bh(&fl->lock);
}

static void ccpk_release(struct sock *sk)
{
	struct ccpk_ca *ca = inet_csk_ca(sk);
	u32 sid = ca->sid;
	struct ccpk_flow *fl;

	ccpk_drop_agent_rate(sk, ca);
	ca->sid = 0;
	if (!sid || sid > ccpk->max_flows)
		return;
	fl = &ccpk->flows[sid - 1];
	spin_lock_bh(&ccpk->lock);
	spin_lock(&fl->lock);
	if (fl->sk == sk)
		ccpk_slot_free(sid - 1, fl);	/* sends the close */
	spin_unlock(&fl->lock);
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

/* one per name of the agent's registry (ccp_algs.h) */
#define CCPK_OPS_ENTRY(_name) CCPK_OPS(_name),
static struct tcp_congestion_ops ccpk_ops[] __read_mostly = {
	CCPK_ALGORITHMS(CCPK_OPS_ENTRY)
};

/* ccpk_ops[0 .. ccpk_nregistered) are registered with the stack */
static unsigned int ccpk_nregistered;

/*
 * Register every name of ccpk_ops, or none (module init, last step).
 * Returns 0 when all are registered; -errno when none is and the module
 * may be freed; 1 when none is but the module must stay loaded.
 *
 * A name another module holds (-EEXIST) fails the k-th registration after
 * the first k-1 went live.  A socket may select one of those meanwhile
 * (setsockopt, or the sysctl default): it takes a reference to this module
 * and points at ccpk_ops, and a failed init frees the module whatever its
 * reference count.  The kernel exports no way to look a name up first
 * (tcp_ca_find() is not exported).  So the earlier names are unregistered
 * (each waits for an RCU grace period: every lookup that found it, and the
 * try_module_get() that follows it in the same read-side section, is over)
 * and the module's reference count, compared with its count before the
 * first registration, says whether any socket got in.  If one did, failing
 * would free the code it runs: the module stays loaded with no name
 * registered (sockets that hold it keep working), says so, and can be
 * removed once they have closed.
 */
static int ccpk_register_all(void)
{
	int base = module_refcount(THIS_MODULE), held;
	int i, ret = 0;

	for (i = 0; i < ARRAY_SIZE(ccpk_ops); i++) {
		ret = tcp_register_congestion_control(&ccpk_ops[i]);
		if (ret)
			break;
	}
	if (!ret) {
		ccpk_nregistered = ARRAY_SIZE(ccpk_ops);
		return 0;
	}
	pr_err("cannot register %s: %d%s\n", ccpk_ops[i].name, ret,
	       ret == -EEXIST ?
	       " (another module has that name: see /proc/sys/net/ipv4/tcp_available_congestion_control)" : "");
	while (--i >= 0)
		tcp_unregister_congestion_control(&ccpk_ops[i]);
	ccpk_nregistered = 0;
	held = module_refcount(THIS_MODULE) - base;
	if (held > 0) {
		pr_err("%d sockets selected a ccp name while the names were being registered: staying loaded with no name registered; rmmod ccp_kernel once they have closed\n",
		       held);
		return 1;
	}
	return ret;
}


/* ---- module ------------------------------------------------------------- */

static struct pernet_operations ccpk_net_ops = {
	.id = &ccpk_net_id,
	.size = sizeof(struct ccpk_net),
};

static void ccpk_free_all(void)
{
	kmem_cache_destroy(ccpk_state_cache);
	ccpk_state_cache = NULL;
	free_percpu(ccpk->pcpu);
	kvfree(ccpk->uids);
	kvfree(ccpk->free_slots);
	kvfree(ccpk->flows);
	kvfree(ccpk->conns);
	kvfree(ccpk);
	ccpk = NULL;
}

/* no new work after this; wait for what runs */
static void ccpk_stop_work(void)
{
	spin_lock_bh(&ccpk->lock);
	WRITE_ONCE(ccpk->shutting_down, true);
	spin_unlock_bh(&ccpk->lock);
	cancel_work_sync(&ccpk->event_work);
	cancel_delayed_work_sync(&ccpk->sweep_work);
	cancel_delayed_work_sync(&ccpk->probe_work);
}

static int __init ccpk_module_init(void)
{
	int ret;
	u32 s;

	BUILD_BUG_ON(sizeof(struct ccpk_ca) > ICSK_CA_PRIV_SIZE);
	BUILD_BUG_ON(CCPK_LAT_RING & (CCPK_LAT_RING - 1));
	if (!max_flows || max_flows > 65535 || max_programs < 2 ||
	    max_programs > 64)
		return -EINVAL;

	ccpk = kvzalloc(sizeof(*ccpk), GFP_KERNEL);
	if (!ccpk)
		return -ENOMEM;
	spin_lock_init(&ccpk->lock);
	INIT_DELAYED_WORK(&ccpk->probe_work, ccpk_probe_fn);
	INIT_DELAYED_WORK(&ccpk->sweep_work, ccpk_sweep_fn);
	INIT_WORK(&ccpk->event_work, ccpk_event_fn);
	atomic64_set(&ccpk->lat_count, 0);
	ccpk->max_flows = max_flows;
	ccpk->id = get_random_u32();
	ccpk->conns = kvcalloc(max_flows, sizeof(*ccpk->conns), GFP_KERNEL);
	ccpk->flows = kvcalloc(max_flows, sizeof(*ccpk->flows), GFP_KERNEL);
	ccpk->free_slots = kvcalloc(max_flows, sizeof(*ccpk->free_slots), GFP_KERNEL);
	ccpk->pcpu = alloc_percpu(struct ccpk_pcpu);
	ccpk_state_cache = KMEM_CACHE(ccp_priv_state, 0);
	/* slots per user: at least twice as many entries as slots (ccp_policy.h) */
	ccpk->uid_mask = roundup_pow_of_two(2 * max_flows) - 1;
	ccpk->uids = kvcalloc(ccpk->uid_mask + 1, sizeof(*ccpk->uids), GFP_KERNEL);
	ret = -ENOMEM;
	if (!ccpk->conns || !ccpk->flows || !ccpk->free_slots || !ccpk->pcpu ||
	    !ccpk_state_cache || !ccpk->uids) {
		ccpk_free_all();
		return ret;
	}
	for (s = 0; s < max_flows; s++) {
		spin_lock_init(&ccpk->flows[s].lock);
		ccpk->free_slots[s] = s;
	}
	ccpk->nfree = max_flows;

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
		ccpk_free_all();
		return -ENOMEM;
	}
	/* never set: it only quiets libccp's warnings, and a data race */
	ccpk->dp._in_fallback = false;

	ret = register_pernet_subsys(&ccpk_net_ops);
	if (ret)
		goto err_ccp;

	ret = ccpk_nl_init();
	if (ret)
		goto err_pernet;

	/*
	 * No agent is registered yet: the family did not exist a moment ago.
	 * An agent started after this finds the family and registers
	 * (CCP_CMD_AGENT_HELLO), which sends it READY once flows exist.
	 */
	spin_lock_bh(&ccpk->lock);
	WRITE_ONCE(ccpk->ready, true);
	WRITE_ONCE(ccpk->agent_up, false);
	spin_unlock_bh(&ccpk->lock);

	ret = ccpk_proc_init();
	if (ret)
		goto err_nl;

	ret = ccpk_register_all();
	if (ret < 0)
		goto err_proc;
	if (ret > 0)
		return 0;	/* loaded, no name registered (see above) */
	pr_info("datapath %s loaded: %u flow slots (%u per other namespace, %u in all), %u program slots, agent %s\n",
		CCPK_VERSION, max_flows, netns_quota, netns_total, max_programs,
		ccpk->agent_up ? "listening" : "not running (in-kernel Reno until it is)");
	return 0;

err_proc:
	ccpk_proc_exit();
err_nl:
	ccpk_stop_work();	/* shutting_down: no work is queued again */
	ccpk_nl_exit();		/* waits for agent messages being handled */
	cancel_work_sync(&ccpk->event_work);
err_pernet:
	unregister_pernet_subsys(&ccpk_net_ops);
err_ccp:
	ccp_free(&ccpk->dp);
	ccpk_free_all();
	return ret;
}

static void __exit ccpk_module_exit(void)
{
	int i;

	/* no socket uses us (module refcount), so no ACK path runs */
	for (i = (int)ccpk_nregistered - 1; i >= 0; i--)
		tcp_unregister_congestion_control(&ccpk_ops[i]);
	/*
	 * First the work items (shutting_down: none is queued again), so
	 * that nothing sends while the family goes away; then the family:
	 * once ccpk_nl_exit() returns no agent message is handled or will
	 * be, no release notification runs, and nothing is sent (see
	 * ccp_nl.c).  An agent message or notification handled until then
	 * may have queued event_work (the others check shutting_down).
	 */
	ccpk_stop_work();
	ccpk_proc_exit();
	ccpk_nl_exit();
	cancel_work_sync(&ccpk->event_work);
	cancel_delayed_work_sync(&ccpk->sweep_work);
	cancel_delayed_work_sync(&ccpk->probe_work);
	unregister_pernet_subsys(&ccpk_net_ops);
	ccp_free(&ccpk->dp);
	ccpk_free_all();
	pr_info("datapath unloaded\n");
}

module_init(ccpk_module_init);
module_exit(ccpk_module_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("CCP datapath: TCP congestion control from a user-space agent, with in-kernel Reno fallback");
MODULE_VERSION(CCPK_VERSION);
/* "tcp_<name>": what the kernel's request_module() asks for by congestion-control name */
#define CCPK_ALIAS(_name) MODULE_ALIAS("tcp_" _name);
CCPK_ALGORITHMS(CCPK_ALIAS)
