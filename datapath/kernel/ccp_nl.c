// SPDX-License-Identifier: GPL-2.0
/*
 * Generic netlink IPC between the CCP datapath and its agent: the family
 * "ccp" (version 1, initial network namespace only; ccp_genl.h).
 *
 *  - agent -> datapath: CCP_CMD_AGENT_MSG, one CCP message (INSTALL,
 *    UPDATE_FIELDS, CHANGE_PROG) in CCP_ATTR_MSG.  The operation is
 *    GENL_ADMIN_PERM: the genl core refuses (-EPERM) a sender without
 *    CAP_NET_ADMIN in the initial user namespace (netlink_capable(): both
 *    the socket's opener and the sending task) before we see the message.
 *    GENL_UNS_ADMIN_PERM would be wrong: it asks for CAP_NET_ADMIN over the
 *    message's network namespace only, which the owner of any user
 *    namespace has over its own namespaces.  (The family is not netnsok,
 *    so the core only passes us messages sent in init_net anyway.)  The
 *    policy bounds the attribute's length (CCP_GENL_MSG_MIN..MAX) and, with
 *    strict validation, refuses unknown attributes and trailing bytes.
 *  - registration: CCP_CMD_AGENT_HELLO (GENL_ADMIN_PERM as well, no
 *    attribute) names the sending socket as the agent: the datapath sends
 *    to it from then on, and takes INSTALL, UPDATE_FIELDS and CHANGE_PROG
 *    only from it (rej_not_agent otherwise).  A later HELLO from another
 *    socket makes that one the agent (its programs replace the old one's);
 *    up to CCPK_MAX_LISTENERS registered sockets are kept, oldest first,
 *    so that when the newest is released the one before gets the flows
 *    back (a READY probe).  A registered socket leaves the list when it is
 *    released (the netlink notifier below) or when a send finds it gone.
 *  - datapath -> agent: CCP_CMD_DATAPATH_MSG, one CCP message (READY,
 *    CREATE, MEASURE) in CCP_ATTR_MSG, unicast from the kernel (port id 0)
 *    to the registered agent's port id (genlmsg_unicast()).  There is no
 *    multicast group: no membership, taken in advance or otherwise, hears
 *    anything.  A send answers -ECONNREFUSED when no socket has that port
 *    id any more (the agent is gone: tcp_ccp.c declares it lost) and
 *    -EAGAIN when the agent's receive buffer is full (busy: the CREATE is
 *    sent again later, backing off).  NETLINK_GENERIC, unlike
 *    NETLINK_USERSOCK, is not registered with NL_CFG_F_NONROOT_SEND: only
 *    CAP_NET_ADMIN may send to another socket's port id, so an
 *    unprivileged user can neither read what the datapath sends nor
 *    forge it to the agent, which still drops every message whose source
 *    port id is not 0.
 *
 * Version 1 multicast to a group "datapath".  Anyone could join that
 * group id while no family owned it (genl_bind() checks only registered
 * families' groups), before the first load or across an rmmod, and a
 * member that kept its buffer full made the registration's check for
 * early members fail and every send return -ENOBUFS (issue 50).  The only
 * window left: when the agent's socket is released, netlink_release()
 * frees its port id and then runs the notifier; a process that binds that
 * port id in between gets what is sent in those instructions.
 *
 * Permission and policy failures are answered by the genl core to the
 * sender (errno and extack text) and never reach this file; everything
 * that does reach it is counted in /proc/net/ccp (rx_ok or a rej_*
 * reason), rejected messages are logged rate-limited and answered with an
 * errno and an extack text.  On top of the core's checks every message is
 * checked here (ccpk_validate(), socket id in use, program installed, and
 * for flow updates the sender's port id: the agent's) before libccp sees
 * it.
 *
 * A netlink notifier tells the datapath when a registered socket is
 * released: if it was the agent, the agent is gone and its programs with
 * it (tcp_ccp.c).
 *
 * This is not the protocol of upstream portus's netlink backend
 * (NETLINK_USERSOCK, group 22): only ccp-agent's backend speaks it.
 */
#define pr_fmt(fmt) "ccp: " fmt

#include <linux/capability.h>
#include <linux/netlink.h>
#include <linux/ratelimit.h>
#include <linux/version.h>
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0)
#include <linux/unaligned.h>
#else
#include <asm/unaligned.h>
#endif
#include <net/genetlink.h>
#include <net/net_namespace.h>
#include <net/netlink.h>
#include <net/sock.h>

#include "ccp_genl.h"
#include "ccp_kernel.h"
#include "ccp_libccp.h"	/* libccp internals: last */

static const struct nla_policy ccpk_genl_policy[CCP_ATTR_MAX + 1] = {
	[CCP_ATTR_MSG] = NLA_POLICY_RANGE(NLA_BINARY, CCP_GENL_MSG_MIN,
					  CCP_GENL_MSG_MAX),
};

static int ccpk_genl_agent_msg(struct sk_buff *skb, struct genl_info *info);
static int ccpk_genl_hello(struct sk_buff *skb, struct genl_info *info);

static const struct genl_small_ops ccpk_genl_ops[] = {
	{
		.cmd	= CCP_CMD_AGENT_MSG,
		.flags	= GENL_ADMIN_PERM,
		.doit	= ccpk_genl_agent_msg,
	},
	{
		.cmd	= CCP_CMD_AGENT_HELLO,
		.flags	= GENL_ADMIN_PERM,
		.doit	= ccpk_genl_hello,
	},
};

static struct genl_family ccpk_genl_family = {
	.name		= CCP_GENL_NAME,
	.version	= CCP_GENL_VERSION,
	.maxattr	= CCP_ATTR_MAX,
	.policy		= ccpk_genl_policy,
	.netnsok	= false,	/* init_net only */
	.parallel_ops	= true,		/* ccpk->lock serializes; no genl_mutex */
	.module		= THIS_MODULE,
	.small_ops	= ccpk_genl_ops,
	.n_small_ops	= ARRAY_SIZE(ccpk_genl_ops),
};

/*
 * Unicast @len bytes as a message of @cmd to the socket @portid of
 * init_net: 0, -ECONNREFUSED (no such socket), -EAGAIN (its receive buffer
 * is full or it is marked congested since an overrun) or another error.
 * genlmsg_unicast() is netlink_unicast() with MSG_DONTWAIT: it never
 * waits, but it picks its allocation flags with gfp_any() when it trims
 * the skb, which is GFP_KERNEL in process context with bottom halves on.
 * Every caller has them off already (the flow locks, ccpk->lock and the
 * ACK path are all _bh or softirq); the local_bh_disable() makes it true
 * here whatever a later caller does.
 */
static int ccpk_genl_unicast(u32 portid, u8 cmd, const char *msg, int len)
{
	struct sk_buff *skb;
	void *hdr;
	int ret;

	skb = genlmsg_new(msg ? nla_total_size(len) : 0, GFP_ATOMIC);
	if (!skb)
		return -ENOMEM;
	hdr = genlmsg_put(skb, 0, 0, &ccpk_genl_family, 0, cmd);
	if (!hdr || (msg && nla_put(skb, CCP_ATTR_MSG, len, msg))) {
		nlmsg_free(skb);
		return -EMSGSIZE;
	}
	genlmsg_end(skb, hdr);
	local_bh_disable();
	ret = genlmsg_unicast(&init_net, skb, portid);	/* consumes skb */
	local_bh_enable();
	return ret;
}

/* The family's id (for /proc/net/ccp: tools and tests). */
u32 ccpk_nl_family_id(void)
{
	return READ_ONCE(ccpk->nl_up) ? ccpk_genl_family.id : 0;
}

/*
 * One CCP message to the registered agent: softirq or bottom halves off
 * (GFP_ATOMIC, no sleep); under a flow's lock or ccpk->lock.  Once nl_up
 * is false (ccpk_nl_exit()) every send fails with -ENOTCONN; with no agent
 * registered, -ECONNREFUSED, as for one that is gone.  A send that finds
 * the socket gone leaves its port id for event_work, which forgets it.
 */
int ccpk_nl_send(const char *msg, int len)
{
	u32 to = READ_ONCE(ccpk->listener);
	int ret;

	if (!READ_ONCE(ccpk->nl_up))
		return -ENOTCONN;
	if (!to)
		return -ECONNREFUSED;
	ret = ccpk_genl_unicast(to, CCP_CMD_DATAPATH_MSG, msg, len);
	if (ret == -ECONNREFUSED)
		WRITE_ONCE(ccpk->refused_port, to);
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
	if (!READ_ONCE(ccpk->ready))
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

/*
 * The text of an error answer (extack).  @why must be a string constant
 * (the core keeps the pointer): NL_SET_ERR_MSG() wants a literal, ours
 * come from tables of literals.
 */
static void ccpk_ext_msg(struct netlink_ext_ack *extack, const char *why)
{
	if (extack)
		extack->_msg = why;
}

/* Count (and log, rate-limited) a rejected message; any context, no lock. */
static void ccpk_reject(enum ccpk_counter c, const char *why,
			const struct ccpk_msg_info *mi, u32 portid)
{
	ccpk_inc_ctr(c);
	ccpk_inc(rej_total);
	if (__ratelimit(&ccpk_rej_rs))
		pr_warn("rejected agent message (%s): type %u len %u sid %u from port %u\n",
			why, mi ? mi->type : 0, mi ? mi->len : 0, mi ? mi->sid : 0,
			portid);
}

static void ccpk_reject_unlocked(enum ccpk_counter c, const char *why,
				 const struct ccpk_msg_info *mi, u32 portid)
{
	ccpk_reject(c, why, mi, portid);
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

/* One CCP message from the socket @portid: 0 or a negative errno. */
static int ccpk_handle(u8 *buf, int len, u32 portid,
		       struct netlink_ext_ack *extack)
{
	struct ccp_connection *conn = NULL;
	struct ccpk_flow *fl = NULL;
	struct ccpk_msg_info mi;
	enum ccpk_verdict v;
	bool fl_locked = false;
	int ret;

	v = ccpk_validate(buf, len, ccpk->max_flows, &mi);
	if (v != CCPK_OK) {
		ccpk_reject_unlocked(ccpk_verdict_ctr[v], ccpk_verdict_name(v), &mi,
				     portid);
		ccpk_ext_msg(extack, ccpk_verdict_name(v));
		return -EINVAL;
	}

	if (mi.type == INSTALL_EXPR) {
		/*
		 * only the registered agent installs (and so steers: updates
		 * are taken from the socket that installed, below)
		 */
		if (READ_ONCE(ccpk->listener) != portid) {
			ccpk_reject(CCPK_CTR_rej_not_agent,
				    "INSTALL not from the registered agent", &mi, portid);
			ccpk_ext_msg(extack, "not from the registered agent (send CCP_CMD_AGENT_HELLO first)");
			return -EBUSY;
		}
		if (ccpk_install_lock(portid, mi.program_uid)) {
			ccpk_reject(CCPK_CTR_rej_displaced,
				    "another agent installed its programs meanwhile", &mi, portid);
			ccpk_ext_msg(extack, "another agent installed its programs meanwhile");
			return -EBUSY;
		}
	} else {
		spin_lock_bh(&ccpk->lock);
	}
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
			ccpk_ext_msg(extack, "no such flow (ended?)");
			ret = -ENOENT;
			goto out;
		}
		if (mi.type == CHANGE_PROG && !ccpk_prog_index(mi.program_uid)) {
			ccpk_reject(CCPK_CTR_rej_unknown_prog, "unknown program", &mi, portid);
			ccpk_ext_msg(extack, "unknown program");
			ret = -ENOENT;
			goto out;
		}
		/* only the socket that installed the programs steers flows */
		if (!ccpk->agent_known || portid != ccpk->agent_portid) {
			ccpk_reject(CCPK_CTR_rej_not_agent, "not from the agent's socket",
				    &mi, portid);
			ccpk_ext_msg(extack, "not from the agent's socket");
			ret = -EBUSY;
			goto out;
		}
		spin_lock(&fl->lock);	/* the flow's libccp state */
		fl_locked = true;
		if (!ccpk_flow_current(fl)) {
			/*
			 * an answer to an earlier agent generation's CREATE or
			 * report: normal after a re-announcement, dropped
			 * without an error answer
			 */
			ccpk_inc(rx_stale);
			ret = 0;
			goto out;
		}
	}

	ret = ccp_read_msg(&ccpk->dp, (char *)buf, len);
	if (ret < 0) {
		ccpk_reject(CCPK_CTR_rej_libccp, "libccp refused", &mi, portid);
		ccpk_ext_msg(extack, "libccp refused the message (program table full?)");
		ret = -EINVAL;
		goto out;
	}
	ret = 0;

	ccpk_inc(rx_ok);
	ccpk->last_rx_ns = ktime_get_ns();
	/* the agent is answering; written only on a change (read per ACK) */
	if (READ_ONCE(ccpk->pending_since))
		WRITE_ONCE(ccpk->pending_since, 0);

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
	return ret;
}

/*
 * What every command checks first: not unloading, the sender's
 * CAP_NET_ADMIN (the core's GENL_ADMIN_PERM check again: it must never
 * fire), the family's version.  0 or the errno to answer.
 */
static int ccpk_genl_admit(struct sk_buff *skb, struct genl_info *info)
{
	u32 portid = info->snd_portid;

	if (READ_ONCE(ccpk->shutting_down))
		return -ESHUTDOWN;
	if (!netlink_capable(skb, CAP_NET_ADMIN)) {
		ccpk_reject_unlocked(CCPK_CTR_rej_perm, "sender lacks CAP_NET_ADMIN",
				     NULL, portid);
		return -EPERM;
	}
	if (info->genlhdr->version != CCP_GENL_VERSION) {
		ccpk_reject_unlocked(CCPK_CTR_rej_nlmsg, "genl version is not 2",
				     NULL, portid);
		GENL_SET_ERR_MSG(info, "ccp family version 2 expected (an agent built for another ccp-kernel?)");
		return -EPROTO;
	}
	return 0;
}

/*
 * CCP_CMD_AGENT_MSG: runs in the sender's process context, inside
 * genl_rcv(), which holds the genl core's cb_lock for reading (see
 * ccpk_nl_exit()).  The core has checked GENL_ADMIN_PERM and the policy.
 */
static int ccpk_genl_agent_msg(struct sk_buff *skb, struct genl_info *info)
{
	const struct nlattr *a = info->attrs[CCP_ATTR_MSG];
	u32 portid = info->snd_portid;
	int ret = ccpk_genl_admit(skb, info);

	if (ret)
		return ret;
	if (!a) {
		ccpk_reject_unlocked(CCPK_CTR_rej_nlmsg, "no CCP_ATTR_MSG", NULL,
				     portid);
		GENL_SET_ERR_MSG(info, "no CCP_ATTR_MSG attribute");
		return -EINVAL;
	}
	return ccpk_handle(nla_data(a), nla_len(a), portid, info->extack);
}

/*
 * CCP_CMD_AGENT_HELLO: the sending socket registers as the agent (the
 * core has checked GENL_ADMIN_PERM; the family's policy refuses
 * attributes other than CCP_ATTR_MSG, and a HELLO needs none).  The
 * sender's port id is the socket's own (genl_rcv() passes the sending
 * socket's, not one the message claims).
 */
static int ccpk_genl_hello(struct sk_buff *skb, struct genl_info *info)
{
	u32 portid = info->snd_portid;
	int ret = ccpk_genl_admit(skb, info);

	if (ret)
		return ret;
	if (!portid) {	/* a kernel socket: never an agent */
		GENL_SET_ERR_MSG(info, "port id 0 cannot register");
		return -EINVAL;
	}
	spin_lock_bh(&ccpk->lock);
	ccpk_agent_hello(portid);
	spin_unlock_bh(&ccpk->lock);
	return 0;
}

/*
 * Netlink sockets being released: the agent's means the agent is gone, and
 * its programs with it (process context, from netlink_release()).
 */
static int ccpk_nl_notify(struct notifier_block *nb, unsigned long event,
			  void *ptr)
{
	const struct netlink_notify *n = ptr;

	if (event != NETLINK_URELEASE || n->protocol != NETLINK_GENERIC ||
	    !net_eq(n->net, &init_net) || !n->portid)
		return NOTIFY_DONE;
	/*
	 * Every closing genl socket of init_net passes here: only a
	 * registered one (or the agent's) takes the lock (checked again
	 * under it).
	 */
	if (!ccpk_is_listener(n->portid) &&
	    (!READ_ONCE(ccpk->agent_known) ||
	     READ_ONCE(ccpk->agent_portid) != n->portid))
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
	int ret;

	BUILD_BUG_ON(CCP_GENL_MSG_MAX != CCPK_HDR_LEN + CCPK_INSTALL_HDR_LEN +
		     CCPK_MAX_PROG_EXPR * CCPK_EXPR_LEN +
		     CCPK_MAX_PROG_INSTR * CCPK_INSTR_LEN);
	BUILD_BUG_ON(CCP_GENL_MSG_MIN != CCPK_HDR_LEN);
	BUILD_BUG_ON(CCP_GENL_MSG_MAX > S16_MAX);	/* nla_policy.max is s16 */

	/* before the family: no agent can be known without the notifier */
	ret = netlink_register_notifier(&ccpk_nl_notifier);
	if (ret)
		return ret;
	ret = genl_register_family(&ccpk_genl_family);
	if (ret) {
		pr_err("cannot register the generic netlink family \"%s\": %d\n",
		       CCP_GENL_NAME, ret);
		netlink_unregister_notifier(&ccpk_nl_notifier);
		return ret;
	}
	spin_lock_bh(&ccpk->lock);
	WRITE_ONCE(ccpk->nl_up, true);
	spin_unlock_bh(&ccpk->lock);
	return 0;
}

/*
 * Unloading (and a failed load after ccpk_nl_init()), once the work items
 * are stopped (tcp_ccp.c): after this returns no agent message is being
 * handled or will be, no release notification runs, and nothing is sent.
 *
 *  - nl_up = false under the lock: every later send (from a handler or
 *    the notifier) fails with -ENOTCONN instead of using the family;
 *    shutting_down makes handlers that still start return at once.
 *  - genl_unregister_family() closes the rmmod race of the USERSOCK
 *    design (where a sender could enter the input callback after exit had
 *    found it idle): genl_rcv() runs every doit callback, from the lookup
 *    of the family by id to the return, with the core's cb_lock held for
 *    reading, and genl_unregister_family() removes the family from the id
 *    table with cb_lock held for writing (genl_lock_all()), so it waits
 *    for every handler already running and no later message can find the
 *    family (Linux 6.1 and 6.12 net/netlink/genetlink.c).
 *  - netlink_unregister_notifier() waits for running notifier calls (the
 *    chain's rwsem).
 */
void ccpk_nl_exit(void)
{
	spin_lock_bh(&ccpk->lock);
	WRITE_ONCE(ccpk->shutting_down, true);
	WRITE_ONCE(ccpk->nl_up, false);
	WRITE_ONCE(ccpk->ready, false);
	spin_unlock_bh(&ccpk->lock);
	genl_unregister_family(&ccpk_genl_family);
	netlink_unregister_notifier(&ccpk_nl_notifier);
}
