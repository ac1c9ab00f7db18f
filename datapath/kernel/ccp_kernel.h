/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internal interfaces of the CCP kernel datapath (ccp-kernel.ko).
 * See tcp_ccp.c for the design.
 */
#ifndef CCP_KERNEL_H
#define CCP_KERNEL_H

#include <linux/percpu.h>
#include <linux/spinlock.h>
#include <linux/version.h>
#include <linux/workqueue.h>
#include <net/sock.h>
#include <net/tcp.h>

/*
 * Kernel versions: built and tested against Debian 12's 6.1 and 6.12.
 * cong_control's signature changed in 6.10 (tcp_ccp.c); tcp_snd_cwnd() and
 * tcp_snd_cwnd_set() appeared in 5.19.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 19, 0)
static inline u32 tcp_snd_cwnd(const struct tcp_sock *tp)
{
	return tp->snd_cwnd;
}

static inline void tcp_snd_cwnd_set(struct tcp_sock *tp, u32 val)
{
	tp->snd_cwnd = val;
}
#endif

#include "ccp.h"		/* libccp public API */
#include "ccp_validate.h"
#include "ccp_policy.h"	/* enum ccpk_mode, retry and admission rules */

#define CCPK_LAT_RING		4096	/* latency samples kept for /proc */
#define CCPK_MAX_LISTENERS	4	/* registered agent sockets kept */

/* counters, exported in /proc/net/ccp */
#define CCPK_COUNTERS(X)						\
	X(flows_started)	/* sockets that selected a ccp* algorithm */ \
	X(flows_no_slot)	/* no connection slot / no memory: Reno only */ \
	X(flows_netns_refused)	/* namespace policy: no slot, Reno only */ \
	X(flows_loopback)	/* loopback path (loopback=0): no slot, Reno only */ \
	X(flows_uid_refused)	/* its user holds uid_share of the slots: Reno only */ \
	X(flows_closed)							\
	X(attaches)		/* PENDING -> ATTACHED, first time */	\
	X(reattaches)		/* PENDING -> ATTACHED, had been before */ \
	X(fallbacks)		/* ATTACHED/PENDING flow -> FALLBACK */	\
	X(agent_lost)		/* agent declared gone */		\
	X(agent_lost_nolistener) /* ... because a send found its socket gone */ \
	X(agent_lost_timeout)	/* ... because it stopped answering */	\
	X(agent_lost_closed)	/* ... because its netlink socket closed */ \
	X(agent_found)		/* a READY probe reached a listener */	\
	X(agent_hellos)		/* CCP_CMD_AGENT_HELLO registrations */	\
	X(listeners_dropped)	/* registered sockets forgotten: more than CCPK_MAX_LISTENERS */ \
	X(agent_closed)		/* the agent's netlink socket was released */ \
	X(agent_changes)	/* another socket registered as the agent */ \
	X(agent_restarts)	/* the agent installed program uid 1 again */ \
	X(program_resets)	/* libccp's program table emptied */	\
	X(probes_sent)		/* READY probes attempted */		\
	X(creates_sent)							\
	X(recreates)		/* CREATE re-sent for an existing flow */ \
	X(create_retries)	/* ... because the last one went unanswered */ \
	X(creates_throttled)	/* CREATEs held back by create_rate */ \
	X(sweeps)		/* passes over the flows after an agent event */ \
	X(reports_sent)							\
	X(closes_sent)							\
	X(tx_errors)		/* sends failed (other than gone or busy) */ \
	X(tx_busy)		/* the agent's receive buffer was full (-EAGAIN) */ \
	X(rx_ok)		/* agent messages accepted */		\
	X(rx_install)							\
	X(rx_update)							\
	X(rx_changeprog)						\
	X(rej_total)		/* all rejected agent messages */	\
	X(rej_perm)		/* sender lacks CAP_NET_ADMIN (the genl core refuses it first) */ \
	X(rej_nlmsg)		/* genl version not 1, or no CCP message attribute */ \
	X(rej_short)							\
	X(rej_bad_type)							\
	X(rej_bad_len)							\
	X(rej_prog_too_big)						\
	X(rej_prog_work)	/* too much interpreter work per ACK */	\
	X(rej_bad_prog)							\
	X(rej_bad_fields)						\
	X(rej_bad_sid)		/* sid out of range */			\
	X(rej_stale_sid)	/* sid in range, no flow (e.g. just closed) */ \
	X(rej_unknown_prog)	/* CHANGE_PROG to a program not installed */ \
	X(rej_not_agent)	/* install/update/change from a socket that is not the registered agent */ \
	X(rej_libccp)		/* libccp refused it (e.g. program table full) */ \
	X(rej_displaced)	/* INSTALL from a socket another agent replaced meanwhile */ \
	X(rx_stale)		/* answer meant for an earlier agent generation */ \
	X(invoke_errors)	/* ccp_invoke() < 0 (program fault) */	\
	X(fault_fallbacks)	/* fault_limit faults in a row: Reno, new CREATE */ \
	X(cwnd_updates)		/* agent cwnd/rate updates applied */	\
	X(libccp_warnings)

#define CCPK_CTR_ENUM(n) CCPK_CTR_##n,
enum ccpk_counter { CCPK_COUNTERS(CCPK_CTR_ENUM) CCPK_CTR_MAX };
#undef CCPK_CTR_ENUM

/*
 * One connection slot.  Its lock protects the fields below and the slot's
 * libccp state (ccpk->conns[slot] and its ccp_priv_state) against the
 * flow's own ACK path, agent messages for it, the sweep, /proc and
 * release().  Lockless readers (the ACK path's fast check, the sweep's
 * scan, /proc/net/ccp) read only sk, mode, gen and retry_at, with
 * READ_ONCE; those are written with WRITE_ONCE under the lock.  sk is
 * set and cleared under ccpk->lock as well (slot allocation).
 */
struct ccpk_flow {
	spinlock_t lock;
	struct sock *sk;	/* owner; NULL when free */
	u32 gen;		/* the ccpk->gen its agent state belongs to */
	u8 mode;		/* enum ccpk_mode */
	u8 ever_attached:1,	/* was under agent control before */
	   announced:1,		/* a CREATE went out for it (ever) */
	   update_pending:1,	/* agent update staged, not yet applied */
	   reported:1,		/* the current invoke sent a report */
	   other_netns:1;	/* counted against its namespace's quota */
	u8 tries;		/* CREATEs sent since the last answer */
	u8 busy;		/* CREATEs in a row that found the agent busy */
	u32 uid;		/* owner's kuid, counted in ccpk->uids */
	u8 fault_streak;	/* fault fallbacks since the last clean report */
	u16 faults;		/* consecutive faulting ACKs */
	unsigned long retry_at;	/* jiffies: when FALLBACK/PENDING (re)announces */
	u64 report_ns;		/* first report not yet answered */
	u64 reply_ns;		/* when the answer to it arrived */
} ____cacheline_aligned_in_smp;

struct ccpk_pcpu {
	u64 ctr[CCPK_CTR_MAX];
};

/* event_work's bits (ccpk->events) */
enum {
	CCPK_EV_NOLISTENER,	/* a send found the agent's socket gone */
	CCPK_EV_TIMEOUT,	/* the agent watchdog expired */
};

struct ccpk_datapath {
	/* read on every ACK, written rarely (under lock, WRITE_ONCE) */
	struct ccpk_flow *flows;
	struct ccp_connection *conns;
	struct ccpk_pcpu __percpu *pcpu;	/* counters */
	u32 max_flows;
	/*
	 * Agent generation: bumped (under lock) whenever flows must leave the
	 * agent they were announced to: it was lost, found again, replaced,
	 * or its program table emptied.  A flow whose gen differs catches up
	 * on its next ACK (or in the sweep): see tcp_ccp.c.
	 */
	u32 gen;
	bool agent_up;		/* a listener exists and answers */
	bool ready;		/* IPC up: libccp's sends go out */
	bool nl_up;		/* the genl family is registered */
	bool shutting_down;

	/*
	 * Read on every ACK (the watchdog), alone on its cache line and
	 * written only when it changes: set by the first send that waits
	 * for an answer, cleared by the first answer after it.
	 */
	unsigned long pending_since ____cacheline_aligned_in_smp;
				/* jiffies of the oldest send waiting for an answer; 0: none */

	/* written per agent message or applied update: off the ACK path's lines */
	unsigned long events ____cacheline_aligned_in_smp;	/* CCPK_EV_* for event_work */
	u32 nolistener_gen;	/* gen when a send found no listener */
	u32 refused_port;	/* the port id that send went to */
	atomic64_t lat_count;
	u64 last_rx_ns;

	/*
	 * The datapath lock: slot allocation, libccp's program table, the
	 * agent's identity and state transitions.  Never taken on the ACK
	 * path.  Order: ccpk->lock before a flow's lock.
	 */
	spinlock_t lock ____cacheline_aligned_in_smp;
	struct ccp_datapath dp;	/* libccp state */
	u32 nflows;
	u32 nflows_other_netns;	/* slots held by other namespaces */
	u32 *free_slots;	/* ring of free slot numbers, FIFO */
	u32 free_head;
	u32 nfree;
	struct ccpk_uid_count *uids;	/* slots per user (ccp_policy.h) */
	u32 uid_mask;
	u32 id;			/* datapath id in READY */
	/*
	 * The agent whose programs are in libccp's table: the netlink port id
	 * of the socket that installed them.  agent_known is false exactly
	 * when the table is empty of any agent's programs.
	 */
	bool agent_known;
	u32 agent_portid;
	/*
	 * Registered agent sockets (CCP_CMD_AGENT_HELLO), oldest first, at
	 * most CCPK_MAX_LISTENERS; a socket's entry goes when it is released.
	 * The datapath sends only to the newest, listener (0: none; read
	 * without the lock by every send).  INSTALL, UPDATE_FIELDS and
	 * CHANGE_PROG are accepted only from it.
	 */
	u32 listeners[CCPK_MAX_LISTENERS];
	u32 nlisteners;
	u32 listener;
	/*
	 * Program table epochs: prog_epoch counts the times the table was
	 * emptied; prog_synced is the latest epoch known to have no ACK still
	 * running a program installed before it (an RCU grace period passed).
	 * libccp may only write the table while they are equal.
	 */
	u32 prog_epoch;
	u32 prog_synced;
	struct delayed_work probe_work;
	struct delayed_work sweep_work;
	struct work_struct event_work;
	/* latency ring: report sent -> reply received -> cwnd applied */
	u32 lat_reply_ns[CCPK_LAT_RING];
	u32 lat_apply_ns[CCPK_LAT_RING];
};

extern struct ccpk_datapath *ccpk;
extern unsigned int ccpk_agent_timeout_ms;
extern unsigned int ccpk_probe_interval_ms;
extern bool ccpk_debug;

/* per-CPU counters: any context, no lock */
#define ccpk_inc(c)	this_cpu_inc(ccpk->pcpu->ctr[CCPK_CTR_##c])
#define ccpk_inc_ctr(i)	this_cpu_inc(ccpk->pcpu->ctr[(i)])

/* why the agent is declared gone */
enum ccpk_lost {
	CCPK_LOST_NOLISTENER,	/* a send found the agent's socket gone */
	CCPK_LOST_TIMEOUT,	/* nothing came back for agent_timeout_ms */
	CCPK_LOST_CLOSED,	/* its netlink socket was released */
};

/* tcp_ccp.c */
void ccpk_agent_lost(enum ccpk_lost why);	/* lock held */
int ccpk_install_lock(u32 portid, u32 program_uid);	/* 0: ccpk->lock taken */
void ccpk_agent_closed(u32 portid);		/* lock held */
void ccpk_agent_hello(u32 portid);		/* lock held */
bool ccpk_is_listener(u32 portid);		/* any context */
u32 ccpk_programs_installed(void);		/* any context */
void ccpk_flow_attach(struct ccpk_flow *fl);	/* flow lock held */
bool ccpk_flow_current(const struct ccpk_flow *fl);
u8 ccpk_flow_mode(const struct ccpk_flow *fl);	/* as /proc shows it */
struct ccp_connection *ccpk_conn(u32 sid);
void ccpk_tx_done(u16 type, u32 sid, u32 nfields, u32 gen, int ret);
void ccpk_ctr_read(u64 *out);			/* CCPK_CTR_MAX sums */

/* ccp_nl.c */
int ccpk_nl_init(void);
void ccpk_nl_exit(void);
int ccpk_nl_send(const char *msg, int len);	/* raw, BH off or softirq */
int ccpk_dp_send(struct ccp_datapath *dp, char *msg, int len);
u32 ccpk_nl_family_id(void);			/* any context; 0: none */

/* ccp_proc.c */
int ccpk_proc_init(void);
void ccpk_proc_exit(void);

#endif /* CCP_KERNEL_H */
