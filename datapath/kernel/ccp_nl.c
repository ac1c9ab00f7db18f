// SPDX-License-Identifier: GPL-2.0
/*
 * Netlink IPC between the CCP datapath and the agent, compatible with
 * portus 0.9's netlink backend (`ccp-agent --ipc netlink`):
 *
 *  - protocol NETLINK_USERSOCK, init_net;
 *  - datapath -> agent: one CCP message per netlink message, broadcast to
 *    multicast group 22 (nlmsghdr type NLMSG_DONE, then the CCP message;
 *    portus strips the 16-byte netlink header);
 *  - agent -> datapath: the agent sends to port id 0 (the kernel) a 16-byte
 *    netlink header (length, rest zero) followed by one CCP message.
 *
 * Every incoming message is checked (sender capability, netlink framing,
 * ccpk_validate(), socket id in use, program installed, and for flow
 * updates the sender's port id: the agent's) before libccp sees it.
 * NETLINK_USERSOCK lets unprivileged processes send to the kernel and join
 * groups, so the CAP_NET_ADMIN check here is what keeps unprivileged users
 * from steering flows.  It protects this direction only: anyone may also
 * send to group 22 or to the agent's port id, so the agent must drop every
 * datagram whose source is not the kernel (port id 0), as ccp-agent does
 * (portus-agent/runtime/src/netlink.rs).
 *
 * A netlink notifier tells the datapath when the agent's socket is
 * released: the agent is gone and its programs with it (tcp_ccp.c).
 */
#define pr_fmt(fmt) "ccp: " fmt

#include <linux/atomic.h>
#include <linux/capability.h>
#include <linux/delay.h>
#include <linux/netlink.h>
#include <linux/ratelimit.h>
#include <linux/version.h>
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0)
#include <linux/unaligned.h>
#else
#include <asm/unaligned.h>
#endif
#include <net/net_namespace.h>
#include <net/netlink.h>
#include <net/sock.h>

#include "ccp_kernel.h"
#include "ccp_libccp.h"	/* libccp internals: last */

static atomic_t ccpk_nl_busy = ATOMIC_INIT(0);

int ccpk_nl_send(const char *msg, int len)
{
	struct sock *nl = ccpk->nl_sk;
	struct nlmsghdr *nlh;
	struct sk_buff *skb;
	int ret;

	if (!nl)
		return -ENOTCONN;
	skb = nlmsg_new(len, GFP_ATOMIC);
	if (!skb)
		return -ENOMEM;
	nlh = nlmsg_put(skb, 0, 0, NLMSG_DONE, len, 0);
	if (!nlh) {
		kfree_skb(skb);
		return -EMSGSIZE;
	}
	memcpy(nlmsg_data(nlh), msg, len);
	ret = nlmsg_multicast(nl, skb, 0, CCPK_NL_GROUP, GFP_ATOMIC);
	/*
	 * -ESRCH means nobody took it: no socket on the group, or (unless it
	 * set NETLINK_BROADCAST_ERROR) every one had a full buffer.  Only the
	 * first means the agent is gone.
	 */
	if (ret == -ESRCH && netlink_has_listeners(nl, CCPK_NL_GROUP))
		ret = -ENOBUFS;
	return ret;
}

/*
 * libccp's send_msg: every datapath -> agent message passes here (under
 * the flow's lock, or ccpk->lock; bookkeeping in ccpk_tx_done()).
 */
int ccpk_dp_send(struct ccp_datapath *dp, char *msg, int len)
{
	u32 sid, nfields = 0, gen;
	u16 type;
	int ret;

	/* ccp_init()'s READY: dropped, the datapath sends one when IPC is up */
	if (!ccpk->ready)
		return 0;
	if (len < CCPK_HDR_LEN)
		return -EINVAL;
	/* while the agent is away only the probe talks (READY, then CREATEs) */
	if (!READ_ONCE(ccpk->agent_up))
		return -ENOTCONN;
	type = get_unaligned_le16(msg);
	sid = get_unaligned_le32(msg + 4);
	if (type == MEASURE && len >= CCPK_HDR_LEN + 8)
		nfields = get_unaligned_le32(msg + CCPK_HDR_LEN + 4);

	gen = READ_ONCE(ccpk->gen);
	ret = ccpk_nl_send(msg, len);
	ccpk_tx_done(type, sid, nfields, gen, ret);
	return ret;
}

/* ---- receive --------------------------------------------------------------- */

static const enum ccpk_counter ccpk_verdict_ctr[CCPK_VERDICT_MAX] = {
	[CCPK_OK]		= CCPK_CTR_rx_ok,
	[CCPK_REJ_SHORT]	= CCPK_CTR_rej_short,
	[CCPK_REJ_TYPE]		= CCPK_CTR_rej_bad_type,
	[CCPK_REJ_LEN]		= CCPK_CTR_rej_bad_len,
	[CCPK_REJ_PROG_SIZE]	= CCPK_CTR_rej_prog_too_big,
	[CCPK_REJ_PROG]		= CCPK_CTR_rej_bad_prog,
	[CCPK_REJ_FIELDS]	= CCPK_CTR_rej_bad_fields,
	[CCPK_REJ_SID]		= CCPK_CTR_rej_bad_sid,
	[CCPK_REJ_PROG_WORK]	= CCPK_CTR_rej_prog_work,
};

static DEFINE_RATELIMIT_STATE(ccpk_rej_rs, 5 * HZ, 5);

/* Count (and log, rate-limited) a rejected message; any context, no lock. */
static void ccpk_reject(enum ccpk_counter c, const char *why,
			const struct ccpk_msg_info *mi)
{
	ccpk_inc_ctr(c);
	ccpk_inc(rej_total);
	if (__ratelimit(&ccpk_rej_rs))
		pr_warn("rejected agent message (%s): type %u len %u sid %u\n",
			why, mi ? mi->type : 0, mi ? mi->len : 0, mi ? mi->sid : 0);
}

static void ccpk_reject_unlocked(enum ccpk_counter c, const char *why,
				 const struct ccpk_msg_info *mi)
{
	ccpk_reject(c, why, mi);
}

/* Index (1-based) of the installed program with this uid, or 0. */
static u32 ccpk_prog_index(u32 uid)
{
	struct DatapathProgram *progs = ccpk->dp.programs;
	u32 i;

	for (i = 0; i < ccpk->dp.max_programs; i++)
		if (progs[i].index && progs[i].program_uid == uid)
			return progs[i].index;
	return 0;
}

/* Does the flow have (or has staged) a program that is still installed? */
static bool ccpk_has_program(struct ccp_connection *conn)
{
	struct DatapathProgram *progs = ccpk->dp.programs;
	struct ccp_priv_state *st = conn->state;
	u32 idx;

	if (!st)
		return false;
	if (st->staged_program_index >= 0)
		return true;
	idx = st->program_index;
	return idx && idx <= ccpk->dp.max_programs && progs[idx - 1].index == idx;
}

static void ccpk_handle(u8 *buf, int len, u32 portid)
{
	struct ccp_connection *conn = NULL;
	struct ccpk_flow *fl = NULL;
	struct ccpk_msg_info mi;
	enum ccpk_verdict v;
	bool fl_locked = false;
	int ret;

	v = ccpk_validate(buf, len, ccpk->max_flows, &mi);
	if (v != CCPK_OK) {
		ccpk_reject_unlocked(ccpk_verdict_ctr[v], ccpk_verdict_name(v), &mi);
		return;
	}

	if (mi.type == INSTALL_EXPR)	/* a new agent's programs replace the old one's */
		ccpk_install_lock(portid, mi.program_uid);
	else
		spin_lock_bh(&ccpk->lock);
	if (mi.type != INSTALL_EXPR) {
		conn = ccp_connection_lookup(&ccpk->dp, mi.sid);
		fl = &ccpk->flows[mi.sid - 1];
		if (!conn || !fl->sk || !conn->state) {
			/* usually the agent answering a flow that just ended */
			ccpk_inc(rej_stale_sid);
			ccpk_inc(rej_total);
			if (ccpk_debug && __ratelimit(&ccpk_rej_rs))
				pr_info("dropped agent message for ended flow: type %u sid %u\n",
					mi.type, mi.sid);
			goto out;
		}
		if (mi.type == CHANGE_PROG && !ccpk_prog_index(mi.program_uid)) {
			ccpk_reject(CCPK_CTR_rej_unknown_prog, "unknown program", &mi);
			goto out;
		}
		/* only the socket that installed the programs steers flows */
		if (!ccpk->agent_known || portid != ccpk->agent_portid) {
			ccpk_reject(CCPK_CTR_rej_not_agent, "not from the agent's socket", &mi);
			goto out;
		}
		spin_lock(&fl->lock);	/* the flow's libccp state */
		fl_locked = true;
		if (!ccpk_flow_current(fl)) {
			/* an answer to an earlier agent generation's CREATE or report */
			ccpk_inc(rx_stale);
			goto out;
		}
	}

	ret = ccp_read_msg(&ccpk->dp, (char *)buf, len);
	if (ret < 0) {
		ccpk_reject(CCPK_CTR_rej_libccp, "libccp refused", &mi);
		goto out;
	}

	ccpk_inc(rx_ok);
	ccpk->last_rx_ns = ktime_get_ns();
	WRITE_ONCE(ccpk->pending_since, 0);	/* the agent is answering */

	switch (mi.type) {
	case INSTALL_EXPR:
		ccpk_inc(rx_install);
		break;
	case UPDATE_FIELDS:
	case CHANGE_PROG:
		if (mi.type == CHANGE_PROG)
			ccpk_inc(rx_changeprog);
		else
			ccpk_inc(rx_update);
		if (fl->mode == CCPK_PENDING &&
		    (mi.type == CHANGE_PROG || ccpk_has_program(conn)))
			ccpk_flow_attach(fl);
		if (fl->mode == CCPK_ATTACHED) {
			if (fl->report_ns && !fl->reply_ns)
				fl->reply_ns = ccpk->last_rx_ns;
			fl->update_pending = 1;
		}
		break;
	}
out:
	if (fl_locked)
		spin_unlock(&fl->lock);
	spin_unlock_bh(&ccpk->lock);
}

/* Netlink input: runs in the sender's process context. */
static void ccpk_nl_rcv(struct sk_buff *skb)
{
	struct nlmsghdr *nlh;
	int rem;

	atomic_inc(&ccpk_nl_busy);
	if (READ_ONCE(ccpk->shutting_down))
		goto out;
	if (!netlink_net_capable(skb, CAP_NET_ADMIN)) {
		ccpk_reject_unlocked(CCPK_CTR_rej_perm, "sender lacks CAP_NET_ADMIN", NULL);
		goto out;
	}
	nlh = nlmsg_hdr(skb);
	rem = skb->len;
	if (!nlmsg_ok(nlh, rem)) {
		struct ccpk_msg_info mi = { .len = min_t(u32, skb->len, U16_MAX) };

		ccpk_reject_unlocked(CCPK_CTR_rej_nlmsg, "netlink framing", &mi);
		goto out;
	}
	while (nlmsg_ok(nlh, rem)) {
		ccpk_handle(nlmsg_data(nlh), nlmsg_len(nlh), NETLINK_CB(skb).portid);
		nlh = nlmsg_next(nlh, &rem);
	}
	if (rem >= NLMSG_HDRLEN)	/* trailing bytes that are no message */
		ccpk_reject_unlocked(CCPK_CTR_rej_nlmsg, "netlink framing", NULL);
out:
	atomic_dec(&ccpk_nl_busy);
}

/*
 * Netlink sockets being released: the agent's means the agent is gone, and
 * its programs with it (process context, from netlink_release()).
 */
static int ccpk_nl_notify(struct notifier_block *nb, unsigned long event,
			  void *ptr)
{
	const struct netlink_notify *n = ptr;

	if (event != NETLINK_URELEASE || n->protocol != NETLINK_USERSOCK ||
	    !net_eq(n->net, &init_net) || !n->portid)
		return NOTIFY_DONE;
	spin_lock_bh(&ccpk->lock);
	if (!ccpk->shutting_down)
		ccpk_agent_closed(n->portid);
	spin_unlock_bh(&ccpk->lock);
	return NOTIFY_DONE;
}

static struct notifier_block ccpk_nl_notifier = {
	.notifier_call = ccpk_nl_notify,
};

int ccpk_nl_init(void)
{
	struct netlink_kernel_cfg cfg = {
		.input = ccpk_nl_rcv,
	};
	struct sock *nl;

	nl = netlink_kernel_create(&init_net, NETLINK_USERSOCK, &cfg);
	if (!nl) {
		pr_err("cannot create the NETLINK_USERSOCK kernel socket (another CCP datapath loaded?)\n");
		return -EBUSY;
	}
	if (netlink_register_notifier(&ccpk_nl_notifier)) {
		netlink_kernel_release(nl);
		return -ENOMEM;
	}
	spin_lock_bh(&ccpk->lock);
	ccpk->nl_sk = nl;
	spin_unlock_bh(&ccpk->lock);
	return 0;
}

void ccpk_nl_exit(void)
{
	struct sock *nl;

	/* waits for notifier calls in progress */
	netlink_unregister_notifier(&ccpk_nl_notifier);
	spin_lock_bh(&ccpk->lock);
	nl = ccpk->nl_sk;
	ccpk->nl_sk = NULL;
	ccpk->ready = false;
	spin_unlock_bh(&ccpk->lock);
	if (nl)
		netlink_kernel_release(nl);
	synchronize_net();
	/* wait for senders already inside ccpk_nl_rcv() */
	while (atomic_read(&ccpk_nl_busy))
		msleep(1);
}
