// SPDX-License-Identifier: GPL-2.0
/*
 * ccp_clash: a test module for the guest suite (ops/vm/guest/name_clash.sh)
 * that registers a TCP congestion control under one of ccp-kernel's names
 * (module parameter "name", default "ccp_auto", the last one ccp-kernel
 * registers), so that ccp-kernel's init fails on that name after the names
 * before it went live (issue 50 item 7).  Its algorithm is the kernel's own
 * Reno (exported helpers); it is never meant for traffic.
 */
#include <linux/module.h>
#include <net/tcp.h>

static char *name = "ccp_auto";
module_param(name, charp, 0444);
MODULE_PARM_DESC(name, "the congestion control name to hold");

static struct tcp_congestion_ops clash_ops __read_mostly = {
	.ssthresh	= tcp_reno_ssthresh,
	.cong_avoid	= tcp_reno_cong_avoid,
	.undo_cwnd	= tcp_reno_undo_cwnd,
	.owner		= THIS_MODULE,
};

static int __init clash_init(void)
{
	if (!name || !*name || strlen(name) >= TCP_CA_NAME_MAX)
		return -EINVAL;
	strscpy(clash_ops.name, name, TCP_CA_NAME_MAX);
	return tcp_register_congestion_control(&clash_ops);
}

static void __exit clash_exit(void)
{
	tcp_unregister_congestion_control(&clash_ops);
}

module_init(clash_init);
module_exit(clash_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("test: holds one of ccp-kernel's congestion control names");
