// SPDX-License-Identifier: GPL-2.0
/*
 * CCP datapath as BPF struct_ops: no kernel module.
 *
 * One tcp_congestion_ops per name of the module's table (ccp, ccp_<alg>,
 * ccp_auto; ccp_bpf.h CCPB_ALGORITHMS), so setsockopt(TCP_CONGESTION)
 * and the tcp_congestion_control sysctl select exactly as with
 * ccp-kernel.ko.  All share the programs below and differ only in init,
 * which records the algorithm id of the name.
 *
 * At init a flow the policy gives a slot (take_slot: max_flows,
 * uid_share, the namespace quotas, loopback) is announced to the agent by
 * a CREATE record, at most create_rate of them a second; one held back, or
 * lost to a full ring, runs the fallback and is announced at an interval's
 * end CCPB_CREATE_RETRY_NS later.  A flow without a slot runs the fallback
 * alone and reports nothing.
 *
 * On every ACK (cong_control):
 *  - the measurements the fold programs take (the module's primitives:
 *    bytes/packets acked, SACKed beyond the cumulative ACK, lost, CE
 *    marked, RTT samples, send/ack rates, delivered, in flight, pending)
 *    are folded into the flow's interval accumulators (sk_storage);
 *  - once an interval (the smoothed RTT, at least CCPB_MIN_INTERVAL_US)
 *    has passed, or at once after an RTO, one record goes to the agent
 *    over the ring buffer "reports" and the accumulators restart;
 *  - the window and pacing rate come from the flow's entry in
 *    "decisions" (written by the agent) while it is fresh: it answers
 *    one of the flow's last CCPB_STALE_REPORTS reports, or one sent less
 *    than CCPB_STALE_MIN_NS ago.  Otherwise (no
 *    agent, agent dead or hung, a decision out of range) the in-BPF fallback
 *    runs the flow: slow start (with HyStart's delay exit), then Cubic;
 *    proportional rate reduction towards ssthresh in
 *    CWR/Recovery.  cong_control replaces the stack's window
 *    logic, so this fallback is complete: a flow never stalls.
 *
 * Bounded: no loops; every map access checked; every agent value range
 * checked before use (an out-of-range decision counts as none).
 *
 * cong_control's arguments changed in Linux 6.10 (ack and flag added
 * before the rate sample): this file is built twice, CCPB_CC_NARGS=2
 * (6.1) and 4 (6.10+), and the loader picks the object that matches the
 * running kernel's BTF.
 */
#include "ccp_vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ccp_bpf.h"

#ifndef CCPB_CC_NARGS
#error "build with -DCCPB_CC_NARGS=2 (Linux < 6.10) or 4"
#endif

char _license[] SEC("license") = "GPL";

#define USEC_PER_SEC		1000000ULL
#define NSEC_PER_USEC		1000ULL
#define NSEC_PER_SEC		1000000000ULL
#define TCP_INFINITE_SSTHRESH	0x7fffffffU
#define PACING_SS_RATIO		200	/* net.ipv4.tcp_pacing_ss_ratio default */
#define PACING_CA_RATIO		120	/* net.ipv4.tcp_pacing_ca_ratio default */

#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))

/* per flow (socket) */
struct ccpb_flow {
	__u32 id;
	__u32 alg;
	__u32 seq;		/* reports sent (attempted) so far */
	__u32 lost_reports;
	__u64 i_start_ns;	/* interval start */
	/* interval accumulators */
	__u64 i_bytes_acked;
	__u64 i_delivered;	/* packets */
	__u64 i_rtt_sum;
	__u32 i_packets_acked;
	__u32 i_misordered;
	__u32 i_lost;
	__u32 i_ecn;
	__u32 i_acks;
	__u32 i_timeouts;
	__u32 i_rtt_min;
	__u32 i_rtt_max;
	__u32 i_rtt_last;
	__u32 i_rtt_n;
	/* last values of the cumulative counters */
	__u64 last_bytes_acked;
	__u32 last_delivered_ce;
	__u32 last_delivered;
	__u64 rate_out;
	__u64 rate_in;
	/* fallback and control state */
	__u32 prr_delivered;	/* the stack's is not ours to write */
	/* the Cubic fallback */
	__u64 epoch_us;		/* start of the current growth epoch; 0: none */
	__u32 w_max;		/* window before the last reduction (packets) */
	__u32 origin;		/* the cubic's plateau for this epoch */
	__u32 k_ms;		/* time to reach it from the epoch's start */
	__u32 ack_cnt;		/* packets acked in the epoch (Reno estimate) */
	__u32 reno_cwnd;	/* the window Reno would have (TCP friendliness) */
	__u32 base_rtt;		/* least RTT sample of the flow (us) */
	__u64 rep_ns[CCPB_STALE_RING];	/* when report seq went out, at seq % ring */
	__u8 ca_state;		/* as told by set_state */
	__u8 mode;		/* CCPB_MODE_* */
	__u8 rate_set;		/* a decision set sk_pacing_rate */
	__u8 pacing_set;	/* ... and switched sk_pacing_status on */
	__u8 timeout;		/* CA_EVENT_LOSS since the last ACK */
	__u8 slot;		/* CCPB_SLOT_*: whether (and where) it holds a slot */
	__u8 announced;		/* its CREATE went out: it reports, decisions apply */
	__u8 pad;
	__u32 netns;		/* its namespace's inode, when it holds a slot there */
	__u32 uid;		/* its owner, counted in uid_slots while it holds a slot */
	__u64 create_at_ns;	/* a slot, no CREATE yet: when to try again */
};

#define CCPB_SLOT_NONE		0	/* no slot: id 0, the fallback alone */
#define CCPB_SLOT_INIT_NS	1
#define CCPB_SLOT_OTHER_NS	2

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ccpb_flow);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, CCPB_RINGBUF_BYTES);
} reports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, CCPB_MAX_FLOWS);
	__type(key, __u32);
	__type(value, struct ccpb_decision);
} decisions SEC(".maps");

/* one copy per CPU (the module's counters are per-CPU too): every ACK counts
 * in its CPU's copy, no cache line bounces between CPUs; user space sums */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ccpb_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ccpb_policy);
} policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ccpb_slots);
} slots SEC(".maps");

/* slots held per namespace other than the initial one (key: ns inode) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, CCPB_MAX_NETNS);
	__type(key, __u32);
	__type(value, __u32);
} netns_slots SEC(".maps");

/* slots held per user (key: the socket's kuid; every namespace) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, CCPB_MAX_FLOWS);	/* no more users than slots */
	__type(key, __u32);
	__type(value, __u32);
} uid_slots SEC(".maps");

__u32 next_flow_id;
/* create_rate's window (the module's ratelimit): its start, CREATEs tried in it */
__u64 create_window_ns;
__u64 create_window_n;

/* this CPU's copy; atomic still, as a softirq may interrupt a program
 * running in process context on the same CPU (the line stays local) */
#define STAT_INC(field) do {						\
	__u32 k0 = 0;							\
	struct ccpb_stats *s_ = bpf_map_lookup_elem(&stats, &k0);	\
	if (s_)								\
		__sync_fetch_and_add(&s_->field, 1);			\
} while (0)

static __always_inline struct tcp_sock *tcp_sk(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline __u32 in_flight(const struct tcp_sock *tp)
{
	__u32 left = tp->sacked_out + tp->lost_out;
	__u32 out = tp->packets_out;

	out = out > left ? out - left : 0;
	return out + tp->retrans_out;
}

static __always_inline __u32 mss_of(const struct tcp_sock *tp)
{
	__u32 mss = tp->mss_cache;

	return mss ? mss : 1;
}

static __always_inline __u32 pkts_bytes(__u32 pkts, __u32 mss)
{
	__u64 b = (__u64)pkts * mss;

	return b > 0xffffffffULL ? 0xffffffffU : (__u32)b;
}

/* tcp_is_cwnd_limited() */
static __always_inline bool cwnd_limited(const struct tcp_sock *tp)
{
	__u32 cwnd = tp->snd_cwnd;

	if (BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited))
		return true;
	if (cwnd < tp->snd_ssthresh)	/* slow start */
		return cwnd < 2 * tp->max_packets_out;
	return false;
}

/* What the stack's tcp_update_pacing_rate() would set (TSO sizing). */
static __always_inline void default_pacing(struct tcp_sock *tp)
{
	struct sock *sk = &tp->inet_conn.icsk_inet.sk;
	__u32 cwnd = tp->snd_cwnd, srtt = tp->srtt_us;
	__u64 rate = (__u64)tp->mss_cache * ((USEC_PER_SEC / 100) << 3);

	rate *= cwnd < tp->snd_ssthresh / 2 ? PACING_SS_RATIO : PACING_CA_RATIO;
	rate *= max(cwnd, tp->packets_out);
	if (srtt)
		rate /= srtt;
	tp->inet_conn.icsk_inet.sk.sk_pacing_rate = min(rate, (__u64)sk->sk_max_pacing_rate);
}

static __always_inline void drop_agent_rate(struct tcp_sock *tp, struct ccpb_flow *fl)
{
	if (fl->pacing_set &&
	    tp->inet_conn.icsk_inet.sk.sk_pacing_status == SK_PACING_NEEDED)
		tp->inet_conn.icsk_inet.sk.sk_pacing_status = SK_PACING_NONE;
	fl->pacing_set = 0;
	fl->rate_set = 0;
}

/* Proportional rate reduction towards ssthresh (RFC 6937). */
static __always_inline void reno_reduce(struct tcp_sock *tp, struct ccpb_flow *fl,
					__u32 acked)
{
	__u32 inflight = in_flight(tp), ssthresh = tp->snd_ssthresh;
	__u32 prior = tp->prior_cwnd, prr_out = tp->prr_out;
	__s64 sndcnt;

	if (!acked || !prior)
		return;
	fl->prr_delivered += acked;
	if (inflight > ssthresh) {
		__u64 allowed = ((__u64)ssthresh * fl->prr_delivered + prior - 1) / prior;

		sndcnt = (__s64)allowed - (__s64)prr_out;
	} else {
		__s64 room = (__s64)ssthresh - inflight;

		sndcnt = (__s64)fl->prr_delivered - (__s64)prr_out;
		if (sndcnt < (__s64)acked)
			sndcnt = acked;
		if (sndcnt > room)
			sndcnt = room;
	}
	/* the first retransmission of the episode always goes out */
	if (!prr_out && sndcnt < 1)
		sndcnt = 1;
	if (sndcnt < 0)
		sndcnt = 0;
	tp->snd_cwnd = max(inflight + (__u32)sndcnt, 2U);
}

/* cwnd += acked / w, one packet per w packets acked (tcp_cong_avoid_ai) */
static __always_inline void add_ai(struct tcp_sock *tp, __u32 cwnd, __u32 w, __u32 acked)
{
	__u32 cnt = tp->snd_cwnd_cnt;

	if (!w)
		w = 1;
	if (cnt >= w) {
		cnt = 0;
		cwnd++;
	}
	cnt += acked;
	if (cnt >= w) {
		__u32 delta = cnt / w;

		cnt -= delta * w;
		cwnd += delta;
	}
	tp->snd_cwnd_cnt = cnt;
	tp->snd_cwnd = min(cwnd, tp->snd_cwnd_clamp);
}

/* floor(cbrt(x)) for x < 2^63, bit by bit (21 steps, unrolled) */
static __always_inline __u32 icbrt(__u64 x)
{
	__u64 r = 0;
	int b;

#pragma unroll
	for (b = 20; b >= 0; b--) {
		__u64 c = r | (1ULL << b);

		if (c * c * c <= x)
			r = c;
	}
	return (__u32)r;
}

#define CUBIC_BETA	717	/* /1024: the window after a loss, 0.7 */
#define CUBIC_K_SCALE	2500000000ULL	/* K = cbrt(dW / C) s, C = 0.4: in ms, cbrt(dW * 2.5e9) */
#define CUBIC_MAX_DT_MS	100000ULL	/* beyond 100 s into an epoch the curve is flat out */

/* Cubic's window growth in congestion avoidance (RFC 9438: W(t) = C (t - K)^3 +
 * W_max, with the Reno-friendly estimate as a floor); how many acked packets per
 * window increment. */
static __always_inline __u32 cubic_cnt(struct tcp_sock *tp, struct ccpb_flow *fl,
				       __u32 cwnd, __u32 acked)
{
	__u64 now_us = bpf_ktime_get_ns() / NSEC_PER_USEC, t_ms, d, dt, target;
	__u32 cnt, srtt_us = tp->srtt_us >> 3;

	fl->ack_cnt += acked;
	if (!fl->epoch_us) {
		fl->epoch_us = now_us;
		fl->ack_cnt = acked;
		fl->reno_cwnd = cwnd;
		if (fl->w_max <= cwnd) {
			fl->k_ms = 0;
			fl->origin = cwnd;
		} else {
			d = fl->w_max - cwnd;
			if (d > (1ULL << 31))	/* keeps d x 2.5e9 below 2^63 */
				d = 1ULL << 31;
			fl->k_ms = icbrt(d * CUBIC_K_SCALE);
			fl->origin = fl->w_max;
		}
	}
	/* where the curve is one RTT from now */
	t_ms = (now_us - fl->epoch_us + srtt_us) / 1000;
	dt = t_ms > fl->k_ms ? t_ms - fl->k_ms : fl->k_ms - t_ms;
	if (dt > CUBIC_MAX_DT_MS)
		dt = CUBIC_MAX_DT_MS;
	d = dt * dt * dt * 4 / 10000000000ULL;	/* 0.4 (dt/1000)^3 packets */
	if (t_ms > fl->k_ms)
		target = fl->origin + d;
	else
		target = fl->origin > d ? fl->origin - d : 0;
	if (target > cwnd)
		cnt = (__u32)(cwnd / (target - cwnd));
	else
		cnt = 100 * cwnd;	/* flat: barely grow */
	if (!fl->w_max && cnt > 20)
		cnt = 20;		/* no loss yet: at least 5 % a window */
	/* TCP friendliness: Reno's window grows 3(1-b)/(1+b) packets per window */
	{
		__u32 per = (cwnd * 15) >> 3;	/* acked packets per Reno increment */

		if (per && fl->ack_cnt >= per) {
			__u32 n = fl->ack_cnt / per;

			fl->ack_cnt -= n * per;
			fl->reno_cwnd += n;
		}
		if (fl->reno_cwnd > cwnd) {
			__u32 m = cwnd / (fl->reno_cwnd - cwnd);

			if (cnt > m)
				cnt = m;
		}
	}
	return max(cnt, 2U);
}

/* The in-BPF fallback: slow start, then Cubic (Reno's AIMD for a socket without
 * per-flow state); proportional rate reduction in CWR/Recovery.  Cubic for every
 * name, ccp_reno included: the fallback keeps a flow moving while no agent
 * decides, as the module's Reno does for every name, and Reno's linear growth
 * left ccp_reno at 0.76-0.83x native cubic on the guest's 1-BDP link. */
static __always_inline void fallback(struct tcp_sock *tp, struct ccpb_flow *fl,
				     const struct rate_sample *rs)
{
	__u32 acked = rs->acked_sacked;
	__u32 cwnd, ssthresh, clamp;

	if (fl && (fl->ca_state == TCP_CA_CWR || fl->ca_state == TCP_CA_Recovery)) {
		reno_reduce(tp, fl, acked);
		return;
	}
	if (!acked || !cwnd_limited(tp))
		return;
	cwnd = tp->snd_cwnd;
	ssthresh = tp->snd_ssthresh;
	clamp = tp->snd_cwnd_clamp;
	if (cwnd < ssthresh) {		/* slow start */
		__u32 n = min(cwnd + acked, ssthresh);

		acked -= n - cwnd;
		cwnd = min(n, clamp);
		tp->snd_cwnd = cwnd;
		if (!acked)
			return;
	}
	if (fl)
		add_ai(tp, cwnd, cubic_cnt(tp, fl, cwnd, acked), acked);
	else			/* no per-flow state: Reno */
		add_ai(tp, cwnd, cwnd, acked);
}

/* HyStart's delay exit (as Linux Cubic's): in slow start, a measurement interval
 * whose least RTT is an eighth (4..16 ms) above the flow's least ends it */
static __always_inline void hystart(struct tcp_sock *tp, struct ccpb_flow *fl)
{
	__u32 base = fl->base_rtt, thresh;

	if (!base || fl->i_rtt_n < 8 ||
	    tp->snd_cwnd >= tp->snd_ssthresh || tp->snd_cwnd < 16)
		return;
	thresh = base >> 3;
	thresh = thresh < 4000 ? 4000 : thresh > 16000 ? 16000 : thresh;
	if (fl->i_rtt_min >= base + thresh)
		tp->snd_ssthresh = tp->snd_cwnd;
}

/* The interval's accumulators restart at `now`. */
static __always_inline void end_interval(struct ccpb_flow *fl, __u64 now)
{
	fl->i_start_ns = now;
	fl->i_bytes_acked = 0;
	fl->i_delivered = 0;
	fl->i_rtt_sum = 0;
	fl->i_packets_acked = 0;
	fl->i_misordered = 0;
	fl->i_lost = 0;
	fl->i_ecn = 0;
	fl->i_acks = 0;
	fl->i_timeouts = 0;
	fl->i_rtt_min = 0;
	fl->i_rtt_max = 0;
	fl->i_rtt_n = 0;
}

/* The interval's measurements to the agent; accumulators restart.
 * CCPB_CLOSE: the last, partial interval of a flow that ends.  A flow
 * the agent does not know (no slot, or its CREATE not out yet) reports to
 * nobody: its interval only ends (the fallback's HyStart reads the
 * interval), no record is built. */
static __always_inline void emit_report(struct tcp_sock *tp, struct ccpb_flow *fl,
					__u64 now, __u32 mss, __u32 kind)
{
	struct ccpb_report r;
	__u32 inflight, wseq, nxt;

	if (!fl->announced) {
		end_interval(fl, now);
		return;
	}
	inflight = in_flight(tp);
	wseq = tp->write_seq;
	nxt = tp->snd_nxt;
	__builtin_memset(&r, 0, sizeof(r));
	if (kind == CCPB_REPORT) {
		fl->seq++;
		fl->rep_ns[fl->seq & (CCPB_STALE_RING - 1)] = now;
	}
	r.kind = kind;
	r.flow = fl->id;
	r.seq = fl->seq;
	r.alg = fl->alg;
	r.now_ns = now;
	r.mss = mss;
	r.interval_us = (now - fl->i_start_ns) / NSEC_PER_USEC;
	r.bytes_acked = fl->i_bytes_acked;
	r.packets_acked = fl->i_packets_acked;
	r.packets_misordered = fl->i_misordered;
	r.lost_pkts = fl->i_lost;
	r.ecn_packets = fl->i_ecn;
	r.acks = fl->i_acks;
	r.timeouts = fl->i_timeouts;
	r.rtt_min_us = fl->i_rtt_min;
	r.rtt_max_us = fl->i_rtt_max;
	r.rtt_last_us = fl->i_rtt_last;
	r.rtt_samples = fl->i_rtt_n;
	r.rtt_sum_us = fl->i_rtt_sum;
	r.rate_outgoing = fl->rate_out;
	r.rate_incoming = fl->rate_in;
	r.delivered_bytes = fl->i_delivered * mss;
	r.snd_cwnd = pkts_bytes(tp->snd_cwnd, mss);
	r.bytes_in_flight = pkts_bytes(inflight, mss);
	r.packets_in_flight = inflight;
	r.bytes_pending = wseq - nxt;
	r.snd_rate = fl->rate_set ? tp->inet_conn.icsk_inet.sk.sk_pacing_rate : 0;
	r.mode = fl->mode;
	r.lost_reports = fl->lost_reports;
	if (bpf_ringbuf_output(&reports, &r, sizeof(r), 0)) {
		fl->lost_reports++;
		STAT_INC(ring_full);
	} else if (kind == CCPB_REPORT) {
		STAT_INC(reports);
	}
	end_interval(fl, now);
}

/* Fold one ACK into the interval (the module's ccpk_load_prims()). */
static __always_inline void measure(struct tcp_sock *tp, struct ccpb_flow *fl,
				    const struct rate_sample *rs, __u32 mss)
{
	__u64 bytes_acked = tp->bytes_acked;
	__u64 acked = bytes_acked - fl->last_bytes_acked;
	__u32 ce = tp->delivered_ce, dlv = tp->delivered;
	__u32 pkts = (__u32)((acked + mss - 1) / mss);
	__u32 sacked = rs->acked_sacked;
	__s32 delivered = rs->delivered;
	int losses = rs->losses;
	long rtt = rs->rtt_us;
	__u32 sample;

	fl->last_bytes_acked = bytes_acked;
	fl->i_bytes_acked += acked;
	fl->i_packets_acked += pkts;
	if (sacked > pkts)
		fl->i_misordered += sacked - pkts;
	if (losses > 0)
		fl->i_lost += losses;
	fl->i_ecn += ce - fl->last_delivered_ce;
	fl->last_delivered_ce = ce;
	fl->i_delivered += dlv - fl->last_delivered;
	fl->last_delivered = dlv;
	fl->i_acks++;
	if (fl->timeout) {
		fl->i_timeouts++;
		fl->timeout = 0;
	}
	if (rtt > 0 && rtt < 0xffffffffL) {
		sample = (__u32)rtt;
		if (!fl->i_rtt_n || sample < fl->i_rtt_min)
			fl->i_rtt_min = sample;
		if (sample > fl->i_rtt_max)
			fl->i_rtt_max = sample;
		fl->i_rtt_sum += sample;
		fl->i_rtt_n++;
		fl->i_rtt_last = sample;
		if (!fl->base_rtt || sample < fl->base_rtt)
			fl->base_rtt = sample;
	} else if (!fl->i_rtt_last) {
		fl->i_rtt_last = tp->srtt_us >> 3;
	}
	if (delivered > 0) {
		__u64 b = (__u64)delivered * mss;
		__u32 si = rs->snd_interval_us, ri = rs->rcv_interval_us;

		if (si)
			fl->rate_out = b * USEC_PER_SEC / si;
		if (ri)
			fl->rate_in = b * USEC_PER_SEC / ri;
	}
}

/* The agent's decision for the flow if it is fresh and in range. */
static __always_inline const struct ccpb_decision *fresh_decision(struct ccpb_flow *fl,
								  __u64 now)
{
	const struct ccpb_decision *d;
	__u32 id = fl->id, seq;

	d = bpf_map_lookup_elem(&decisions, &id);
	if (!d)
		return NULL;
	seq = d->seq;
	if (!seq || seq > fl->seq || d->cwnd_bytes > CCPB_MAX_CWND_BYTES ||
	    d->rate > CCPB_MAX_RATE) {
		STAT_INC(decisions_refused);
		return NULL;
	}
	if (fl->seq - seq < CCPB_STALE_REPORTS)
		return d;
	/* older: still fresh while its report is recent (and still in the ring) */
	if (fl->seq - seq < CCPB_STALE_RING &&
	    now - fl->rep_ns[seq & (CCPB_STALE_RING - 1)] < CCPB_STALE_MIN_NS)
		return d;
	return NULL;
}

static __always_inline void apply(struct tcp_sock *tp, struct ccpb_flow *fl,
				  const struct ccpb_decision *d, __u32 mss)
{
	__u32 cwnd_bytes = d->cwnd_bytes;
	__u64 rate = d->rate;

	if (cwnd_bytes) {
		__u32 cwnd = cwnd_bytes / mss;

		cwnd = max(cwnd, 2U);
		tp->snd_cwnd = min(cwnd, tp->snd_cwnd_clamp);
	}
	if (rate) {
		__u64 cap = tp->inet_conn.icsk_inet.sk.sk_max_pacing_rate;

		tp->inet_conn.icsk_inet.sk.sk_pacing_rate = min(rate, cap);
		if (tp->inet_conn.icsk_inet.sk.sk_pacing_status == SK_PACING_NONE) {
			tp->inet_conn.icsk_inet.sk.sk_pacing_status = SK_PACING_NEEDED;
			fl->pacing_set = 1;
		}
		fl->rate_set = 1;
	} else if (fl->rate_set) {
		drop_agent_rate(tp, fl);
	}
}

/*
 * May a CREATE go out now?  At most policy create_rate in each second's
 * window, all flows together (the module's ccpk_create_allowed, the
 * kernel's ratelimit).  The window moves on by compare-and-swap: of the
 * CPUs that see it expired one restarts it, and an attempt counted in the
 * old window just before the restart is forgotten (a few more than
 * create_rate in a second, never a flood).
 */
static __always_inline bool create_allowed(__u64 now)
{
	struct ccpb_policy *p;
	__u64 start = create_window_ns;
	__u32 k0 = 0, rate;

	p = bpf_map_lookup_elem(&policy, &k0);
	rate = p ? p->create_rate : 0;
	if (!rate)
		return true;
	if (now - start >= NSEC_PER_SEC &&
	    __sync_val_compare_and_swap(&create_window_ns, start, now) == start)
		__sync_lock_test_and_set(&create_window_n, 0);
	return __sync_fetch_and_add(&create_window_n, 1) < rate;
}

/*
 * Announce a flow that holds a slot (fl->id) to the agent: its CREATE.
 * Held back by create_rate, or lost to a full ring, it is tried again
 * CCPB_CREATE_RETRY_NS later (at an interval's end, on_ack); until then the
 * flow runs the in-BPF fallback and reports nothing.
 */
static __always_inline void announce(struct sock *sk, struct ccpb_flow *fl, __u64 now)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct sock_common *skc = &sk->__sk_common;
	struct ccpb_report r;
	__u32 mss = mss_of(tp);

	if (!create_allowed(now)) {
		STAT_INC(creates_throttled);
		fl->create_at_ns = now + CCPB_CREATE_RETRY_NS;
		return;
	}
	__builtin_memset(&r, 0, sizeof(r));
	r.kind = CCPB_CREATE;
	r.flow = fl->id;
	r.alg = fl->alg;
	r.now_ns = now;
	r.mss = mss;
	r.init_cwnd = pkts_bytes(tp->snd_cwnd, mss);
	if (skc->skc_family == AF_INET) {
		r.src_ip = __builtin_bswap32(skc->skc_rcv_saddr);
		r.dst_ip = __builtin_bswap32(skc->skc_daddr);
	}
	r.src_port = skc->skc_num;
	r.dst_port = __builtin_bswap16(skc->skc_dport);
	if (bpf_ringbuf_output(&reports, &r, sizeof(r), 0)) {
		STAT_INC(ring_full);
		fl->create_at_ns = now + CCPB_CREATE_RETRY_NS;
		return;
	}
	fl->announced = 1;
	STAT_INC(creates);
}

static __always_inline void on_ack(struct sock *sk, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	const struct ccpb_decision *d;
	struct ccpb_flow *fl;
	__u32 mss = mss_of(tp), interval;
	__u64 now;

	fl = bpf_sk_storage_get(&flows, sk, 0, 0);
	if (!fl) {			/* no state: Reno, no agent */
		fallback(tp, NULL, rs);
		default_pacing(tp);
		STAT_INC(fallback_acks);
		return;
	}
	measure(tp, fl, rs, mss);
	now = bpf_ktime_get_ns();
	interval = max(tp->srtt_us >> 3, (__u32)CCPB_MIN_INTERVAL_US);
	if (now - fl->i_start_ns >= (__u64)interval * NSEC_PER_USEC || fl->i_timeouts) {
		if (fl->mode == CCPB_MODE_FALLBACK)
			hystart(tp, fl);
		emit_report(tp, fl, now, mss, CCPB_REPORT);
		if (fl->id && !fl->announced && now >= fl->create_at_ns)
			announce(sk, fl, now);
	}

	d = fl->announced ? fresh_decision(fl, now) : NULL;
	if (d) {
		apply(tp, fl, d, mss);
		fl->mode = CCPB_MODE_AGENT;
		STAT_INC(decisions_applied);
	} else {
		if (fl->mode == CCPB_MODE_AGENT)
			STAT_INC(stale_fallbacks);
		fl->mode = CCPB_MODE_FALLBACK;
		if (fl->rate_set)
			drop_agent_rate(tp, fl);
		fallback(tp, fl, rs);
		STAT_INC(fallback_acks);
	}
	if (!fl->rate_set)
		default_pacing(tp);
}

#define IFF_LOOPBACK	0x8

/* a loopback path, as the module's ccpk_is_loopback: a destination in
 * 127/8, ::1 or ::ffff:127/104, or a route over a loopback device (a local
 * address of another interface: the route's device is lo) */
static __always_inline bool is_loopback(struct sock *sk)
{
	const struct sock_common *skc = &sk->__sk_common;
	struct net_device *dev;
	struct dst_entry *dst;
	__be32 a0, a1, a2, a3;

	if (skc->skc_family == AF_INET && (skc->skc_daddr & 0xff) == 127)	/* network order */
		return true;
	if (skc->skc_family == AF_INET6) {
		a0 = skc->skc_v6_daddr.in6_u.u6_addr32[0];
		a1 = skc->skc_v6_daddr.in6_u.u6_addr32[1];
		a2 = skc->skc_v6_daddr.in6_u.u6_addr32[2];
		a3 = skc->skc_v6_daddr.in6_u.u6_addr32[3];
		if (!a0 && !a1 &&
		    ((!a2 && a3 == __builtin_bswap32(1)) ||
		     (a2 == __builtin_bswap32(0xffff) && (a3 & 0xff) == 127)))
			return true;
	}
	dst = sk->sk_dst_cache;
	dev = dst ? dst->dev : NULL;
	return dev && (dev->flags & IFF_LOOPBACK);
}

/* one user's slots at most: uid_share percent of max_flows, at least one
 * (the module's ccpk_uid_quota); uid_share 100 or more: no limit */
static __always_inline __u32 uid_quota(const struct ccpb_policy *p)
{
	__u64 q;

	if (p->uid_share >= 100)
		return 0xffffffff;
	q = (__u64)p->max_flows * p->uid_share / 100;
	return q ? (__u32)q : 1;
}

/* count one more slot for @key in @map (netns_slots, uid_slots) unless it
 * holds @quota already, or the map is full; the race with count_put is
 * take_slot's (below) */
static __always_inline bool count_take(void *map, __u32 key, __u32 quota)
{
	__u32 zero = 0, *cnt;

	bpf_map_update_elem(map, &key, &zero, BPF_NOEXIST);
	cnt = bpf_map_lookup_elem(map, &key);
	if (!cnt)
		return false;
	if (__sync_fetch_and_add(cnt, 1) >= quota) {
		__sync_fetch_and_add(cnt, -1);
		return false;
	}
	return true;
}

/* one slot fewer for @key; its entry goes with its last slot */
static __always_inline void count_put(void *map, __u32 key)
{
	__u32 *cnt = bpf_map_lookup_elem(map, &key);

	if (cnt && __sync_fetch_and_add(cnt, -1) == 1)
		bpf_map_delete_elem(map, &key);
}

/*
 * Take a slot for a new flow, as the module's policy (tcp_ccp.c): at most
 * max_flows in all; at most uid_share percent of them for one user's
 * sockets (in every namespace); a socket outside the initial namespace only
 * while its namespace holds fewer than netns_quota and all such sockets
 * fewer than netns_total; a loopback connection only with loopback 1.
 * Counters go up first and back down on a refusal, so racing inits never
 * overshoot the totals.  One race is tolerated: a namespace's (or user's)
 * last close deleting its entry just as a new flow of it counts itself in
 * it leaves that flow uncounted there (one slot over its quota until it
 * closes; the totals stay exact).
 */
static __always_inline bool take_slot(struct sock *sk, struct ccpb_flow *fl)
{
	struct ccpb_policy *p;
	struct ccpb_slots *s;
	struct net *net;
	__u32 k0 = 0, ns, uid;

	p = bpf_map_lookup_elem(&policy, &k0);
	s = bpf_map_lookup_elem(&slots, &k0);
	if (!p || !s)
		return false;
	if (!p->loopback && is_loopback(sk)) {
		STAT_INC(no_slot_loopback);
		return false;
	}
	if (__sync_fetch_and_add(&s->used, 1) >= p->max_flows) {
		__sync_fetch_and_add(&s->used, -1);
		STAT_INC(no_slot_full);
		return false;
	}
	uid = sk->sk_uid.val;
	if (!count_take(&uid_slots, uid, uid_quota(p))) {
		__sync_fetch_and_add(&s->used, -1);
		STAT_INC(no_slot_uid);
		return false;
	}
	fl->uid = uid;
	net = sk->__sk_common.skc_net.net;
	ns = net ? net->ns.inum : 0;
	if (ns && ns == p->init_netns) {
		fl->slot = CCPB_SLOT_INIT_NS;
		return true;
	}
	if (!p->netns_quota)
		goto refused_netns;
	if (__sync_fetch_and_add(&s->other_netns, 1) >= p->netns_total) {
		__sync_fetch_and_add(&s->other_netns, -1);
		count_put(&uid_slots, uid);
		__sync_fetch_and_add(&s->used, -1);
		STAT_INC(no_slot_full);
		return false;
	}
	/* refused too when CCPB_MAX_NETNS namespaces hold slots */
	if (!count_take(&netns_slots, ns, p->netns_quota))
		goto refused_other;
	fl->slot = CCPB_SLOT_OTHER_NS;
	fl->netns = ns;
	return true;
refused_other:
	__sync_fetch_and_add(&s->other_netns, -1);
refused_netns:
	count_put(&uid_slots, uid);
	__sync_fetch_and_add(&s->used, -1);
	STAT_INC(no_slot_netns);
	return false;
}

static __always_inline void put_slot(struct ccpb_flow *fl)
{
	struct ccpb_slots *s;
	__u32 k0 = 0;

	if (fl->slot == CCPB_SLOT_NONE)
		return;
	s = bpf_map_lookup_elem(&slots, &k0);
	if (fl->slot == CCPB_SLOT_OTHER_NS) {
		count_put(&netns_slots, fl->netns);
		if (s)
			__sync_fetch_and_add(&s->other_netns, -1);
	}
	count_put(&uid_slots, fl->uid);
	if (s)
		__sync_fetch_and_add(&s->used, -1);
	fl->slot = CCPB_SLOT_NONE;
}

static __always_inline void flow_init(struct sock *sk, __u32 alg)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ccpb_flow *fl;
	__u32 id;

	STAT_INC(flows_started);
	fl = bpf_sk_storage_get(&flows, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!fl) {
		STAT_INC(no_storage);
		return;		/* Reno without state (on_ack) */
	}
	put_slot(fl);		/* an init without a release in between */
	__builtin_memset(fl, 0, sizeof(*fl));
	fl->i_start_ns = bpf_ktime_get_ns();
	fl->last_bytes_acked = tp->bytes_acked;
	fl->last_delivered_ce = tp->delivered_ce;
	fl->last_delivered = tp->delivered;
	fl->mode = CCPB_MODE_FALLBACK;
	if (!take_slot(sk, fl))
		return;		/* id 0: the fallback alone, never announced */
	id = __sync_fetch_and_add(&next_flow_id, 1) + 1;
	if (!id)		/* wrapped: 0 is no flow */
		id = __sync_fetch_and_add(&next_flow_id, 1) + 1;
	fl->id = id;
	fl->alg = alg;
	announce(sk, fl, fl->i_start_ns);
}

/* one init per name: the only difference between the names */
#define CCPB_INIT(id, nm)						\
SEC("struct_ops/init_" #nm)						\
void BPF_PROG(init_##nm, struct sock *sk)				\
{									\
	flow_init(sk, id);						\
}
CCPB_ALGORITHMS(CCPB_INIT)

SEC("struct_ops/ccpb_release")
void BPF_PROG(ccpb_release, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ccpb_flow *fl;
	__u32 id;

	fl = bpf_sk_storage_get(&flows, sk, 0, 0);
	if (!fl)
		return;
	id = fl->id;
	if (fl->rate_set)
		drop_agent_rate(tp, fl);
	if (id) {
		/* a flow never announced closes silently (emit_report) */
		emit_report(tp, fl, bpf_ktime_get_ns(), mss_of(tp), CCPB_CLOSE);
		bpf_map_delete_elem(&decisions, &id);
	}
	put_slot(fl);
	bpf_sk_storage_delete(&flows, sk);
	STAT_INC(flows_closed);
}

#if CCPB_CC_NARGS == 4
SEC("struct_ops/ccpb_cong_control")
void BPF_PROG(ccpb_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	on_ack(sk, rs);
}
#else
SEC("struct_ops/ccpb_cong_control")
void BPF_PROG(ccpb_cong_control, struct sock *sk, const struct rate_sample *rs)
{
	on_ack(sk, rs);
}
#endif

SEC("struct_ops/ccpb_ssthresh")
__u32 BPF_PROG(ccpb_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ccpb_flow *fl;
	__u32 cwnd = tp->snd_cwnd;

	fl = bpf_sk_storage_get(&flows, sk, 0, 0);
	if (!fl)
		return max(cwnd >> 1, 2U);
	/* Cubic: a new epoch from 0.7 of the window; fast convergence */
	fl->epoch_us = 0;
	if (cwnd < fl->w_max)
		fl->w_max = (__u32)(((__u64)cwnd * (1024 + CUBIC_BETA)) / 2048);
	else
		fl->w_max = cwnd;
	return max((__u32)(((__u64)cwnd * CUBIC_BETA) >> 10), 2U);
}

SEC("struct_ops/ccpb_undo_cwnd")
__u32 BPF_PROG(ccpb_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);

	return max(tp->snd_cwnd, tp->prior_cwnd);
}

SEC("struct_ops/ccpb_set_state")
void BPF_PROG(ccpb_set_state, struct sock *sk, __u8 new_state)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ccpb_flow *fl;
	__u8 old;

	fl = bpf_sk_storage_get(&flows, sk, 0, 0);
	if (!fl)
		return;
	old = fl->ca_state;
	fl->ca_state = new_state;
	if (new_state == TCP_CA_Loss)
		fl->epoch_us = 0;	/* Cubic starts over after an RTO */
	if ((new_state == TCP_CA_CWR || new_state == TCP_CA_Recovery) &&
	    old != TCP_CA_CWR && old != TCP_CA_Recovery)
		fl->prr_delivered = 0;	/* a reduction starts */
	/* a reduction ends in the fallback: cwnd = ssthresh (the stack's
	 * tcp_end_cwnd_reduction(), which skips a cong_control; the module's
	 * ccpk_set_state()) */
	if (fl->mode == CCPB_MODE_FALLBACK && new_state == TCP_CA_Open &&
	    (old == TCP_CA_CWR || (old == TCP_CA_Recovery && tp->undo_marker)) &&
	    tp->snd_ssthresh < TCP_INFINITE_SSTHRESH)
		tp->snd_cwnd = max(tp->snd_ssthresh, 2U);
}

SEC("struct_ops/ccpb_cwnd_event")
void BPF_PROG(ccpb_cwnd_event, struct sock *sk, int ev)
{
	struct ccpb_flow *fl;

	if (ev != CA_EVENT_LOSS && ev != CA_EVENT_TX_START)
		return;
	fl = bpf_sk_storage_get(&flows, sk, 0, 0);
	if (!fl)
		return;
	if (ev == CA_EVENT_LOSS)
		fl->timeout = 1;
	else
		fl->epoch_us = 0;	/* after idle: no growth for the idle time */
}

#define CCPB_OPS(id, nm)						\
SEC(".struct_ops")							\
struct tcp_congestion_ops nm = {					\
	.init		= (void *)init_##nm,				\
	.release	= (void *)ccpb_release,				\
	.ssthresh	= (void *)ccpb_ssthresh,			\
	.cong_control	= (void *)ccpb_cong_control,			\
	.undo_cwnd	= (void *)ccpb_undo_cwnd,			\
	.set_state	= (void *)ccpb_set_state,			\
	.cwnd_event	= (void *)ccpb_cwnd_event,			\
	.name		= #nm,						\
};
CCPB_ALGORITHMS(CCPB_OPS)
