// SPDX-License-Identifier: GPL-2.0
/*
 * User-space unit test of ccp_values.h: libccp's u64 cwnd and rate reach the
 * socket whole (not truncated to u32), clamped to what the socket takes;
 * byte counts saturate instead of wrapping.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ccp_values.h"

static int failures, checks;

#define EXPECT(cond) do { \
	checks++; \
	if (!(cond)) { \
		failures++; \
		fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
	} \
} while (0)

int main(void)
{
	const u64 two32 = 1ULL << 32;

	/* saturated u32 fields */
	EXPECT(ccpk_sat32(0) == 0);
	EXPECT(ccpk_sat32(CCPK_U32_MAX) == CCPK_U32_MAX);
	EXPECT(ccpk_sat32(two32) == CCPK_U32_MAX);
	EXPECT(ccpk_pkts_bytes(10, 1448) == 14480);
	/* 3,000,000 packets of 1448 bytes: 4.3e9 bytes, wrapped to 48 MB in u32 */
	EXPECT(ccpk_pkts_bytes(3000000, 1448) == CCPK_U32_MAX);
	EXPECT(ccpk_pkts_bytes(CCPK_U32_MAX, 65535) == CCPK_U32_MAX);
	EXPECT(ccpk_pkts_bytes(two32 * 4, 1) == CCPK_U32_MAX);

	/* the register's value, not its low half */
	EXPECT(ccpk_full_value(two32, 0) == two32);
	EXPECT(ccpk_full_value(3 * two32 + 5, 5) == 3 * two32 + 5);
	EXPECT(ccpk_full_value(1000, 1000) == 1000);
	/* a value that is not the register's low half is taken as given */
	EXPECT(ccpk_full_value(two32 + 7, 8) == 8);

	/* windows */
	EXPECT(ccpk_cwnd_pkts(14480, 1448, 10000) == 10);
	EXPECT(ccpk_cwnd_pkts(0, 1448, 10000) == 2);
	EXPECT(ccpk_cwnd_pkts(1447, 1448, 10000) == 2);
	EXPECT(ccpk_cwnd_pkts(two32, 1448, 10000) == 10000);	/* was 2 (u32: 0) */
	EXPECT(ccpk_cwnd_pkts(two32, 1448, CCPK_U32_MAX) == 2966137);
	EXPECT(ccpk_cwnd_pkts(~0ULL, 1, CCPK_U32_MAX) == CCPK_U32_MAX);
	EXPECT(ccpk_cwnd_pkts(100000, 0, 10000) == 10000);	/* mss 0 read as 1 */
	EXPECT(ccpk_cwnd_pkts(100000, 1000, 0) == 2);		/* clamp below 2 */

	/* pacing rates */
	EXPECT(ccpk_pacing_rate(two32, ~0ULL) == two32);	/* was 0: a stall */
	EXPECT(ccpk_pacing_rate(5 * two32, ~0ULL) == 5 * two32);
	EXPECT(ccpk_pacing_rate(12500000, 1000000) == 1000000);
	EXPECT(ccpk_pacing_rate(0, ~0ULL) == 0);
	EXPECT(ccpk_pacing_rate(ccpk_full_value(two32, (u32)two32), ~0ULL) == two32);

	printf("values_test: %d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}
