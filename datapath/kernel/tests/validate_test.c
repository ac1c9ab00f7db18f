// SPDX-License-Identifier: GPL-2.0
/*
 * User-space unit test of ccpk_validate() (ccp_validate.c): well-formed
 * portus-style messages pass, each class of malformed message is rejected
 * for the right reason, and random buffers never read out of bounds (build
 * with -fsanitize=address,undefined; `make check` does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccp_validate.h"

#define MAX_SID 1024

static int failures, checks;

struct buf {
	u8 b[9000];
	size_t n;
};

static void put8(struct buf *m, u8 v) { m->b[m->n++] = v; }
static void put16(struct buf *m, u16 v) { put8(m, v & 0xff); put8(m, v >> 8); }
static void put32(struct buf *m, u32 v) { put16(m, v & 0xffff); put16(m, v >> 16); }
static void put64(struct buf *m, u64 v) { put32(m, (u32)v); put32(m, (u32)(v >> 32)); }
static void fix_len(struct buf *m) { m->b[2] = m->n & 0xff; m->b[3] = (m->n >> 8) & 0xff; }

static void hdr(struct buf *m, u16 type, u32 sid)
{
	m->n = 0;
	put16(m, type);
	put16(m, 0);
	put32(m, sid);
}

static void instr(struct buf *m, u8 op, u8 rt, u32 ri, u8 lt, u32 li, u8 tt, u32 ti)
{
	put8(m, op);
	put8(m, rt); put32(m, ri);
	put8(m, lt); put32(m, li);
	put8(m, tt); put32(m, ti);
}

/* (def (Report (volatile acked 0))) (when true (:= Report.acked (+ Report.acked Ack.bytes_acked)) (report)) */
static void install(struct buf *m, u32 uid)
{
	hdr(m, 2, 0);
	put32(m, uid);
	put32(m, 1);		/* expressions */
	put32(m, 4);		/* instructions */
	put32(m, 1); put32(m, 1); put32(m, 2); put32(m, 2);
	instr(m, 2, 5, 0, 5, 0, 1, 0);		/* DEF report0 = 0 */
	instr(m, 1, 2, 0, 2, 0, 1, 1);		/* flag := true */
	instr(m, 0, 7, 0, 5, 0, 4, 0);		/* tmp0 = report0 + acked */
	instr(m, 1, 5, 0, 5, 0, 7, 0);		/* report0 := tmp0 */
	fix_len(m);
}

static void update(struct buf *m, u32 sid, u32 n, u8 type, u32 idx)
{
	u32 i;

	hdr(m, 3, sid);
	put32(m, n);
	for (i = 0; i < n; i++) {
		put8(m, type); put32(m, idx); put64(m, 14480);
	}
	fix_len(m);
}

static void changeprog(struct buf *m, u32 sid, u32 uid, u32 n)
{
	u32 i;

	hdr(m, 4, sid);
	put32(m, uid);
	put32(m, n);
	for (i = 0; i < n; i++) {
		put8(m, 2); put32(m, 4); put64(m, 14480);
	}
	fix_len(m);
}

/* @nexpr expressions, each: condition [0, @ncond), body [@ncond, @ncond + @nbody) */
static void prog_exprs(struct buf *m, u32 nexpr, u32 ncond, u32 nbody, u32 ninstr)
{
	u32 i;

	hdr(m, 2, 0);
	put32(m, 9); put32(m, nexpr); put32(m, ninstr);
	for (i = 0; i < nexpr; i++) {
		put32(m, 0); put32(m, ncond); put32(m, ncond); put32(m, nbody);
	}
	for (i = 0; i < ninstr; i++)
		instr(m, 1, 7, 0, 7, 0, 1, 1);
	fix_len(m);
}

/* 255 one-instruction expressions and an empty one: 256 + 255 steps */
static void prog_disjoint(struct buf *m)
{
	u32 i;

	hdr(m, 2, 0);
	put32(m, 9); put32(m, 256); put32(m, 255);
	for (i = 0; i < 256; i++) {
		put32(m, i < 255 ? i : 0); put32(m, i < 255);
		put32(m, i < 255 ? i + 1 : 0); put32(m, 0);
	}
	for (i = 0; i < 255; i++)
		instr(m, 1, 7, 0, 7, 0, 1, 1);
	fix_len(m);
}

static void expect(const char *what, struct buf *m, enum ccpk_verdict want)
{
	struct ccpk_msg_info mi;
	enum ccpk_verdict got = ccpk_validate(m->b, m->n, MAX_SID, &mi);

	checks++;
	if (got != want) {
		failures++;
		printf("FAIL %-40s got %s want %s\n", what, ccpk_verdict_name(got),
		       ccpk_verdict_name(want));
	}
}

int main(void)
{
	static struct buf m;
	struct ccpk_msg_info mi;
	unsigned int i, j;

	install(&m, 1);
	expect("valid install", &m, CCPK_OK);
	m.n--;
	expect("install one byte short", &m, CCPK_REJ_LEN);
	install(&m, 1);
	m.b[2]++;
	expect("install declared len > received", &m, CCPK_REJ_LEN);
	install(&m, 1);
	m.b[0] = 5;
	expect("READY type from agent", &m, CCPK_REJ_TYPE);
	m.b[0] = 0;
	expect("CREATE type from agent", &m, CCPK_REJ_TYPE);
	m.b[0] = 1;
	expect("MEASURE type from agent", &m, CCPK_REJ_TYPE);
	m.n = 5;
	expect("5-byte message", &m, CCPK_REJ_SHORT);

	/* 256 instructions: libccp's u8 counter would loop forever */
	hdr(&m, 2, 0);
	put32(&m, 9); put32(&m, 1); put32(&m, 256);
	put32(&m, 0); put32(&m, 1); put32(&m, 1); put32(&m, 255);
	for (i = 0; i < 256; i++)
		instr(&m, 1, 7, 0, 7, 0, 1, 1);
	fix_len(&m);
	expect("256-instruction program", &m, CCPK_REJ_PROG_SIZE);
	/* 255 is fine */
	hdr(&m, 2, 0);
	put32(&m, 9); put32(&m, 1); put32(&m, 255);
	put32(&m, 0); put32(&m, 1); put32(&m, 1); put32(&m, 254);
	for (i = 0; i < 255; i++)
		instr(&m, 1, 7, 0, 7, 0, 1, 1);
	fix_len(&m);
	expect("255-instruction program", &m, CCPK_OK);
	/* 111 report DEFs overflow libccp's MEASURE buffer */
	hdr(&m, 2, 0);
	put32(&m, 9); put32(&m, 1); put32(&m, 112);
	put32(&m, 111); put32(&m, 0); put32(&m, 111); put32(&m, 1);
	for (i = 0; i < 111; i++)
		instr(&m, 2, 5, i % 110, 5, i % 110, 1, 0);
	instr(&m, 1, 2, 0, 2, 0, 1, 1);
	fix_len(&m);
	expect("111 report fields", &m, CCPK_REJ_PROG);

	/*
	 * Work per ACK: expressions may share instructions.  256 expressions
	 * each running all 255 instructions: 65,536 steps on every ACK.
	 */
	prog_exprs(&m, 256, 1, 254, 255);
	expect("256 x 255 overlapping expressions", &m, CCPK_REJ_PROG_WORK);
	/* 4 x (1 + 1 + 254) = 1024 steps: the bound */
	prog_exprs(&m, 4, 1, 254, 255);
	expect("1024 steps per ACK", &m, CCPK_OK);
	ccpk_validate(m.b, m.n, MAX_SID, &mi);
	checks++;
	if (mi.work != 1024) {
		failures++;
		printf("FAIL work of 4 x 256 steps: %u\n", mi.work);
	}
	prog_exprs(&m, 5, 1, 254, 255);
	expect("1280 steps per ACK", &m, CCPK_REJ_PROG_WORK);
	/* 4 of them and an empty expression: 1025 */
	prog_exprs(&m, 5, 1, 254, 255);
	m.b[20 + 16 * 4 + 4] = 0;			/* expression 4: no condition */
	m.b[20 + 16 * 4 + 12] = 0;			/* and no body */
	expect("1025 steps per ACK", &m, CCPK_REJ_PROG_WORK);
	/* the most a program without shared instructions can do: 511 */
	prog_disjoint(&m);
	expect("256 disjoint expressions", &m, CCPK_OK);
	ccpk_validate(m.b, m.n, MAX_SID, &mi);
	checks++;
	if (mi.work != 511) {
		failures++;
		printf("FAIL work of 256 disjoint expressions: %u\n", mi.work);
	}

	install(&m, 1);
	m.b[20 + 16 + 16 * 2 + 1] = 7;			/* instr 2 result: tmp 8 */
	m.b[20 + 16 + 16 * 2 + 2] = 8;
	expect("tmp register 8", &m, CCPK_REJ_PROG);
	install(&m, 1);
	m.b[20 + 16 + 16 * 2 + 1] = 1;			/* result immediate */
	expect("immediate result register", &m, CCPK_REJ_PROG);
	install(&m, 1);
	m.b[20 + 16 + 16 * 2 + 1] = 4;			/* result primitive */
	expect("primitive result register", &m, CCPK_REJ_PROG);
	install(&m, 1);
	m.b[20 + 16 + 16 * 1 + 6] = 9;			/* unknown register type */
	expect("register type 9", &m, CCPK_REJ_PROG);
	install(&m, 1);
	m.b[20 + 16] = 15;				/* opcode MAX_OP */
	expect("opcode 15", &m, CCPK_REJ_PROG);
	install(&m, 1);
	m.b[20 + 12] = 3;				/* body 3..5 > 4 */
	expect("expression beyond program", &m, CCPK_REJ_PROG);
	install(&m, 1);
	m.b[20 + 8] = 0xff; m.b[20 + 9] = 0xff; m.b[20 + 10] = 0xff; m.b[20 + 11] = 0xff;
	expect("expression start wraps u32", &m, CCPK_REJ_PROG);
	install(&m, 1);
	m.b[20 + 16 + 16 * 2 + 7] = 110;		/* report index 110 */
	expect("report register 110", &m, CCPK_REJ_PROG);
	install(&m, 1);
	m.b[12] = 2;					/* 2 expressions declared */
	expect("expression count vs length", &m, CCPK_REJ_LEN);
	install(&m, 1);
	m.b[20 + 16 + 11] = 5;				/* DEF report0 = report0 */
	expect("DEF from a register", &m, CCPK_REJ_PROG);
	install(&m, 1);
	m.b[20 + 16 + 16 * 3] = 2;			/* a DEF after the fold */
	m.b[20 + 16 + 16 * 3 + 11] = 7;			/* from tmp0 */
	expect("late DEF from a register", &m, CCPK_REJ_PROG);
	/* only DEFs: libccp never sets the report's field count */
	hdr(&m, 2, 0);
	put32(&m, 9); put32(&m, 1); put32(&m, 2);
	put32(&m, 0); put32(&m, 0); put32(&m, 0); put32(&m, 2);
	instr(&m, 2, 5, 0, 5, 0, 1, 0);
	instr(&m, 2, 5, 1, 5, 1, 1, 0);
	fix_len(&m);
	expect("only DEFs", &m, CCPK_REJ_PROG);
	hdr(&m, 2, 0);
	put32(&m, 9); put32(&m, 0); put32(&m, 0);
	fix_len(&m);
	expect("no instructions", &m, CCPK_REJ_PROG);
	/* one DEF and one fold instruction: the smallest program that reports */
	hdr(&m, 2, 0);
	put32(&m, 9); put32(&m, 1); put32(&m, 2);
	put32(&m, 1); put32(&m, 0); put32(&m, 1); put32(&m, 1);
	instr(&m, 2, 5, 0, 5, 0, 1, 0);
	instr(&m, 1, 5, 0, 5, 0, 4, 0);
	fix_len(&m);
	expect("one DEF, one fold instruction", &m, CCPK_OK);

	update(&m, 3, 1, 2, 4);
	expect("update cwnd", &m, CCPK_OK);
	ccpk_validate(m.b, m.n, MAX_SID, &mi);
	checks++;
	if (!mi.sets_cwnd || mi.sets_rate || mi.sid != 3) {
		failures++;
		printf("FAIL update info\n");
	}
	update(&m, 3, 2, 0, 15);
	expect("update control 15", &m, CCPK_OK);
	update(&m, 3, 1, 0, 110);
	expect("update control 110", &m, CCPK_REJ_FIELDS);
	update(&m, 3, 1, 2, 3);
	expect("update implicit Micros", &m, CCPK_REJ_FIELDS);
	update(&m, 3, 1, 5, 0);
	expect("update report register", &m, CCPK_REJ_FIELDS);
	update(&m, 3, 128, 0, 1);
	expect("128 updates", &m, CCPK_REJ_FIELDS);
	update(&m, 0, 1, 2, 4);
	expect("sid 0", &m, CCPK_REJ_SID);
	update(&m, MAX_SID + 1, 1, 2, 4);
	expect("sid max+1", &m, CCPK_REJ_SID);
	update(&m, 3, 1, 2, 4);
	m.b[8] = 2;					/* count 2, one field */
	expect("update count vs length", &m, CCPK_REJ_LEN);
	update(&m, 3, 1, 2, 4);
	m.n = 12; fix_len(&m);
	expect("update truncated", &m, CCPK_REJ_LEN);
	hdr(&m, 3, 3); put16(&m, 1); fix_len(&m);
	expect("update without count", &m, CCPK_REJ_SHORT);

	changeprog(&m, 7, 1, 1);
	expect("change prog", &m, CCPK_OK);
	changeprog(&m, 7, 1, 0);
	expect("change prog no updates", &m, CCPK_OK);
	changeprog(&m, 7, 1, 1);
	m.b[12] = 0xff;
	expect("change prog huge count", &m, CCPK_REJ_FIELDS);
	changeprog(&m, 70000, 1, 1);
	expect("change prog sid 70000", &m, CCPK_REJ_SID);

	/* random buffers: must never read past the end (sanitizers) */
	srand(42);
	for (i = 0; i < 200000; i++) {
		size_t n = rand() % 200;
		u8 *p = malloc(n ? n : 1);

		for (j = 0; j < n; j++)
			p[j] = rand();
		if (n >= 4 && (i & 1)) {		/* plausible headers */
			p[0] = 2 + rand() % 3;
			p[1] = 0;
			p[2] = n & 0xff;
			p[3] = n >> 8;
		}
		ccpk_validate(p, n, MAX_SID, &mi);
		free(p);
	}

	printf("%d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}
