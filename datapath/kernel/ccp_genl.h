/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The generic netlink family between the CCP datapath (ccp-kernel.ko) and
 * its agent.  Shared by the module, ops/vm/nlfuzz.c and (as constants) the
 * agent's backend, portus-agent/runtime/src/ipc/netlink.rs: keep them in step.
 *
 *  - family "ccp", version 2, initial network namespace only; no
 *    multicast group: every datapath message goes to one socket;
 *  - agent -> datapath: CCP_CMD_AGENT_HELLO (NLM_F_REQUEST, no attribute)
 *    registers the sending socket's port id as the agent's: the datapath
 *    sends to the newest registered socket that still exists (it keeps a
 *    few, so that an agent started beside another hands the flows back
 *    when it stops).  Then CCP_CMD_AGENT_MSG carrying one CCP message
 *    (libccp's serialization: INSTALL, UPDATE_FIELDS, CHANGE_PROG) in
 *    CCP_ATTR_MSG, accepted only from that socket.  Both need
 *    CAP_NET_ADMIN in the initial user namespace (GENL_ADMIN_PERM);
 *  - datapath -> agent: CCP_CMD_DATAPATH_MSG carrying one CCP message
 *    (READY, CREATE, MEASURE) in CCP_ATTR_MSG, unicast from the kernel
 *    (port id 0) to the registered socket's port id.
 *
 * Version 1 multicast the datapath's messages to a group "datapath"; an
 * agent of that version finds no group and says so.  The family id is
 * dynamic: resolve it with the genl controller (CTRL_CMD_GETFAMILY,
 * CTRL_ATTR_FAMILY_NAME "ccp").
 */
#ifndef CCP_GENL_H
#define CCP_GENL_H

#define CCP_GENL_NAME		"ccp"
#define CCP_GENL_VERSION	2

enum ccp_genl_cmd {
	CCP_CMD_UNSPEC,
	CCP_CMD_AGENT_MSG,	/* agent -> datapath */
	CCP_CMD_DATAPATH_MSG,	/* datapath -> agent (unicast to the agent) */
	CCP_CMD_AGENT_HELLO,	/* agent -> datapath: "send to this socket" */
	__CCP_CMD_MAX,
};

enum ccp_genl_attr {
	CCP_ATTR_UNSPEC,
	CCP_ATTR_MSG,		/* binary: one CCP message */
	__CCP_ATTR_MAX,
};
#define CCP_ATTR_MAX		(__CCP_ATTR_MAX - 1)

/*
 * Length bounds of CCP_ATTR_MSG from the agent (checked by the family's
 * policy): a CCP header at least, and at most the largest message the
 * datapath can accept (an INSTALL of 256 expressions and 255 instructions:
 * 8 + 12 + 256 * 16 + 255 * 16 bytes; see ccp_validate.h).
 */
#define CCP_GENL_MSG_MIN	8
#define CCP_GENL_MSG_MAX	8196

#endif /* CCP_GENL_H */
