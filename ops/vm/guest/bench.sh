#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Benchmarks, run inside the guest (ops/vm/bench.sh boots it):
#  - CPU time per transferred byte, ccp_cubic + agent vs native cubic, at
#    200 Mbit/s (tbf), 20 ms RTT, 1 BDP of queue: busy CPU of the whole
#    guest (/proc/stat: user+nice+system+irq+softirq+steal) over bytes
#    received; the agent's own share from /proc/PID/stat;
#  - report -> cwnd-applied latency inside the guest, from the module's
#    /proc/net/ccp_latency ring (report sent -> agent reply received ->
#    update applied on the next ACK), p50/p99.
set -u
. "$REPO/ops/vm/guest/lib.sh"
RUNS=${RUNS:-6}
SECS=${SECS:-10}
plan bench_done
insmod $KO || { fail bench_insmod "insmod failed"; exit 0; }
setup_link 200mbit 20 500000
B=$OUT/bench.txt
: > $B
bench() { echo "BENCH $*"; echo "$*" >> $B; }
agent_ticks() { [ -n "$AGENT_PID" ] && awk '{print $14 + $15}' /proc/$AGENT_PID/stat || echo 0; }

# Runs alternate (cubic, ccp_cubic, cubic, ...) so that both see the same
# conditions (the guest's speed follows the host's load); the figure is
# the median over pairs of the per-run ratio, plus the pooled ratio.
# the flow log goes to tmpfs: writes over 9p would be charged to the agent
agent_available && agent_start $T/flows-bench.jsonl || { fail bench_agent "agent not available"; exit 0; }
a0=$(agent_ticks); nap 10; a1=$(agent_ticks)
bench "agent idle (no flows) for 10 s: $(calc "($a1 - $a0) / 100")s CPU"
r0=$(ctr reports_sent); u0=$(ctr cwnd_updates)
declare -A CPU BYTES
CPU[cubic]=0; CPU[ccp_cubic]=0; BYTES[cubic]=0; BYTES[ccp_cubic]=0; AGT=0
ratios=
for i in $(seq $RUNS); do
	for cc in cubic ccp_cubic; do
		a0=$(agent_ticks)
		cp /proc/stat $T/stat0
		iperf_run 5201 $cc $SECS $T/bench-$cc-$i.json
		cp /proc/stat $T/stat1
		a1=$(agent_ticks)
		cpu=$($CHECK cpustat $T/stat0 $T/stat1)
		by=$($PY -c "import json;print(json.load(open('$T/bench-$cc-$i.json'))['end']['sum_received']['bytes'])")
		thr=$($CHECK thr $T/bench-$cc-$i.json)
		nspb=$(calc "$cpu * 1e9 / $by")
		ag=$(calc "($a1 - $a0) / 100")
		[ $cc = ccp_cubic ] && AGT=$(calc "$AGT + $ag")
		bench "run $i $cc: $thr Mbit/s, $by bytes, guest busy CPU ${cpu}s (agent ${ag}s), $nspb ns/byte"
		CPU[$cc]=$(calc "${CPU[$cc]} + $cpu"); BYTES[$cc]=$(( ${BYTES[$cc]} + by ))
		eval "nspb_$cc=$nspb"
	done
	ratios="$ratios $(calc "$nspb_ccp_cubic / $nspb_cubic")"
done
bench "agent: $(( $(ctr reports_sent) - r0 )) reports, $(( $(ctr cwnd_updates) - u0 )) updates applied"
c=$(calc "${CPU[cubic]} * 1e9 / max(${BYTES[cubic]}, 1)")
x=$(calc "${CPU[ccp_cubic]} * 1e9 / max(${BYTES[ccp_cubic]}, 1)")
med=$(echo $ratios | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
bench "cpu_per_byte native cubic: $c ns/byte (${CPU[cubic]}s / ${BYTES[cubic]} B)"
bench "cpu_per_byte ccp_cubic+agent: $x ns/byte (${CPU[ccp_cubic]}s / ${BYTES[ccp_cubic]} B, agent ${AGT}s)"
bench "cpu_per_byte ratio ccp_cubic/cubic: pooled $(calc "$x / max($c, 1e-9)"), median of pairs $med (pairs:$ratios; goal <= 1.1)"

cat /proc/net/ccp_latency > $OUT/bench-latency.txt
n=$(grep -vc '^#' $OUT/bench-latency.txt)
read r50 r99 <<<"$($CHECK pct $OUT/bench-latency.txt 0 50 99)"
read a50 a99 <<<"$($CHECK pct $OUT/bench-latency.txt 1 50 99)"
bench "latency report->agent reply (n=$n): p50 $(calc "$r50 / 1000") us, p99 $(calc "$r99 / 1000") us"
bench "latency report->cwnd applied (n=$n): p50 $(calc "$a50 / 1000") us, p99 $(calc "$a99 / 1000") us"
awk '!/^#/ {print $2 - $1}' $OUT/bench-latency.txt > $T/wait.txt
read w50 w99 <<<"$($CHECK pct $T/wait.txt 0 50 99)"
bench "latency reply received->applied on the next ACK: p50 $(calc "$w50 / 1000") us, p99 $(calc "$w99 / 1000") us"
agent_stop
cp $T/flows-bench.jsonl $OUT/ 2>/dev/null
cp /proc/net/ccp $OUT/bench.ctr
rmmod ccp_kernel
pass bench_done "figures in work/out/bench.txt"
