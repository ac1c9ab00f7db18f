// SPDX-License-Identifier: GPL-2.0
/*
 * nlfuzz: send malformed CCP messages to the ccp-kernel datapath over
 * netlink (NETLINK_USERSOCK, to the kernel's port 0, as the agent does) and
 * check from /proc/net/ccp that each class was rejected for the expected
 * reason and that nothing was accepted.
 *
 *   nlfuzz [-n COUNT] [-s SEED] [-p SID]
 *   nlfuzz -a PORTID [-n COUNT] [-s SEED] [-p SID]
 *
 * -p SID: a socket id in use by a running flow; it only receives messages
 * that must be refused before libccp sees them (unknown program, or a
 * well-formed update from a socket that is not the agent's).
 * Exit status 0 when every check passed.
 *
 * -a PORTID: fuzz the agent instead, from the datapath's side: send what
 * any local user can send to the agent's netlink port (and to group 22):
 * random bytes (shorter than a netlink header too), random CREATE, MEASURE
 * and READY payloads, and well-formed hostile ones (READY, which makes
 * portus drop every flow; a 0-field MEASURE closing flow SID; CREATEs
 * replacing it, with an MSS of 2^31, and for many new socket ids; reports
 * with garbage for it), from root and from an unprivileged user.  The
 * agent must take none of them for the kernel's.  This mode checks only
 * that every datagram reached the agent's socket (ECONNREFUSED: the agent
 * is gone) or found it full; the caller checks the agent and its flows.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/netlink.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define NLMSG_HDR 16

static int failures;
static unsigned int max_sid = 1024;

struct msg {
	uint8_t b[70000];
	size_t n;
};

static void put8(struct msg *m, uint8_t v) { m->b[m->n++] = v; }
static void put16(struct msg *m, uint16_t v) { put8(m, v); put8(m, v >> 8); }
static void put32(struct msg *m, uint32_t v) { put16(m, v); put16(m, v >> 16); }
static void put64(struct msg *m, uint64_t v) { put32(m, v); put32(m, v >> 32); }
static void set_len(struct msg *m, uint16_t len) { m->b[2] = len; m->b[3] = len >> 8; }

static void hdr(struct msg *m, uint16_t type, uint32_t sid)
{
	m->n = 0;
	put16(m, type);
	put16(m, 0);
	put32(m, sid);
}

static void instr(struct msg *m, uint8_t op, uint8_t rt, uint32_t ri,
		  uint8_t lt, uint32_t li, uint8_t tt, uint32_t ti)
{
	put8(m, op);
	put8(m, rt); put32(m, ri);
	put8(m, lt); put32(m, li);
	put8(m, tt); put32(m, ti);
}

static void update_cwnd(struct msg *m, uint32_t sid)
{
	hdr(m, 3, sid);
	put32(m, 1);
	put8(m, 2); put32(m, 4); put64(m, 100 * 1448);
	set_len(m, m->n);
}

static void install(struct msg *m, uint32_t uid, uint32_t ninstr, uint8_t tmp_idx, uint8_t op)
{
	uint32_t i;

	hdr(m, 2, 0);
	put32(m, uid);
	put32(m, 1);
	put32(m, ninstr);
	put32(m, 0); put32(m, 1); put32(m, 1); put32(m, ninstr - 1);
	for (i = 0; i < ninstr; i++)
		instr(m, i == 1 ? op : 1, 7, i == 1 ? tmp_idx : 0, 7, 0, 1, 1);
	set_len(m, m->n > 65535 ? 65535 : m->n);
}

static int nl_open(void)
{
	struct sockaddr_nl a = { .nl_family = AF_NETLINK };
	int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_USERSOCK);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("nlfuzz: netlink socket");
		exit(2);
	}
	return fd;
}

/* Send @len raw bytes to the kernel. */
static void send_raw(int fd, const void *buf, size_t len)
{
	struct sockaddr_nl to = { .nl_family = AF_NETLINK };

	if (sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof(to)) < 0 &&
	    errno != ECONNREFUSED)
		fprintf(stderr, "nlfuzz: sendto(%zu): %s\n", len, strerror(errno));
}

/* Send a CCP message inside a well-formed netlink header. */
static void send_ccp(int fd, const struct msg *m)
{
	static uint8_t buf[sizeof(((struct msg *)0)->b) + NLMSG_HDR];
	uint32_t len = NLMSG_HDR + m->n;

	memset(buf, 0, NLMSG_HDR);
	memcpy(buf, &len, 4);
	memcpy(buf + NLMSG_HDR, m->b, m->n);
	send_raw(fd, buf, len);
}

#define NCTR 128
struct counters {
	char name[NCTR][64];
	unsigned long long val[NCTR];
	int n;
};

static void read_counters(struct counters *c)
{
	FILE *f = fopen("/proc/net/ccp", "r");
	char name[64];
	unsigned long long v;

	c->n = 0;
	if (!f) {
		perror("nlfuzz: /proc/net/ccp");
		exit(2);
	}
	while (c->n < NCTR && fscanf(f, "%63s %llu", name, &v) == 2) {
		snprintf(c->name[c->n], sizeof(c->name[0]), "%s", name);
		c->val[c->n++] = v;
	}
	fclose(f);
}

static unsigned long long ctr(const struct counters *c, const char *name)
{
	int i;

	for (i = 0; i < c->n; i++)
		if (!strcmp(c->name[i], name))
			return c->val[i];
	fprintf(stderr, "nlfuzz: no counter %s\n", name);
	failures++;
	return 0;
}

/*
 * Check the counter deltas of one step: @want lists "name=delta" (exact)
 * or "name>=delta".  ("accepted" counts every accepted message, the
 * agent's included, so it is only shown.)
 */
static void check(const char *step, const struct counters *a,
		  const struct counters *b, const char *const want[])
{
	unsigned long long rej = ctr(b, "rej_total") - ctr(a, "rej_total");
	unsigned long long ok = ctr(b, "rx_ok") - ctr(a, "rx_ok");
	int i, bad = 0;

	printf("nlfuzz: %-28s rejected %llu accepted %llu", step, rej, ok);
	for (i = 0; want[i]; i++) {
		char name[48];
		unsigned long long d, exp;
		const char *op = strpbrk(want[i], "=>");

		snprintf(name, sizeof(name), "%.*s", (int)(op - want[i]), want[i]);
		d = ctr(b, name) - ctr(a, name);
		if (op[0] == '>') {
			exp = strtoull(op + 2, NULL, 10);
			if (d < exp)
				bad = 1;
		} else {
			exp = strtoull(op + 1, NULL, 10);
			if (d != exp)
				bad = 1;
		}
		printf(" %s+%llu", name, d);
	}
	printf(" %s\n", bad ? "FAIL" : "ok");
	failures += bad;
}

/* ---- -a: the agent's side ----------------------------------------------- */

struct agent_target {
	int fd;
	uint32_t portid;	/* the agent's port */
	unsigned long sent, full, refused, other;
};

/* Send @len bytes to the agent's port, or (@group) to group 22. */
static void agent_send(struct agent_target *t, const void *buf, size_t len, int group)
{
	struct sockaddr_nl to = { .nl_family = AF_NETLINK };
	static unsigned int n;

	if (group)
		to.nl_groups = 1u << (22 - 1);
	else
		to.nl_pid = t->portid;
	if (sendto(t->fd, buf, len, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof(to)) >= 0)
		t->sent++;
	else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
		t->full++;
	else if (errno == ECONNREFUSED && group)
		t->sent++;	/* broadcast done; port 0 (the kernel) refused it */
	else if (errno == ECONNREFUSED)
		t->refused++;
	else
		t->other++;
	/* a steady stream, not a flood: the kernel's own reports must fit */
	if (++n % 10 == 0)
		usleep(1000);
}

static void agent_send_ccp(struct agent_target *t, const struct msg *m, int group)
{
	static uint8_t buf[sizeof(((struct msg *)0)->b) + NLMSG_HDR];
	uint32_t len = NLMSG_HDR + m->n;

	memset(buf, 0, NLMSG_HDR);
	memcpy(buf, &len, 4);
	buf[4] = 3;		/* NLMSG_DONE, as the kernel sends */
	memcpy(buf + NLMSG_HDR, m->b, m->n);
	agent_send(t, buf, len, group);
}

static void dp_create(struct msg *m, uint32_t sid, uint32_t mss, const char *alg)
{
	size_t i, l = strlen(alg);

	hdr(m, 0, sid);
	put32(m, 10 * 1448);	/* init_cwnd */
	put32(m, mss);
	put32(m, 0x0a000101); put32(m, 40000);
	put32(m, 0x0a000202); put32(m, 5201);
	for (i = 0; i < 64; i++)
		put8(m, i < l ? alg[i] : 0);
	set_len(m, m->n);
}

static void dp_measure(struct msg *m, uint32_t sid, uint32_t nfields)
{
	uint32_t i;

	hdr(m, 1, sid);
	put32(m, rand());	/* program uid */
	put32(m, nfields);
	for (i = 0; i < nfields; i++)
		put64(m, ((uint64_t)rand() << 32) | rand());
	set_len(m, m->n);
}

static void dp_ready(struct msg *m)
{
	hdr(m, 5, 0);
	put32(m, rand());
	set_len(m, m->n);
}

/* Well-formed messages only the kernel may send, aimed at flow @sid. */
static void agent_hostile(struct agent_target *t, uint32_t sid, int group)
{
	static struct msg m;
	uint32_t i;

	dp_ready(&m);
	agent_send_ccp(t, &m, group);
	dp_measure(&m, sid, 0);			/* "the flow closed" */
	agent_send_ccp(t, &m, group);
	dp_create(&m, sid, 1u << 31, "ccp_cubic");	/* issue 25: mss >= 2^31 */
	agent_send_ccp(t, &m, group);
	dp_measure(&m, sid, 3);
	agent_send_ccp(t, &m, group);
	dp_create(&m, sid, 1448, "ccp_reno");	/* the flow replaced */
	agent_send_ccp(t, &m, group);
	dp_measure(&m, sid, 16);		/* garbage to decide on */
	agent_send_ccp(t, &m, group);
	dp_create(&m, sid, 1448, "ccp\nforged log line");
	agent_send_ccp(t, &m, group);
	for (i = 0; i < 20; i++) {		/* flows nobody has */
		dp_create(&m, 2000 + rand() % 60000, 1448, "ccp_mocc");
		agent_send_ccp(t, &m, group);
	}
}

static int agent_fuzz(uint32_t portid, unsigned int count, uint32_t sid)
{
	static struct msg m;
	struct agent_target t = { .portid = portid };
	unsigned int i, j;
	pid_t pid;
	int st = 0;

	t.fd = nl_open();
	/* 1. random bytes, most shorter than a netlink header */
	for (i = 0; i < count; i++) {
		size_t n = 1 + rand() % 64;

		for (j = 0; j < n; j++)
			m.b[j] = rand();
		agent_send(&t, m.b, n, 0);
	}
	/* 2. random CREATE/MEASURE/READY payloads in a netlink header */
	for (i = 0; i < count; i++) {
		static const uint8_t types[] = { 0, 1, 5 };

		m.n = 1 + rand() % 200;
		for (j = 0; j < m.n; j++)
			m.b[j] = rand();
		m.b[0] = types[rand() % 3];
		m.b[1] = 0;
		if (i & 1)
			set_len(&m, m.n);
		agent_send_ccp(&t, &m, 0);
	}
	/* 3. well-formed hostile messages, to the port and to the group */
	for (i = 0; i < 20; i++) {
		agent_hostile(&t, sid, 0);
		agent_hostile(&t, sid, 1);
	}
	/* 4. the same from an unprivileged user */
	pid = fork();
	if (pid == 0) {
		struct agent_target u = { .portid = portid };

		if (setgid(65534) || setuid(65534))
			_exit(3);
		u.fd = nl_open();
		for (i = 0; i < 5; i++) {
			agent_hostile(&u, sid, 0);
			agent_hostile(&u, sid, 1);
		}
		printf("nlfuzz: unprivileged: sent %lu, agent buffer full %lu, refused %lu, other errors %lu\n",
		       u.sent, u.full, u.refused, u.other);
		_exit(u.refused || u.other || !u.sent ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	printf("nlfuzz: agent port %u: sent %lu, agent buffer full %lu, refused %lu, other errors %lu\n",
	       portid, t.sent, t.full, t.refused, t.other);
	if (t.refused || t.other || !t.sent || !WIFEXITED(st) || WEXITSTATUS(st)) {
		printf("nlfuzz: FAILED (the agent's socket went away, or sends failed)\n");
		return 1;
	}
	printf("nlfuzz: all datagrams reached the agent's socket\n");
	return 0;
}

int main(int argc, char **argv)
{
	static struct msg m;
	struct counters a, b;
	unsigned int count = 2000, seed = 1, live_sid = 0, agent_port = 0, i, j;
	char buf[64];
	FILE *f;
	int fd, opt;

	while ((opt = getopt(argc, argv, "n:s:p:a:")) != -1) {
		switch (opt) {
		case 'n': count = atoi(optarg); break;
		case 's': seed = atoi(optarg); break;
		case 'p': live_sid = atoi(optarg); break;
		case 'a': agent_port = strtoul(optarg, NULL, 10); break;
		default:
			fprintf(stderr, "usage: nlfuzz [-a AGENT_PORTID] [-n COUNT] [-s SEED] [-p LIVE_SID]\n");
			return 2;
		}
	}
	srand(seed);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (agent_port)
		return agent_fuzz(agent_port, count, live_sid);
	f = fopen("/sys/module/ccp_kernel/parameters/max_flows", "r");
	if (f && fgets(buf, sizeof(buf), f))
		max_sid = atoi(buf);
	if (f)
		fclose(f);
	fd = nl_open();

	/* 1. random bytes, no framing at all */
	read_counters(&a);
	for (i = 0; i < count; i++) {
		size_t n = 1 + rand() % 2000;

		for (j = 0; j < n; j++)
			m.b[j] = rand();
		send_raw(fd, m.b, n);
	}
	read_counters(&b);
	{
		const char *const w[] = { NULL };
		check("random bytes", &a, &b, w);
		if (ctr(&b, "rej_total") - ctr(&a, "rej_total") < count) {
			printf("nlfuzz: random bytes: fewer rejections than messages FAIL\n");
			failures++;
		}
	}

	/* 2. random payloads in a valid netlink header, plausible CCP types */
	read_counters(&a);
	for (i = 0; i < count; i++) {
		m.n = 1 + rand() % 600;
		for (j = 0; j < m.n; j++)
			m.b[j] = rand();
		if (i & 1) {
			m.b[0] = 2 + rand() % 3;
			m.b[1] = 0;
		}
		send_ccp(fd, &m);
	}
	read_counters(&b);
	{
		char w0[48];
		const char *const w[] = { w0, NULL };

		snprintf(w0, sizeof(w0), "rej_total=%u", count);
		check("random CCP payloads", &a, &b, w);
	}

	/* 3. truncated messages: every prefix of a valid UPDATE_FIELDS */
	read_counters(&a);
	update_cwnd(&m, max_sid);
	for (i = 0; i < 25; i++) {
		struct msg t = m;

		t.n = i;
		send_ccp(fd, &t);
	}
	/* and declared longer than sent */
	update_cwnd(&m, max_sid);
	set_len(&m, 200);
	send_ccp(fd, &m);
	read_counters(&b);
	{
		const char *const w[] = { "rej_short=8", "rej_bad_len=18", NULL };
		check("truncated", &a, &b, w);
	}

	/* 4. oversized: 60000-byte INSTALL body, Len 65535 with 100 bytes */
	read_counters(&a);
	hdr(&m, 2, 0);
	while (m.n < 60000)
		put8(&m, rand());
	set_len(&m, 60000);
	send_ccp(fd, &m);
	hdr(&m, 3, 1);
	while (m.n < 100)
		put8(&m, 0);
	set_len(&m, 65535);
	send_ccp(fd, &m);
	read_counters(&b);
	{
		const char *const w[] = { "rej_total=2", NULL };
		check("oversized", &a, &b, w);
	}

	/* 5. a 256-instruction program (hangs libccp) and 1000 instructions */
	read_counters(&a);
	install(&m, 77, 256, 0, 1);
	send_ccp(fd, &m);
	install(&m, 78, 1000, 0, 1);
	send_ccp(fd, &m);
	read_counters(&b);
	{
		const char *const w[] = { "rej_prog_too_big=2", "rej_total=2", NULL };
		check("256-instruction INSTALL", &a, &b, w);
	}

	/* 6. programs with a bad register or opcode */
	read_counters(&a);
	install(&m, 79, 10, 8, 1);	/* tmp register 8 */
	send_ccp(fd, &m);
	install(&m, 80, 10, 0, 15);	/* opcode 15 */
	send_ccp(fd, &m);
	install(&m, 81, 10, 0, 1);
	m.b[8 + 12 + 4] = 200;		/* condition runs past the program */
	send_ccp(fd, &m);
	read_counters(&b);
	{
		const char *const w[] = { "rej_bad_prog=3", NULL };
		check("bad programs", &a, &b, w);
	}

	/* 7. wrong socket ids */
	read_counters(&a);
	{
		const uint32_t sids[] = { 0, max_sid + 1, 65535, 0xffffffffu, max_sid };

		for (i = 0; i < 5; i++) {
			update_cwnd(&m, sids[i]);
			send_ccp(fd, &m);
		}
	}
	read_counters(&b);
	{
		const char *const w[] = { "rej_bad_sid=4", "rej_stale_sid=1", NULL };
		check("wrong socket ids", &a, &b, w);
	}

	/* 8. bad update fields, and an unknown program for a live flow */
	read_counters(&a);
	update_cwnd(&m, max_sid);
	m.b[13] = 3;			/* implicit register 3 (Micros) */
	send_ccp(fd, &m);
	update_cwnd(&m, max_sid);
	m.b[12] = 0;			/* control register ... */
	m.b[13] = 200;			/* ... 200 */
	send_ccp(fd, &m);
	if (live_sid) {
		hdr(&m, 4, live_sid);
		put32(&m, 0xdead);
		put32(&m, 0);
		set_len(&m, m.n);
		send_ccp(fd, &m);
	}
	read_counters(&b);
	{
		const char *const w1[] = { "rej_bad_fields=2", "rej_unknown_prog=1", NULL };
		const char *const w0[] = { "rej_bad_fields=2", NULL };

		check("bad fields / unknown prog", &a, &b, live_sid ? w1 : w0);
	}

	/* 9. a sender without CAP_NET_ADMIN */
	read_counters(&a);
	{
		pid_t pid = fork();

		if (pid == 0) {
			if (setgid(65534) || setuid(65534))
				_exit(3);
			fd = nl_open();
			update_cwnd(&m, live_sid ? live_sid : 1);
			send_ccp(fd, &m);
			_exit(0);
		}
		waitpid(pid, NULL, 0);
	}
	read_counters(&b);
	{
		const char *const w[] = { "rej_perm=1", NULL };
		check("unprivileged sender", &a, &b, w);
	}

	/* 10. a well-formed update for the live flow from a privileged socket
	 * that is not the agent's: only the agent steers flows */
	if (live_sid) {
		read_counters(&a);
		update_cwnd(&m, live_sid);
		send_ccp(fd, &m);
		read_counters(&b);
		{
			const char *const w[] = { "rej_not_agent=1", NULL };

			check("update not from the agent", &a, &b, w);
		}
	}

	printf("nlfuzz: %s\n", failures ? "FAILED" : "all checks passed");
	return failures ? 1 : 0;
}
