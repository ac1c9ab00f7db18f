// SPDX-License-Identifier: GPL-2.0
/*
 * fakeagent: a minimal CCP agent for tests that need what the real agent
 * never does.  It answers the datapath like portus (programs installed on
 * READY and on the first CREATE, every CREATE answered with a CHANGE_PROG)
 * but its program divides by zero on every ACK (-m fault), so each flow it
 * takes faults on every ACK.
 *
 *   fakeagent [-m fault] [-t SECS] [-l LOGFILE] [-r READYFILE]
 *
 * Log lines (CLOCK_MONOTONIC ms first, the clock of /proc/uptime):
 *   T ready
 *   T install UID
 *   T create SID ALG SRCIP:PORT DSTIP:PORT
 *   T change SID UID
 *   T report SID NFIELDS
 *   T close SID
 * READYFILE is created once the socket has registered.  Runs until
 * SECS pass or SIGTERM; needs CAP_NET_ADMIN (the datapath refuses others).
 *
 * The transport is kept to tp_open(), tp_send() and tp_recv() below: the
 * datapath's generic netlink family "ccp" (datapath/kernel/ccp_genl.h),
 * resolved with the genl controller (CTRL_CMD_GETFAMILY) like ccp-agent
 * and ops/vm/nlfuzz.c do; the socket registers as the agent
 * (CCP_CMD_AGENT_HELLO), and the datapath sends to it alone.
 * Error answers of the kernel to what it sent are logged as
 *   T error ERRNO
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
#include <time.h>
#include <unistd.h>

#include "../../datapath/kernel/ccp_genl.h"
#include "ccpmsg.h"

static FILE *logf;
static long long now_ms(void);

/* ---- transport: the generic netlink family "ccp" ---------------------------- */

static uint16_t tp_family;	/* the family's id */
static uint32_t tp_seq = 1;

static size_t align4(size_t n) { return (n + 3) & ~(size_t)3; }

/* A generic netlink request of @cmd with one attribute into @buf: its length. */
static size_t tp_build(uint8_t *buf, size_t cap, uint16_t type, uint8_t cmd,
		       uint8_t version, uint16_t attr, const void *val, size_t len)
{
	struct nlmsghdr *nh = (struct nlmsghdr *)buf;
	struct genlmsghdr *gh = (struct genlmsghdr *)(buf + NLMSG_HDRLEN);
	struct nlattr *a = (struct nlattr *)(buf + NLMSG_HDRLEN + GENL_HDRLEN);
	size_t n = NLMSG_HDRLEN + GENL_HDRLEN + align4(NLA_HDRLEN + len);

	if (n > cap)
		return 0;
	memset(buf, 0, n);
	nh->nlmsg_len = n;
	nh->nlmsg_type = type;
	nh->nlmsg_flags = NLM_F_REQUEST;
	nh->nlmsg_seq = ++tp_seq;
	gh->cmd = cmd;
	gh->version = version;
	a->nla_len = NLA_HDRLEN + len;
	a->nla_type = attr;
	memcpy(a + 1, val, len);
	return n;
}

static int tp_sendto_kernel(int fd, const void *buf, size_t len)
{
	struct sockaddr_nl to = { .nl_family = AF_NETLINK };	/* port 0: the kernel */

	return sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof(to)) < 0 ? -errno : 0;
}

/*
 * The id of family "ccp" (controller's answer to CTRL_CMD_GETFAMILY): 0,
 * or -errno; -EPROTONOSUPPORT for another version of the family.
 */
static int tp_resolve(int fd, uint16_t *id)
{
	static uint8_t buf[16384];
	uint32_t seq;
	size_t n;
	int tries, r;

	n = tp_build(buf, sizeof(buf), GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1,
		     CTRL_ATTR_FAMILY_NAME, CCP_GENL_NAME, strlen(CCP_GENL_NAME) + 1);
	seq = tp_seq;
	r = tp_sendto_kernel(fd, buf, n);
	if (r)
		return r;
	*id = 0;
	for (tries = 0; tries < 64; tries++) {
		struct nlmsghdr *nh = (struct nlmsghdr *)buf;
		struct sockaddr_nl from;
		socklen_t al = sizeof(from);
		ssize_t got = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &al);
		size_t at;

		if (got < 0)
			return -errno;
		if (al < sizeof(from) || from.nl_pid != 0 ||
		    got < (ssize_t)(NLMSG_HDRLEN + GENL_HDRLEN) || nh->nlmsg_seq != seq ||
		    nh->nlmsg_len > (size_t)got)
			continue;
		if (nh->nlmsg_type == NLMSG_ERROR) {
			int32_t e;

			memcpy(&e, buf + NLMSG_HDRLEN, 4);
			return e ? e : -EPROTO;
		}
		if (nh->nlmsg_type != GENL_ID_CTRL)
			continue;
		for (at = NLMSG_HDRLEN + GENL_HDRLEN; at + NLA_HDRLEN <= nh->nlmsg_len;) {
			struct nlattr *a = (struct nlattr *)(buf + at);

			if (a->nla_len < NLA_HDRLEN || at + a->nla_len > nh->nlmsg_len)
				break;
			if ((a->nla_type & NLA_TYPE_MASK) == CTRL_ATTR_FAMILY_ID)
				memcpy(id, a + 1, 2);
			if ((a->nla_type & NLA_TYPE_MASK) == CTRL_ATTR_VERSION && a->nla_len >= NLA_HDRLEN + 4) {
				uint32_t v;

				memcpy(&v, a + 1, 4);
				if (v != CCP_GENL_VERSION)
					return -EPROTONOSUPPORT;
			}
			at += align4(a->nla_len);
		}
		return *id ? 0 : -ENOENT;
	}
	return -ETIMEDOUT;
}

/* Register the socket as the agent's (no attribute, no ack asked): 0 or -errno. */
static int tp_hello(int fd)
{
	uint8_t buf[NLMSG_HDRLEN + GENL_HDRLEN] = { 0 };
	struct nlmsghdr *nh = (struct nlmsghdr *)buf;
	struct genlmsghdr *gh = (struct genlmsghdr *)(buf + NLMSG_HDRLEN);

	nh->nlmsg_len = sizeof(buf);
	nh->nlmsg_type = tp_family;
	nh->nlmsg_flags = NLM_F_REQUEST;
	nh->nlmsg_seq = ++tp_seq;
	gh->cmd = CCP_CMD_AGENT_HELLO;
	gh->version = CCP_GENL_VERSION;
	return tp_sendto_kernel(fd, buf, sizeof(buf));
}

/* Open the agent's socket and register it with the datapath; -1 on error. */
static int tp_open(void)
{
	struct sockaddr_nl a = { .nl_family = AF_NETLINK };
	struct timeval tv = { .tv_sec = 1 };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
	int one = 1, rcvbuf = 4 << 20, r;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		goto fail;
	r = tp_resolve(fd, &tp_family);
	if (r) {
		fprintf(stderr, "fakeagent: family \"%s\": %s\n", CCP_GENL_NAME, strerror(-r));
		errno = -r;
		goto fail;
	}
	setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	r = tp_hello(fd);
	if (r) {
		errno = -r;
		goto fail;
	}
	tv.tv_sec = 0;
	tv.tv_usec = 100000;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
fail:
	r = errno;
	close(fd);
	errno = r;
	return -1;
}

/* Send one CCP message to the datapath; 0 or -errno. */
static int tp_send(int fd, const uint8_t *msg, size_t len)
{
	static uint8_t buf[65536];
	size_t n = tp_build(buf, sizeof(buf), tp_family, CCP_CMD_AGENT_MSG,
			    CCP_GENL_VERSION, CCP_ATTR_MSG, msg, len);

	return n ? tp_sendto_kernel(fd, buf, n) : -EMSGSIZE;
}

/*
 * Receive one CCP message from the datapath into @msg (at most @cap bytes):
 * its length, 0 on timeout or for anything not a datapath message from
 * the kernel, -errno.
 */
static int tp_recv(int fd, uint8_t *msg, size_t cap)
{
	static uint8_t buf[65536];
	struct nlmsghdr *nh = (struct nlmsghdr *)buf;
	struct genlmsghdr *gh = (struct genlmsghdr *)(buf + NLMSG_HDRLEN);
	struct sockaddr_nl from;
	socklen_t al = sizeof(from);
	ssize_t r = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &al);
	size_t at;

	if (r < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	if (al < sizeof(from) || from.nl_pid != 0 || r < NLMSG_HDRLEN ||
	    nh->nlmsg_len < NLMSG_HDRLEN || nh->nlmsg_len > (size_t)r)
		return 0;
	if (nh->nlmsg_type == NLMSG_ERROR && nh->nlmsg_len >= NLMSG_HDRLEN + 4) {
		int32_t e;

		memcpy(&e, buf + NLMSG_HDRLEN, 4);
		if (e)
			fprintf(logf, "%lld error %d\n", now_ms(), -e);
		return 0;
	}
	if (nh->nlmsg_type != tp_family || nh->nlmsg_len < NLMSG_HDRLEN + GENL_HDRLEN ||
	    gh->cmd != CCP_CMD_DATAPATH_MSG)
		return 0;
	for (at = NLMSG_HDRLEN + GENL_HDRLEN; at + NLA_HDRLEN <= nh->nlmsg_len;) {
		struct nlattr *a = (struct nlattr *)(buf + at);

		if (a->nla_len < NLA_HDRLEN || at + a->nla_len > nh->nlmsg_len)
			return 0;
		if ((a->nla_type & NLA_TYPE_MASK) == CCP_ATTR_MSG) {
			size_t n = a->nla_len - NLA_HDRLEN;

			if (n > cap)
				return 0;
			memcpy(msg, a + 1, n);
			return (int)n;
		}
		at += align4(a->nla_len);
	}
	return 0;
}

/* ---- CCP messages ----------------------------------------------------------- */

static uint16_t rd16(const uint8_t *p) { return p[0] | p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | (uint32_t)rd16(p + 2) << 16; }

/*
 * The faulting program: one expression whose condition is
 * Tmp.0 := 1 / 0, which libccp refuses (LIBCCP_DIV_BY_ZERO) on every ACK.
 */
static void install_fault(struct msg *m, uint32_t uid)
{
	hdr(m, 2, 0);
	put32(m, uid);
	put32(m, 1);			/* expressions */
	put32(m, 1);			/* instructions */
	put32(m, 0); put32(m, 1);	/* condition: [0, 1) */
	put32(m, 1); put32(m, 0);	/* body: empty */
	instr(m, 3 /* DIV */, 7 /* tmp */, 0, 1 /* imm */, 1, 1 /* imm */, 0);
	set_len(m, m->n);
}

static void change_prog(struct msg *m, uint32_t sid, uint32_t uid)
{
	hdr(m, 4, sid);
	put32(m, uid);
	put32(m, 0);			/* no updates */
	set_len(m, m->n);
}

/* ---- the agent ------------------------------------------------------------ */

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void ip(char *out, size_t n, uint32_t a, uint32_t port)
{
	snprintf(out, n, "%u.%u.%u.%u:%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255, port);
}

int main(int argc, char **argv)
{
	const char *mode = "fault", *logpath = NULL, *readypath = NULL;
	int secs = 3600, opt, fd, r, installed = 0, errs = 0;
	uint32_t uid = 4242;
	static uint8_t in[70000];
	static struct msg out;
	long long t_end;

	while ((opt = getopt(argc, argv, "m:t:l:r:")) != -1) {
		switch (opt) {
		case 'm': mode = optarg; break;
		case 't': secs = atoi(optarg); break;
		case 'l': logpath = optarg; break;
		case 'r': readypath = optarg; break;
		default:
			fprintf(stderr, "usage: fakeagent [-m fault] [-t SECS] [-l LOG] [-r READYFILE]\n");
			return 2;
		}
	}
	if (strcmp(mode, "fault")) {
		fprintf(stderr, "fakeagent: only -m fault is known\n");
		return 2;
	}
	logf = logpath ? fopen(logpath, "w") : stdout;
	if (!logf) {
		perror("fakeagent: log");
		return 2;
	}
	setvbuf(logf, NULL, _IOLBF, 0);
	signal(SIGTERM, on_stop);
	signal(SIGINT, on_stop);
	fd = tp_open();
	if (fd < 0) {
		perror("fakeagent: generic netlink socket (family \"" CCP_GENL_NAME "\")");
		return 2;
	}
	if (readypath) {
		FILE *f = fopen(readypath, "w");

		if (f)
			fclose(f);
	}
	t_end = now_ms() + secs * 1000LL;
	while (!stop && now_ms() < t_end) {
		uint16_t type;
		uint32_t sid;
		int len;

		r = tp_recv(fd, in, sizeof(in));
		if (r < 0) {
			if (r != -ENOBUFS && ++errs > 100) {
				fprintf(stderr, "fakeagent: recv: %s\n", strerror(-r));
				return 1;
			}
			continue;
		}
		if (r < 8)
			continue;
		len = r;
		type = rd16(in);
		sid = rd32(in + 4);
		if (type == 5) {			/* READY: programs afresh */
			fprintf(logf, "%lld ready\n", now_ms());
			installed = 0;
		}
		if ((type == 5 || type == 0) && !installed) {
			uid++;
			install_fault(&out, uid);
			r = tp_send(fd, out.b, out.n);
			fprintf(logf, "%lld install %u%s\n", now_ms(), uid, r ? " failed" : "");
			installed = !r;
		}
		if (type == 0 && len >= 32) {		/* CREATE */
			char src[32], dst[32], alg[65] = "";

			if (len >= 8 + 24 + 64) {
				memcpy(alg, in + 8 + 24, 64);
				alg[64] = 0;
			}
			ip(src, sizeof(src), rd32(in + 16), rd32(in + 20));
			ip(dst, sizeof(dst), rd32(in + 24), rd32(in + 28));
			fprintf(logf, "%lld create %u %s %s %s\n", now_ms(), sid,
				alg[0] ? alg : "?", src, dst);
			change_prog(&out, sid, uid);
			r = tp_send(fd, out.b, out.n);
			fprintf(logf, "%lld change %u %u%s\n", now_ms(), sid, uid, r ? " failed" : "");
		} else if (type == 1) {			/* MEASURE */
			uint32_t nf = len >= 16 ? rd32(in + 12) : 0;

			if (nf)
				fprintf(logf, "%lld report %u %u\n", now_ms(), sid, nf);
			else
				fprintf(logf, "%lld close %u\n", now_ms(), sid);
		}
	}
	close(fd);
	return 0;
}
