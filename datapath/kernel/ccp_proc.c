// SPDX-License-Identifier: GPL-2.0
/*
 * /proc/net/ccp          state and counters, one "name value" per line
 * /proc/net/ccp_flows    one line per flow with a libccp slot
 * /proc/net/ccp_latency  recent report -> reply -> cwnd-applied latencies
 *
 * All three need CAP_NET_ADMIN (in the initial user namespace), checked at
 * open: they describe every namespace's traffic (counts across namespaces,
 * the agent's netlink port id, report and answer timings, addresses).  The
 * mode stays 0444 so that a service holding only CAP_NET_ADMIN (not root:
 * ops/systemd) can open them.
 */
#include <linux/capability.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <net/net_namespace.h>
#include <net/tcp.h>
#include <net/ipv6.h>

#include "ccp_kernel.h"

#define CCPK_CTR_NAME(n) #n,
static const char *const ccpk_ctr_names[CCPK_CTR_MAX] = {
	CCPK_COUNTERS(CCPK_CTR_NAME)
};
#undef CCPK_CTR_NAME

static const char *const ccpk_mode_names[] = {
	[CCPK_FREE] = "free",
	[CCPK_PENDING] = "pending",
	[CCPK_ATTACHED] = "ccp",
	[CCPK_FALLBACK] = "fallback",
};

/*
 * No lock (a reader must not stall the datapath): counters are per-CPU
 * sums, the modes a lockless snapshot of the slots.
 */
static int ccpk_stats_show(struct seq_file *m, void *v)
{
	u64 *ctr;
	u64 now = ktime_get_ns(), last_rx;
	u32 nflows = 0, modes[4] = {}, nprogs, other = 0, family, listener;
	bool up, known;
	u32 portid;
	int i;

	ctr = kmalloc_array(CCPK_CTR_MAX, sizeof(*ctr), GFP_KERNEL);
	if (!ctr)
		return -ENOMEM;
	ccpk_ctr_read(ctr);
	up = READ_ONCE(ccpk->agent_up);
	last_rx = READ_ONCE(ccpk->last_rx_ns);
	known = READ_ONCE(ccpk->agent_known);
	portid = READ_ONCE(ccpk->agent_portid);
	nprogs = ccpk_programs_installed();
	family = ccpk_nl_family_id();
	listener = READ_ONCE(ccpk->listener);
	for (i = 0; i < ccpk->max_flows; i++) {
		const struct ccpk_flow *fl = &ccpk->flows[i];
		u8 mode;

		if (!READ_ONCE(fl->sk))
			continue;
		nflows++;
		mode = ccpk_flow_mode(fl);
		if (mode < 4)
			modes[mode]++;
		if ((i & 4095) == 4095)
			cond_resched();
	}
	other = READ_ONCE(ccpk->nflows_other_netns);

	seq_printf(m, "agent_up %u\n", up);
	seq_printf(m, "agent_last_msg_ms_ago %lld\n",
		   last_rx ? (long long)div_u64(now - last_rx, NSEC_PER_MSEC) : -1LL);
	/* the socket whose programs are installed; 0: none */
	seq_printf(m, "agent_portid %u\n", known ? portid : 0);
	seq_printf(m, "programs_installed %u\n", nprogs);
	seq_printf(m, "flows_active %u\n", nflows);
	seq_printf(m, "flows_pending %u\n", modes[CCPK_PENDING]);
	seq_printf(m, "flows_ccp %u\n", modes[CCPK_ATTACHED]);
	seq_printf(m, "flows_fallback %u\n", modes[CCPK_FALLBACK]);
	seq_printf(m, "flows_other_netns %u\n", other);
	seq_printf(m, "max_flows %u\n", ccpk->max_flows);
	/* the generic netlink family "ccp" (0: none) */
	seq_printf(m, "genl_family_id %u\n", family);
	/* the registered socket the datapath sends to (0: none) */
	seq_printf(m, "agent_listener %u\n", listener);
	for (i = 0; i < CCPK_CTR_MAX; i++)
		seq_printf(m, "%s %llu\n", ccpk_ctr_names[i], ctr[i]);
	kfree(ctr);
	return 0;
}

/* " addr:port" of one end of a flow; IPv6 as "[addr]:port" */
static void ccpk_show_end(struct seq_file *m, const struct sock *sk, bool local)
{
	const struct inet_sock *inet = inet_sk(sk);
	u16 port = ntohs(local ? inet->inet_sport : inet->inet_dport);

#if IS_ENABLED(CONFIG_IPV6)
	if (sk->sk_family == AF_INET6 && !ipv6_addr_v4mapped(&sk->sk_v6_daddr)) {
		seq_printf(m, " [%pI6c]:%u",
			   local ? &sk->sk_v6_rcv_saddr : &sk->sk_v6_daddr, port);
		return;
	}
#endif
	seq_printf(m, " %pI4:%u", local ? &inet->inet_saddr : &inet->inet_daddr,
		   port);
}

/*
 * /proc/net/ccp_flows: every flow of every namespace with its addresses,
 * for CAP_NET_ADMIN only (checked at open).  A seq_file over the slots:
 * each line is read under that flow's lock only (which keeps its socket
 * from going away), so a listing never holds a lock across slots and
 * bottom halves are off for one line at a time.  Positions: 0 the header,
 * then slot + 1.
 */
static void *ccpk_flows_seek(loff_t *pos)
{
	loff_t i;

	if (*pos == 0)
		return SEQ_START_TOKEN;
	for (i = *pos - 1; i < ccpk->max_flows; i++) {
		if (READ_ONCE(ccpk->flows[i].sk)) {
			*pos = i + 1;
			return &ccpk->flows[i];
		}
	}
	*pos = ccpk->max_flows + 1;
	return NULL;
}

static void *ccpk_flows_start(struct seq_file *m, loff_t *pos)
{
	return ccpk_flows_seek(pos);
}

static void *ccpk_flows_next(struct seq_file *m, void *v, loff_t *pos)
{
	++*pos;
	return ccpk_flows_seek(pos);
}

static void ccpk_flows_stop(struct seq_file *m, void *v)
{
}

static int ccpk_flows_show(struct seq_file *m, void *v)
{
	struct ccpk_flow *fl = v;
	const struct tcp_sock *tp;
	const struct sock *sk;
	u32 i;
	u8 mode;

	if (v == SEQ_START_TOKEN) {
		seq_puts(m, "sid alg mode cwnd ssthresh srtt_us pacing_Bps src dst\n");
		return 0;
	}
	i = fl - ccpk->flows;
	spin_lock_bh(&fl->lock);
	sk = fl->sk;
	if (!sk)		/* ended since */
		goto out;
	tp = tcp_sk(sk);
	mode = ccpk_flow_mode(fl);
	seq_printf(m, "%u %s %s %u %u %u %lu", i + 1,
		   ccpk->conns[i].flow_info.congAlg,
		   mode < ARRAY_SIZE(ccpk_mode_names) ? ccpk_mode_names[mode] : "?",
		   READ_ONCE(tp->snd_cwnd), READ_ONCE(tp->snd_ssthresh),
		   READ_ONCE(tp->srtt_us) >> 3,
		   READ_ONCE(sk->sk_pacing_rate));
	ccpk_show_end(m, sk, true);
	ccpk_show_end(m, sk, false);
	seq_putc(m, '\n');
out:
	spin_unlock_bh(&fl->lock);
	return 0;
}

static const struct seq_operations ccpk_flows_seq_ops = {
	.start = ccpk_flows_start,
	.next = ccpk_flows_next,
	.stop = ccpk_flows_stop,
	.show = ccpk_flows_show,
};

/* who may open the files above: the opener's capability, at open */
static bool ccpk_proc_allowed(const struct file *file)
{
	return file_ns_capable(file, &init_user_ns, CAP_NET_ADMIN);
}

static int ccpk_flows_open(struct inode *inode, struct file *file)
{
	/* flows of every namespace, with their addresses */
	if (!ccpk_proc_allowed(file))
		return -EPERM;
	return seq_open(file, &ccpk_flows_seq_ops);
}

static const struct proc_ops ccpk_flows_proc_ops = {
	.proc_open = ccpk_flows_open,
	.proc_read = seq_read,
	.proc_lseek = seq_lseek,
	.proc_release = seq_release,
};

static int ccpk_latency_show(struct seq_file *m, void *v)
{
	u32 *reply, *apply, n, i, start;
	u64 count;

	reply = kvmalloc_array(2 * CCPK_LAT_RING, sizeof(u32), GFP_KERNEL);
	if (!reply)
		return -ENOMEM;
	apply = reply + CCPK_LAT_RING;
	/* no lock: samples written meanwhile may show up mixed */
	count = atomic64_read(&ccpk->lat_count);
	for (i = 0; i < CCPK_LAT_RING; i++) {
		reply[i] = READ_ONCE(ccpk->lat_reply_ns[i]);
		apply[i] = READ_ONCE(ccpk->lat_apply_ns[i]);
	}

	n = count < CCPK_LAT_RING ? (u32)count : CCPK_LAT_RING;
	start = count < CCPK_LAT_RING ? 0 : (u32)(count % CCPK_LAT_RING);
	seq_printf(m, "# samples %llu (last %u): report->reply_ns report->cwnd_applied_ns\n",
		   count, n);
	for (i = 0; i < n; i++) {
		u32 j = (start + i) % CCPK_LAT_RING;

		seq_printf(m, "%u %u\n", reply[j], apply[j]);
	}
	kvfree(reply);
	return 0;
}

static int ccpk_stats_open(struct inode *inode, struct file *file)
{
	if (!ccpk_proc_allowed(file))
		return -EPERM;
	return single_open(file, ccpk_stats_show, NULL);
}

static int ccpk_latency_open(struct inode *inode, struct file *file)
{
	if (!ccpk_proc_allowed(file))
		return -EPERM;
	return single_open(file, ccpk_latency_show, NULL);
}

static const struct proc_ops ccpk_stats_proc_ops = {
	.proc_open = ccpk_stats_open,
	.proc_read = seq_read,
	.proc_lseek = seq_lseek,
	.proc_release = single_release,
};

static const struct proc_ops ccpk_latency_proc_ops = {
	.proc_open = ccpk_latency_open,
	.proc_read = seq_read,
	.proc_lseek = seq_lseek,
	.proc_release = single_release,
};

int ccpk_proc_init(void)
{
	/* CAP_NET_ADMIN only, checked at open (see the top of this file) */
	if (!proc_create("ccp", 0444, init_net.proc_net, &ccpk_stats_proc_ops))
		goto err;
	if (!proc_create("ccp_flows", 0444, init_net.proc_net, &ccpk_flows_proc_ops))
		goto err_stats;
	if (!proc_create("ccp_latency", 0444, init_net.proc_net, &ccpk_latency_proc_ops))
		goto err_flows;
	return 0;
err_flows:
	remove_proc_entry("ccp_flows", init_net.proc_net);
err_stats:
	remove_proc_entry("ccp", init_net.proc_net);
err:
	return -ENOMEM;
}

void ccpk_proc_exit(void)
{
	remove_proc_entry("ccp_latency", init_net.proc_net);
	remove_proc_entry("ccp_flows", init_net.proc_net);
	remove_proc_entry("ccp", init_net.proc_net);
}
