#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Benchmarks, run inside the guest (ops/vm/bench.sh boots it):
#  - CPU time per transferred byte, ccp_cubic + agent vs native cubic, at
#    200 Mbit/s (tbf), 20 ms RTT, 1 BDP of queue: busy CPU of the whole
#    guest (/proc/stat: user+nice+system+irq+softirq+steal) over bytes
#    received; the agent's own share from /proc/PID/stat;
#  - report -> cwnd-applied latency inside the guest, from the module's
#    /proc/net/ccp_latency ring (report sent -> agent reply received ->
#    update applied on the next ACK), p50/p99;
#  - per-ACK cost with 1, 100 and 1,000 bulk flows (ops/vm/ccpflows.c),
#    ccp_cubic + agent vs native cubic: busy CPU of the guest over the ACKs
#    the sender received, with and without the agent's CPU (ratios).
set -u
. "$REPO/ops/vm/guest/lib.sh"
RUNS=${RUNS:-6}
SECS=${SECS:-10}
plan bench_done
insmod $KO $KO_PARAMS || { fail bench_insmod "insmod failed"; exit 0; }
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

# Per-ACK cost with 1, 100 and 1,000 flows.  N bulk connections (ccpflows
# -b, as fast as each may send) from snd to a sink in rcv over the same
# link, native cubic and ccp_cubic under the agent alternating, PAIRS pairs
# per N.  Once all N are up (ccp_cubic: and attached to the agent, or
# ATTACH_WAIT s passed) and 1 s more, the guest's busy CPU (/proc/stat) and
# the ACKs the sender received (snd's Tcp InSegs) are read over MSECS s:
#  - the whole guest's cost per ACK: busy CPU (both ends, the router, the
#    tools, the agent) / ACKs, and the same without the agent's CPU;
#  - in one more pair, run under perf (whose own start and stop cost CPU,
#    so it is kept out of the pairs above), the congestion control's own code
#    per ACK: kernel CPU samples (cpu-clock at 999 Hz on both vCPUs) in its
#    functions (cubic's; or ccp-kernel's, libccp's interpreter and the Reno
#    helpers both use), not counting what they call elsewhere in the kernel
#    (for ccp: netlink sends, allocations), / ACKs.
# The figures per N: the medians over pairs of the ccp_cubic / cubic ratios.
# No threshold: figures only.
PAIRS=${PAIRS:-3} MSECS=${MSECS:-8} ATTACH_WAIT=${ATTACH_WAIT:-20} PERF_HZ=999
CC_SYMS_cubic='^(cubictcp_|bictcp_|tcp_cong_avoid_ai|tcp_slow_start|tcp_reno_)'
CC_SYMS_ccp_cubic='^(ccpk_|ccp_|state_machine|process_instruction|process_expression|read_reg|write_reg|reset_state|init_register_state|reset_time|send_measurement|write_measure_msg|write_create_msg|send_conn_create|serialize_header|datapath_program_lookup|get_ccp_priv_state|_check_fto|_update_fto_timer|tcp_cong_avoid_ai|tcp_slow_start|tcp_reno_)'
insegs() { $NS_SND awk '/^Tcp:/ {if (!h) {for (i = 1; i <= NF; i++) if ($i == "InSegs") c = i; h = 1} else print $c}' /proc/net/snmp; }
attached() { awk -v d="$RCV_IP:$1" 'NR>1 && $9==d && $3=="ccp"' /proc/net/ccp_flows | wc -l; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR ? (NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2) : "none")}'; }
have_perf=no
perf record -e cpu-clock:k -o $T/perf-probe.data -- true > /dev/null 2>&1 && have_perf=yes
# peracks N CC PORT PROFILE: prints "acks busy_cpu_s agent_cpu_s attached cc_samples window_s"
peracks() {
	local n=$1 cc=$2 port=$3 prof=$4 i sink cli s0 s1 a0 a1 t0 t1 att=0 cpu ccs=none
	rm -f $T/pa.ready
	$NS_RCV $BIN/ccpflows -s $RCV_IP:$port -t 900 > $T/pa-sink.out 2>&1 &
	sink=$!
	for i in $(seq 40); do $NS_RCV ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break; nap 0.25; done
	$NS_SND $BIN/ccpflows -c $RCV_IP:$port -n $n -C $cc -b -t 900 -w 60 -r $T/pa.ready > $T/pa-cli.out 2>&1 &
	cli=$!
	for i in $(seq 600); do [ -e $T/pa.ready ] || ! kill -0 $cli 2>/dev/null && break; nap 0.1; done
	if [ $cc != cubic ]; then
		for i in $(seq $((ATTACH_WAIT * 4))); do [ $(attached $port) -ge $n ] && break; nap 0.25; done
	fi
	nap 1
	t0=$(now); s0=$(insegs); cp /proc/stat $T/pst0; a0=$(agent_ticks)
	if [ $prof = 1 ] && [ $have_perf = yes ]; then
		perf record -a -e cpu-clock:k -F $PERF_HZ -o $T/perf.data -- sleep $MSECS > /dev/null 2>> $T/perf.err
	else
		nap $MSECS
	fi
	s1=$(insegs); cp /proc/stat $T/pst1; a1=$(agent_ticks); t1=$(now)
	[ $cc != cubic ] && att=$(attached $port)
	kill $cli $sink 2>/dev/null
	wait $cli $sink 2>/dev/null
	if [ $prof = 1 ] && [ $have_perf = yes ]; then
		perf report -i $T/perf.data --stdio --sort sym -F sample,sym 2>> $T/perf.err |
			grep -v '^#' | grep . > $OUT/bench-perf-$n-$cc.txt
		eval "re=\$CC_SYMS_$cc"
		ccs=$(awk -v re="$re" '{s = $3; sub(/\.(isra|constprop|part|cold)\..*/, "", s)} s ~ re {n += $1} END {print n + 0}' $OUT/bench-perf-$n-$cc.txt)
	fi
	cpu=$($CHECK cpustat $T/pst0 $T/pst1)
	echo "$((s1 - s0)) $cpu $(calc "($a1 - $a0) / 100") $att $ccs $(calc "$t1 - $t0")"
}
port=7000
for n in 1 100 1000; do
	R= RK= NC= NX= CCR=
	for i in $(seq $PAIRS); do
		port=$((port + 1))
		read ac cc_ _ _ _ wc <<<"$(peracks $n cubic $port 0)"
		port=$((port + 1))
		read ax cx agx att _ wx <<<"$(peracks $n ccp_cubic $port 0)"
		read nc nx nk r rk <<<"$(pair_ratios $ac $cc_ $ax $cx $agx)"
		R="$R $r" RK="$RK $rk" NC="$NC $nc" NX="$NX $nx"
		bench "per-ACK N=$n pair $i: cubic $ac ACKs in ${wc}s, $nc ns/ACK; ccp_cubic $ax ACKs in ${wx}s, $nx ns/ACK ($nk without the agent's ${agx}s), $att/$n attached; ratio $r ($rk)"
	done
	if [ $have_perf = yes ]; then
		port=$((port + 1))
		read ac _ _ _ sc _ <<<"$(peracks $n cubic $port 1)"
		port=$((port + 1))
		read ax _ _ att sx _ <<<"$(peracks $n ccp_cubic $port 1)"
		pc=$(calc "$sc / $PERF_HZ * 1e9 / max($ac, 1)")
		px=$(calc "$sx / $PERF_HZ * 1e9 / max($ax, 1)")
		CCR="congestion-control code per ACK (perf, one more pair): cubic $pc ns ($sc samples, $ac ACKs), ccp_cubic $px ns ($sx samples, $ax ACKs, $att/$n attached), ratio $(calc "$px / max($pc, 1e-9)")"
		bench "per-ACK N=$n profiled pair: $CCR"
	fi
	bench "per-ACK cost N=$n: whole guest ccp_cubic/cubic $(echo $R | median) (median of $PAIRS pairs:$R), without the agent's CPU $(echo $RK | median); ns/ACK cubic $(echo $NC | median), ccp_cubic $(echo $NX | median); ${CCR:-no perf figures}"
done
cp /proc/net/ccp $OUT/bench-peracks.ctr

agent_stop
cp $T/flows-bench.jsonl $OUT/ 2>/dev/null
cp /proc/net/ccp $OUT/bench.ctr
rmmod ccp_kernel
pass bench_done "figures in work/out/bench.txt"
