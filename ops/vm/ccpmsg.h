/* SPDX-License-Identifier: GPL-2.0 */
/*
 * libccp's message format for the guest tools (fakeagent.c, nlfuzz.c): a
 * buffer, little-endian writes, the 8-byte header (type, length, socket id)
 * and one fold-program instruction.  Define CCPMSG_CAP before including it
 * for a buffer other than 4096 bytes (nlfuzz sends oversized messages).
 */
#ifndef CCPMSG_H
#define CCPMSG_H

#include <stddef.h>
#include <stdint.h>

#ifndef CCPMSG_CAP
#define CCPMSG_CAP 4096
#endif

struct msg {
	uint8_t b[CCPMSG_CAP];
	size_t n;
};

static inline void put8(struct msg *m, uint8_t v) { m->b[m->n++] = v; }
static inline void put16(struct msg *m, uint16_t v) { put8(m, v); put8(m, v >> 8); }
static inline void put32(struct msg *m, uint32_t v) { put16(m, v); put16(m, v >> 16); }
static inline void put64(struct msg *m, uint64_t v) { put32(m, v); put32(m, v >> 32); }

/* the header's length field (bytes 2-3) */
static inline void set_len(struct msg *m, uint16_t len)
{
	m->b[2] = len & 0xff;
	m->b[3] = len >> 8;
}

/* start a message: type, length 0 (set_len when done), socket id */
static inline void hdr(struct msg *m, uint16_t type, uint32_t sid)
{
	m->n = 0;
	put16(m, type);
	put16(m, 0);
	put32(m, sid);
}

/* one instruction: opcode, then result, left and right operands (type, index) */
static inline void instr(struct msg *m, uint8_t op, uint8_t rt, uint32_t ri,
			 uint8_t lt, uint32_t li, uint8_t tt, uint32_t ti)
{
	put8(m, op);
	put8(m, rt); put32(m, ri);
	put8(m, lt); put32(m, li);
	put8(m, tt); put32(m, ti);
}

#endif
