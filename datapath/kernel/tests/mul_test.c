// SPDX-License-Identifier: GPL-2.0
/*
 * User-space test of the one fix the Makefile applies to libccp's copy
 * (machine.c, MUL): a product that wraps past its left operand is an
 * overflow.  libccp 1.2 tested "result < arg1 && arg2 > 0", which misses
 * (2^32 + 1)^2 = 2^64 + 2^33 + 1, i.e. 2^33 + 1 after the wrap.  A flow
 * runs a program computing that product on its first ACK: ccp_invoke()
 * must fail with LIBCCP_MUL_INT_OVERFLOW, and a product that fits
 * (65536 * 65536) must not.  Built from libccp's C sources in user space
 * (as the libccp crate builds them), with the patched machine.c.
 */
#include <stdio.h>
#include <string.h>

#include "ccp.h"
#include "ccp_error.h"

static u64 clock_us;
static u64 now(void) { return clock_us; }
static u64 since(u64 then) { return clock_us - then; }
static u64 after(u64 us) { return clock_us + us; }
static int send_msg(struct ccp_datapath *dp, char *msg, int len) { (void)dp; (void)msg; (void)len; return 0; }
static void set_cwnd(struct ccp_connection *c, u32 v) { (void)c; (void)v; }
static void set_rate(struct ccp_connection *c, u32 v) { (void)c; (void)v; }
static void log_fn(struct ccp_datapath *dp, enum ccp_log_level l, const char *m, int n) { (void)dp; (void)l; (void)m; (void)n; }

struct buf { u8 b[512]; int n; };
static void put8(struct buf *m, u8 v) { m->b[m->n++] = v; }
static void put16(struct buf *m, u16 v) { put8(m, v & 0xff); put8(m, v >> 8); }
static void put32(struct buf *m, u32 v) { put16(m, v & 0xffff); put16(m, v >> 16); }
static void fix_len(struct buf *m) { m->b[2] = m->n & 0xff; m->b[3] = (m->n >> 8) & 0xff; }
static void hdr(struct buf *m, u16 type, u32 sid) { m->n = 0; put16(m, type); put16(m, 0); put32(m, sid); }
static void instr(struct buf *m, u8 op, u8 rt, u32 ri, u8 lt, u32 li, u8 tt, u32 ti)
{
	put8(m, op);
	put8(m, rt); put32(m, ri);
	put8(m, lt); put32(m, li);
	put8(m, tt); put32(m, ti);
}

/*
 * flag := true; tmp0 = 65536 * 65536; tmp0 = tmp0 + @add;
 * tmp1 = tmp0 * tmp0 (@by 0), or tmp0 * @by
 */
static int run(u32 uid, u32 add, u32 by)
{
	struct ccp_datapath dp = {
		.set_cwnd = set_cwnd, .set_rate_abs = set_rate, .send_msg = send_msg,
		.log = log_fn, .now = now, .since_usecs = since, .after_usecs = after,
		.max_connections = 4, .max_programs = 4, .fto_us = 1ULL << 62,
	};
	struct ccp_connection conns[4];
	struct ccp_datapath_info info = { .init_cwnd = 14480, .mss = 1448, .congAlg = "test" };
	struct ccp_connection *c;
	struct buf m;
	int ret;

	memset(conns, 0, sizeof(conns));
	dp.ccp_active_connections = conns;
	if (ccp_init(&dp, 1) < 0)
		return 1000;
	hdr(&m, 2, 0);		/* INSTALL */
	put32(&m, uid); put32(&m, 1); put32(&m, 4);
	put32(&m, 0); put32(&m, 1); put32(&m, 1); put32(&m, 3);
	instr(&m, 1, 2, 0, 2, 0, 1, 1);		/* BIND flag := true */
	instr(&m, 12, 7, 0, 1, 65536, 1, 65536);	/* MUL tmp0 = 65536 * 65536 */
	instr(&m, 0, 7, 0, 7, 0, 1, add);		/* ADD tmp0 = tmp0 + add */
	if (by)
		instr(&m, 12, 7, 1, 7, 0, 1, by);	/* MUL tmp1 = tmp0 * by */
	else
		instr(&m, 12, 7, 1, 7, 0, 7, 0);	/* MUL tmp1 = tmp0 * tmp0 */
	fix_len(&m);
	if (ccp_read_msg(&dp, (char *)m.b, m.n) < 0)
		return 1001;
	c = ccp_connection_start(&dp, NULL, &info);
	if (!c)
		return 1002;
	hdr(&m, 4, c->index);	/* CHANGE_PROG, no updates */
	put32(&m, uid); put32(&m, 0);
	fix_len(&m);
	if (ccp_read_msg(&dp, (char *)m.b, m.n) < 0)
		return 1003;
	clock_us += 1000;
	ret = ccp_invoke(c);
	ccp_connection_free(&dp, c->index);
	ccp_free(&dp);
	return ret;
}

int main(void)
{
	int failures = 0, got;

	/* (2^32 + 1) * 3 fits */
	got = run(6, 1, 3);
	if (got < 0) {
		printf("FAIL (2^32 + 1) * 3: ccp_invoke %d, want >= 0\n", got);
		failures++;
	}
	/* (2^32)^2 wraps to 0 < 2^32: caught before the fix too */
	got = run(7, 0, 0);
	if (got != LIBCCP_MUL_INT_OVERFLOW) {
		printf("FAIL (2^32)^2: ccp_invoke %d, want %d\n", got, LIBCCP_MUL_INT_OVERFLOW);
		failures++;
	}
	/* (2^32 + 1)^2 wraps to 2^33 + 1 > 2^32 + 1: what libccp 1.2 missed */
	got = run(8, 1, 0);
	if (got != LIBCCP_MUL_INT_OVERFLOW) {
		printf("FAIL (2^32 + 1)^2: ccp_invoke %d, want %d\n", got, LIBCCP_MUL_INT_OVERFLOW);
		failures++;
	}
	printf("mul_test: 3 checks, %d failures\n", failures);
	return failures ? 1 : 0;
}
