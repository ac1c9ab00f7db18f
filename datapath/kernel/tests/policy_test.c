// SPDX-License-Identifier: GPL-2.0
/*
 * User-space unit test of ccp_policy.h: CREATE retries back off and stay
 * bounded, a faulting program's flow is announced again at once and then
 * ever later, the ACK path takes a lock only when the flow needs it, and
 * the namespace policy admits other namespaces only within their quota.
 * A small model of the flow state machine then checks that no flow stays
 * unannounced when CREATEs get lost at random.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ccp_policy.h"

static int failures, checks;

#define EXPECT(cond) do { \
	checks++; \
	if (!(cond)) { \
		failures++; \
		fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
	} \
} while (0)

/*
 * A model of one flow's announcements (the logic of ccpk_flow_sync(),
 * ccpk_announce() and the netlink answer, with HZ = 1000): each CREATE is
 * lost with probability @loss_pct; an answered one attaches the flow.
 * Returns the time (ms) at which the flow attached, or -1.
 */
static long model_attach(unsigned int seed, unsigned int loss_pct, u32 tmo_ms,
			 unsigned long horizon_ms)
{
	unsigned long now, retry_at = 0;
	u8 mode = CCPK_FALLBACK;
	u32 tries = 0;

	srand(seed);
	for (now = 0; now < horizon_ms; now++) {	/* one ACK per ms */
		if (!ccpk_flow_due(mode, false, true, now, retry_at, true))
			continue;
		if (mode == CCPK_ATTACHED)
			return (long)now;
		/* announce */
		mode = CCPK_PENDING;
		retry_at = now + ccpk_retry_ms(tmo_ms, tries);
		tries++;
		if ((unsigned int)(rand() % 100) >= loss_pct)
			mode = CCPK_ATTACHED;	/* answered (next ACK sees it) */
	}
	return -1;
}

/*
 * The per-user table against a plain array: 200,000 random takes and puts
 * by 300 users (many sharing a home entry) in a 1024-entry table, quota 40;
 * after every operation each user's count matches and every entry is
 * reachable from its home (no hole breaks a probe chain).
 */
static void uid_table_model(void)
{
	enum { SIZE = 1024, USERS = 300, QUOTA = 40 };
	static struct ccpk_uid_count t[SIZE];
	static u32 held[USERS];
	u32 mask = SIZE - 1, op, u, i, bad = 0, refused = 0, total = 0;
	unsigned int seed = 7;

	for (op = 0; op < 200000 && !bad; op++) {
		/* uids 0, 1024, 2048, ...: the same home entry for a third of them */
		u = (u32)rand_r(&seed) % USERS;
		u32 uid = u % 3 ? u * 7919 : u * SIZE;

		if (rand_r(&seed) % 2) {
			bool ok = ccpk_uid_take(t, mask, uid, QUOTA);

			if (ok != (held[u] < QUOTA))
				bad++;
			if (ok) {
				held[u]++;
				total++;
			} else {
				refused++;
			}
		} else if (held[u]) {
			ccpk_uid_put(t, mask, uid);
			held[u]--;
			total--;
		}
		if (op % 997)
			continue;
		for (i = 0; i < USERS; i++) {
			u32 id = i % 3 ? i * 7919 : i * SIZE;
			struct ccpk_uid_count *e = ccpk_uid_slot(t, mask, id);

			if (!e || (held[i] ? (e->uid != id || e->n != held[i]) : e->n != 0))
				bad++;
		}
	}
	EXPECT(bad == 0);
	EXPECT(refused > 0 && total > 0);
	/* all given back: the table is empty */
	for (u = 0; u < USERS; u++) {
		u32 uid = u % 3 ? u * 7919 : u * SIZE;

		while (held[u]--)
			ccpk_uid_put(t, mask, uid);
	}
	for (i = 0, bad = 0; i < SIZE; i++)
		bad += t[i].n != 0;
	EXPECT(bad == 0);
	printf("uid table: %u operations, %u refusals at quota %d, 0 mismatches\n",
	       op, refused, QUOTA);
}

int main(void)
{
	unsigned int s;
	int stuck = 0;
	long worst = 0;

	/* retries: agent_timeout_ms, doubling, at most 64 times */
	EXPECT(ccpk_retry_ms(1000, 0) == 1000);
	EXPECT(ccpk_retry_ms(1000, 1) == 2000);
	EXPECT(ccpk_retry_ms(1000, 6) == 64000);
	EXPECT(ccpk_retry_ms(1000, 200) == 64000);
	EXPECT(ccpk_retry_ms(0, 0) == CCPK_RETRY_DEFAULT_MS);
	EXPECT(ccpk_retry_ms(0xffffffffU, 255) == (0xffffffffU >> 6) << 6);
	EXPECT(ccpk_retry_ms(250, 2) == 1000);

	/*
	 * a full buffer: retried after an eighth of the timeout, doubling for
	 * each busy answer in a row up to the timeout, never counted as a try
	 */
	{
		bool counted;
		u32 tmo, busy, prev;

		EXPECT(ccpk_create_wait_ms(1000, 5, 1, &counted) == 125 && !counted);
		EXPECT(ccpk_create_wait_ms(1000, 5, 2, &counted) == 250 && !counted);
		EXPECT(ccpk_create_wait_ms(1000, 0, 4, &counted) == 1000 && !counted);
		EXPECT(ccpk_create_wait_ms(1000, 0, 255, &counted) == 1000 && !counted);
		EXPECT(ccpk_create_wait_ms(100, 5, 1, &counted) == 20 && !counted);
		EXPECT(ccpk_create_wait_ms(100, 0, 3, &counted) == 80);
		EXPECT(ccpk_create_wait_ms(100, 0, 4, &counted) == 100);
		EXPECT(ccpk_create_wait_ms(10, 0, 9, &counted) == 20);
		EXPECT(ccpk_create_wait_ms(0, 0, 1, &counted) == 125 && !counted);
		EXPECT(ccpk_create_wait_ms(1000, 5, 0, &counted) == 32000 && counted);
		EXPECT(ccpk_create_wait_ms(1000, 0, 0, &counted) == 1000 && counted);
		/* non-decreasing in @busy, bounded by the timeout (or 20 ms) */
		for (tmo = 0; tmo < 70000; tmo = tmo * 3 + 7) {
			u32 full = ccpk_retry_ms(tmo, 0);
			u32 cap = full > CCPK_BUSY_WAIT_MIN_MS ? full : CCPK_BUSY_WAIT_MIN_MS;

			prev = 0;
			for (busy = 1; busy < 300; busy++) {
				u32 w = ccpk_create_wait_ms(tmo, 0, busy, &counted);

				EXPECT(w >= prev && w <= cap && w >= CCPK_BUSY_WAIT_MIN_MS);
				prev = w;
			}
			EXPECT(prev == cap);
		}
	}

	/* faults: the first fresh CREATE at once, then 1, 2, 4 ... 64 timeouts */
	EXPECT(ccpk_fault_backoff_ms(1000, 0) == 0);
	EXPECT(ccpk_fault_backoff_ms(1000, 1) == 0);
	EXPECT(ccpk_fault_backoff_ms(1000, 2) == 1000);
	EXPECT(ccpk_fault_backoff_ms(1000, 3) == 2000);
	EXPECT(ccpk_fault_backoff_ms(1000, 255) == 64000);
	EXPECT(!ccpk_fault_exceeded(7, 8));
	EXPECT(ccpk_fault_exceeded(8, 8));
	EXPECT(ccpk_fault_exceeded(65535, 8));
	EXPECT(!ccpk_fault_exceeded(65535, 0));	/* 0: never */
	EXPECT(ccpk_fault_exceeded(1, 1));

	/* jiffies wrap */
	EXPECT(ccpk_time_reached(5, 5));
	EXPECT(ccpk_time_reached(6, 5));
	EXPECT(!ccpk_time_reached(4, 5));
	EXPECT(ccpk_time_reached(3, (unsigned long)-3));
	EXPECT(!ccpk_time_reached((unsigned long)-3, 3));

	/* which ACKs take the flow's lock */
	EXPECT(ccpk_flow_due(CCPK_ATTACHED, false, true, 0, 100, true));
	EXPECT(!ccpk_flow_due(CCPK_ATTACHED, false, true, 0, 100, false));
	EXPECT(!ccpk_flow_due(CCPK_FALLBACK, false, false, 1000, 0, true));
	EXPECT(!ccpk_flow_due(CCPK_FALLBACK, false, true, 99, 100, true));
	EXPECT(ccpk_flow_due(CCPK_FALLBACK, false, true, 100, 100, true));
	EXPECT(!ccpk_flow_due(CCPK_PENDING, false, true, 99, 100, true));
	EXPECT(ccpk_flow_due(CCPK_PENDING, false, true, 100, 100, false));
	EXPECT(ccpk_flow_due(CCPK_FALLBACK, true, false, 0, 100, true));
	EXPECT(ccpk_flow_due(CCPK_PENDING, true, true, 0, 100, false));
	EXPECT(!ccpk_flow_due(CCPK_FREE, false, true, 100, 0, true));

	/* what /proc shows */
	EXPECT(ccpk_mode_shown(CCPK_ATTACHED, false, true) == CCPK_ATTACHED);
	EXPECT(ccpk_mode_shown(CCPK_ATTACHED, true, false) == CCPK_FALLBACK);
	EXPECT(ccpk_mode_shown(CCPK_ATTACHED, true, true) == CCPK_PENDING);
	EXPECT(ccpk_mode_shown(CCPK_FALLBACK, true, true) == CCPK_PENDING);
	EXPECT(ccpk_mode_shown(CCPK_FREE, true, true) == CCPK_FREE);

	/* namespaces */
	EXPECT(ccpk_netns_admit(true, 5000, 0, 5000, 0));
	EXPECT(!ccpk_netns_admit(false, 0, 0, 0, 512));		/* default: none */
	EXPECT(ccpk_netns_admit(false, 2, 3, 10, 512));
	EXPECT(!ccpk_netns_admit(false, 3, 3, 10, 512));	/* quota full */
	EXPECT(!ccpk_netns_admit(false, 0, 3, 512, 512));	/* all others full */

	/*
	 * No flow stuck: with half the CREATEs lost, every one of 2000 model
	 * flows attaches; the back-off keeps the worst case within the sum of
	 * the retry intervals of the tries it took.
	 */
	for (s = 1; s <= 2000; s++) {
		long t = model_attach(s, 50, 1000, 3600000);

		if (t < 0)
			stuck++;
		else if (t > worst)
			worst = t;
	}
	EXPECT(stuck == 0);
	printf("model: 2000 flows, 50%% of CREATEs lost: %d stuck, last attached after %ld ms\n",
	       stuck, worst);
	/* a lossless agent: attached on the ACK after the first CREATE */
	EXPECT(model_attach(1, 0, 1000, 10) == 1);

	/* slots per user: a share of max_flows, at least one */
	EXPECT(ccpk_uid_quota(1024, 50) == 512);
	EXPECT(ccpk_uid_quota(1024, 100) == 1024);
	EXPECT(ccpk_uid_quota(1024, 250) == 1024);
	EXPECT(ccpk_uid_quota(3, 10) == 1);
	EXPECT(ccpk_uid_quota(65535, 0) == 1);
	uid_table_model();

	printf("%d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}
