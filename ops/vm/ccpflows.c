// SPDX-License-Identifier: GPL-2.0
/*
 * ccpflows: many TCP connections at once, with a chosen congestion control
 * (iperf3 caps -P at 128).  One process, one thread, epoll.
 *
 *   ccpflows -s ADDR:PORT [-t SECS]
 *       sink: accept connections and read (and drop) what arrives
 *   ccpflows -c ADDR:PORT -n N [-C CC] [-t SECS] [-i MS | -b] [-r FILE] [-w SECS]
 *       N connections to ADDR:PORT, TCP_CONGESTION=CC set before connect;
 *       with -i MS each sends 100 bytes every MS ms (staggered), with -b
 *       each sends as fast as it can (bulk); for SECS seconds, then exits.
 *       -r FILE: written once every connection is up ("connected N cc_ok M"),
 *       -w SECS: how long to wait for that (default 60).
 *   ccpflows -L ADDR:PORT -n N [-C CC] [-t SECS] [-i MS] [-r FILE]
 *       both ends in one process (a local listener): sink and clients.
 *
 * Prints "ccpflows: connected N of M, cc set on K (CC), bytes sent B, acked
 * ..." at the end; exit status 0 when every connection came up with CC.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXF 20000

static int lfd = -1, ep;
static int cfd[MAXF];		/* client sockets */
static long long next_ms[MAXF];
static int up[MAXF];
static volatile sig_atomic_t stop;

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void die(const char *what)
{
	fprintf(stderr, "ccpflows: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void parse(const char *s, struct sockaddr_in *a)
{
	char host[64];
	const char *c = strrchr(s, ':');

	if (!c || c - s >= (long)sizeof(host)) {
		fprintf(stderr, "ccpflows: ADDR:PORT expected, got %s\n", s);
		exit(2);
	}
	memcpy(host, s, c - s);
	host[c - s] = 0;
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons(atoi(c + 1));
	if (inet_pton(AF_INET, host, &a->sin_addr) != 1) {
		fprintf(stderr, "ccpflows: bad address %s\n", host);
		exit(2);
	}
}

static void nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* epoll data: tag 1 = listener, 2 = accepted (idx: its fd), 3 = client (idx) */
static void ep_add(int fd, unsigned int tag, unsigned int idx, unsigned int ev)
{
	struct epoll_event e = { .events = ev, .data.u64 = ((unsigned long long)tag << 32) | idx };

	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) < 0)
		die("epoll_ctl");
}

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	const char *cc = NULL, *ready = NULL, *sink = NULL, *dst = NULL;
	int n = 1, secs = 10, interval = 1000, bulk = 0, wait_s = 60, opt, i;
	int connected = 0, ccok = 0, accepted = 0, local = 0;
	unsigned long long sent = 0, rcvd = 0;
	static char buf[65536];
	struct sockaddr_in a;
	struct rlimit rl = { 65536, 65536 };
	long long t0, t_end, t_up = 0;
	struct epoll_event evs[256];

	while ((opt = getopt(argc, argv, "s:c:L:n:C:t:i:br:w:")) != -1) {
		switch (opt) {
		case 's': sink = optarg; break;
		case 'c': dst = optarg; break;
		case 'L': sink = dst = optarg; local = 1; break;
		case 'n': n = atoi(optarg); break;
		case 'C': cc = optarg; break;
		case 't': secs = atoi(optarg); break;
		case 'i': interval = atoi(optarg); break;
		case 'b': bulk = 1; break;
		case 'r': ready = optarg; break;
		case 'w': wait_s = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: see the top of ops/vm/ccpflows.c\n");
			return 2;
		}
	}
	if ((!sink && !dst) || n < 1 || n > MAXF || interval < 1) {
		fprintf(stderr, "ccpflows: give -s, -c or -L, and 1 <= N <= %d\n", MAXF);
		return 2;
	}
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		rl.rlim_cur = rl.rlim_max = 4 * MAXF;
		setrlimit(RLIMIT_NOFILE, &rl);	/* unprivileged: keep what we have */
	}
	signal(SIGTERM, on_stop);
	signal(SIGINT, on_stop);
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	ep = epoll_create1(0);
	if (ep < 0)
		die("epoll_create1");
	memset(buf, 'x', sizeof(buf));
	t0 = now_ms();

	if (sink) {
		int one = 1;

		parse(sink, &a);
		lfd = socket(AF_INET, SOCK_STREAM, 0);
		if (lfd < 0)
			die("socket");
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 4096) < 0)
			die("bind/listen");
		nonblock(lfd);
		ep_add(lfd, 1, 0, EPOLLIN);
	}
	if (dst) {
		parse(dst, &a);
		for (i = 0; i < n; i++) {
			cfd[i] = socket(AF_INET, SOCK_STREAM, 0);
			if (cfd[i] < 0)
				die("socket");
			if (cc && setsockopt(cfd[i], IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc)) == 0)
				ccok++;
			nonblock(cfd[i]);
			if (connect(cfd[i], (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EINPROGRESS)
				die("connect");
			ep_add(cfd[i], 3, i, EPOLLOUT);
			/* staggered: flow i first sends at i * interval / n */
			next_ms[i] = t0 + (long long)i * interval / n;
			/* let the local sink accept in time */
			if (local && i % 64 == 63) {
				int k, m = epoll_wait(ep, evs, 256, 0);

				for (k = 0; k < m; k++) {
					if ((evs[k].data.u64 >> 32) == 1) {
						int fd;

						while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
							ep_add(fd, 2, fd, EPOLLIN);
							accepted++;
						}
					}
				}
				/* the client events come back on the next wait */
			}
		}
	}
	t_end = t0 + secs * 1000LL;
	while (!stop) {
		long long now = now_ms();
		int m, k, timeout = 10;

		if (now >= t_end)
			break;
		if (dst && !t_up && now > t0 + wait_s * 1000LL) {
			fprintf(stderr, "ccpflows: only %d of %d connected after %d s\n", connected, n, wait_s);
			break;
		}
		m = epoll_wait(ep, evs, 256, timeout);
		for (k = 0; k < m; k++) {
			unsigned int tag = evs[k].data.u64 >> 32, idx = (unsigned int)evs[k].data.u64;

			if (tag == 1) {
				int fd;

				while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					ep_add(fd, 2, fd, EPOLLIN);
					accepted++;
				}
			} else if (tag == 2) {
				ssize_t r;

				while ((r = read((int)idx, buf, sizeof(buf))) > 0)
					rcvd += r;
				if (r == 0) {	/* the other end closed */
					epoll_ctl(ep, EPOLL_CTL_DEL, (int)idx, NULL);
					close((int)idx);
				}
			} else if (tag == 3 && !up[idx]) {
				int err = 0;
				socklen_t l = sizeof(err);

				getsockopt(cfd[idx], SOL_SOCKET, SO_ERROR, &err, &l);
				if (err) {
					errno = err;
					die("connect (async)");
				}
				up[idx] = 1;
				connected++;
				if (!bulk) {
					struct epoll_event e = { .events = 0, .data.u64 = evs[k].data.u64 };

					epoll_ctl(ep, EPOLL_CTL_MOD, cfd[idx], &e);
				}
			} else if (tag == 3 && bulk) {
				ssize_t w = write(cfd[idx], buf, sizeof(buf));

				if (w > 0)
					sent += w;
			}
		}
		if (dst && !t_up && connected == n) {
			t_up = now_ms();
			if (ready) {
				FILE *f = fopen(ready, "w");

				if (f) {
					fprintf(f, "connected %d cc_ok %d after_ms %lld\n", connected, ccok, t_up - t0);
					fclose(f);
				}
			}
		}
		if (dst && !bulk) {
			now = now_ms();
			for (i = 0; i < n; i++) {
				if (up[i] && now >= next_ms[i]) {
					ssize_t w = write(cfd[i], buf, 100);

					if (w > 0)
						sent += w;
					next_ms[i] += interval;
					if (next_ms[i] < now)
						next_ms[i] = now + interval;
				}
			}
		}
	}
	printf("ccpflows: connected %d of %d, cc set on %d (%s), accepted %d, bytes sent %llu, received %llu, up after %lld ms\n",
	       connected, dst ? n : 0, ccok, cc ? cc : "default", accepted, sent, rcvd,
	       t_up ? t_up - t0 : -1);
	return (!dst || (connected == n && (!cc || ccok == n))) ? 0 : 1;
}
