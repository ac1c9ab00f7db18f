// SPDX-License-Identifier: GPL-2.0
/*
 * /proc/net/ccp          state and counters, one "name value" per line
 * /proc/net/ccp_flows    one line per flow with a libccp slot
 * /proc/net/ccp_latency  recent report -> reply -> cwnd-applied latencies
 */
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

static int ccpk_stats_show(struct seq_file *m, void *v)
{
	u64 ctr[CCPK_CTR_MAX];
	u64 now = ktime_get_ns(), last_rx;
	u32 nflows, modes[4] = {}, portid, nprogs, family, group;
	bool up, known;
	int i;

	spin_lock_bh(&ccpk->lock);
	memcpy(ctr, ccpk->ctr, sizeof(ctr));
	up = ccpk->agent_up;
	nflows = ccpk->nflows;
	last_rx = ccpk->last_rx_ns;
	known = ccpk->agent_known;
	portid = ccpk->agent_portid;
	nprogs = ccpk_programs_installed();
	family = ccpk_nl_family_id();
	group = ccpk_nl_group_id();
	for (i = 0; i < ccpk->max_flows; i++)
		if (ccpk->flows[i].sk && ccpk->flows[i].mode < 4)
			modes[ccpk->flows[i].mode]++;
	spin_unlock_bh(&ccpk->lock);

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
	seq_printf(m, "max_flows %u\n", ccpk->max_flows);
	/* the generic netlink family "ccp" and its group "datapath" (0: none) */
	seq_printf(m, "genl_family_id %u\n", family);
	seq_printf(m, "genl_group_id %u\n", group);
	for (i = 0; i < CCPK_CTR_MAX; i++)
		seq_printf(m, "%s %llu\n", ccpk_ctr_names[i], ctr[i]);
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

static int ccpk_flows_show(struct seq_file *m, void *v)
{
	u32 i;

	seq_puts(m, "sid alg mode cwnd ssthresh srtt_us pacing_Bps src dst\n");
	spin_lock_bh(&ccpk->lock);
	for (i = 0; i < ccpk->max_flows; i++) {
		struct ccpk_flow *fl = &ccpk->flows[i];
		const struct tcp_sock *tp;

		if (!fl->sk)
			continue;
		tp = tcp_sk(fl->sk);
		seq_printf(m, "%u %s %s %u %u %u %lu", i + 1,
			   ccpk->conns[i].flow_info.congAlg,
			   fl->mode < ARRAY_SIZE(ccpk_mode_names) ?
			   ccpk_mode_names[fl->mode] : "?",
			   READ_ONCE(tp->snd_cwnd), READ_ONCE(tp->snd_ssthresh),
			   READ_ONCE(tp->srtt_us) >> 3,
			   READ_ONCE(fl->sk->sk_pacing_rate));
		ccpk_show_end(m, fl->sk, true);
		ccpk_show_end(m, fl->sk, false);
		seq_putc(m, '\n');
	}
	spin_unlock_bh(&ccpk->lock);
	return 0;
}

static int ccpk_latency_show(struct seq_file *m, void *v)
{
	u32 *reply, *apply, n, i, start;
	u64 count;

	reply = kvmalloc_array(2 * CCPK_LAT_RING, sizeof(u32), GFP_KERNEL);
	if (!reply)
		return -ENOMEM;
	apply = reply + CCPK_LAT_RING;
	spin_lock_bh(&ccpk->lock);
	count = ccpk->lat_count;
	memcpy(reply, ccpk->lat_reply_ns, sizeof(ccpk->lat_reply_ns));
	memcpy(apply, ccpk->lat_apply_ns, sizeof(ccpk->lat_apply_ns));
	spin_unlock_bh(&ccpk->lock);

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

int ccpk_proc_init(void)
{
	if (!proc_create_single("ccp", 0444, init_net.proc_net, ccpk_stats_show))
		goto err;
	/* flows of every namespace, with their addresses: root only */
	if (!proc_create_single("ccp_flows", 0400, init_net.proc_net, ccpk_flows_show))
		goto err_stats;
	if (!proc_create_single("ccp_latency", 0444, init_net.proc_net, ccpk_latency_show))
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
