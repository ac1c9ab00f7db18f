/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel types the CCP BPF datapath reads and writes: a minimal,
 * hand-written subset, not a generated vmlinux.h.  Every struct carries
 * preserve_access_index, so each field access is a CO-RE relocation that
 * libbpf resolves at load time against the running kernel's BTF
 * (/sys/kernel/btf/vmlinux): only the field names and types must exist
 * there, not these offsets or sizes, and one object serves Debian's 6.1
 * and 6.12 kernels.  A field missing from the running kernel makes the
 * load fail with libbpf naming it.
 *
 * Types used: sock_common (with its namespace: possible_net_t, net,
 * ns_common; in6_addr), sock, inet_sock, inet_connection_sock,
 * tcp_sock, rate_sample, tcp_congestion_ops (the struct_ops type: libbpf
 * matches its members by name).  A bitfield is declared as one here and
 * read with BPF_CORE_READ_BITFIELD (relocated byte offset, size, shifts).
 */
#ifndef CCP_VMLINUX_H
#define CCP_VMLINUX_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

/* uapi BPF map types and flags used here (include/uapi/linux/bpf.h) */
enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_SK_STORAGE = 24,
	BPF_MAP_TYPE_STRUCT_OPS = 26,
	BPF_MAP_TYPE_RINGBUF = 27,
};
#define BPF_ANY			0
#define BPF_NOEXIST		1
#define BPF_F_NO_PREALLOC	(1U << 0)
#define BPF_SK_STORAGE_GET_F_CREATE	(1ULL << 0)

#define AF_INET		2
#define AF_INET6	10

/* enum tcp_ca_state (include/uapi/linux/tcp.h) */
#define TCP_CA_Open	0
#define TCP_CA_Disorder	1
#define TCP_CA_CWR	2
#define TCP_CA_Recovery	3
#define TCP_CA_Loss	4

/* enum tcp_ca_event (include/net/tcp.h) */
#define CA_EVENT_TX_START	0
#define CA_EVENT_CWND_RESTART	1
#define CA_EVENT_COMPLETE_CWR	2
#define CA_EVENT_LOSS		3

/* enum sk_pacing (include/net/sock.h) */
#define SK_PACING_NONE		0
#define SK_PACING_NEEDED	1

#define TCP_CA_NAME_MAX		16

/* a namespace's identity: its inode number (ls -i /proc/PID/ns/net) */
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} __attribute__((preserve_access_index)) possible_net_t;

struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__be32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	possible_net_t skc_net;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

typedef struct {
	__u32 val;
} kuid_t;

struct net_device {
	unsigned int flags;	/* IFF_* */
} __attribute__((preserve_access_index));

struct dst_entry {
	struct net_device *dev;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	struct dst_entry *sk_dst_cache;	/* __rcu: BPF programs run under RCU */
	kuid_t sk_uid;
	unsigned long sk_pacing_rate;
	unsigned long sk_max_pacing_rate;
	__u32 sk_pacing_status;
} __attribute__((preserve_access_index));

struct inet_sock {
	struct sock sk;
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	struct inet_sock icsk_inet;
} __attribute__((preserve_access_index));

struct tcp_sock {
	struct inet_connection_sock inet_conn;
	__u32 srtt_us;
	__u32 mss_cache;
	__u32 snd_cwnd;
	__u32 snd_cwnd_cnt;
	__u32 snd_cwnd_clamp;
	__u32 snd_ssthresh;
	__u32 prior_cwnd;
	__u32 prr_out;
	__u32 undo_marker;
	__u32 packets_out;
	__u32 sacked_out;
	__u32 lost_out;
	__u32 retrans_out;
	__u32 max_packets_out;
	__u32 delivered;
	__u32 delivered_ce;
	__u32 write_seq;
	__u32 snd_nxt;
	__u64 bytes_acked;
	__u8 is_cwnd_limited:1;	/* a bitfield: read with BPF_CORE_READ_BITFIELD */
} __attribute__((preserve_access_index));

struct rate_sample {
	__s32 delivered;
	__u32 snd_interval_us;
	__u32 rcv_interval_us;
	long rtt_us;
	int losses;
	__u32 acked_sacked;
	bool is_app_limited;
} __attribute__((preserve_access_index));

/* The struct_ops type: libbpf fills the kernel's tcp_congestion_ops from
 * the members named here (function pointers become the programs). */
struct tcp_congestion_ops {
	__u32 (*ssthresh)(struct sock *sk);
	void (*cong_avoid)(struct sock *sk, __u32 ack, __u32 acked);
	void (*set_state)(struct sock *sk, __u8 new_state);
	void (*cwnd_event)(struct sock *sk, int ev);
	void (*cong_control)(void);	/* 2 or 4 arguments: see ccp.bpf.c */
	__u32 (*undo_cwnd)(struct sock *sk);
	void (*init)(struct sock *sk);
	void (*release)(struct sock *sk);
	char name[TCP_CA_NAME_MAX];
} __attribute__((preserve_access_index));

#endif /* CCP_VMLINUX_H */
