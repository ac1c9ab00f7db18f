/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The congestion-control names ccp-kernel.ko registers, from the agent's
 * registry (algs/src/registry.rs): "ccp" (the agent's default, --alg),
 * "ccp_<alg>" for every algorithm of the registry in its order, and
 * "ccp_auto" (the agent chooses by the flow's preference).
 *
 * Generated: do not edit.  After a change to the registry, run
 *   cargo run -p ccp-agent -- --list --format c-header > datapath/kernel/ccp_algs.h
 * (portus-agent/tests/registry.rs fails while this file and the registry disagree).
 */
#ifndef CCP_ALGS_H
#define CCP_ALGS_H

/* X(name) once per name */
#define CCPK_ALGORITHMS(X)	\
	X("ccp")	\
	X("ccp_reno")	\
	X("ccp_cubic")	\
	X("ccp_bbr")	\
	X("ccp_jury")	\
	X("ccp_owl")	\
	X("ccp_mocc")	\
	X("ccp_iris")	\
	X("ccp_nuwa")	\
	X("ccp_auto")

#endif /* CCP_ALGS_H */
