/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Conversions between libccp's values and what a TCP socket takes.  Pure
 * functions: the same header is compiled into the module and into a
 * user-space unit test (tests/values_test.c).
 *
 * libccp keeps the Cwnd (bytes) and Rate (bytes/s) registers as u64 but
 * hands them to the datapath as u32 (ccp.h: set_cwnd(), set_rate_abs()),
 * so a value of 2^32 or more arrives truncated: a rate that is a multiple
 * of 2^32 arrives as 0, which as a pacing rate stops the flow.  libccp
 * calls both with the register itself, which the datapath can read in the
 * flow's state: ccpk_full_value() recovers the u64.  Products such as
 * packets x MSS are computed in u64 and saturated where libccp's field is
 * a u32 (a primitive, a CREATE field).
 */
#ifndef CCPK_VALUES_H
#define CCPK_VALUES_H

#ifdef __KERNEL__
#include <linux/math64.h>
#include <linux/types.h>
#define ccpk_div_u64(a, b)	div64_u64((a), (b))
#else
#include <stdint.h>
#define ccpk_div_u64(a, b)	((a) / (b))
#endif

#include "types.h"	/* libccp: u8/u16/u32/u64 */

#define CCPK_U32_MAX	0xffffffffU

/* A u64 as a u32 field of libccp's: saturated. */
static inline u32 ccpk_sat32(u64 v)
{
	return v > CCPK_U32_MAX ? CCPK_U32_MAX : (u32)v;
}

/* @pkts packets of @mss bytes, as a u32 byte count (saturated). */
static inline u32 ccpk_pkts_bytes(u64 pkts, u32 mss)
{
	/* pkts < 2^32 and mss < 2^32 in every caller: no u64 overflow */
	if (pkts > CCPK_U32_MAX)
		pkts = CCPK_U32_MAX;
	return ccpk_sat32(pkts * mss);
}

/*
 * The value libccp meant when it passed @passed: its register @reg when
 * @passed is the register's low 32 bits (libccp's calls), else @passed.
 */
static inline u64 ccpk_full_value(u64 reg, u32 passed)
{
	return (u32)reg == passed ? reg : passed;
}

/*
 * A window of @bytes as snd_cwnd: whole packets of @mss, in [2, @clamp]
 * (the socket's snd_cwnd_clamp; at least 2).
 */
static inline u32 ccpk_cwnd_pkts(u64 bytes, u32 mss, u32 clamp)
{
	u64 pkts = ccpk_div_u64(bytes, mss ? (u64)mss : 1);

	if (clamp < 2)
		clamp = 2;
	if (pkts < 2)
		return 2;
	return pkts > clamp ? clamp : (u32)pkts;
}

/*
 * An agent rate (bytes/s) as sk_pacing_rate, at most @max (the socket's
 * sk_max_pacing_rate); 0 when there is no rate to apply (the caller then
 * leaves the pacing rate alone: a pacing rate of 0 stops the flow).
 */
static inline u64 ccpk_pacing_rate(u64 rate, u64 max)
{
	return rate < max ? rate : max;
}

#endif /* CCPK_VALUES_H */
