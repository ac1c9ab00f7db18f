#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Per-ACK cost of the BPF datapath (issue 47) in the QEMU guest, figures only:
#   make -C datapath/bpf && cargo build --release -p ccp-agent &&
#   gcc -O2 -o ops/vm/work/bin/ccpflows ops/vm/ccpflows.c &&
#     bash ops/vm/test.sh --guest ops/vm/guest/bpf_bench.sh
# (and, for the module's figures, ccp-kernel.ko built into ops/vm/work/ko/<kernel>/ as
# ops/vm/test.sh does).  On the benchmark link of guest/bench.sh (200 Mbit/s, 20 ms,
# 1 BDP), N bulk connections (ccpflows), alternating, PAIRS times each:
#   cubic        native cubic
#   bpf          ccp_cubic on the BPF datapath, no agent (the in-BPF fallback)
#   bpf+agent    ccp_cubic on the BPF datapath under the agent (--ipc bpf: the bridge in its process)
#   module       ccp_cubic on ccp-kernel.ko under the agent (when the module is there)
# Per run: the whole guest's busy CPU per ACK the senders received (both ends, the router,
# the tools, the agent and the bridge), the same without the agent's and the bridge's CPU,
# and for the BPF runs the BPF programs' own time per call (kernel.bpf_stats_enabled:
# run_time_ns / run_cnt of ccpb_cong_control, which runs once per ACK).  The guest is
# emulated (TCG): absolute times follow the host's load; compare ratios of one run.
set -u
. "$REPO/ops/vm/guest/lib.sh"
B=$OUT/bpf-bench.txt
: > $B
bench() { echo "BENCH $*"; echo "$*" >> $B; }
CCPB=$REPO/datapath/bpf/build/ccp-bpf
PAIRS=${PAIRS:-3} MSECS=${MSECS:-8}
plan bpf_bench_done

mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
sysctl -qw kernel.bpf_stats_enabled=1
setup_link 200mbit 20 500000
[ -x $BIN/ccpflows ] || { fail bpf_bench_done "no $BIN/ccpflows"; exit 0; }
# the flows run in namespaces (lib.sh): slots for them, as the module's KO_PARAMS
$CCPB load -n 1024 -N 2048 -l 1 > $OUT/bpf-bench-load.log 2>&1 || { fail bpf_bench_done "ccp-bpf load: $(tail -1 $OUT/bpf-bench-load.log)"; exit 0; }

insegs() { $NS_SND awk '/^Tcp:/ {if (!h) {for (i = 1; i <= NF; i++) if ($i == "InSegs") c = i; h = 1} else print $c}' /proc/net/snmp; }
ticks() { local p t=0; for p in "$@"; do [ -n "$p" ] && [ -r /proc/$p/stat ] && t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat))); done; echo $t; }
# the BPF cong_control's run time and count (ns, calls)
progstat() {
	bpftool prog show -j 2>/dev/null | $PY -c '
import json, sys
t = c = 0
for p in json.load(sys.stdin):
    if p.get("name", "").startswith("ccpb_cong_contr"):
        t += p.get("run_time_ns", 0); c += p.get("run_cnt", 0)
print(t, c)'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR ? (NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2) : "none")}'; }
AGENT_PID=

# peracks N CC PORT: "acks busy_cpu_s helper_cpu_s bpf_ns bpf_calls window_s"
peracks() {
	local n=$1 cc=$2 port=$3 i sink cli s0 s1 h0 h1 t0 t1 cpu b0 b1
	rm -f $T/pa.ready
	$NS_RCV $BIN/ccpflows -s $RCV_IP:$port -t 900 > $T/pa-sink.out 2>&1 &
	sink=$!
	for i in $(seq 40); do $NS_RCV ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break; nap 0.25; done
	$NS_SND $BIN/ccpflows -c $RCV_IP:$port -n $n -C $cc -b -t 900 -w 60 -r $T/pa.ready > $T/pa-cli.out 2>&1 &
	cli=$!
	for i in $(seq 600); do [ -e $T/pa.ready ] || ! kill -0 $cli 2>/dev/null && break; nap 0.1; done
	nap 2
	t0=$(now); s0=$(insegs); cp /proc/stat $T/pst0; h0=$(ticks $AGENT_PID); b0=$(progstat)
	nap $MSECS
	s1=$(insegs); cp /proc/stat $T/pst1; h1=$(ticks $AGENT_PID); b1=$(progstat); t1=$(now)
	kill $cli $sink 2>/dev/null
	wait $cli $sink 2>/dev/null
	cpu=$($CHECK cpustat $T/pst0 $T/pst1)
	set -- $b0 $b1
	echo "$((s1 - s0)) $cpu $(calc "($h1 - $h0) / 100") $(($3 - $1)) $(($4 - $2)) $(calc "$t1 - $t0")"
}

start_bpf_agent() {	# the agent on the BPF datapath: libccp for its flows in its process
	local i n0
	n0=$(grep -c "bridging the BPF datapath" $OUT/bpf-bench-agent.log 2>/dev/null)
	CCP_LOG=warn,ccp_bpf_bridge=info $AGENT --ipc bpf --alg cubic >> $OUT/bpf-bench-agent.log 2>&1 &
	AGENT_PID=$!
	for i in $(seq 200); do
		[ "$(grep -c "bridging the BPF datapath" $OUT/bpf-bench-agent.log)" -gt "${n0:-0}" ] && return 0
		nap 0.05
	done
	return 1
}

port=7000
# run_set N LABEL CC [agent]: PAIRS runs of native cubic then CC, ns per ACK, ratios
run_set() {
	local n=$1 label=$2 cc=$3 i ac cc_ ax cx hx bt bc wx nc nx nk r rk per R= RK= NC= NX= PER=
	for i in $(seq $PAIRS); do
		port=$((port + 1))
		read ac cc_ _ _ _ _ <<<"$(peracks $n cubic $port)"
		port=$((port + 1))
		read ax cx hx bt bc wx <<<"$(peracks $n $cc $port)"
		read nc nx nk r rk <<<"$(pair_ratios $ac $cc_ $ax $cx $hx)"
		per=$([ "${bc:-0}" -gt 0 ] 2>/dev/null && calc "$bt / $bc" || echo none)
		R="$R $r" RK="$RK $rk" NC="$NC $nc" NX="$NX $nx" PER="$PER $per"
		bench "per-ACK N=$n $label pair $i: cubic $ac ACKs, $nc ns/ACK; $label $ax ACKs in ${wx}s, $nx ns/ACK ($nk without agent/bridge ${hx}s); ratio $r ($rk); BPF cong_control $per ns/call ($bc calls)"
	done
	bench "per-ACK cost N=$n $label/cubic: whole guest $(echo $R | median) (median of $PAIRS:$R), without agent and bridge $(echo $RK | median); ns/ACK cubic $(echo $NC | median), $label $(echo $NX | median); BPF cong_control ns/call $(echo $PER | median)"
}

for n in 1 100; do
	run_set $n bpf ccp_cubic
done
if start_bpf_agent; then
	for n in 1 100; do
		run_set $n bpf+agent ccp_cubic
	done
	kill $AGENT_PID 2>/dev/null
	wait $AGENT_PID 2>/dev/null
else
	bench "bpf+agent: the agent (--ipc bpf) did not start (bpf-bench-agent.log)"
fi
AGENT_PID=
$CCPB unload >> $OUT/bpf-bench-load.log 2>&1
if [ -r "$KO" ] && insmod $KO $KO_PARAMS; then
	FL=$T/flows-bench.jsonl
	if agent_start $FL; then
		for n in 1 100; do
			run_set $n module ccp_cubic
		done
		agent_stop
	else
		bench "module: the agent did not register"
	fi
	rmmod ccp_kernel
else
	bench "module: no ccp-kernel.ko at $KO (build it as ops/vm/test.sh does): no module figures"
fi
pass bpf_bench_done "figures in work/out/bpf-bench.txt"
