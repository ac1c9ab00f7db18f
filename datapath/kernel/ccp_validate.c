// SPDX-License-Identifier: GPL-2.0
/*
 * Validation of agent -> datapath CCP messages before libccp parses them.
 *
 * What libccp 1.2 (ccp.c, serialize.c, machine.c) does not check, and what
 * therefore has to be checked here:
 *  - read_header() copies 8 bytes whatever the buffer length is;
 *  - the INSTALL instruction/expression limits are tested on a zeroed struct,
 *    i.e. never; expressions and instructions are copied by their declared
 *    counts without looking at the message length;
 *  - a program of 256 instructions loops forever (u8 index);
 *  - register indices are used unchecked when read (report, control, tmp,
 *    local, implicit arrays) and control indices of staged updates are used
 *    unchecked when written;
 *  - expression ranges are not checked against the instruction count, and
 *    may overlap: the work of one ACK is bounded here (CCPK_MAX_PROG_WORK);
 *  - more than MAX_REPORT_REG leading report DEFs overflow the MEASURE
 *    message buffer on the ACK path;
 *  - UPDATE_FIELDS/CHANGE_PROG updates are read by count, not by length;
 *  - reset_state() sets a program's report field count at its first
 *    instruction that is not a DEF: a program without one (only DEFs, or no
 *    instruction) reports with whatever count its slot held before (0: the
 *    agent reads the report as the flow's close);
 *  - a DEF takes its value from the right operand's immediate value, which
 *    only an IMMEDIATE_REG operand sets: any other type leaves the value of
 *    the program that held the slot before.
 */
#ifdef __KERNEL__
#include <linux/kernel.h>
#include <linux/string.h>
#else
#include <string.h>
#endif

#include "ccp_validate.h"
#include "ccp_libccp.h"	/* register types, opcodes, limits */

static inline u16 rd16(const u8 *p)
{
	return (u16)(p[0] | (p[1] << 8));
}

static inline u32 rd32(const u8 *p)
{
	return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) |
	       ((u32)p[3] << 24);
}

/* May register (@type, @idx) be used as an operand (@dst: as a result)? */
static bool reg_ok(u8 type, u32 idx, bool dst)
{
	switch (type) {
	case NONVOLATILE_CONTROL_REG:
	case VOLATILE_CONTROL_REG:
		return idx < MAX_CONTROL_REG;
	case IMMEDIATE_REG:
		return !dst;
	case IMPLICIT_REG:
		return idx < MAX_IMPLICIT_REG;
	case LOCAL_REG:
		return idx < MAX_LOCAL_REG;
	case PRIMITIVE_REG:
		return !dst && idx < CCPK_NUM_PRIMITIVES;
	case VOLATILE_REPORT_REG:
	case NONVOLATILE_REPORT_REG:
		return idx < MAX_REPORT_REG;
	case TMP_REG:
		return idx < MAX_TMP_REG;
	default:
		return false;
	}
}

static enum ccpk_verdict check_install(const u8 *p, size_t len,
				       struct ccpk_msg_info *info)
{
	u32 i, nexpr, ninstr, nreport = 0, work = 0;
	bool in_defs = true;
	const u8 *ex, *in;
	u64 want;

	if (len < CCPK_HDR_LEN + CCPK_INSTALL_HDR_LEN)
		return CCPK_REJ_SHORT;
	info->program_uid = rd32(p + 8);
	nexpr = rd32(p + 12);
	ninstr = rd32(p + 16);
	info->num_expr = nexpr;
	info->num_instr = ninstr;
	if (ninstr > CCPK_MAX_PROG_INSTR || nexpr > CCPK_MAX_PROG_EXPR)
		return CCPK_REJ_PROG_SIZE;
	want = CCPK_HDR_LEN + CCPK_INSTALL_HDR_LEN +
	       (u64)nexpr * CCPK_EXPR_LEN + (u64)ninstr * CCPK_INSTR_LEN;
	if (want != len)
		return CCPK_REJ_LEN;

	ex = p + CCPK_HDR_LEN + CCPK_INSTALL_HDR_LEN;
	for (i = 0; i < nexpr; i++, ex += CCPK_EXPR_LEN) {
		u64 cond_end = (u64)rd32(ex) + rd32(ex + 4);
		u64 body_end = (u64)rd32(ex + 8) + rd32(ex + 12);

		if (cond_end > ninstr || body_end > ninstr)
			return CCPK_REJ_PROG;
		/* both counts <= ninstr <= 255 here: no overflow */
		work += 1 + rd32(ex + 4) + rd32(ex + 12);
	}
	info->work = work;

	in = ex;
	for (i = 0; i < ninstr; i++, in += CCPK_INSTR_LEN) {
		u8 op = in[0];

		if (op >= MAX_OP)
			return CCPK_REJ_PROG;
		if (!reg_ok(in[1], rd32(in + 2), true) ||
		    !reg_ok(in[6], rd32(in + 7), false) ||
		    !reg_ok(in[11], rd32(in + 12), false))
			return CCPK_REJ_PROG;
		/* a DEF's value is its right operand's immediate (see above) */
		if (op == DEF && in[11] != IMMEDIATE_REG)
			return CCPK_REJ_PROG;
		/* libccp reports one field per leading DEF of a report register */
		if (op == DEF && in_defs) {
			if (in[6] == VOLATILE_REPORT_REG ||
			    in[6] == NONVOLATILE_REPORT_REG)
				nreport++;
		} else {
			in_defs = false;
		}
	}
	/* no instruction but DEFs: the field count is never set (see above) */
	if (in_defs || nreport > MAX_REPORT_REG)
		return CCPK_REJ_PROG;
	if (work > CCPK_MAX_PROG_WORK)
		return CCPK_REJ_PROG_WORK;
	return CCPK_OK;
}

static enum ccpk_verdict check_fields(const u8 *f, u32 n,
				      struct ccpk_msg_info *info)
{
	u32 i;

	for (i = 0; i < n; i++, f += CCPK_FIELD_LEN) {
		u32 idx = rd32(f + 1);

		switch (f[0]) {
		case NONVOLATILE_CONTROL_REG:
		case VOLATILE_CONTROL_REG:
			if (idx >= MAX_CONTROL_REG)
				return CCPK_REJ_FIELDS;
			break;
		case IMPLICIT_REG:
			if (idx == CWND_REG)
				info->sets_cwnd = true;
			else if (idx == RATE_REG)
				info->sets_rate = true;
			else
				return CCPK_REJ_FIELDS;
			break;
		default:
			return CCPK_REJ_FIELDS;
		}
	}
	return CCPK_OK;
}

static enum ccpk_verdict check_updates(const u8 *p, size_t len, size_t fixed,
				       u32 n, struct ccpk_msg_info *info)
{
	info->num_updates = n;
	if (n > CCPK_MAX_UPDATES || n > MAX_MUTABLE_REG)
		return CCPK_REJ_FIELDS;
	if (fixed + (u64)n * CCPK_FIELD_LEN != len)
		return CCPK_REJ_LEN;
	return check_fields(p + fixed, n, info);
}

enum ccpk_verdict ccpk_validate(const u8 *p, size_t len, u32 max_sid,
				struct ccpk_msg_info *info)
{
	memset(info, 0, sizeof(*info));
	if (!p || len < CCPK_HDR_LEN)
		return CCPK_REJ_SHORT;

	info->type = rd16(p);
	info->len = rd16(p + 2);
	info->sid = rd32(p + 4);

	switch (info->type) {
	case INSTALL_EXPR:
	case UPDATE_FIELDS:
	case CHANGE_PROG:
		break;
	default:
		return CCPK_REJ_TYPE;
	}
	/* the declared length must be exactly what arrived */
	if (info->len != len || len > BIGGEST_MSG_SIZE)
		return CCPK_REJ_LEN;

	switch (info->type) {
	case INSTALL_EXPR:
		/* socket id is ignored by libccp for INSTALL */
		return check_install(p, len, info);
	case UPDATE_FIELDS:
		if (info->sid == 0 || info->sid > max_sid)
			return CCPK_REJ_SID;
		if (len < CCPK_HDR_LEN + CCPK_UPDATES_HDR_LEN)
			return CCPK_REJ_SHORT;
		return check_updates(p, len, CCPK_HDR_LEN + CCPK_UPDATES_HDR_LEN,
				     rd32(p + 8), info);
	default: /* CHANGE_PROG */
		if (info->sid == 0 || info->sid > max_sid)
			return CCPK_REJ_SID;
		if (len < CCPK_HDR_LEN + CCPK_CHANGE_HDR_LEN)
			return CCPK_REJ_SHORT;
		info->program_uid = rd32(p + 8);
		return check_updates(p, len, CCPK_HDR_LEN + CCPK_CHANGE_HDR_LEN,
				     rd32(p + 12), info);
	}
}

const char *ccpk_verdict_name(enum ccpk_verdict v)
{
	static const char *const names[CCPK_VERDICT_MAX] = {
		[CCPK_OK]		= "ok",
		[CCPK_REJ_SHORT]	= "short",
		[CCPK_REJ_TYPE]		= "bad_type",
		[CCPK_REJ_LEN]		= "bad_len",
		[CCPK_REJ_PROG_SIZE]	= "prog_too_big",
		[CCPK_REJ_PROG]		= "bad_prog",
		[CCPK_REJ_FIELDS]	= "bad_fields",
		[CCPK_REJ_SID]		= "bad_sid",
		[CCPK_REJ_PROG_WORK]	= "prog_too_costly",
	};

	if ((unsigned int)v >= CCPK_VERDICT_MAX)
		return "?";
	return names[v];
}
