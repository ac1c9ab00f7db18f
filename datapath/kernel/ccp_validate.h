/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structural validation of agent -> datapath CCP messages.
 *
 * libccp parses agent messages with almost no bounds checking (see
 * ccp_validate.c for the list).  Every message that reaches ccp_read_msg()
 * must first pass ccpk_validate().  The function is pure (no kernel state)
 * so the same file is compiled into the module and into a user-space unit
 * test (tests/validate_test.c).
 */
#ifndef CCPK_VALIDATE_H
#define CCPK_VALIDATE_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#endif

#include "types.h"	/* libccp: u8/u16/u32/u64 */

/* Wire layout (little endian, as written by portus 0.9). */
#define CCPK_HDR_LEN		8	/* u16 type, u16 len, u32 socket id */
#define CCPK_INSTALL_HDR_LEN	12	/* u32 uid, u32 #expressions, u32 #instructions */
#define CCPK_EXPR_LEN		16	/* 4 x u32 */
#define CCPK_INSTR_LEN		16	/* u8 op, 3 x (u8 type, u32 index) */
#define CCPK_CHANGE_HDR_LEN	8	/* u32 uid, u32 #updates */
#define CCPK_UPDATES_HDR_LEN	4	/* u32 #updates */
#define CCPK_FIELD_LEN		13	/* u8 type, u32 index, u64 value */

/*
 * Limits.  A program of 256 instructions makes libccp's u8 instruction
 * counter wrap and ccp_invoke() loop forever, so 255 is the hard maximum.
 * libccp reads the update count of UPDATE_FIELDS as a signed char, so at
 * most 127 updates keep its reading identical to ours.
 */
#define CCPK_MAX_PROG_INSTR	255
#define CCPK_MAX_PROG_EXPR	256
/*
 * Interpreter work per ACK.  libccp evaluates every expression in turn
 * (until one whose condition holds does not fall through) and runs its
 * condition's and its body's instructions, ranges that may overlap: 256
 * expressions each spanning all 255 instructions made 65,280 instructions
 * on every ACK.  A program's work is the most one ACK can cost: one step
 * per expression plus every instruction of its condition and body,
 * summed over all expressions.  Programs whose expressions do not share
 * instructions (portus never shares them) stay below 256 + 255 = 511;
 * the bound leaves twice that.
 */
#define CCPK_MAX_PROG_WORK	1024
#define CCPK_MAX_UPDATES	127
#define CCPK_NUM_PRIMITIVES	16

enum ccpk_verdict {
	CCPK_OK = 0,
	CCPK_REJ_SHORT,		/* shorter than a CCP header / fixed part */
	CCPK_REJ_TYPE,		/* not INSTALL(2), UPDATE_FIELDS(3), CHANGE_PROG(4) */
	CCPK_REJ_LEN,		/* declared length != received length or layout */
	CCPK_REJ_PROG_SIZE,	/* >= 256 instructions or > 256 expressions */
	CCPK_REJ_PROG,		/* bad opcode, register, expression range, #reports */
	CCPK_REJ_FIELDS,	/* too many or invalid update fields */
	CCPK_REJ_SID,		/* socket id out of range */
	CCPK_REJ_PROG_WORK,	/* more than CCPK_MAX_PROG_WORK steps per ACK */
	CCPK_VERDICT_MAX
};

struct ccpk_msg_info {
	u16 type;
	u16 len;
	u32 sid;
	u32 program_uid;	/* INSTALL, CHANGE_PROG */
	u32 num_expr;		/* INSTALL */
	u32 num_instr;		/* INSTALL */
	u32 work;		/* INSTALL: steps per ACK at most (see above) */
	u32 num_updates;	/* UPDATE_FIELDS, CHANGE_PROG */
	bool sets_cwnd;		/* an update writes the Cwnd register */
	bool sets_rate;		/* an update writes the Rate register */
};

/*
 * Check @buf (@len bytes, the netlink payload) against the CCP wire format
 * and libccp's limits.  @max_sid is the size of the connection table.
 * Returns CCPK_OK and fills @info, or the reason for rejection.
 */
enum ccpk_verdict ccpk_validate(const u8 *buf, size_t len, u32 max_sid,
				struct ccpk_msg_info *info);

const char *ccpk_verdict_name(enum ccpk_verdict v);

#endif /* CCPK_VALIDATE_H */
