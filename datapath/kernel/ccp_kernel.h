/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internal interfaces of the CCP kernel datapath (ccp-kernel.ko).
 * See tcp_ccp.c for the design.
 */
#ifndef CCP_KERNEL_H
#define CCP_KERNEL_H

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

/* multicast group portus's netlink backend joins (NETLINK_USERSOCK) */
#define CCPK_NL_GROUP		22
#define CCPK_LAT_RING		4096	/* latency samples kept for /proc */

/* per-flow control mode (slot->mode) */
enum ccpk_mode {
	CCPK_FREE = 0,		/* slot unused */
	CCPK_PENDING,		/* CREATE sent, waiting for the agent: Reno */
	CCPK_ATTACHED,		/* agent in control: libccp drives cwnd/rate */
	CCPK_FALLBACK,		/* agent gone: in-kernel Reno, re-CREATE later */
};

/* counters, exported in /proc/net/ccp */
#define CCPK_COUNTERS(X)						\
	X(flows_started)	/* sockets that selected a ccp* algorithm */ \
	X(flows_no_slot)	/* no connection slot / no memory: Reno only */ \
	X(flows_closed)							\
	X(attaches)		/* PENDING -> ATTACHED, first time */	\
	X(reattaches)		/* PENDING -> ATTACHED, had been before */ \
	X(fallbacks)		/* ATTACHED/PENDING flow -> FALLBACK */	\
	X(agent_lost)		/* agent declared gone */		\
	X(agent_lost_nolistener) /* ... because a send found no listener */ \
	X(agent_lost_timeout)	/* ... because it stopped answering */	\
	X(agent_lost_closed)	/* ... because its netlink socket closed */ \
	X(agent_found)		/* a READY probe reached a listener */	\
	X(agent_closed)		/* the agent's netlink socket was released */ \
	X(agent_changes)	/* programs installed from another socket */ \
	X(agent_restarts)	/* the agent installed program uid 1 again */ \
	X(program_resets)	/* libccp's program table emptied */	\
	X(probes_sent)		/* READY probes attempted */		\
	X(creates_sent)							\
	X(recreates)		/* CREATE re-sent for an existing flow */ \
	X(reports_sent)							\
	X(closes_sent)							\
	X(tx_errors)		/* sends failed (other than no listener) */ \
	X(tx_nobufs)		/* listener's receive buffer full */	\
	X(rx_ok)		/* agent messages accepted */		\
	X(rx_install)							\
	X(rx_update)							\
	X(rx_changeprog)						\
	X(rej_total)		/* all rejected agent messages */	\
	X(rej_perm)		/* sender lacks CAP_NET_ADMIN */	\
	X(rej_nlmsg)		/* broken netlink framing */		\
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
	X(rej_not_agent)	/* update/change from a socket that is not the agent */ \
	X(rej_libccp)		/* libccp refused it (e.g. program table full) */ \
	X(invoke_errors)	/* ccp_invoke() < 0 (program fault) */	\
	X(cwnd_updates)		/* agent cwnd/rate updates applied */	\
	X(libccp_warnings)

#define CCPK_CTR_ENUM(n) CCPK_CTR_##n,
enum ccpk_counter { CCPK_COUNTERS(CCPK_CTR_ENUM) CCPK_CTR_MAX };
#undef CCPK_CTR_ENUM

struct ccpk_flow {
	struct sock *sk;	/* owner; NULL when free */
	u8 mode;		/* enum ccpk_mode */
	u8 ever_attached;	/* was under agent control before */
	u8 update_pending;	/* agent update staged, not yet applied */
	u64 report_ns;		/* first report not yet answered */
	u64 reply_ns;		/* when the answer to it arrived */
};

struct ccpk_datapath {
	spinlock_t lock;	/* serializes libccp: recv vs. invoke */
	struct ccp_datapath dp;	/* libccp state */
	struct ccp_connection *conns;
	struct ccpk_flow *flows;
	u32 max_flows;
	u32 nflows;
	u32 hint;		/* next slot to try */
	u32 id;			/* datapath id in READY */
	bool ready;		/* netlink socket up */
	bool agent_up;		/* a listener exists and answers */
	bool shutting_down;
	bool pending;		/* a CREATE or report waits for the agent */
	/*
	 * The agent whose programs are in libccp's table: the netlink port id
	 * of the socket that installed them.  agent_known is false exactly
	 * when the table is empty of any agent's programs.
	 */
	bool agent_known;
	u32 agent_portid;
	unsigned long pending_since;	/* jiffies: the oldest such send */
	u64 last_rx_ns;
	struct sock *nl_sk;
	struct delayed_work probe_work;
	u64 ctr[CCPK_CTR_MAX];
	/* latency ring: report sent -> reply received -> cwnd applied */
	u32 lat_reply_ns[CCPK_LAT_RING];
	u32 lat_apply_ns[CCPK_LAT_RING];
	u64 lat_count;
};

extern struct ccpk_datapath *ccpk;
extern unsigned int ccpk_agent_timeout_ms;
extern unsigned int ccpk_probe_interval_ms;
extern bool ccpk_debug;

#define ccpk_inc(c)	(ccpk->ctr[CCPK_CTR_##c]++)

/* why the agent is declared gone */
enum ccpk_lost {
	CCPK_LOST_NOLISTENER,	/* a send found nobody on the group */
	CCPK_LOST_TIMEOUT,	/* nothing came back for agent_timeout_ms */
	CCPK_LOST_CLOSED,	/* its netlink socket was released */
};

/* tcp_ccp.c */
void ccpk_agent_lost(enum ccpk_lost why);	/* lock held */
void ccpk_agent_install(u32 portid, u32 program_uid);	/* lock held */
void ccpk_agent_closed(u32 portid);		/* lock held */
u32 ccpk_programs_installed(void);		/* lock held */
void ccpk_flow_attach(struct ccpk_flow *fl);	/* lock held */
struct ccp_connection *ccpk_conn(u32 sid);

/* ccp_nl.c */
int ccpk_nl_init(void);
void ccpk_nl_exit(void);
int ccpk_nl_send(const char *msg, int len);	/* raw, any context */
int ccpk_dp_send(struct ccp_datapath *dp, char *msg, int len);

/* ccp_proc.c */
int ccpk_proc_init(void);
void ccpk_proc_exit(void);

#endif /* CCP_KERNEL_H */
