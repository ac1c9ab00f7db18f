/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Decisions of the CCP datapath that do not need kernel state: when a flow
 * announces itself (again) to the agent, how long it waits for an answer,
 * when faults of its program make it fall back, whether a socket of a
 * network namespace other than the initial one gets a connection slot, and
 * how many slots one user may hold.
 * Pure functions: the same header is compiled into the module and into a
 * user-space unit test (tests/policy_test.c).  Times are in jiffies or
 * milliseconds as named; jiffies comparisons are wrap-safe like the
 * kernel's time_after_eq().
 */
#ifndef CCPK_POLICY_H
#define CCPK_POLICY_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdbool.h>
#include <stdint.h>
#endif

#include "types.h"	/* libccp: u8/u16/u32/u64 */

/* per-flow control mode (ccpk_flow.mode) */
enum ccpk_mode {
	CCPK_FREE = 0,		/* slot unused */
	CCPK_PENDING,		/* CREATE sent, waiting for the agent: Reno */
	CCPK_ATTACHED,		/* agent in control: libccp drives cwnd/rate */
	CCPK_FALLBACK,		/* in-kernel Reno; CREATE (again) when due */
};

/* CREATE retries back off up to this many times agent_timeout_ms */
#define CCPK_RETRY_MAX_SHIFT	6
/* agent_timeout_ms 0 ("only on send failure") still retries CREATEs */
#define CCPK_RETRY_DEFAULT_MS	1000U

/*
 * How long a flow waits for the answer to its CREATE before sending it
 * again (ms): agent_timeout_ms, doubled for every try that went
 * unanswered, at most 64 times as long.
 */
static inline u32 ccpk_retry_ms(u32 tmo_ms, u32 tries)
{
	u32 shift = tries < CCPK_RETRY_MAX_SHIFT ? tries : CCPK_RETRY_MAX_SHIFT;

	if (!tmo_ms)
		tmo_ms = CCPK_RETRY_DEFAULT_MS;
	if (tmo_ms > (0xffffffffU >> CCPK_RETRY_MAX_SHIFT))
		tmo_ms = 0xffffffffU >> CCPK_RETRY_MAX_SHIFT;
	return tmo_ms << shift;
}

/*
 * How long a flow that just sent (or tried to send) its CREATE waits for
 * the answer before sending it again (ms), and whether that counts as a
 * try.  A CREATE that went out backs off with every try.  One that found
 * the agent's buffer full (-EAGAIN; @busy: the how-manyth in a row, 1 the
 * first, 0 for a CREATE that went out) is tried again after an eighth of
 * agent_timeout_ms (at least 20 ms), twice that after the next, and so on
 * up to agent_timeout_ms, without counting as a try: the agent is there,
 * only busy, and drains its buffer (a few hundred messages) in a fraction
 * of a second; waiting a whole timeout at once let only a bufferful in
 * per second (2,000 flows took 7.6 s to re-attach in the guest), and not
 * backing off at all had thousands of flows knock every 125 ms on an
 * agent that stays busy.
 */
#define CCPK_BUSY_WAIT_MIN_MS	20U

static inline u32 ccpk_create_wait_ms(u32 tmo_ms, u32 tries, u32 busy,
				      bool *count_try)
{
	u32 full = ccpk_retry_ms(tmo_ms, 0);
	u32 ms = full / 8;

	*count_try = !busy;
	if (!busy)
		return ccpk_retry_ms(tmo_ms, tries);
	if (ms < CCPK_BUSY_WAIT_MIN_MS)
		ms = CCPK_BUSY_WAIT_MIN_MS;
	while (--busy && ms < full)
		ms *= 2;
	return ms < full ? ms : (full > CCPK_BUSY_WAIT_MIN_MS ? full : CCPK_BUSY_WAIT_MIN_MS);
}

/*
 * A flow whose program faulted on fault_limit ACKs in a row falls back
 * and announces itself afresh.  @streak counts such fallbacks since the
 * program last reported cleanly (1 = the first): the first CREATE goes out
 * at once, later ones wait retry_ms(streak - 2), so an agent that keeps
 * handing out a faulting program is asked again after 1, 2, 4 ... 64
 * agent timeouts, and the flow runs Reno in between.
 */
static inline u32 ccpk_fault_backoff_ms(u32 tmo_ms, u32 streak)
{
	return streak <= 1 ? 0 : ccpk_retry_ms(tmo_ms, streak - 2);
}

/*
 * Has a flow's program faulted long enough to fall back?  @faults is the
 * number of consecutive faulting ACKs including this one; @limit the
 * fault_limit parameter (0: never).
 */
static inline bool ccpk_fault_exceeded(u32 faults, u32 limit)
{
	return limit && faults >= limit;
}

/* wrap-safe "now is at or after then" for jiffies */
static inline bool ccpk_time_reached(unsigned long now, unsigned long then)
{
	return (long)(now - then) >= 0;
}

/*
 * Does a flow need its lock on this ACK (or the sweep's attention)?  A
 * flow whose state belongs to an earlier agent generation (@stale) must be
 * brought in line; an attached one runs its program; a pending one
 * re-sends its CREATE when @retry_at has come; one in fallback announces
 * itself when an agent is up and @retry_at has come.  Everything else runs
 * the in-kernel Reno without any lock.  @ack: for the ACK path (attached
 * flows run their program); the sweep passes false.
 */
static inline bool ccpk_flow_due(u8 mode, bool stale, bool agent_up,
				 unsigned long now, unsigned long retry_at,
				 bool ack)
{
	if (stale)
		return true;
	switch (mode) {
	case CCPK_ATTACHED:
		return ack;
	case CCPK_PENDING:
		return agent_up && ccpk_time_reached(now, retry_at);
	case CCPK_FALLBACK:
		return agent_up && ccpk_time_reached(now, retry_at);
	default:
		return false;
	}
}

/*
 * The mode /proc shows for a flow: the stored one, unless the agent it
 * belongs to is gone or replaced (@stale) and the flow has not caught up
 * yet: then fallback, or pending when another agent is up (it is being
 * announced to it).
 */
static inline u8 ccpk_mode_shown(u8 mode, bool stale, bool agent_up)
{
	if (!stale || mode == CCPK_FREE)
		return mode;
	return agent_up ? CCPK_PENDING : CCPK_FALLBACK;
}

/*
 * The namespace policy: may a socket take a connection slot?  Sockets of
 * the initial network namespace may (up to max_flows, checked elsewhere);
 * a socket of any other namespace only while its namespace holds fewer
 * than @quota slots (netns_quota; 0: none) and all other namespaces
 * together fewer than @total (netns_total).
 */
static inline bool ccpk_netns_admit(bool init_ns, u32 ns_flows, u32 quota,
				    u32 other_flows, u32 total)
{
	if (init_ns)
		return true;
	return ns_flows < quota && other_flows < total;
}

/*
 * Slots per user.  One user's sockets (the socket's owner, a kuid: the same
 * user in every user and network namespace) may hold at most @pct percent
 * of @max_flows slots (at least one), so that no user can take every slot
 * and leave everyone else's flows to the in-kernel Reno.  100: no limit.
 */
static inline u32 ccpk_uid_quota(u32 max_flows, u32 pct)
{
	u64 q = (u64)max_flows * (pct > 100 ? 100 : pct) / 100;

	return q ? (u32)q : 1;
}

/*
 * The slots each user holds: an open-addressing table (linear probing) of
 * @mask + 1 entries, a power of two at least twice max_flows, so it never
 * fills (no more users than slots).  n == 0 marks an empty entry; removal
 * shifts the entries after it back (no tombstones).  Under ccpk->lock.
 */
struct ccpk_uid_count {
	u32 uid;
	u32 n;
};

static inline u32 ccpk_uid_home(u32 uid, u32 mask)
{
	return (u32)(uid * 2654435761u) & mask;	/* Knuth's multiplicative hash */
}

/* The entry of @uid, or the empty entry where it would go. */
static inline struct ccpk_uid_count *ccpk_uid_slot(struct ccpk_uid_count *t,
						   u32 mask, u32 uid)
{
	u32 i = ccpk_uid_home(uid, mask), k;

	for (k = 0; k <= mask; k++, i = (i + 1) & mask)
		if (!t[i].n || t[i].uid == uid)
			return &t[i];
	return NULL;	/* full: cannot happen at the sizes above */
}

/* One more slot for @uid if it holds fewer than @quota; false: refused. */
static inline bool ccpk_uid_take(struct ccpk_uid_count *t, u32 mask, u32 uid,
				 u32 quota)
{
	struct ccpk_uid_count *e = ccpk_uid_slot(t, mask, uid);

	if (!e || e->n >= quota)
		return false;
	e->uid = uid;
	e->n++;
	return true;
}

/* @uid gives a slot back (it holds one). */
static inline void ccpk_uid_put(struct ccpk_uid_count *t, u32 mask, u32 uid)
{
	struct ccpk_uid_count *e = ccpk_uid_slot(t, mask, uid);
	u32 i, j;

	if (!e || !e->n || --e->n)
		return;
	/* e is empty now: move back each later entry whose home allows it */
	i = (u32)(e - t);
	for (j = (i + 1) & mask; t[j].n; j = (j + 1) & mask) {
		u32 h = ccpk_uid_home(t[j].uid, mask);

		/* t[j] may move to i when i lies cyclically in [h, j) */
		if (((j - h) & mask) >= ((j - i) & mask)) {
			t[i] = t[j];
			t[j].n = 0;
			i = j;
		}
	}
}

#endif /* CCPK_POLICY_H */
