// SPDX-License-Identifier: GPL-2.0
/*
 * ccplink: a trace-driven bottleneck in user space, with mahimahi's semantics
 * (mm-link + mm-delay), between two TUN devices of the guest's router
 * namespace (ops/vm/guest/lib.sh setup_trace_link routes the data arriving
 * from the sender into TUN A and the ACKs arriving from the receiver into
 * TUN B).
 *
 *   data  (read A) -> drop-tail queue -> delivery opportunities -> FWD ms -> (write B)
 *   ACKs  (read B) -> REV ms -> (write A)
 *
 * Capacity: a trace in either of the simulator's formats
 * (datapath/sim/src/trace.rs), recognised the same way:
 *  - mahimahi: one integer ms per line, each a delivery opportunity of 1500
 *    bytes; the file repeats with period = its last timestamp;
 *  - throughput log (a .tput suffix, or two numbers on the first line that is
 *    neither empty nor a '#' comment): `time_s rate_mbps`, each rate held
 *    until the next sample, the last for the median interval, repeating with
 *    that period.  It is served as delivery opportunities of 1500 bytes, the
 *    g-th at the instant the log's rate has accrued (g + 1) x 1500 bytes.
 * An opportunity carries up to 1500 bytes of the queue's head packets (a
 * packet may span opportunities, as in mahimahi's link_queue); one that finds
 * the queue empty, or only packets that arrived after it, is wasted.  The
 * trace's clock starts at start-up or, with -w BYTES, when the first data
 * packet of at least BYTES reaches the link (a transfer's first full
 * segment: an iperf3 run's control exchange comes before); packets before
 * that pass with the base delay only.
 *
 * Queue: drop-tail, counted in packets queued or in transmission (the
 * simulator's buffer_pkts), -q PKTS, or -b BDPS: round(BDPS x mean rate x
 * (FWD + REV) / 1500 bytes), at least 1, as the simulator sizes buffer_bdp.
 *
 * Statistics (-s FILE, JSON, written at SIGTERM/SIGINT): packets in, dropped,
 * delivered; how late packets left the forward delay line ("late_ms": p99 to
 * the ms, max, how many over 10 ms: the process ran behind its trace); each
 * delivered data packet's sojourn (arrival at the link to
 * its delivery opportunity: the simulator's queue delay) as mean/p50/p95/max;
 * per -B ms bin from the trace's start: the trace's capacity, the bytes
 * delivered and the capacity wasted on an empty queue.  "start_boottime_s"
 * is the trace's time 0 on CLOCK_BOOTTIME (the clock of /proc/uptime),
 * "start_realtime_s" on CLOCK_REALTIME (bash's $EPOCHREALTIME).
 *
 * ccplink -t TRACE -a TUNA -z TUNB -f FWD_MS -r REV_MS (-q PKTS | -b BDPS)
 *         [-s STATS] [-B BIN_MS] [-w BYTES] [-p PIDFILE]
 *         ccplink -c TRACE [SECONDS]   prints the trace's capacity per second
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define OPP_BYTES 1500		/* one delivery opportunity (the simulator's packet) */
#define MAX_PKT 65536
#define MAX_TRACE_MS 86400000ULL
#define MAX_LINES 20000000UL
#define MAX_FILE (256u << 20)
#define SOJ_RES_NS 100000ULL	/* sojourn histogram: 0.1 ms bins ... */
#define SOJ_BINS 200000		/* ... up to 20 s */

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("ccplink: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/* ------------------------------------------------------------------ trace */
struct trace {
	int is_log;
	/* mahimahi */
	uint64_t *ms;
	size_t n;
	uint64_t period_ms;
	/* log: sample starts (ns from the first), bits per ns, bits before each start */
	double *start, *bpn, *cum;
	size_t ns;
	double period_ns;
};

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static char *slurp(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("trace %s: cannot open it: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		die("trace %s: not a regular file", path);
	if ((unsigned long long)st.st_size > MAX_FILE)
		die("trace %s: larger than %u bytes", path, MAX_FILE);
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		die("out of memory");
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r <= 0)
			die("trace %s: read failed: %s", path, r < 0 ? strerror(errno) : "short file");
		got += (size_t)r;
	}
	buf[got] = 0;
	close(fd);
	return buf;
}

/* next line of buf (modified in place): trimmed, NULL at the end */
static char *next_line(char **p, unsigned long *lineno)
{
	if (!**p)
		return NULL;
	char *s = *p, *e = strchr(s, '\n');
	if (e) {
		*e = 0;
		*p = e + 1;
	} else {
		*p = s + strlen(s);
	}
	++*lineno;
	while (*s == ' ' || *s == '\t' || *s == '\r')
		s++;
	size_t l = strlen(s);
	while (l && (s[l - 1] == ' ' || s[l - 1] == '\t' || s[l - 1] == '\r'))
		s[--l] = 0;
	return s;
}

static void load_trace(struct trace *t, const char *path)
{
	char *text = slurp(path), *p = text, *s;
	unsigned long ln = 0;
	size_t pl = strlen(path);
	int log = pl > 5 && !strcmp(path + pl - 5, ".tput");
	memset(t, 0, sizeof(*t));
	if (!log) {
		/* the format from the first line that is neither empty nor a comment */
		char *q = text, *copy = strdup(text);
		unsigned long l2 = 0;
		q = copy;
		while ((s = next_line(&q, &l2)) && (!*s || *s == '#'))
			;
		if (!s)
			die("trace %s: it is empty: give one timestamp (ms) per delivery opportunity "
			    "(mahimahi) or one `time_s rate_mbps` sample per line", path);
		char a[64], b[64], c[8];
		int k = sscanf(s, "%63s %63s %7s", a, b, c);
		char *end;
		if (k == 1) {
			strtoull(a, &end, 10);
			if (*end || a[0] == '-')
				die("trace %s: line %lu: unknown trace format (%s)", path, l2, s);
		} else if (k == 2) {
			strtod(a, &end);
			if (*end)
				die("trace %s: line %lu: unknown trace format (%s)", path, l2, s);
			strtod(b, &end);
			if (*end)
				die("trace %s: line %lu: unknown trace format (%s)", path, l2, s);
			log = 1;
		} else {
			die("trace %s: line %lu: unknown trace format (%s): a mahimahi file holds one "
			    "integer timestamp (ms) per line, a throughput log `time_s rate_mbps`", path, l2, s);
		}
		free(copy);
	}
	t->is_log = log;
	if (!log) {
		size_t cap = 1 << 16;
		t->ms = malloc(cap * sizeof(*t->ms));
		while ((s = next_line(&p, &ln))) {
			if (!*s)
				continue;
			char *end;
			errno = 0;
			unsigned long long v = strtoull(s, &end, 10);
			if (*end || s[0] == '-' || errno)
				die("trace %s: line %lu: \"%s\" is not a timestamp (one non-negative "
				    "integer ms per line)", path, ln, s);
			if (v > MAX_TRACE_MS)
				die("trace %s: line %lu: timestamp %llu ms is after one day", path, ln, v);
			if (t->n && v < t->ms[t->n - 1])
				die("trace %s: line %lu: timestamp %llu ms is before the previous %llu ms: "
				    "timestamps must not decrease", path, ln, v,
				    (unsigned long long)t->ms[t->n - 1]);
			if (t->n >= MAX_LINES)
				die("trace %s: more than %lu delivery opportunities", path, MAX_LINES);
			if (t->n == cap) {
				cap *= 2;
				t->ms = realloc(t->ms, cap * sizeof(*t->ms));
				if (!t->ms)
					die("out of memory");
			}
			t->ms[t->n++] = v;
		}
		if (!t->n)
			die("trace %s: it is empty", path);
		t->period_ms = t->ms[t->n - 1];
		if (!t->period_ms)
			die("trace %s: it lasts 0 ms: the last timestamp is the period and must be > 0",
			    path);
	} else {
		size_t cap = 1024, n = 0;
		double *ts = malloc(cap * sizeof(double)), *rs = malloc(cap * sizeof(double));
		while ((s = next_line(&p, &ln))) {
			if (!*s || *s == '#')
				continue;
			char a[64], b[64], c[8], *e1, *e2;
			if (sscanf(s, "%63s %63s %7s", a, b, c) != 2)
				die("trace %s: line %lu: \"%s\" is not a sample: a throughput log holds "
				    "`time_s rate_mbps` per line", path, ln, s);
			double tv = strtod(a, &e1), rv = strtod(b, &e2);
			if (*e1 || !isfinite(tv) || tv < 0 || tv > MAX_TRACE_MS / 1e3)
				die("trace %s: line %lu: time \"%s\" is not a number of seconds in [0, 86400]",
				    path, ln, a);
			if (*e2 || !isfinite(rv) || rv < 0)
				die("trace %s: line %lu: rate \"%s\" is not a non-negative number of Mbit/s "
				    "(0 for an outage)", path, ln, b);
			if (n && tv < ts[n - 1])
				die("trace %s: line %lu: time %g s is before the previous sample's %g s: "
				    "samples must be in time order", path, ln, tv, ts[n - 1]);
			if (n && tv == ts[n - 1]) {
				rs[n - 1] = rv;
				continue;
			}
			if (n >= MAX_LINES)
				die("trace %s: more than %lu samples", path, MAX_LINES);
			if (n == cap) {
				cap *= 2;
				ts = realloc(ts, cap * sizeof(double));
				rs = realloc(rs, cap * sizeof(double));
				if (!ts || !rs)
					die("out of memory");
			}
			ts[n] = tv;
			rs[n++] = rv;
		}
		if (!n)
			die("trace %s: it is empty: give one `time_s rate_mbps` sample per line", path);
		int any = 0;
		for (size_t i = 0; i < n; i++)
			any |= rs[i] > 0;
		if (!any)
			die("trace %s: every rate is 0 Mbit/s: the link would never deliver a packet", path);
		double hold = 1.0;
		if (n > 1) {
			double *g = malloc((n - 1) * sizeof(double));
			for (size_t i = 0; i + 1 < n; i++)
				g[i] = ts[i + 1] - ts[i];
			qsort(g, n - 1, sizeof(double), cmp_dbl);
			hold = g[(n - 1) / 2];
			free(g);
		}
		/* as RateLog::from_samples: starts in whole ns, merged when closer than 1 ns */
		t->start = malloc(n * sizeof(double));
		t->bpn = malloc(n * sizeof(double));
		t->cum = malloc((n + 1) * sizeof(double));
		size_t m = 0;
		for (size_t i = 0; i < n; i++) {
			double st = round((ts[i] - ts[0]) * 1e9);
			if (m && t->start[m - 1] >= st) {
				t->bpn[m - 1] = rs[i] / 1e3;
				continue;
			}
			t->start[m] = st;
			t->bpn[m++] = rs[i] / 1e3;
		}
		t->ns = m;
		t->period_ns = round((ts[n - 1] - ts[0] + hold) * 1e9);
		if (t->period_ns < t->start[m - 1] + 1)
			t->period_ns = t->start[m - 1] + 1;
		t->cum[0] = 0;
		for (size_t i = 0; i < m; i++) {
			double end = i + 1 < m ? t->start[i + 1] : t->period_ns;
			t->cum[i + 1] = t->cum[i] + (end - t->start[i]) * t->bpn[i];
		}
		free(ts);
		free(rs);
	}
	free(text);
}

static double trace_mean_mbps(const struct trace *t)
{
	if (t->is_log)
		return t->cum[t->ns] / t->period_ns * 1e3;
	return (double)t->n * OPP_BYTES * 8 / ((double)t->period_ms * 1e3);
}

/* the log: the smallest t (ns) with B(t) >= bits (RateLog::time_of_bits) */
static double log_time_of_bits(const struct trace *t, double bits)
{
	if (bits <= 0)
		return 0;
	double total = t->cum[t->ns];
	double c = fmax(ceil(bits / total) - 1, 0);
	double rem = bits - c * total;
	if (rem > total)
		rem = total;
	size_t lo = 0, hi = t->ns;	/* first i with cum[i + 1] >= rem */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t->cum[mid + 1] < rem)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo >= t->ns)
		lo = t->ns - 1;
	double r = t->bpn[lo], into = r > 0 ? (rem - t->cum[lo]) / r : 0;
	return c * t->period_ns + t->start[lo] + fmax(into, 0);
}

/* the time (ns from the trace's start) of delivery opportunity g */
static uint64_t opp_ns(const struct trace *t, uint64_t g)
{
	if (t->is_log)
		return (uint64_t)ceil(log_time_of_bits(t, (double)(g + 1) * OPP_BYTES * 8));
	uint64_t c = g / t->n, i = g % t->n;
	return (c * t->period_ms + t->ms[i]) * 1000000ULL;
}

/* ------------------------------------------------------------------ packets */
struct pkt {
	struct pkt *next;
	uint64_t arr, due;
	uint32_t len;
	unsigned char data[];
};
struct fifo {
	struct pkt *head, *tail;
	size_t n;
};
static struct pkt *freelist;

static struct pkt *pkt_get(void)
{
	struct pkt *p = freelist;
	if (p) {
		freelist = p->next;
		return p;
	}
	p = malloc(sizeof(*p) + MAX_PKT);
	if (!p)
		die("out of memory");
	return p;
}
static void pkt_put(struct pkt *p)
{
	p->next = freelist;
	freelist = p;
}
static void push(struct fifo *f, struct pkt *p)
{
	p->next = NULL;
	if (f->tail)
		f->tail->next = p;
	else
		f->head = p;
	f->tail = p;
	f->n++;
}
static struct pkt *pop(struct fifo *f)
{
	struct pkt *p = f->head;
	if (p) {
		f->head = p->next;
		if (!f->head)
			f->tail = NULL;
		f->n--;
	}
	return p;
}

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int tun_open(const char *name)
{
	struct ifreq ifr;
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die("/dev/net/tun: %s", strerror(errno));
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
	if (strlen(name) >= IFNAMSIZ)
		die("TUN name %s is too long", name);
	strcpy(ifr.ifr_name, name);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0)
		die("TUNSETIFF %s: %s", name, strerror(errno));
	fcntl(fd, F_SETFL, O_NONBLOCK);
	return fd;
}

/* ------------------------------------------------------------------ state */
static volatile sig_atomic_t stop;
static void on_sig(int s)
{
	(void)s;
	stop = 1;
}

static struct trace tr;
static uint64_t t0_mono, t0_boot, t0_real, bin_ns = 100000000ULL, last_ns;
static int started;
static uint64_t *bin_deliv, *bin_waste;
static size_t nbins;
static uint32_t *soj;
static uint64_t soj_n, soj_max;
static double soj_sum;
static uint64_t in_pkts, in_bytes, drops, deliv_pkts, deliv_bytes, ack_pkts, wr_err;
static uint64_t peak_q;
/* how late data packets left the forward delay line (ms bins up to 10 s): a link that
 * ran behind its trace (its process starved of CPU) shows here */
#define LATE_BINS 10000
static uint32_t late[LATE_BINS];
static uint64_t late_n, late_max;

/* a failed write into a TUN: counted, and the first few said on stderr */
static void wr(int fd, const struct pkt *p, const char *dir)
{
	if (write(fd, p->data, p->len) >= 0)
		return;
	if (wr_err++ < 5)
		fprintf(stderr, "ccplink: writing a %u-byte packet (IPv%d) %s failed: %s\n", p->len,
			p->len ? p->data[0] >> 4 : 0, dir, strerror(errno));
}

static void bin_add(uint64_t **arr, uint64_t t, uint64_t v)
{
	size_t b = (size_t)(t / bin_ns);
	if (b >= nbins) {
		size_t nn = nbins ? nbins : 1024;
		while (nn <= b)
			nn *= 2;
		bin_deliv = realloc(bin_deliv, nn * sizeof(uint64_t));
		bin_waste = realloc(bin_waste, nn * sizeof(uint64_t));
		if (!bin_deliv || !bin_waste)
			die("out of memory");
		memset(bin_deliv + nbins, 0, (nn - nbins) * sizeof(uint64_t));
		memset(bin_waste + nbins, 0, (nn - nbins) * sizeof(uint64_t));
		nbins = nn;
	}
	(*arr)[b] += v;
}

static double soj_pct(double q)
{
	if (!soj_n)
		return NAN;
	uint64_t want = (uint64_t)ceil(q * (double)soj_n), acc = 0;
	if (!want)
		want = 1;
	for (size_t i = 0; i < SOJ_BINS; i++) {
		acc += soj[i];
		if (acc >= want)
			return (double)(i + 1) * SOJ_RES_NS / 1e6;	/* the bin's upper edge */
	}
	return (double)soj_max / 1e6;
}

static void write_stats(const char *path, double fwd_ms, double rev_ms, uint64_t qpkts)
{
	if (!path)
		return;
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "ccplink: cannot write %s: %s\n", tmp, strerror(errno));
		return;
	}
	size_t used = started ? (size_t)(last_ns / bin_ns) + 1 : 0;
	fprintf(f, "{\"format\": \"%s\", \"mean_mbps\": %.6f, \"period_s\": %.6f, "
		"\"fwd_ms\": %g, \"rev_ms\": %g, \"buffer_pkts\": %llu, \"started\": %s, "
		"\"start_boottime_s\": %.6f, \"start_realtime_s\": %.6f, \"elapsed_s\": %.6f, "
		"\"bin_ms\": %g, ",
		tr.is_log ? "tput" : "mahimahi", trace_mean_mbps(&tr),
		tr.is_log ? tr.period_ns / 1e9 : tr.period_ms / 1e3, fwd_ms, rev_ms,
		(unsigned long long)qpkts, started ? "true" : "false", t0_boot / 1e9,
		t0_real / 1e9, last_ns / 1e9, bin_ns / 1e6);
	fprintf(f, "\"in_pkts\": %llu, \"in_bytes\": %llu, \"drops\": %llu, \"deliv_pkts\": %llu, "
		"\"deliv_bytes\": %llu, \"ack_pkts\": %llu, \"write_errors\": %llu, \"peak_queue_pkts\": %llu, ",
		(unsigned long long)in_pkts, (unsigned long long)in_bytes, (unsigned long long)drops,
		(unsigned long long)deliv_pkts, (unsigned long long)deliv_bytes,
		(unsigned long long)ack_pkts, (unsigned long long)wr_err, (unsigned long long)peak_q);
	if (late_n) {
		uint64_t acc = 0, p99 = 0, over10 = 0;
		for (size_t i = 0; i < LATE_BINS; i++) {
			acc += late[i];
			if (!p99 && acc * 100 >= late_n * 99)
				p99 = i + 1;
			if (i >= 10)
				over10 += late[i];
		}
		fprintf(f, "\"late_ms\": {\"p99\": %llu, \"max\": %.3f, \"over_10ms\": %llu}, ",
			(unsigned long long)p99, late_max / 1e6, (unsigned long long)over10);
	}
	if (soj_n)
		fprintf(f, "\"sojourn_ms\": {\"n\": %llu, \"mean\": %.4f, \"p50\": %.4f, \"p95\": %.4f, "
			"\"max\": %.4f}, ", (unsigned long long)soj_n, soj_sum / soj_n / 1e6,
			soj_pct(0.5), soj_pct(0.95), soj_max / 1e6);
	else
		fprintf(f, "\"sojourn_ms\": null, ");
	/* the trace's capacity per bin, from its opportunities */
	fputs("\"cap_bytes\": [", f);
	uint64_t g = 0;
	for (size_t b = 0; b < used; b++) {
		uint64_t c = 0, end = (b + 1) * bin_ns;
		while (opp_ns(&tr, g) < end) {
			c += OPP_BYTES;
			g++;
		}
		fprintf(f, "%s%llu", b ? ", " : "", (unsigned long long)c);
	}
	fputs("], \"deliv_bytes_bins\": [", f);
	for (size_t b = 0; b < used; b++)
		fprintf(f, "%s%llu", b ? ", " : "", (unsigned long long)(b < nbins ? bin_deliv[b] : 0));
	fputs("], \"wasted_bytes_bins\": [", f);
	for (size_t b = 0; b < used; b++)
		fprintf(f, "%s%llu", b ? ", " : "", (unsigned long long)(b < nbins ? bin_waste[b] : 0));
	fputs("]}\n", f);
	if (fclose(f) == 0)
		rename(tmp, path);
}

static void usage(void)
{
	die("usage: ccplink -t TRACE -a TUN_A -z TUN_B -f FWD_MS -r REV_MS (-q PKTS | -b BDPS) "
	    "[-s STATS] [-B BIN_MS] [-w BYTES] [-p PIDFILE]\n       ccplink -c TRACE [SECONDS]");
}

static double num_arg(const char *what, const char *s, double lo, double hi)
{
	char *e;
	double v = strtod(s, &e);
	if (!*s || *e || !isfinite(v) || v < lo || v > hi)
		die("%s is \"%s\": give a number in [%g, %g]", what, s, lo, hi);
	return v;
}

int main(int argc, char **argv)
{
	const char *trace = NULL, *ta = NULL, *tb = NULL, *stats = NULL, *pidf = NULL;
	double fwd_ms = -1, rev_ms = -1, bdps = -1;
	long long qpkts = -1;
	long wait_first = 0;
	int opt;

	if (argc >= 3 && !strcmp(argv[1], "-c")) {
		/* the trace's capacity per second (Mbit/s), for checks */
		load_trace(&tr, argv[2]);
		double secs = argc > 3 ? num_arg("SECONDS", argv[3], 1, 86400) : 60;
		uint64_t g = 0;
		for (int s = 0; s < (int)secs; s++) {
			uint64_t c = 0, end = (uint64_t)(s + 1) * 1000000000ULL;
			while (opp_ns(&tr, g) < end) {
				c += OPP_BYTES;
				g++;
			}
			printf("%d %.4f\n", s, c * 8 / 1e6);
		}
		return 0;
	}
	while ((opt = getopt(argc, argv, "t:a:z:f:r:q:b:s:B:w:p:")) != -1) {
		switch (opt) {
		case 't': trace = optarg; break;
		case 'a': ta = optarg; break;
		case 'z': tb = optarg; break;
		case 'f': fwd_ms = num_arg("-f FWD_MS", optarg, 0, 10000); break;
		case 'r': rev_ms = num_arg("-r REV_MS", optarg, 0, 10000); break;
		case 'q': qpkts = (long long)num_arg("-q PKTS", optarg, 1, 10000000); break;
		case 'b': bdps = num_arg("-b BDPS", optarg, 0.001, 10000); break;
		case 's': stats = optarg; break;
		case 'B': bin_ns = (uint64_t)(num_arg("-B BIN_MS", optarg, 1, 60000) * 1e6); break;
		case 'w': wait_first = (long)num_arg("-w BYTES", optarg, 1, MAX_PKT); break;
		case 'p': pidf = optarg; break;
		default: usage();
		}
	}
	if (!trace || !ta || !tb || fwd_ms < 0 || rev_ms < 0 || (qpkts < 0) == (bdps < 0) || optind != argc)
		usage();
	load_trace(&tr, trace);
	if (qpkts < 0) {
		double bdp = (fwd_ms + rev_ms) / 1e3 * trace_mean_mbps(&tr) * 1e6 / 8;
		qpkts = llround(bdps * bdp / OPP_BYTES);
		if (qpkts < 1)
			qpkts = 1;
	}
	int fa = tun_open(ta), fb = tun_open(tb);
	soj = calloc(SOJ_BINS, sizeof(*soj));
	if (!soj)
		die("out of memory");
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sig;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (pidf) {
		FILE *f = fopen(pidf, "w");
		if (!f)
			die("cannot write %s: %s", pidf, strerror(errno));
		fprintf(f, "%d\n", (int)getpid());
		fclose(f);
	}
	fprintf(stderr, "ccplink: %s (%s, mean %.3f Mbit/s, period %.3f s), queue %lld packets, "
		"delays %g + %g ms\n", trace, tr.is_log ? "tput" : "mahimahi", trace_mean_mbps(&tr),
		tr.is_log ? tr.period_ns / 1e9 : tr.period_ms / 1e3, qpkts, fwd_ms, rev_ms);

	const uint64_t fwd = (uint64_t)(fwd_ms * 1e6), rev = (uint64_t)(rev_ms * 1e6);
	struct fifo q = {0}, dfwd = {0}, drev = {0};
	struct pkt *transit = NULL;
	uint32_t transit_left = 0;
	uint64_t g = 0;	/* the next opportunity */
	if (!wait_first) {
		t0_mono = clock_ns(CLOCK_MONOTONIC);
		t0_boot = clock_ns(CLOCK_BOOTTIME);
		t0_real = clock_ns(CLOCK_REALTIME);
		started = 1;
	}
	while (!stop) {
		uint64_t now = clock_ns(CLOCK_MONOTONIC);
		/* arrivals: data from A, ACKs from B */
		for (int k = 0; k < 256; k++) {
			struct pkt *p = pkt_get();
			ssize_t r = read(fa, p->data, MAX_PKT);
			if (r <= 0) {
				pkt_put(p);
				break;
			}
			p->len = (uint32_t)r;
			if (!started && r < wait_first) {
				/* before the trace's clock: the base delay only */
				p->due = now + fwd;
				push(&dfwd, p);
				continue;
			}
			if (!started) {
				t0_mono = now;
				t0_boot = clock_ns(CLOCK_BOOTTIME);
				t0_real = clock_ns(CLOCK_REALTIME);
				started = 1;
			}
			p->arr = now - t0_mono;
			in_pkts++;
			in_bytes += (uint64_t)r;
			if (q.n + (transit != NULL) >= (uint64_t)qpkts) {
				drops++;
				pkt_put(p);
				continue;
			}
			push(&q, p);
			if (q.n + (transit != NULL) > peak_q)
				peak_q = q.n + (transit != NULL);
		}
		for (int k = 0; k < 256; k++) {
			struct pkt *p = pkt_get();
			ssize_t r = read(fb, p->data, MAX_PKT);
			if (r <= 0) {
				pkt_put(p);
				break;
			}
			p->len = (uint32_t)r;
			p->due = now + rev;
			ack_pkts++;
			push(&drev, p);
		}
		if (started) {
			uint64_t tnow = now - t0_mono;
			last_ns = tnow;
			/* the opportunities up to now */
			for (;;) {
				uint64_t to = opp_ns(&tr, g);
				if (to > tnow)
					break;
				if (!transit && !q.head) {
					/* empty: every opportunity up to now is wasted */
					bin_add(&bin_waste, to, OPP_BYTES);
					g++;
					continue;
				}
				uint32_t left = OPP_BYTES;
				while (left) {
					if (!transit) {
						if (!q.head || q.head->arr > to)
							break;
						transit = pop(&q);
						transit_left = transit->len;
					}
					uint32_t a = transit_left < left ? transit_left : left;
					transit_left -= a;
					left -= a;
					if (!transit_left) {
						uint64_t s = to - transit->arr;
						soj_n++;
						soj_sum += (double)s;
						if (s > soj_max)
							soj_max = s;
						soj[s / SOJ_RES_NS < SOJ_BINS ? s / SOJ_RES_NS : SOJ_BINS - 1]++;
						deliv_pkts++;
						deliv_bytes += transit->len;
						bin_add(&bin_deliv, to, transit->len);
						transit->due = t0_mono + to + fwd;
						push(&dfwd, transit);
						transit = NULL;
					}
				}
				if (left)
					bin_add(&bin_waste, to, left);
				g++;
			}
		}
		/* the delay lines */
		while (dfwd.head && dfwd.head->due <= now) {
			struct pkt *p = pop(&dfwd);
			uint64_t l = now - p->due;
			late[l / 1000000 < LATE_BINS ? l / 1000000 : LATE_BINS - 1]++;
			late_n++;
			if (l > late_max)
				late_max = l;
			wr(fb, p, "towards the receiver");
			pkt_put(p);
		}
		while (drev.head && drev.head->due <= now) {
			struct pkt *p = pop(&drev);
			wr(fa, p, "towards the sender");
			pkt_put(p);
		}
		/* sleep until the next event or an arrival */
		uint64_t next = UINT64_MAX;
		if (started && (transit || q.head))
			next = t0_mono + opp_ns(&tr, g);
		if (dfwd.head && dfwd.head->due < next)
			next = dfwd.head->due;
		if (drev.head && drev.head->due < next)
			next = drev.head->due;
		struct pollfd pf[2] = {{fa, POLLIN, 0}, {fb, POLLIN, 0}};
		struct timespec ts, *tsp = NULL;
		if (next != UINT64_MAX) {
			uint64_t now2 = clock_ns(CLOCK_MONOTONIC), d = next > now2 ? next - now2 : 0;
			ts.tv_sec = (time_t)(d / 1000000000ULL);
			ts.tv_nsec = (long)(d % 1000000000ULL);
			tsp = &ts;
		}
		if (ppoll(pf, 2, tsp, NULL) < 0 && errno != EINTR)
			die("ppoll: %s", strerror(errno));
	}
	write_stats(stats, fwd_ms, rev_ms, (uint64_t)qpkts);
	return 0;
}
