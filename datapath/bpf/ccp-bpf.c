// SPDX-License-Identifier: GPL-2.0
/*
 * ccp-bpf: loader and test tool of the CCP BPF datapath (ccp.bpf.c).
 *
 *   ccp-bpf load [-d DIR]     load the object matching the running kernel,
 *                             pin its maps under /sys/fs/bpf/ccp (root
 *                             only) and register every ccp* name; the
 *                             names stay registered after this exits
 *   ccp-bpf check [-d DIR]    load and verify only: nothing registered,
 *                             nothing pinned
 *   ccp-bpf unload            unregister the names, remove the pins
 *   ccp-bpf policy [POLICY]   show the slot policy, change what is given
 *   ccp-bpf stats             the datapath's counters, slots and policy
 *   ccp-bpf listen [-t SECONDS] [-c PACKETS] [-r BYTES_PER_S] [-q]
 *                             print every record of the ring "reports";
 *                             with -c/-r answer each report with that
 *                             window (PACKETS x the flow's MSS) and/or
 *                             pacing rate (a fixed decision: a test agent,
 *                             not an algorithm)
 *
 * POLICY (load and policy; the module's parameters of the same names and
 * defaults): which sockets get a slot, i.e. are announced to the agent (one
 * without runs the in-BPF fallback alone):
 *   -m MAX_FLOWS    slots in all (1..65536, default 1024)
 *   -n NETNS_QUOTA  slots each namespace other than the initial one may hold
 *                   (default 0: their sockets get none)
 *   -N NETNS_TOTAL  slots all other namespaces may hold together (512)
 *   -l 0|1          loopback connections get a slot too (default 0)
 *   -u UID_SHARE    percent of MAX_FLOWS the sockets of one user may hold
 *                   together, in every namespace (default 50; at least one
 *                   slot; 100: no limit): no user can take every slot
 *   -C CREATE_RATE  CREATEs per second at most, all flows together (default
 *                   5000; 0: no limit): a flow over it runs the in-BPF
 *                   fallback and is announced 100 ms later
 * The initial namespace is PID 1's (/proc/1/ns/net).
 *
 * DIR holds ccp-cc2.bpf.o (Linux < 6.10: cong_control(sk, rs)) and
 * ccp-cc4.bpf.o (6.10+: cong_control(sk, ack, flag, rs)); default: the
 * directory of this program.  Root (CAP_BPF + CAP_NET_ADMIN) only.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/bpf.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "ccp_bpf.h"

#define PIN_DIR		"/sys/fs/bpf/ccp"
#define PIN_OPS		PIN_DIR "/ops"
#define BPF_FS_MAGIC	0xcafe4a11

#define ALG_NAME(id, nm) #nm,
static const char *const alg_names[CCPB_NR_ALGS] = { CCPB_ALGORITHMS(ALG_NAME) };

static const char *const pinned_maps[] = { "reports", "decisions", "stats", "policy", "slots" };

/* a policy on the command line: each field given or not */
struct policy_arg {
	unsigned long long max_flows, netns_quota, netns_total, loopback, uid_share, create_rate;
	bool has_max_flows, has_netns_quota, has_netns_total, has_loopback, has_uid_share,
		has_create_rate;
};

static void policy_apply(struct ccpb_policy *p, const struct policy_arg *a)
{
	if (a->has_max_flows)
		p->max_flows = (__u32)a->max_flows;
	if (a->has_netns_quota)
		p->netns_quota = (__u32)a->netns_quota;
	if (a->has_netns_total)
		p->netns_total = (__u32)a->netns_total;
	if (a->has_loopback)
		p->loopback = (__u32)a->loopback;
	if (a->has_uid_share)
		p->uid_share = (__u32)a->uid_share;
	if (a->has_create_rate)
		p->create_rate = (__u32)a->create_rate;
}

static void policy_print(const struct ccpb_policy *p)
{
	printf("max_flows %u\nnetns_quota %u\nnetns_total %u\nloopback %u\nuid_share %u\ncreate_rate %u\ninit_netns %llu\n",
	       p->max_flows, p->netns_quota, p->netns_total, p->loopback, p->uid_share,
	       p->create_rate, (unsigned long long)p->init_netns);
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

/* cong_control's parameter count in the running kernel's BTF: 2, 4, or -1 */
static int cong_control_nargs(void)
{
	struct btf *btf = btf__load_vmlinux_btf();
	const struct btf_type *t;
	const struct btf_member *m;
	int id, i, n = -1;

	if (!btf) {
		fprintf(stderr, "ccp-bpf: no kernel BTF (/sys/kernel/btf/vmlinux): %s\n",
			strerror(errno));
		return -1;
	}
	id = btf__find_by_name_kind(btf, "tcp_congestion_ops", BTF_KIND_STRUCT);
	if (id < 0)
		goto out;
	t = btf__type_by_id(btf, id);
	m = btf_members(t);
	for (i = 0; i < btf_vlen(t); i++, m++) {
		const struct btf_type *p;

		if (strcmp(btf__name_by_offset(btf, m->name_off), "cong_control"))
			continue;
		p = btf__type_by_id(btf, m->type);
		if (!p || !btf_is_ptr(p))
			break;
		p = btf__type_by_id(btf, p->type);
		if (p && btf_is_func_proto(p))
			n = btf_vlen(p);
		break;
	}
out:
	btf__free(btf);
	if (n != 2 && n != 4)
		fprintf(stderr, "ccp-bpf: the kernel's tcp_congestion_ops.cong_control has %d parameters; this datapath knows 2 and 4\n", n);
	return n == 2 || n == 4 ? n : -1;
}

static int object_path(const char *dir, char *buf, size_t len)
{
	char self[PATH_MAX];
	int nargs = cong_control_nargs();
	ssize_t n;

	if (nargs < 0)
		return -1;
	if (!dir) {
		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n <= 0)
			return -1;
		self[n] = 0;
		*strrchr(self, '/') = 0;	/* an absolute path has one */
		dir = self;
	}
	if ((size_t)snprintf(buf, len, "%s/ccp-cc%d.bpf.o", dir, nargs) >= len)
		return -1;
	return 0;
}

static bool is_bpffs(const char *path)
{
	struct statfs st;

	return statfs(path, &st) == 0 && (unsigned long)st.f_type == BPF_FS_MAGIC;
}

static struct bpf_object *open_load(const char *dir)
{
	char path[PATH_MAX];
	struct bpf_object *obj;
	int err;

	if (object_path(dir, path, sizeof(path)))
		return NULL;
	obj = bpf_object__open_file(path, NULL);
	if (!obj) {
		fprintf(stderr, "ccp-bpf: cannot open %s: %s\n", path, strerror(errno));
		return NULL;
	}
	err = bpf_object__load(obj);
	if (err) {
		fprintf(stderr, "ccp-bpf: cannot load %s: %s\n", path, strerror(-err));
		bpf_object__close(obj);
		return NULL;
	}
	printf("loaded %s\n", path);
	return obj;
}

static int unregister_pinned(bool verbose)
{
	int i, fd, key = 0, failed = 0;
	char path[PATH_MAX];

	for (i = 0; i < CCPB_NR_ALGS; i++) {
		snprintf(path, sizeof(path), PIN_OPS "/%s", alg_names[i]);
		fd = bpf_obj_get(path);
		if (fd < 0) {
			if (errno != ENOENT) {
				fprintf(stderr, "ccp-bpf: %s: %s\n", path, strerror(errno));
				failed++;
			}
			continue;
		}
		if (bpf_map_delete_elem(fd, &key) && errno != ENOENT) {
			fprintf(stderr, "ccp-bpf: cannot unregister %s: %s\n",
				alg_names[i], strerror(errno));
			failed++;
		} else if (verbose) {
			printf("unregistered %s\n", alg_names[i]);
		}
		close(fd);
		if (unlink(path) && errno != ENOENT)
			failed++;
	}
	for (i = 0; i < (int)(sizeof(pinned_maps) / sizeof(pinned_maps[0])); i++) {
		snprintf(path, sizeof(path), PIN_DIR "/%s", pinned_maps[i]);
		if (unlink(path) && errno != ENOENT) {
			fprintf(stderr, "ccp-bpf: cannot unpin %s: %s\n", path, strerror(errno));
			failed++;
		}
	}
	rmdir(PIN_OPS);
	rmdir(PIN_DIR);
	return failed ? -1 : 0;
}

/* every CPU's copy of "stats" zero but its abi */
static int init_stats(int fd)
{
	int ncpu = libbpf_num_possible_cpus(), c, err;
	struct ccpb_stats *per;
	__u32 key = 0;

	if (ncpu <= 0)
		return -1;
	per = calloc(ncpu, sizeof(*per));
	if (!per)
		return -1;
	for (c = 0; c < ncpu; c++)
		per[c].abi = CCPB_ABI;
	err = bpf_map_update_elem(fd, &key, per, BPF_ANY);
	free(per);
	return err;
}

static int cmd_load(const char *dir, bool check_only, const struct policy_arg *pa)
{
	struct bpf_object *obj;
	struct bpf_map *map;
	char path[PATH_MAX];
	int registered = 0, i;
	__u32 key = 0;
	struct ccpb_policy pol = {
		.max_flows = CCPB_DEF_MAX_FLOWS,
		.netns_total = CCPB_DEF_NETNS_TOTAL,
		.uid_share = CCPB_DEF_UID_SHARE,
		.create_rate = CCPB_DEF_CREATE_RATE,
	};
	struct stat ns;

	if (!check_only && stat("/proc/1/ns/net", &ns)) {
		fprintf(stderr, "ccp-bpf: cannot identify the initial network namespace (/proc/1/ns/net): %s\n",
			strerror(errno));
		return 1;
	}
	pol.init_netns = check_only ? 0 : ns.st_ino;
	policy_apply(&pol, pa);

	if (!check_only) {
		if (!is_bpffs("/sys/fs/bpf")) {
			fprintf(stderr, "ccp-bpf: /sys/fs/bpf is not a BPF file system (mount -t bpf bpf /sys/fs/bpf)\n");
			return 1;
		}
		if (access(PIN_DIR "/stats", F_OK) == 0) {
			fprintf(stderr, "ccp-bpf: already loaded (%s exists): ccp-bpf unload first\n", PIN_DIR);
			return 1;
		}
	}
	obj = open_load(dir);
	if (!obj)
		return 1;
	if (check_only) {
		struct bpf_program *p;
		int n = 0;

		bpf_object__for_each_program(p, obj)
			n++;
		printf("verified: %d programs\n", n);
		bpf_object__close(obj);
		return 0;
	}
	map = bpf_object__find_map_by_name(obj, "stats");
	if (!map || init_stats(bpf_map__fd(map))) {
		fprintf(stderr, "ccp-bpf: cannot initialise stats\n");
		goto fail;
	}
	/* the policy before any name is registered: no socket sees it unset */
	map = bpf_object__find_map_by_name(obj, "policy");
	if (!map || bpf_map_update_elem(bpf_map__fd(map), &key, &pol, BPF_ANY)) {
		fprintf(stderr, "ccp-bpf: cannot set the policy\n");
		goto fail;
	}
	/* root only: the directories 0700, the pins 0600 (bpffs default) */
	if ((mkdir(PIN_DIR, 0700) && errno != EEXIST) || (mkdir(PIN_OPS, 0700) && errno != EEXIST) ||
	    chmod(PIN_DIR, 0700) || chmod(PIN_OPS, 0700)) {
		fprintf(stderr, "ccp-bpf: cannot create %s: %s\n", PIN_OPS, strerror(errno));
		goto fail;
	}
	for (i = 0; i < (int)(sizeof(pinned_maps) / sizeof(pinned_maps[0])); i++) {
		map = bpf_object__find_map_by_name(obj, pinned_maps[i]);
		snprintf(path, sizeof(path), PIN_DIR "/%s", pinned_maps[i]);
		if (!map || bpf_map__pin(map, path)) {
			fprintf(stderr, "ccp-bpf: cannot pin %s\n", path);
			goto fail;
		}
	}
	/* all names or none: a name taken (ccp-kernel.ko loaded) undoes all */
	for (i = 0; i < CCPB_NR_ALGS; i++) {
		struct bpf_link *link;

		map = bpf_object__find_map_by_name(obj, alg_names[i]);
		if (!map || bpf_map__type(map) != BPF_MAP_TYPE_STRUCT_OPS) {
			fprintf(stderr, "ccp-bpf: no struct_ops %s in the object\n", alg_names[i]);
			goto fail;
		}
		snprintf(path, sizeof(path), PIN_OPS "/%s", alg_names[i]);
		if (bpf_map__pin(map, path)) {
			fprintf(stderr, "ccp-bpf: cannot pin %s\n", path);
			goto fail;
		}
		link = bpf_map__attach_struct_ops(map);
		if (!link) {
			fprintf(stderr, "ccp-bpf: cannot register %s: %s%s\n", alg_names[i],
				strerror(errno), errno == EEXIST ?
				" (the name is taken: is ccp-kernel.ko loaded?)" : "");
			goto fail;
		}
		/* registered until ccp-bpf unload, not until this exits */
		bpf_link__disconnect(link);
		bpf_link__destroy(link);
		registered++;
	}
	printf("registered %d names:", registered);
	for (i = 0; i < CCPB_NR_ALGS; i++)
		printf(" %s", alg_names[i]);
	printf("\n");
	bpf_object__close(obj);
	return 0;
fail:
	unregister_pinned(false);
	bpf_object__close(obj);
	return 1;
}

static int pinned_fd(const char *name)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), PIN_DIR "/%s", name);
	fd = bpf_obj_get(path);
	if (fd < 0)
		fprintf(stderr, "ccp-bpf: %s: %s%s\n", path, strerror(errno),
			errno == ENOENT ? " (not loaded: ccp-bpf load)" : "");
	return fd;
}

/*
 * Is the pinned map @name (open as @fd) of @type with @size-byte values, as
 * this tool's ABI says?  A lookup copies the map's values into the caller's
 * buffer (one per CPU for a per-CPU map) and an update reads as many from
 * it: a datapath of another ABI is refused before either could overrun.
 */
static int map_is(int fd, const char *name, __u32 type, size_t size)
{
	struct bpf_map_info info;
	__u32 len = sizeof(info);

	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(fd, &info, &len)) {
		fprintf(stderr, "ccp-bpf: cannot inspect the map %s: %s\n", name, strerror(errno));
		return -1;
	}
	if (info.type != type || info.value_size != size) {
		fprintf(stderr, "ccp-bpf: the loaded datapath's map %s is of type %u with %u-byte values, this tool's of type %u with %zu (another ABI: ccp-bpf unload, then load with this build)\n",
			name, info.type, info.value_size, type, size);
		return -1;
	}
	return 0;
}

/* the counters summed over the CPUs ("stats" is per CPU; abi is each CPU's) */
static int read_stats(struct ccpb_stats *st)
{
	__u32 key = 0;
	int fd = pinned_fd("stats"), err, ncpu = libbpf_num_possible_cpus(), c;
	size_t i, n = sizeof(*st) / sizeof(__u64);
	struct ccpb_stats *per;
	__u64 *sum = (__u64 *)st;

	if (fd < 0)
		return -1;
	if (ncpu <= 0) {
		fprintf(stderr, "ccp-bpf: cannot count the possible CPUs: %s\n", strerror(-ncpu));
		close(fd);
		return -1;
	}
	if (map_is(fd, "stats", BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(*st))) {
		close(fd);
		return -1;
	}
	per = calloc(ncpu, sizeof(*per));	/* 8-byte multiple: the kernel's per-CPU stride */
	if (!per) {
		close(fd);
		fprintf(stderr, "ccp-bpf: out of memory\n");
		return -1;
	}
	err = bpf_map_lookup_elem(fd, &key, per);
	close(fd);
	if (err) {
		fprintf(stderr, "ccp-bpf: cannot read stats: %s\n", strerror(errno));
		free(per);
		return -1;
	}
	memset(st, 0, sizeof(*st));
	for (c = 0; c < ncpu; c++) {
		const __u64 *v = (const __u64 *)&per[c];

		for (i = 0; i < n; i++)
			sum[i] += v[i];
	}
	st->abi = per[0].abi;
	free(per);
	if (st->abi != CCPB_ABI) {
		fprintf(stderr, "ccp-bpf: the loaded datapath has ABI %llu, this tool %d\n",
			(unsigned long long)st->abi, CCPB_ABI);
		return -1;
	}
	return 0;
}

static int read_one(const char *name, void *value, size_t size)
{
	__u32 key = 0;
	int fd = pinned_fd(name), err;

	if (fd < 0)
		return -1;
	if (map_is(fd, name, BPF_MAP_TYPE_ARRAY, size)) {
		close(fd);
		return -1;
	}
	err = bpf_map_lookup_elem(fd, &key, value);
	close(fd);
	if (err)
		fprintf(stderr, "ccp-bpf: cannot read %s: %s\n", name, strerror(errno));
	return err ? -1 : 0;
}

static int cmd_stats(void)
{
	struct ccpb_stats st;
	struct ccpb_slots sl;
	struct ccpb_policy pol;

	if (read_stats(&st) || read_one("slots", &sl, sizeof(sl)) || read_one("policy", &pol, sizeof(pol)))
		return 1;
#define P(f) printf("%s %llu\n", #f, (unsigned long long)st.f)
	P(flows_started); P(flows_closed); P(no_storage); P(reports); P(creates);
	P(ring_full); P(decisions_applied); P(decisions_refused); P(stale_fallbacks);
	P(fallback_acks); P(abi); P(no_slot_full); P(no_slot_netns); P(no_slot_loopback);
	P(no_slot_uid); P(creates_throttled);
#undef P
	printf("slots_used %u\nslots_other_netns %u\n", sl.used, sl.other_netns);
	policy_print(&pol);
	return 0;
}

/* ccp-bpf policy: show it, or change the fields given (new flows see it) */
static int cmd_policy(const struct policy_arg *pa)
{
	struct ccpb_stats st;
	struct ccpb_policy pol;
	__u32 key = 0;
	int fd, err;

	if (read_stats(&st) || read_one("policy", &pol, sizeof(pol)))
		return 1;
	if (pa->has_max_flows || pa->has_netns_quota || pa->has_netns_total || pa->has_loopback ||
	    pa->has_uid_share || pa->has_create_rate) {
		policy_apply(&pol, pa);
		fd = pinned_fd("policy");
		if (fd < 0)
			return 1;
		err = bpf_map_update_elem(fd, &key, &pol, BPF_EXIST);
		close(fd);
		if (err) {
			fprintf(stderr, "ccp-bpf: cannot write the policy: %s\n", strerror(errno));
			return 1;
		}
	}
	policy_print(&pol);
	return 0;
}

struct listener {
	int decisions_fd;
	__u32 cwnd_pkts;
	__u64 rate;
	bool quiet;
	unsigned long records, bad, answered, answer_errors;
};

static const char *alg_name(__u32 alg)
{
	return alg < CCPB_NR_ALGS ? alg_names[alg] : "?";
}

static const char *ip4(__u32 host_order, char *buf)
{
	struct in_addr a = { .s_addr = htonl(host_order) };

	return inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN) ? buf : "?";
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct listener *l = ctx;
	struct ccpb_report r;
	char s[INET_ADDRSTRLEN], d[INET_ADDRSTRLEN];

	/* the ring is written by the datapath only, but check anyway */
	if (size != sizeof(r)) {
		l->bad++;
		return 0;
	}
	memcpy(&r, data, sizeof(r));
	if (!r.flow || r.alg >= CCPB_NR_ALGS || r.kind < CCPB_CREATE || r.kind > CCPB_CLOSE) {
		l->bad++;
		return 0;
	}
	l->records++;
	switch (r.kind) {
	case CCPB_CREATE:
		if (!l->quiet)
			printf("create flow=%u alg=%s mss=%u init_cwnd=%u src=%s:%u dst=%s:%u\n",
			       r.flow, alg_name(r.alg), r.mss, r.init_cwnd, ip4(r.src_ip, s),
			       r.src_port, ip4(r.dst_ip, d), r.dst_port);
		break;
	default:
		if (!l->quiet)
			printf("%s flow=%u alg=%s seq=%u mode=%s now_ns=%llu interval_us=%llu acks=%u bytes_acked=%llu pkts_acked=%u misordered=%u lost=%u ecn=%u timeouts=%u rtt_min=%u rtt_max=%u rtt_last=%u rtt_n=%u rate_out=%llu rate_in=%llu delivered=%llu cwnd=%u inflight=%u pending=%u snd_rate=%llu lost_reports=%u\n",
			       r.kind == CCPB_CLOSE ? "close" : "report",
			       r.flow, alg_name(r.alg), r.seq,
			       r.mode == CCPB_MODE_AGENT ? "agent" : "fallback",
			       (unsigned long long)r.now_ns,
			       (unsigned long long)r.interval_us, r.acks,
			       (unsigned long long)r.bytes_acked, r.packets_acked,
			       r.packets_misordered, r.lost_pkts, r.ecn_packets, r.timeouts,
			       r.rtt_min_us, r.rtt_max_us, r.rtt_last_us, r.rtt_samples,
			       (unsigned long long)r.rate_outgoing,
			       (unsigned long long)r.rate_incoming,
			       (unsigned long long)r.delivered_bytes, r.snd_cwnd,
			       r.bytes_in_flight, r.bytes_pending,
			       (unsigned long long)r.snd_rate, r.lost_reports);
		if (r.kind == CCPB_REPORT && (l->cwnd_pkts || l->rate)) {
			__u64 cwnd = (__u64)l->cwnd_pkts * r.mss;
			struct ccpb_decision dec = {
				.seq = r.seq,
				.cwnd_bytes = cwnd > CCPB_MAX_CWND_BYTES ? CCPB_MAX_CWND_BYTES : (__u32)cwnd,
				.rate = l->rate,
			};

			if (bpf_map_update_elem(l->decisions_fd, &r.flow, &dec, BPF_ANY))
				l->answer_errors++;
			else
				l->answered++;
		}
	}
	return 0;
}

static int cmd_listen(double secs, __u32 cwnd_pkts, __u64 rate, bool quiet)
{
	struct listener l = { .cwnd_pkts = cwnd_pkts, .rate = rate, .quiet = quiet };
	struct ring_buffer *rb;
	struct ccpb_stats st;
	struct timespec t0, t;
	int rfd, err = 0;

	if (read_stats(&st))
		return 1;
	rfd = pinned_fd("reports");
	if (rfd < 0)
		return 1;
	l.decisions_fd = pinned_fd("decisions");
	if (l.decisions_fd < 0)
		return 1;
	rb = ring_buffer__new(rfd, on_record, &l, NULL);
	if (!rb) {
		fprintf(stderr, "ccp-bpf: cannot read the ring: %s\n", strerror(errno));
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("listening%s\n", cwnd_pkts || rate ? " and answering" : "");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!stop) {
		err = ring_buffer__poll(rb, 100);
		if (err < 0 && err != -EINTR) {
			fprintf(stderr, "ccp-bpf: ring poll: %s\n", strerror(-err));
			break;
		}
		err = 0;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (secs > 0 && (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 >= secs)
			break;
	}
	ring_buffer__free(rb);
	printf("records %lu malformed %lu answered %lu answer_errors %lu\n",
	       l.records, l.bad, l.answered, l.answer_errors);
	return err ? 1 : 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: ccp-bpf load [-d DIR] [POLICY] | check [-d DIR] | unload | stats |\n"
		"       policy [POLICY] | listen [-t SECONDS] [-c PACKETS] [-r BYTES_PER_S] [-q]\n"
		"POLICY: [-m MAX_FLOWS] [-n NETNS_QUOTA] [-N NETNS_TOTAL] [-l 0|1] [-u UID_SHARE]\n"
		"        [-C CREATE_RATE]\n");
}

static int parse_u64(const char *s, unsigned long long maxv, unsigned long long *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || v > maxv || s[0] == '-')
		return -1;
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd, *dir = NULL;
	unsigned long long cwnd = 0, rate = 0, secs = 0;
	bool quiet = false;
	struct policy_arg pa = { 0 };
	int opt;

	if (argc < 2) {
		usage();
		return 2;
	}
	cmd = argv[1];
	optind = 2;
	while ((opt = getopt(argc, argv, "d:t:c:r:qm:n:N:l:u:C:")) != -1) {
		switch (opt) {
		case 'm':
			if (parse_u64(optarg, CCPB_MAX_FLOWS, &pa.max_flows) || !pa.max_flows)
				goto bad;
			pa.has_max_flows = true;
			break;
		case 'n':
			if (parse_u64(optarg, CCPB_MAX_FLOWS, &pa.netns_quota))
				goto bad;
			pa.has_netns_quota = true;
			break;
		case 'N':
			if (parse_u64(optarg, CCPB_MAX_FLOWS, &pa.netns_total))
				goto bad;
			pa.has_netns_total = true;
			break;
		case 'l':
			if (parse_u64(optarg, 1, &pa.loopback))
				goto bad;
			pa.has_loopback = true;
			break;
		case 'u':
			if (parse_u64(optarg, 100, &pa.uid_share))
				goto bad;
			pa.has_uid_share = true;
			break;
		case 'C':
			if (parse_u64(optarg, 0xffffffffULL, &pa.create_rate))
				goto bad;
			pa.has_create_rate = true;
			break;
		case 'd':
			dir = optarg;
			break;
		case 't':
			if (parse_u64(optarg, 86400, &secs))
				goto bad;
			break;
		case 'c':
			if (parse_u64(optarg, CCPB_MAX_CWND_BYTES / 65536, &cwnd) || !cwnd)
				goto bad;
			break;
		case 'r':
			if (parse_u64(optarg, CCPB_MAX_RATE, &rate) || !rate)
				goto bad;
			break;
		case 'q':
			quiet = true;
			break;
		default:
			goto bad;
		}
	}
	if (optind != argc)
		goto bad;
	libbpf_set_print(quiet_print);
	if (!strcmp(cmd, "load"))
		return cmd_load(dir, false, &pa);
	if (!strcmp(cmd, "check"))
		return cmd_load(dir, true, &pa);
	if (!strcmp(cmd, "policy"))
		return cmd_policy(&pa);
	if (!strcmp(cmd, "unload"))
		return unregister_pinned(true) ? 1 : 0;
	if (!strcmp(cmd, "stats"))
		return cmd_stats();
	if (!strcmp(cmd, "listen"))
		return cmd_listen((double)secs, (__u32)cwnd, rate, quiet);
bad:
	usage();
	return 2;
}
