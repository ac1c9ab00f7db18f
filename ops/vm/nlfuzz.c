// SPDX-License-Identifier: GPL-2.0
/*
 * nlfuzz: hostile and malformed traffic on the CCP datapath's generic
 * netlink family "ccp" (datapath/kernel/ccp_genl.h), reporting the errno
 * the kernel answered for every attempt.
 *
 *   nlfuzz [-n COUNT] [-s SEED] [-p SID]          fuzz the datapath (root)
 *   nlfuzz -a PORTID [-n COUNT] [-s SEED] [-p SID] fuzz the agent
 *   nlfuzz -u [-a PORTID] [-n COUNT] [-p SID]     what an unprivileged user can do
 *   nlfuzz -f SECONDS [-U]                        flood the family (as nobody: -U)
 *   nlfuzz -j SECONDS                             join groups in advance (nobody)
 *   nlfuzz -i                                     print the family id
 *
 * Default: malformed and hostile CCP messages to the datapath, as root,
 * each with NLM_F_ACK; /proc/net/ccp must show each class rejected for the
 * expected reason (or the genl core must have refused it first, with the
 * expected errno), and nothing accepted.  -p SID: a socket id in use by a
 * running flow; it only receives messages that must be refused before
 * libccp sees them (unknown program, or a well-formed update from a socket
 * that is not the agent's).  Exit status 0 when every check passed.
 *
 * -a PORTID: from the datapath's side, what a local process can send to the
 * agent's netlink port: random bytes (shorter
 * than a netlink header too), random and hostile datapath messages (READY,
 * which makes portus drop every flow; a 0-field MEASURE closing flow SID;
 * CREATEs replacing it; reports with garbage).  As root every datagram
 * must reach the agent's socket (which must drop them: the caller checks
 * the agent); as nobody every attempt must fail with EPERM.
 *
 * -u: as nobody (uid 65534), every way in: each command to the family
 * (EPERM for CCP_CMD_AGENT_MSG and CCP_CMD_AGENT_HELLO, which need
 * CAP_NET_ADMIN; EOPNOTSUPP for the others), forged datapath messages to
 * the agent's port (-a): all must fail.  (The family has no multicast
 * group to join: -j covers group ids taken in advance.)
 *
 * -f SECONDS: send agent messages (INSTALLs, updates, random payloads) as
 * fast as possible for SECONDS, resolving the family again whenever it is
 * gone (the caller unloads and reloads the module meanwhile); -U as
 * nobody.  Prints the errno counts.
 *
 * -j SECONDS: as nobody, join every multicast group id that can be joined
 * (before the module registers its family: version 1 of the family
 * multicast its messages, and a group id joined in advance heard them),
 * then count for SECONDS what arrives; exit status 1 if any datapath
 * message (CCP_CMD_DATAPATH_MSG) arrived.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../datapath/kernel/ccp_genl.h"
#define CCPMSG_CAP 70000
#include "ccpmsg.h"

#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif
#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif

#define NOBODY 65534
#define HDRS (NLMSG_HDRLEN + GENL_HDRLEN + NLA_HDRLEN)

static int failures;
static unsigned int max_sid = 1024;

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

/* ---- errno tallies --------------------------------------------------------- */

#define NERR 160
struct tally {
	unsigned long n[NERR + 1];	/* [0]: accepted; [NERR]: no answer */
};

static void tally_add(struct tally *t, int err)
{
	t->n[err >= 0 && err < NERR ? err : NERR]++;
}

static const char *ename(int e)
{
	const char *s = e == 0 ? "ok" : e == NERR ? "no-answer" : strerrorname_np(e);

	return s ? s : "?";
}

/* "ok 3, EINVAL 1997" */
static const char *tally_str(const struct tally *t)
{
	static char out[512];
	size_t at = 0;
	int e;

	out[0] = 0;
	for (e = 0; e <= NERR && at < sizeof(out) - 40; e++)
		if (t->n[e])
			at += snprintf(out + at, sizeof(out) - at, "%s%s %lu",
				       at ? ", " : "", ename(e), t->n[e]);
	if (!at)
		snprintf(out, sizeof(out), "nothing sent");
	return out;
}

static unsigned long tally_total(const struct tally *t)
{
	unsigned long s = 0;
	int e;

	for (e = 0; e <= NERR; e++)
		s += t->n[e];
	return s;
}

/* ---- generic netlink ------------------------------------------------------- */

struct genl {
	int fd;
	uint16_t family;	/* 0: not resolved */
	uint32_t seq;
};

static int nl_socket(int proto)
{
	struct sockaddr_nl a = { .nl_family = AF_NETLINK };
	struct timeval tv = { .tv_sec = 1 };
	int one = 1, fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, proto);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("nlfuzz: netlink socket");
		exit(2);
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
	setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
	return fd;
}

static size_t align4(size_t n) { return (n + 3) & ~(size_t)3; }
static int32_t rd32(const void *p) { int32_t v; memcpy(&v, p, 4); return v; }
static uint16_t rd16(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* A generic netlink message with one attribute (none if @attr is 0). */
static size_t genl_build(uint8_t *buf, uint16_t type, uint16_t flags, uint32_t seq,
			 uint8_t cmd, uint8_t version, uint16_t attr,
			 const void *val, size_t len)
{
	struct nlmsghdr *nh = (struct nlmsghdr *)buf;
	struct genlmsghdr *gh = (struct genlmsghdr *)(buf + NLMSG_HDRLEN);
	size_t n = NLMSG_HDRLEN + GENL_HDRLEN;

	memset(buf, 0, HDRS);
	if (attr) {
		struct nlattr *a = (struct nlattr *)(buf + n);

		a->nla_len = NLA_HDRLEN + len;
		a->nla_type = attr;
		memcpy(buf + n + NLA_HDRLEN, val, len);
		n += align4(NLA_HDRLEN + len);
		memset(buf + n - (align4(NLA_HDRLEN + len) - NLA_HDRLEN - len), 0,
		       align4(NLA_HDRLEN + len) - NLA_HDRLEN - len);
	}
	nh->nlmsg_len = n;
	nh->nlmsg_type = type;
	nh->nlmsg_flags = flags;
	nh->nlmsg_seq = seq;
	gh->cmd = cmd;
	gh->version = version;
	return n;
}

static int send_to(int fd, const void *buf, size_t len, uint32_t port, uint32_t groups)
{
	struct sockaddr_nl to = { .nl_family = AF_NETLINK, .nl_pid = port,
				  .nl_groups = groups };

	if (sendto(fd, buf, len, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof(to)) < 0)
		return errno;
	return 0;
}

/*
 * Wait for the answer to @seq: 0 (acknowledged), a positive errno, or
 * NERR (no answer within a second).  Anything else is skipped.
 */
static int wait_ack(int fd, uint32_t seq)
{
	static uint8_t buf[16384];
	int tries;

	for (tries = 0; tries < 64; tries++) {
		struct nlmsghdr *nh = (struct nlmsghdr *)buf;
		ssize_t r = recv(fd, buf, sizeof(buf), 0);

		if (r < 0)
			return errno == EAGAIN ? NERR : errno;
		if (r < NLMSG_HDRLEN || nh->nlmsg_type != NLMSG_ERROR ||
		    nh->nlmsg_seq != seq || r < NLMSG_HDRLEN + 4)
			continue;
		return -rd32(buf + NLMSG_HDRLEN);
	}
	return NERR;
}

/* Read (without waiting) and drop what is queued on @fd. */
static void drain(int fd)
{
	static uint8_t buf[16384];

	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
}

/* Look up family @name (and its version, if @version): 0 or an errno. */
static int resolve(int fd, const char *name, uint16_t *id, uint32_t *version)
{
	static uint8_t buf[16384];
	static uint32_t seq = 1000000;
	size_t n;
	int tries, e;

	n = genl_build(buf, GENL_ID_CTRL, NLM_F_REQUEST, ++seq, CTRL_CMD_GETFAMILY, 1,
		       CTRL_ATTR_FAMILY_NAME, name, strlen(name) + 1);
	e = send_to(fd, buf, n, 0, 0);
	if (e)
		return e;
	for (tries = 0; tries < 64; tries++) {
		struct nlmsghdr *nh = (struct nlmsghdr *)buf;
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		size_t at;

		if (r < 0)
			return errno;
		if (r < (ssize_t)(NLMSG_HDRLEN + GENL_HDRLEN) || nh->nlmsg_seq != seq ||
		    nh->nlmsg_len > (size_t)r)
			continue;
		if (nh->nlmsg_type == NLMSG_ERROR)
			return -rd32(buf + NLMSG_HDRLEN);
		if (nh->nlmsg_type != GENL_ID_CTRL)
			continue;
		*id = 0;
		for (at = NLMSG_HDRLEN + GENL_HDRLEN; at + NLA_HDRLEN <= nh->nlmsg_len;) {
			struct nlattr *a = (struct nlattr *)(buf + at);

			if (a->nla_len < NLA_HDRLEN || at + a->nla_len > nh->nlmsg_len)
				break;
			if ((a->nla_type & NLA_TYPE_MASK) == CTRL_ATTR_FAMILY_ID)
				*id = rd16(a + 1);
			if ((a->nla_type & NLA_TYPE_MASK) == CTRL_ATTR_VERSION && version &&
			    a->nla_len >= NLA_HDRLEN + 4)
				*version = (uint32_t)rd32(a + 1);
			at += align4(a->nla_len);
		}
		return *id ? 0 : EPROTO;
	}
	return ETIMEDOUT;
}

static void genl_open(struct genl *g)
{
	uint32_t version = 0;
	int e;

	g->fd = nl_socket(NETLINK_GENERIC);
	g->seq = 1;
	e = resolve(g->fd, CCP_GENL_NAME, &g->family, &version);
	if (e) {
		fprintf(stderr, "nlfuzz: cannot look up the %s family: %s (module not loaded?)\n",
			CCP_GENL_NAME, strerrorname_np(e));
		exit(2);
	}
	if (version != CCP_GENL_VERSION) {
		fprintf(stderr, "nlfuzz: the %s family is version %u, this tool speaks %u\n",
			CCP_GENL_NAME, version, CCP_GENL_VERSION);
		exit(2);
	}
}

/* Send @len bytes as a CCP_CMD_AGENT_MSG with NLM_F_ACK; the answer. */
static int send_ccp_raw(struct genl *g, const void *msg, size_t len, uint8_t cmd,
			uint8_t version, uint16_t attr)
{
	static uint8_t buf[70000 + HDRS + 8];
	size_t n = genl_build(buf, g->family, NLM_F_REQUEST | NLM_F_ACK, ++g->seq,
			      cmd, version, attr, msg, len);
	int e = send_to(g->fd, buf, n, 0, 0);

	return e ? e : wait_ack(g->fd, g->seq);
}

static int send_ccp(struct genl *g, const struct msg *m)
{
	return send_ccp_raw(g, m->b, m->n, CCP_CMD_AGENT_MSG, CCP_GENL_VERSION, CCP_ATTR_MSG);
}

/* ---- /proc/net/ccp --------------------------------------------------------- */

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
	long long v;

	c->n = 0;
	if (!f) {
		perror("nlfuzz: /proc/net/ccp");
		exit(2);
	}
	while (c->n < NCTR && fscanf(f, "%63s %lld", name, &v) == 2) {
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
 * or "name>=delta", and "errno:NAME=count" for the answers (@t).
 * ("accepted" counts every accepted message, the agent's included, so it
 * is only shown.)
 */
static void check(const char *step, const struct counters *a,
		  const struct counters *b, const struct tally *t,
		  const char *const want[])
{
	unsigned long long rej = ctr(b, "rej_total") - ctr(a, "rej_total");
	unsigned long long ok = ctr(b, "rx_ok") - ctr(a, "rx_ok");
	int i, bad = 0;

	printf("nlfuzz: %-28s rejected %llu accepted %llu;", step, rej, ok);
	for (i = 0; want[i]; i++) {
		char name[48];
		unsigned long long d, exp;
		const char *op = strpbrk(want[i], "=>");

		snprintf(name, sizeof(name), "%.*s", (int)(op - want[i]), want[i]);
		if (!strncmp(name, "errno:", 6)) {
			int e;

			d = 0;
			for (e = 0; e <= NERR; e++)
				if (!strcmp(ename(e), name + 6))
					d = t->n[e];
		} else {
			d = ctr(b, name) - ctr(a, name);
		}
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
	printf("; answers: %s %s\n", tally_str(t), bad ? "FAIL" : "ok");
	failures += bad;
}

/* ---- datapath messages, as the kernel would send them ---------------------- */

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

/* ---- -a: the agent's side --------------------------------------------------- */

struct agent_target {
	int fd;
	uint16_t family;
	uint32_t portid;	/* the agent's port */
	struct tally port;
};

/* Send @len bytes to the agent's port. */
static void agent_send(struct agent_target *t, const void *buf, size_t len)
{
	static unsigned int n;

	tally_add(&t->port, send_to(t->fd, buf, len, t->portid, 0));
	/* a steady stream, not a flood: the kernel's own reports must fit */
	if (++n % 10 == 0)
		usleep(1000);
}

/* A datapath message as the kernel frames it: CCP_CMD_DATAPATH_MSG. */
static void agent_send_ccp(struct agent_target *t, const struct msg *m)
{
	static uint8_t buf[sizeof(((struct msg *)0)->b) + HDRS + 8];
	size_t n = genl_build(buf, t->family, 0, 0, CCP_CMD_DATAPATH_MSG, CCP_GENL_VERSION,
			      CCP_ATTR_MSG, m->b, m->n);

	agent_send(t, buf, n);
}

/* Well-formed messages only the kernel may send, aimed at flow @sid. */
static void agent_hostile(struct agent_target *t, uint32_t sid)
{
	static struct msg m;
	uint32_t i;

	dp_ready(&m);
	agent_send_ccp(t, &m);
	dp_measure(&m, sid, 0);			/* "the flow closed" */
	agent_send_ccp(t, &m);
	dp_create(&m, sid, 1u << 31, "ccp_cubic");	/* issue 25: mss >= 2^31 */
	agent_send_ccp(t, &m);
	dp_measure(&m, sid, 3);
	agent_send_ccp(t, &m);
	dp_create(&m, sid, 1448, "ccp_reno");	/* the flow replaced */
	agent_send_ccp(t, &m);
	dp_measure(&m, sid, 16);		/* garbage to decide on */
	agent_send_ccp(t, &m);
	dp_create(&m, sid, 1448, "ccp\nforged log line");
	agent_send_ccp(t, &m);
	for (i = 0; i < 20; i++) {		/* flows nobody has */
		dp_create(&m, 2000 + rand() % 60000, 1448, "ccp_mocc");
		agent_send_ccp(t, &m);
	}
}

static void drop_to_nobody(void)
{
	if (setgid(NOBODY) || setuid(NOBODY)) {
		perror("nlfuzz: setuid(nobody)");
		_exit(3);
	}
}

/* The agent fuzz of one user (root, or nobody after fork). */
static void agent_round(struct agent_target *t, unsigned int count, uint32_t sid, int rounds)
{
	static struct msg m;
	unsigned int i, j;

	/* 1. random bytes, most shorter than a netlink header */
	for (i = 0; i < count; i++) {
		size_t n = 1 + rand() % 64;

		for (j = 0; j < n; j++)
			m.b[j] = rand();
		agent_send(t, m.b, n);
	}
	/* 2. random CREATE/MEASURE/READY payloads in the family's framing */
	for (i = 0; i < count; i++) {
		static const uint8_t types[] = { 0, 1, 5 };

		m.n = 1 + rand() % 200;
		for (j = 0; j < m.n; j++)
			m.b[j] = rand();
		m.b[0] = types[rand() % 3];
		m.b[1] = 0;
		if (i & 1)
			set_len(&m, m.n);
		agent_send_ccp(t, &m);
	}
	/* 3. well-formed hostile messages */
	for (i = 0; i < (unsigned int)rounds; i++)
		agent_hostile(t, sid);
}

static int agent_fuzz(uint32_t portid, unsigned int count, uint32_t sid)
{
	struct agent_target t = { .portid = portid };
	struct genl g;
	unsigned long sent, refused;
	pid_t pid;
	int st = 0, fails = 0;

	genl_open(&g);
	t.fd = g.fd;
	t.family = g.family;
	agent_round(&t, count, sid, 20);
	/* 4. the same from an unprivileged user: every attempt refused */
	pid = fork();
	if (pid == 0) {
		struct agent_target u = t;

		drop_to_nobody();
		memset(&u.port, 0, sizeof(u.port));
		u.fd = nl_socket(NETLINK_GENERIC);
		agent_round(&u, count / 10 + 1, sid, 5);
		printf("nlfuzz: unprivileged: to the agent's port: %s\n", tally_str(&u.port));
		_exit(u.port.n[EPERM] != tally_total(&u.port) || !u.port.n[EPERM] ? 1 : 0);
	}
	waitpid(pid, &st, 0);
	sent = t.port.n[0] + t.port.n[EAGAIN] + t.port.n[ENOBUFS];
	refused = tally_total(&t.port) - sent;
	printf("nlfuzz: agent port %u (root): %s\n", portid, tally_str(&t.port));
	if (refused || !t.port.n[0]) {
		printf("nlfuzz: FAILED: root's datagrams did not reach the agent's socket (gone?)\n");
		fails++;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		printf("nlfuzz: FAILED: an unprivileged attempt was not refused with EPERM\n");
		fails++;
	}
	if (!fails)
		printf("nlfuzz: all of root's datagrams reached the agent's socket; every unprivileged one was refused (EPERM)\n");
	return fails ? 1 : 0;
}

/* ---- -u: everything an unprivileged user might try ---------------------------- */

static int unpriv(uint32_t agent_port, unsigned int count, uint32_t sid)
{
	static const uint8_t cmds[] = { CCP_CMD_UNSPEC, CCP_CMD_AGENT_MSG,
					CCP_CMD_DATAPATH_MSG, CCP_CMD_AGENT_HELLO, 4, 99 };
	static struct msg m;
	struct agent_target t = { .portid = agent_port };
	struct tally any_ok = { 0 };
	struct genl g;
	unsigned int i, c;
	int e, bad = 0;

	drop_to_nobody();
	genl_open(&g);		/* looking a family up is open to everyone */
	printf("nlfuzz: unprivileged (uid %u): family %s id %u\n",
	       getuid(), CCP_GENL_NAME, g.family);
	/* 1. every command, with plausible CCP messages */
	for (c = 0; c < sizeof(cmds); c++) {
		struct tally tc = { 0 };

		for (i = 0; i < count; i++) {
			switch (i % 3) {
			case 0: update_cwnd(&m, sid ? sid : 1); break;
			case 1: install(&m, 0x7000 + i, 4, 0, 1); break;
			default:
				hdr(&m, 4, sid ? sid : 1);
				put32(&m, 1); put32(&m, 0);
				set_len(&m, m.n);
			}
			e = send_ccp_raw(&g, m.b, m.n, cmds[c], CCP_GENL_VERSION, CCP_ATTR_MSG);
			tally_add(&tc, e);
			tally_add(&any_ok, e ? 1 : 0);
		}
		e = cmds[c] == CCP_CMD_AGENT_MSG || cmds[c] == CCP_CMD_AGENT_HELLO ? EPERM : EOPNOTSUPP;
		printf("nlfuzz: unprivileged: command %u x %u: %s (want %s)\n",
		       cmds[c], count, tally_str(&tc), ename(e));
		bad |= tc.n[e] != count;
	}
	/* 2. forged datapath messages to the agent's port */
	t.fd = g.fd;
	t.family = g.family;
	if (agent_port) {
		for (i = 0; i < count / 27 + 1; i++)
			agent_hostile(&t, sid);
		printf("nlfuzz: unprivileged: to the agent's port %u: %s (want EPERM)\n",
		       agent_port, tally_str(&t.port));
		bad |= t.port.n[EPERM] != tally_total(&t.port);
	}
	printf("nlfuzz: unprivileged: %s\n", bad || any_ok.n[0] ? "FAILED: something was not refused" :
	       "every attempt was refused");
	return bad || any_ok.n[0] ? 1 : 0;
}

/* ---- -f: flood ------------------------------------------------------------------ */

static volatile sig_atomic_t stop;
static void on_alarm(int sig) { (void)sig; stop = 1; }

static int flood(unsigned int secs, int as_nobody)
{
	static struct msg m;
	static uint8_t buf[sizeof(((struct msg *)0)->b) + HDRS + 8];
	struct tally t = { 0 };
	struct genl g = { .seq = 1 };
	unsigned long n = 0, lookups = 0, missing = 0;
	int e;

	if (as_nobody)
		drop_to_nobody();
	signal(SIGALRM, on_alarm);
	signal(SIGTERM, on_alarm);
	alarm(secs);
	g.fd = nl_socket(NETLINK_GENERIC);
	while (!stop) {
		size_t len;

		if (!g.family || n % 500 == 0) {
			lookups++;
			if (resolve(g.fd, CCP_GENL_NAME, &g.family, NULL)) {
				g.family = 0;
				missing++;
				usleep(1000);
				continue;
			}
		}
		switch (n % 4) {
		case 0: install(&m, 0x100 + n % 64, 4 + n % 20, 0, 1); break;
		case 1: update_cwnd(&m, 1 + n % max_sid); break;
		case 2:
			m.n = 1 + rand() % 300;
			for (len = 0; len < m.n; len++)
				m.b[len] = rand();
			break;
		default:
			hdr(&m, 4, 1 + n % max_sid);
			put32(&m, 0x100 + n % 64); put32(&m, 0);
			set_len(&m, m.n);
		}
		len = genl_build(buf, g.family, NLM_F_REQUEST, ++g.seq, CCP_CMD_AGENT_MSG,
				 CCP_GENL_VERSION, CCP_ATTR_MSG, m.b, m.n);
		e = send_to(g.fd, buf, len, 0, 0);
		tally_add(&t, e);
		n++;
		if (n % 64 == 0) {
			/* the answers: count a sample, drop the rest */
			static uint8_t r[16384];
			ssize_t k;

			while ((k = recv(g.fd, r, sizeof(r), MSG_DONTWAIT)) > 0) {
				struct nlmsghdr *nh = (struct nlmsghdr *)r;

				if (k >= NLMSG_HDRLEN + 4 && nh->nlmsg_type == NLMSG_ERROR) {
					int err = -rd32(r + NLMSG_HDRLEN);

					if (err == ENOENT)	/* a stale family id: look again */
						g.family = 0;
					tally_add(&t, err);
				}
			}
		}
	}
	printf("nlfuzz: flood (%s, %u s): %lu messages, %lu family lookups (%lu: not registered); send results and answers: %s\n",
	       as_nobody ? "nobody" : "root", secs, n, lookups, missing, tally_str(&t));
	return 0;
}

/* ---- -j: groups joined in advance ---------------------------------------------- */

static int prejoin(unsigned int secs)
{
	static uint8_t buf[65536];
	struct tally joins = { 0 };
	unsigned long ccp_data = 0, ccp_other = 0, other = 0;
	uint16_t family = 0;
	uint32_t gid, joined = 0;
	time_t end;
	int fd;

	drop_to_nobody();
	fd = nl_socket(NETLINK_GENERIC);
	for (gid = 1; gid <= 256; gid++) {
		int e = setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &gid, sizeof(gid)) ? errno : 0;

		tally_add(&joins, e);
		joined += !e;
	}
	printf("nlfuzz: nobody joined %u group ids of 1..256 (answers: %s)\n", joined, tally_str(&joins));
	end = time(NULL) + secs;
	while (time(NULL) < end) {
		struct nlmsghdr *nh = (struct nlmsghdr *)buf;
		ssize_t r = recv(fd, buf, sizeof(buf), 0);

		if (r < (ssize_t)(NLMSG_HDRLEN + GENL_HDRLEN))
			continue;
		if (!family)
			resolve(fd, CCP_GENL_NAME, &family, NULL);
		if (family && nh->nlmsg_type == family) {
			if (((struct genlmsghdr *)(buf + NLMSG_HDRLEN))->cmd == CCP_CMD_DATAPATH_MSG)
				ccp_data++;
			else
				ccp_other++;
		} else {
			other++;
		}
	}
	printf("nlfuzz: received as nobody: %lu datapath messages, %lu other ccp messages, %lu of other families\n",
	       ccp_data, ccp_other, other);
	return ccp_data ? 1 : 0;
}

/* ---- the datapath fuzz (default) --------------------------------------------------- */

static int datapath_fuzz(unsigned int count, uint32_t live_sid)
{
	static struct msg m;
	struct counters a, b;
	struct tally t;
	struct genl g;
	unsigned int i, j, reach;
	char buf[64];
	FILE *f;

	f = fopen("/sys/module/ccp_kernel/parameters/max_flows", "r");
	if (f && fgets(buf, sizeof(buf), f))
		max_sid = atoi(buf);
	if (f)
		fclose(f);
	genl_open(&g);

	/* 1. random bytes, no framing at all: the netlink and genl cores drop them */
	memset(&t, 0, sizeof(t));
	read_counters(&a);
	for (i = 0; i < count; i++) {
		size_t n = 1 + rand() % 2000;

		for (j = 0; j < n; j++)
			m.b[j] = rand();
		tally_add(&t, send_to(g.fd, m.b, n, 0, 0));
	}
	drain(g.fd);
	read_counters(&b);
	{
		const char *const w[] = { "programs_installed=0", "rx_install=0", NULL };

		check("random bytes", &a, &b, &t, w);
	}

	/* 2. random payloads in the family's framing, plausible CCP types */
	memset(&t, 0, sizeof(t));
	reach = 0;
	read_counters(&a);
	for (i = 0; i < count; i++) {
		m.n = 1 + rand() % 600;
		for (j = 0; j < m.n; j++)
			m.b[j] = rand();
		if (i & 1) {
			m.b[0] = 2 + rand() % 3;
			m.b[1] = 0;
		}
		reach += m.n >= CCP_GENL_MSG_MIN;
		tally_add(&t, send_ccp(&g, &m));
	}
	read_counters(&b);
	{
		char w0[48], w1[48];
		const char *const w[] = { w0, w1, "errno:ok=0", NULL };

		snprintf(w0, sizeof(w0), "rej_total=%u", reach);
		snprintf(w1, sizeof(w1), "errno:ERANGE=%u", count - reach);
		check("random CCP payloads", &a, &b, &t, w);
	}

	/* 3. truncated messages: every prefix of a valid UPDATE_FIELDS */
	memset(&t, 0, sizeof(t));
	read_counters(&a);
	update_cwnd(&m, max_sid);
	for (i = 0; i < 25; i++) {
		struct msg p = m;

		p.n = i;
		tally_add(&t, send_ccp(&g, &p));
	}
	/* and declared longer than sent */
	update_cwnd(&m, max_sid);
	set_len(&m, 200);
	tally_add(&t, send_ccp(&g, &m));
	read_counters(&b);
	{
		/* < 8 bytes: the policy's minimum (the core answers ERANGE) */
		const char *const w[] = { "rej_short=0", "rej_bad_len=18", "errno:ERANGE=8",
					  "errno:EINVAL=18", NULL };
		check("truncated", &a, &b, &t, w);
	}

	/* 4. oversized: 60000-byte INSTALL body, Len 65535 with 100 bytes */
	memset(&t, 0, sizeof(t));
	read_counters(&a);
	hdr(&m, 2, 0);
	while (m.n < 60000)
		put8(&m, rand());
	set_len(&m, 60000);
	tally_add(&t, send_ccp(&g, &m));
	hdr(&m, 3, 1);
	while (m.n < 100)
		put8(&m, 0);
	set_len(&m, 65535);
	tally_add(&t, send_ccp(&g, &m));
	read_counters(&b);
	{
		/* over the policy's maximum (8196): the core answers ERANGE */
		const char *const w[] = { "rej_total=1", "rej_bad_len=1", "errno:ERANGE=1",
					  "errno:EINVAL=1", NULL };
		check("oversized", &a, &b, &t, w);
	}

	/* 5. a 256-instruction program (hangs libccp) and 1000 instructions */
	memset(&t, 0, sizeof(t));
	read_counters(&a);
	install(&m, 77, 256, 0, 1);
	tally_add(&t, send_ccp(&g, &m));
	install(&m, 78, 1000, 0, 1);	/* 16036 bytes: over the policy's maximum */
	tally_add(&t, send_ccp(&g, &m));
	read_counters(&b);
	{
		const char *const w[] = { "rej_prog_too_big=1", "rej_total=1", "errno:ERANGE=1",
					  "errno:EINVAL=1", NULL };
		check("256-instruction INSTALL", &a, &b, &t, w);
	}

	/* 6. programs with a bad register or opcode */
	memset(&t, 0, sizeof(t));
	read_counters(&a);
	install(&m, 79, 10, 8, 1);	/* tmp register 8 */
	tally_add(&t, send_ccp(&g, &m));
	install(&m, 80, 10, 0, 15);	/* opcode 15 */
	tally_add(&t, send_ccp(&g, &m));
	install(&m, 81, 10, 0, 1);
	m.b[8 + 12 + 4] = 200;		/* condition runs past the program */
	tally_add(&t, send_ccp(&g, &m));
	read_counters(&b);
	{
		const char *const w[] = { "rej_bad_prog=3", "errno:EINVAL=3", NULL };
		check("bad programs", &a, &b, &t, w);
	}

	/* 7. wrong socket ids */
	memset(&t, 0, sizeof(t));
	read_counters(&a);
	{
		const uint32_t sids[] = { 0, max_sid + 1, 65535, 0xffffffffu, max_sid };

		for (i = 0; i < 5; i++) {
			update_cwnd(&m, sids[i]);
			tally_add(&t, send_ccp(&g, &m));
		}
	}
	read_counters(&b);
	{
		const char *const w[] = { "rej_bad_sid=4", "rej_stale_sid=1", "errno:EINVAL=4",
					  "errno:ENOENT=1", NULL };
		check("wrong socket ids", &a, &b, &t, w);
	}

	/* 8. bad update fields, and an unknown program for a live flow */
	memset(&t, 0, sizeof(t));
	read_counters(&a);
	update_cwnd(&m, max_sid);
	m.b[13] = 3;			/* implicit register 3 (Micros) */
	tally_add(&t, send_ccp(&g, &m));
	update_cwnd(&m, max_sid);
	m.b[12] = 0;			/* control register ... */
	m.b[13] = 200;			/* ... 200 */
	tally_add(&t, send_ccp(&g, &m));
	if (live_sid) {
		hdr(&m, 4, live_sid);
		put32(&m, 0xdead);
		put32(&m, 0);
		set_len(&m, m.n);
		tally_add(&t, send_ccp(&g, &m));
	}
	read_counters(&b);
	{
		const char *const w1[] = { "rej_bad_fields=2", "rej_unknown_prog=1",
					   "errno:ENOENT=1", NULL };
		const char *const w0[] = { "rej_bad_fields=2", "errno:EINVAL=2", NULL };

		check("bad fields / unknown prog", &a, &b, &t, live_sid ? w1 : w0);
	}

	/* 9. the family's framing: version, attributes, commands */
	memset(&t, 0, sizeof(t));
	read_counters(&a);
	update_cwnd(&m, max_sid);
	tally_add(&t, send_ccp_raw(&g, m.b, m.n, CCP_CMD_AGENT_MSG, 1, CCP_ATTR_MSG));
	/* a registration in version 1's framing registers nothing */
	tally_add(&t, send_ccp_raw(&g, m.b, m.n, CCP_CMD_AGENT_HELLO, 1, CCP_ATTR_MSG));
	tally_add(&t, send_ccp_raw(&g, m.b, m.n, CCP_CMD_AGENT_MSG, CCP_GENL_VERSION, 0));	/* no attribute */
	tally_add(&t, send_ccp_raw(&g, m.b, m.n, CCP_CMD_AGENT_MSG, CCP_GENL_VERSION, 9));	/* unknown attribute */
	tally_add(&t, send_ccp_raw(&g, m.b, m.n, CCP_CMD_DATAPATH_MSG, CCP_GENL_VERSION, CCP_ATTR_MSG));
	tally_add(&t, send_ccp_raw(&g, m.b, m.n, 99, CCP_GENL_VERSION, CCP_ATTR_MSG));
	read_counters(&b);
	{
		/* version 1: EPROTO; no attribute: EINVAL (both counted in
		 * rej_nlmsg); an unknown attribute: the core (strict policy,
		 * EINVAL); unknown commands: EOPNOTSUPP */
		const char *const w[] = { "rej_nlmsg=3", "rej_total=3", "errno:EPROTO=2",
					  "errno:EINVAL=2", "errno:EOPNOTSUPP=2", "agent_hellos=0", NULL };
		check("genl framing", &a, &b, &t, w);
	}

	/* 10. a sender without CAP_NET_ADMIN: the genl core refuses it */
	memset(&t, 0, sizeof(t));
	read_counters(&a);
	{
		int p[2];
		pid_t pid;

		if (pipe(p))
			exit(2);
		pid = fork();
		if (pid == 0) {
			struct genl u;
			int e;

			drop_to_nobody();
			genl_open(&u);
			update_cwnd(&m, live_sid ? live_sid : 1);
			e = send_ccp(&u, &m);
			if (write(p[1], &e, sizeof(e)) != sizeof(e))
				_exit(3);
			_exit(0);
		}
		waitpid(pid, NULL, 0);
		{
			int e = NERR;

			if (read(p[0], &e, sizeof(e)) != sizeof(e))
				e = NERR;
			tally_add(&t, e);
		}
		close(p[0]);
		close(p[1]);
	}
	read_counters(&b);
	{
		const char *const w[] = { "rej_total=0", "errno:EPERM=1", NULL };
		check("unprivileged sender", &a, &b, &t, w);
	}

	/* 11. a well-formed update for the live flow from a privileged socket
	 * that is not the agent's: only the agent steers flows */
	if (live_sid) {
		memset(&t, 0, sizeof(t));
		read_counters(&a);
		update_cwnd(&m, live_sid);
		tally_add(&t, send_ccp(&g, &m));
		read_counters(&b);
		{
			const char *const w[] = { "rej_not_agent=1", "errno:EBUSY=1", NULL };

			check("update not from the agent", &a, &b, &t, w);
		}
	}

	/* 12. a well-formed INSTALL from a privileged socket that did not
	 * register: only the registered agent installs programs */
	memset(&t, 0, sizeof(t));
	read_counters(&a);
	install(&m, 0x7100, 10, 0, 1);
	tally_add(&t, send_ccp(&g, &m));
	read_counters(&b);
	{
		const char *const w[] = { "rej_not_agent=1", "rej_total=1", "rx_install=0",
					  "errno:EBUSY=1", NULL };

		check("install not from the registered agent", &a, &b, &t, w);
	}

	printf("nlfuzz: %s\n", failures ? "FAILED" : "all checks passed");
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	unsigned int count = 2000, seed = 1, live_sid = 0, agent_port = 0;
	unsigned int flood_secs = 0, join_secs = 0;
	int opt, mode_u = 0, as_nobody = 0, info = 0;

	while ((opt = getopt(argc, argv, "n:s:p:a:uf:Uj:i")) != -1) {
		switch (opt) {
		case 'n': count = atoi(optarg); break;
		case 's': seed = atoi(optarg); break;
		case 'p': live_sid = atoi(optarg); break;
		case 'a': agent_port = strtoul(optarg, NULL, 10); break;
		case 'u': mode_u = 1; break;
		case 'f': flood_secs = atoi(optarg); break;
		case 'U': as_nobody = 1; break;
		case 'j': join_secs = atoi(optarg); break;
		case 'i': info = 1; break;
		default:
			fprintf(stderr, "usage: nlfuzz [-n COUNT] [-s SEED] [-p LIVE_SID] | -a AGENT_PORTID ... | -u [-a PORTID] ... | -f SECONDS [-U] | -j SECONDS | -i\n");
			return 2;
		}
	}
	srand(seed);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (info) {
		struct genl g;

		genl_open(&g);
		printf("family %u\n", g.family);
		return 0;
	}
	if (join_secs)
		return prejoin(join_secs);
	if (flood_secs)
		return flood(flood_secs, as_nobody);
	if (mode_u)
		return unpriv(agent_port, count, live_sid);
	if (agent_port)
		return agent_fuzz(agent_port, count, live_sid);
	return datapath_fuzz(count, live_sid);
}
