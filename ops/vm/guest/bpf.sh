#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The BPF datapath (datapath/bpf, issue 47) in the QEMU guest, without
# ccp-kernel.ko: loaded by ccp-bpf, the ccp* names registered as BPF
# struct_ops, served by the agent (--ipc bpf).  Part of the default suite
# (ops/vm/test.sh: on 6.12 and 6.1); alone:
#   make -C datapath/bpf && cargo build --release -p ccp-agent &&
#     bash ops/vm/test.sh --guest ops/vm/guest/bpf.sh [KERNEL-RELEASE]
# Prints "RESULT PASS|FAIL name detail" lines (out/results.txt).
set -u
. "$REPO/ops/vm/guest/lib.sh"

RATE=50mbit
RTT_MS=40
BDP=250000		# 1 BDP of queue, as the suite's link
SECS=10
CCPB=$REPO/datapath/bpf/build/ccp-bpf
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
log "bpf tests on $(uname -r)"

plan bpf_no_module bpf_load bpf_pins_root_only bpf_baseline_cubic \
	bpf_fallback_ccp_reno bpf_fallback_ccp_cubic bpf_reports bpf_decision_applied \
	bpf_kill_no_gap bpf_kill_fallback bpf_agent_start bpf_agent_ccp_cubic bpf_agent_ccp_owl bpf_agent_ccp_mocc bpf_agent_stats \
	bpf_agent_kill_no_gap bpf_agent_kill_fallback bpf_agent_restart bpf_netns_no_slots bpf_netns_quota bpf_loopback_no_slot bpf_uid_share bpf_create_rate bpf_unpriv bpf_unload bpf_kernel_log_clean

# bpf_stat NAME: one counter of ccp-bpf stats
bpf_stat() { $CCPB stats 2>/dev/null | awk -v k="$1" '$1==k{print $2}'; }
dmesg -C 2>/dev/null
check bpf_no_module '! grep -q "^ccp_kernel " /proc/modules' "ccp_kernel not loaded"

mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
if [ ! -x "$CCPB" ]; then
	fail bpf_load "no $CCPB: make -C datapath/bpf on the host first"
	exit 0
fi
# the tests' flows run in namespaces (lib.sh's setup_link), as the module's
# suite loads it with netns_quota=1024 netns_total=2048 loopback=1
$CCPB load -n 1024 -N 2048 -l 1 > $OUT/bpf-load.log 2>&1
rc=$?
avail=$(sysctl -n net.ipv4.tcp_available_congestion_control)
missing=$(ccp_names_missing "$avail")
check bpf_load '[ $rc = 0 ] && [ -z "$missing" ]' \
	"ccp-bpf load rc $rc ($(tail -1 $OUT/bpf-load.log)); available: $avail${missing:+; missing:$missing}"
[ $rc = 0 ] || { cat $OUT/bpf-load.log; exit 0; }

modes=$(stat -c '%n %a %U' /sys/fs/bpf/ccp /sys/fs/bpf/ccp/ops /sys/fs/bpf/ccp/reports \
	/sys/fs/bpf/ccp/decisions /sys/fs/bpf/ccp/stats /sys/fs/bpf/ccp/ops/ccp_cubic 2>&1)
bad=$(echo "$modes" | awk '!(($2=="700" || $2=="600") && $3=="root")')
check bpf_pins_root_only '[ -z "$bad" ]' "$(echo $modes)"

setup_link $RATE $RTT_MS $BDP

iperf_run 5201 cubic $SECS $T/bpf-cubic.json
BASE=$($CHECK thr $T/bpf-cubic.json)
check bpf_baseline_cubic 'fge "$BASE" 30' "native cubic $BASE Mbit/s over $RATE/${RTT_MS}ms/1BDP"

# ---------------------------------------------------------------- no agent
# nothing answers: every ACK runs the in-BPF fallback (Cubic)
for cc in ccp_reno ccp_cubic; do
	fa0=$(bpf_stat fallback_acks) cr0=$(bpf_stat creates) ap0=$(bpf_stat decisions_applied)
	iperf_run 5201 $cc $SECS $T/bpf-noagent-$cc.json
	X=$($CHECK thr $T/bpf-noagent-$cc.json)
	R=$(calc "$X / $BASE")
	dfa=$(( $(bpf_stat fallback_acks) - fa0 )) dcr=$(( $(bpf_stat creates) - cr0 ))
	dap=$(( $(bpf_stat decisions_applied) - ap0 ))
	check bpf_fallback_$cc 'fge "$R" 0.9 && [ $dcr -ge 1 ] && [ $dfa -ge 1000 ] && [ $dap = 0 ]' \
		"$cc, no agent: $X Mbit/s = ${R}x native cubic; creates +$dcr, fallback ACKs +$dfa, agent ACKs +$dap"
done

# ---------------------------------------------------------------- reports
# a listener prints every record; a ccp_cubic flow's reports carry what it
# sent: their bytes_acked against the kernel's count of the same socket
$CCPB listen > $T/bpf-listen.out 2> $T/bpf-listen.err &
lp=$!
nap 1
# the sender's own count (ss bytes_acked) 7 s in, between two readings of
# CLOCK_MONOTONIC, the reports' clock (bpf_ktime_get_ns; /proc/uptime ran
# seconds apart from it in a 6.1 guest)
( nap 7; $PY -c 'import subprocess, sys, time
t0 = time.monotonic_ns()
o = subprocess.run(sys.argv[1:], capture_output=True, text=True).stdout
t1 = time.monotonic_ns()
print(t0 / 1e9, t1 / 1e9)
sys.stderr.write(o)' $NS_SND ss -tinH dport = :5201 > $T/bpf-reports-ss.up 2> $T/bpf-reports-ss.txt ) &
iperf_run 5201 ccp_cubic $SECS $T/bpf-reports.json
nap 1
kill -TERM $lp
wait $lp
cp $T/bpf-listen.out $OUT/bpf-listen.out
# the transfer's data connection: of the ccp_cubic flows to port 5201 (the
# control connection is one too) with at least 10 reports, the last created
# (the listener also prints the records the ring kept from earlier tests'
# flows, which nobody read)
flow=$(awk '$1=="create" && $3=="alg=ccp_cubic" && $7 ~ /:5201$/ {c[$2]=0}
	$1=="report" && ($2 in c) {c[$2]++}
	END {for (f in c) {id=f; sub("flow=","",id); if (c[f] >= 10 && id+0 > b+0) b=id}; print b}' $T/bpf-listen.out)
nrep=$(awk -v f="flow=$flow" '$1=="report" && $2==f' $T/bpf-listen.out | wc -l)
rttok=$(awk -v f="flow=$flow" '$1=="report" && $2==f {for (i=3;i<=NF;i++) if ($i ~ /^rtt_min=/) {sub("rtt_min=","",$i); if ($i+0 >= 40000 && $i+0 < 1000000) n++}} END{print n+0}' $T/bpf-listen.out)
closed=$(awk -v f="flow=$flow" '$1=="close" && $2==f' $T/bpf-listen.out | wc -l)
cp $T/bpf-reports-ss.txt $T/bpf-reports-ss.up $OUT/ 2>/dev/null
# the flow's records against the kernel's count of the same socket: ss read
# bytes_acked between u0 and u1 (CLOCK_MONOTONIC); the reports sent
# by u0 sum to at most that, and those sent by the first report after u1 to
# at least that (report clock: bpf_ktime_get_ns)
read lo ss hi <<<"$($PY - "$flow" $T/bpf-listen.out $T/bpf-reports-ss.txt $T/bpf-reports-ss.up <<'PYEOF' 2>/dev/null || echo "none none none"
import re, sys
flow, listen, ssf, upf = sys.argv[1:5]
u0, u1 = (float(x) * 1e9 for x in open(upf).read().split())
ss = max(int(m) for m in re.findall(r"bytes_acked:(\d+)", open(ssf).read()))
reps = []
for line in open(listen):
    w = line.split()
    f = dict(kv.split("=", 1) for kv in w[1:] if "=" in kv)
    if w and w[0] == "report" and f.get("flow") == flow:
        reps.append((int(f["now_ns"]), int(f["bytes_acked"])))
reps.sort()
lo = sum(b for now, b in reps if now <= u0)
hi = 0
for now, b in reps:
    hi += b
    if now > u1:
        break
print(lo, ss, hi)
PYEOF
)"
# one report per RTT (>= 40 ms): at most 25 a second, and most intervals
# carry an RTT sample of at least the path's 40 ms
check bpf_reports '[ -n "$flow" ] && [ $nrep -ge $((SECS * 10)) ] && [ $nrep -le $((SECS * 30)) ] && fle "$lo" "$ss" && fle "$ss" "$(calc "$hi + 1")" && [ $rttok -ge $((nrep / 2)) ] && [ $closed = 1 ]' \
	"flow ${flow:-none}: $nrep reports in ${SECS}s ($rttok with an RTT sample >= 40 ms); the sender's bytes_acked $ss (ss, 7 s in) within the reports' sums $lo .. $hi; close records $closed"

# ---------------------------------------------------------------- decisions
# the listener answers every report with a 10-packet window: a 50 Mbit/s,
# 40 ms path then carries about 10 x 1448 x 8 / 0.041 = 2.8 Mbit/s.  7 s
# into the 16 s transfer it is killed (-9): the decisions go stale within
# CCPB_STALE_REPORTS reports (200 ms) and the in-BPF Cubic takes the flow from there,
# without a gap
KSECS=16
TKILL=7
$CCPB listen -c 10 -q > $T/bpf-cap.out 2>&1 &
lp=$!
nap 1
sf0=$(bpf_stat stale_fallbacks) ap0=$(bpf_stat decisions_applied)
iperf_srv 5201 $T/bpf-kill.json
t0=$(now)
$NS_SND iperf3 -c $RCV_IP -p 5201 -t $KSECS -C ccp_cubic -J > $T/bpf-kill.cli 2>&1 &
pc=$!
nap $TKILL
kill -9 $lp
tk=$(now)
wait $lp 2>/dev/null
wait $pc
iperf_srv_wait
rel_k=$(calc "$tk - $t0")
capped=$($CHECK window $T/bpf-kill.json 2 $(calc "$rel_k - 0.5"))
after=$($CHECK window $T/bpf-kill.json $(calc "$rel_k + 4") $KSECS)
g=$($CHECK gap $T/bpf-kill.json 0.5 $KSECS)
dsf=$(( $(bpf_stat stale_fallbacks) - sf0 )) dap=$(( $(bpf_stat decisions_applied) - ap0 ))
check bpf_decision_applied 'fle "$capped" 4 && fge "$capped" 1.5 && [ $dap -ge 100 ]' \
	"under a 10-packet decision: $capped Mbit/s (expect about 2.8; native cubic $BASE); agent ACKs +$dap"
check bpf_kill_no_gap 'fle "$g" 1.0' "kill -9 of the listener at ${rel_k}s: longest stretch without delivered data ${g}s"
check bpf_kill_fallback 'fge "$after" $(calc "0.5 * $BASE") && [ $dsf -ge 1 ]' \
	"from 4 s after the kill to the end: $after Mbit/s (native cubic $BASE); stale fallbacks +$dsf"

# ---------------------------------------------------------------- agent
# the agent on the BPF datapath: libccp for the BPF flows in its own process
# (--ipc bpf), started first without --ipc (the module is not loaded and the
# pins are there: it must choose bpf itself), after a kill -9 with --ipc bpf
ASECS=15
# bpf_agent_start FLOWLOG [ARGS]: 0 once the agent bridges the datapath
bpf_agent_start() {
	local fl=$1 i n0
	shift
	n0=$(grep -c "bridging the BPF datapath" $OUT/bpf-agent.log 2>/dev/null)
	echo "---- [$(now)] agent $*" >> $OUT/bpf-agent.log
	CCP_LOG=${CCP_LOG:-warn,ccp_agent=info,ccp_bpf_bridge=debug} $AGENT "$@" --alg cubic \
		--models $REPO/models --flow-log $fl >> $OUT/bpf-agent.log 2>&1 &
	AGENT_PID=$!
	for i in $(seq 300); do
		[ "$(grep -c "bridging the BPF datapath" $OUT/bpf-agent.log)" -gt "${n0:-0}" ] && return 0
		kill -0 $AGENT_PID 2>/dev/null || { log "agent exited: $(tail -3 $OUT/bpf-agent.log)"; return 1; }
		nap 0.05
	done
	return 1
}
# agent_share: of the ACKs since the counters A0/F0, the share under a decision
agent_share() {
	local da=$(( $(bpf_stat decisions_applied) - A0 )) df=$(( $(bpf_stat fallback_acks) - F0 ))
	calc "$da / max($da + $df, 1)"
}
FLB=$T/bpf-flows.jsonl
if [ -x "$AGENT" ] && bpf_agent_start $FLB; then
	detected=$(grep -c "a loaded BPF datapath: --ipc bpf" $OUT/bpf-agent.log)
	check bpf_agent_start '[ "$detected" -ge 1 ]' \
		"agent $AGENT_PID without --ipc: chose the BPF datapath itself ($detected log line) and bridges it"
	# per algorithm, alternating runs of native cubic and ccp_<alg> (one pair for
	# cubic, three for the learned owl and mocc, whose runs vary more); the
	# median of the ratios
	for alg in cubic owl mocc; do
		np=3; [ $alg = cubic ] && np=1
		RS= XS= NS= A0=$(bpf_stat decisions_applied) F0=$(bpf_stat fallback_acks)
		da=0 df=0
		for i in $(seq $np); do
			iperf_run 5201 cubic $ASECS $T/bpf-native-$alg-$i.json
			N=$($CHECK thr $T/bpf-native-$alg-$i.json)
			a0=$(bpf_stat decisions_applied) f0=$(bpf_stat fallback_acks)
			iperf_run 5201 ccp_$alg $ASECS $T/bpf-agent-$alg-$i.json
			X=$($CHECK thr $T/bpf-agent-$alg-$i.json)
			da=$((da + $(bpf_stat decisions_applied) - a0)) df=$((df + $(bpf_stat fallback_acks) - f0))
			RS="$RS $(calc "$X / $N")" XS="$XS $X" NS="$NS $N"
		done
		R=$(echo $RS | tr ' ' '\n' | sort -g | awk '{v[NR]=$1} END {print (NR ? v[int((NR+1)/2)] : "none")}')
		share=$(calc "$da / max($da + $df, 1)")
		made=$($CHECK creates $FLB | awk -v r=ccp_$alg -v a=$alg '$2==r && $3==a' | wc -l)
		# the issue's bar: ccp_cubic and a learned algorithm (owl) >= 0.9x native
		# cubic.  MOCC at the default preference <0.4,0.5,0.1> trades throughput
		# for delay (0.87x Cubic in the simulator's evaluation, README): 0.75x here
		bar=0.9; [ $alg = mocc ] && bar=0.75
		check bpf_agent_ccp_$alg 'fge "$R" $bar && fge "$share" 0.8 && [ $made -ge 1 ]' \
			"ccp_$alg under the agent: ${R}x native cubic (median of $np:$RS; Mbit/s ccp_$alg$XS, native cubic just before$NS); ACKs under the agent's decisions $share; created as $alg: $made"
	done
	# SIGUSR1: the agent's counters line carries the bridge's (7 flows above)
	ast=$(agent_stats $OUT/bpf-agent.log $AGENT_PID)
	bcre=$(jnum flows_created "$ast") binv=$(jnum invokes "$ast") bdec=$(jnum decisions "$ast")
	bstale=$(jnum stale_reports "$ast")
	check bpf_agent_stats '[ $bcre -ge 7 ] && [ $binv -ge 100 ] && [ $bdec -ge 100 ]' \
		"kill -USR1: bridge flows_created $bcre, invokes $binv, decisions $bdec, stale_reports $bstale"
	# kill -9 of the agent during a ccp_cubic transfer: decisions stop, the flow
	# falls back to the in-BPF Cubic without a gap
	sf0=$(bpf_stat stale_fallbacks)
	iperf_srv 5201 $T/bpf-akill.json
	t0=$(now)
	$NS_SND iperf3 -c $RCV_IP -p 5201 -t $KSECS -C ccp_cubic -J > $T/bpf-akill.cli 2>&1 &
	pc=$!
	nap $TKILL
	A0=$(bpf_stat decisions_applied) F0=$(bpf_stat fallback_acks)
	kill -9 $AGENT_PID
	tk=$(now)
	wait $AGENT_PID 2>/dev/null
	AGENT_PID=
	wait $pc
	iperf_srv_wait
	rel_k=$(calc "$tk - $t0")
	before=$($CHECK window $T/bpf-akill.json $(calc "$rel_k - 5") $rel_k)
	after=$($CHECK window $T/bpf-akill.json $rel_k $(calc "$rel_k + 5"))
	g=$($CHECK gap $T/bpf-akill.json 0.5 $KSECS)
	ratio=$(calc "$after / max($before, 0.001)")
	dsf=$(( $(bpf_stat stale_fallbacks) - sf0 )) share=$(agent_share)
	check bpf_agent_kill_no_gap 'fle "$g" 1.0' "kill -9 of the agent at ${rel_k}s into a ccp_cubic transfer: longest stretch without delivered data ${g}s"
	check bpf_agent_kill_fallback 'fge "$before" 5 && fge "$ratio" 0.5 && [ $dsf -ge 1 ] && fle "$share" 0.2' \
		"5 s before: $before Mbit/s, 5 s after: $after Mbit/s (${ratio}x); stale fallbacks +$dsf; ACKs under decisions after the kill $share"
	cp $FLB $OUT/ 2>/dev/null
else
	fail bpf_agent_start "agent $AGENT missing or not bridging (cargo build --release -p ccp-agent); see bpf-agent.log"
	for t in bpf_agent_ccp_cubic bpf_agent_ccp_owl bpf_agent_ccp_mocc bpf_agent_kill_no_gap bpf_agent_kill_fallback; do
		fail $t "no agent"
	done
fi

# ---------------------------------------------------------------- restart
# an agent (--ipc bpf) killed -9 5 s into a 20 s ccp_cubic transfer, a new one
# started 4 s later: it takes the flow over (the flow it first sees in a
# report), as the module's kill_reattach: the flow under the new agent's
# decisions within 2 s of it bridging, and stays there; no stretch without
# data, the new agent's flow log has the flow
RSECS=20 RKILL=5 RSTART=9
FLR1=$T/bpf-flows-r1.jsonl FLR2=$T/bpf-flows-r2.jsonl
rm -f $FLR1 $FLR2
if [ -x "$AGENT" ] && bpf_agent_start $FLR1 --ipc bpf; then
	iperf_srv 5201 $T/bpf-restart.json
	t0=$(now)
	$NS_SND iperf3 -c $RCV_IP -p 5201 -t $RSECS -C ccp_cubic -J > $T/bpf-restart.cli 2>&1 &
	pc=$!
	nap $RKILL
	kill -9 $AGENT_PID
	wait $AGENT_PID 2>/dev/null
	nap $((RSTART - RKILL))
	fa_dead=$(bpf_stat fallback_acks)
	ap0=$(bpf_stat decisions_applied)
	if bpf_agent_start $FLR2 --ipc bpf; then
		tl=$(now)
		ta=
		for i in $(seq 100); do
			[ "$(bpf_stat decisions_applied)" -gt "$ap0" ] && { ta=$(now); break; }
			nap 0.05
		done
		attach=$([ -n "$ta" ] && calc "$ta - $tl" || echo never)
		nap 2
		A0=$(bpf_stat decisions_applied) F0=$(bpf_stat fallback_acks)
		wait $pc
		share=$(agent_share)
	else
		attach=never share=0
		wait $pc
	fi
	iperf_srv_wait
	kill -TERM $AGENT_PID 2>/dev/null
	wait $AGENT_PID 2>/dev/null
	AGENT_PID=
	g=$($CHECK gap $T/bpf-restart.json 0.5 $RSECS)
	X=$($CHECK window $T/bpf-restart.json $((RSTART + 3)) $RSECS)
	recreated=$($CHECK creates $FLR2 | awk '$2=="ccp_cubic" && $3=="cubic"' | wc -l)
	check bpf_agent_restart '[ "$attach" != never ] && fle "$attach" 2.0 && fge "$share" 0.8 && [ $recreated -ge 1 ] && fle "$g" 1.0 && fge "$X" "$(calc "0.5 * $BASE")"' \
		"kill -9 at ${RKILL}s, new agent at ${RSTART}s: the flow under its decisions ${attach}s after it bridged, ACKs under decisions from 2 s later to the end $share; flows it created as ccp_cubic: $recreated; longest stretch without data ${g}s; $X Mbit/s from $((RSTART + 3)) s (native cubic $BASE)"
	cp $FLR1 $FLR2 $OUT/ 2>/dev/null
else
	fail bpf_agent_restart "agent --ipc bpf not bridging; see bpf-agent.log"
fi

# ---------------------------------------------------------------- slots
# As the module's netns_no_slots, netns_quota and loopback_no_slot: inside an
# unprivileged user + network namespace anyone may select a ccp name.  With
# netns_quota 0 (the default) such sockets get no slot: never announced to the
# agent (no CREATE), the in-BPF fallback alone.  With 3, two namespaces at once
# hold 3 slots each.  With loopback 0 (the default) a connection to 127/8 gets
# none either.  Each namespace runs ccpflows as nobody: 5 connections to a
# listener of its own on 127.0.0.1:6200, TCP_CONGESTION=ccp_reno.
NSD=$T/bpf-ns
mkdir -p $NSD && chmod 1777 $NSD
$CCPB policy -n 0 -l 1 > /dev/null
r0=$(bpf_stat no_slot_netns) c0=$(bpf_stat creates)
ns_flows def 6
p1=$NS_PID
ns_wait def && ok=yes || ok=no
nap 1
held=$(bpf_stat slots_other_netns)
wait $p1
d_ref=$(( $(bpf_stat no_slot_netns) - r0 )) d_cre=$(( $(bpf_stat creates) - c0 ))
check bpf_netns_no_slots '[ $ok = yes ] && [ "$held" = 0 ] && [ $d_ref -ge 5 ] && [ $d_cre = 0 ]' \
	"nobody in unshare -Urn, 5 ccp_reno connections, netns_quota 0: slots held outside the initial namespace $held, no_slot_netns +$d_ref, CREATEs +$d_cre ($(tail -1 $NSD/def.out | cut -c1-60))"
$CCPB policy -n 3 > /dev/null
r0=$(bpf_stat no_slot_netns)
ns_flows q1 8
p1=$NS_PID
ns_flows q2 8
p2=$NS_PID
ns_wait q1 && ns_wait q2 && ok=yes || ok=no
nap 1.5
held=$(bpf_stat slots_other_netns)
d_ref=$(( $(bpf_stat no_slot_netns) - r0 ))
wait $p1 $p2
nap 0.5
left=$(bpf_stat slots_other_netns)
check bpf_netns_quota '[ $ok = yes ] && [ "$held" = 6 ] && [ $d_ref = 4 ] && [ "$left" = 0 ]' \
	"netns_quota 3, two namespaces with 5 ccp_reno connections each: $held slots held (want 3 + 3), no_slot_netns +$d_ref (want 2 + 2); after they closed: $left"
ip link set lo up	# the guest's initial namespace starts with lo down
# lb_run TAG PORT [ADDR]: 5 ccp_reno connections to ADDR (127.0.0.1) in the
# initial namespace; LB_HELD: slots used (beyond those before) while they run
lb_run() {
	local u0 p
	u0=$(bpf_stat slots_used)
	rm -f $NSD/$1.ready
	$BIN/ccpflows -L ${3:-127.0.0.1}:$2 -n 5 -C ccp_reno -t 4 -i 200 -r $NSD/$1.ready > $NSD/$1.out 2>&1 &
	p=$!
	ns_wait $1 || log "ccpflows $1 not ready: $(tail -1 $NSD/$1.out)"
	nap 1
	LB_HELD=$(( $(bpf_stat slots_used) - u0 ))
	wait $p
}
$CCPB policy -l 0 > /dev/null
r0=$(bpf_stat no_slot_loopback) c0=$(bpf_stat creates)
lb_run lo-off 6201
h_off=$LB_HELD
d_lo=$(( $(bpf_stat no_slot_loopback) - r0 )) d_cre=$(( $(bpf_stat creates) - c0 ))
# an address of this namespace that is not 127/8: its route is over lo
ip addr add 10.200.0.1/32 dev lo
r0=$(bpf_stat no_slot_loopback) c0=$(bpf_stat creates)
lb_run lo-route 6204 10.200.0.1
h_route=$LB_HELD
d_route=$(( $(bpf_stat no_slot_loopback) - r0 )) d_cre_route=$(( $(bpf_stat creates) - c0 ))
ip addr del 10.200.0.1/32 dev lo
$CCPB policy -l 1 > /dev/null
lb_run lo-on 6202
h_on=$LB_HELD
check bpf_loopback_no_slot '[ $h_off = 0 ] && [ $d_lo -ge 5 ] && [ $d_cre = 0 ] && [ $h_route = 0 ] && [ $d_route -ge 5 ] && [ $d_cre_route = 0 ] && [ $h_on -ge 5 ]' \
	"5 ccp_reno connections to 127.0.0.1, loopback 0: slots held $h_off, no_slot_loopback +$d_lo, CREATEs +$d_cre ($(tail -1 $NSD/lo-off.out | cut -c1-60)); to 10.200.0.1 (a local address, routed over lo): slots held $h_route, no_slot_loopback +$d_route, CREATEs +$d_cre_route ($(tail -1 $NSD/lo-route.out | cut -c1-40)); loopback 1: slots held $h_on"
# uid_share: one user's sockets hold at most uid_share % of max_flows, in every
# namespace (here 30 % of 10: 3), so nobody's 5 connections from a namespace
# of its own (quota 10 there) get 3 slots and 2 run the fallback alone
$CCPB policy -m 10 -u 30 -n 10 > /dev/null
r0=$(bpf_stat no_slot_uid) u0=$(bpf_stat slots_used)
ns_flows uid 6
p1=$NS_PID
ns_wait uid && ok=yes || ok=no
nap 1
h_uid=$(( $(bpf_stat slots_used) - u0 ))
d_uid=$(( $(bpf_stat no_slot_uid) - r0 ))
wait $p1
nap 0.5
left=$(( $(bpf_stat slots_used) - u0 ))
$CCPB policy -m 1024 -u 50 -n 3 > /dev/null
check bpf_uid_share '[ $ok = yes ] && [ $h_uid = 3 ] && [ $d_uid = 2 ] && [ $left = 0 ]' \
	"max_flows 10, uid_share 30: nobody's 5 ccp_reno connections (unshare -Urn) held $h_uid slots (want 3), no_slot_uid +$d_uid (want 2) ($(tail -1 $NSD/uid.out | cut -c1-60)); after they closed: $left more than before"
# create_rate (the module's): at most create_rate CREATEs in each second's
# window, all flows together; a flow held back runs the fallback, reports
# nothing, and is announced at an interval's end 100 ms later.  100
# connections to 127.0.0.1 (100 bytes each every 200 ms: an ACK, an interval's
# end, each 200 ms) at create_rate 20: about 20 announced a second, all 100
# within 5 s or so.  ccp-bpf listen reads the ring meanwhile, as an agent would.
$CCPB policy -C 20 > /dev/null
$CCPB listen -t 14 -q > /dev/null 2>&1 &
CL=$!
c0=$(bpf_stat creates) th0=$(bpf_stat creates_throttled) rf0=$(bpf_stat ring_full) s0=$(now)
rm -f $NSD/cr.ready
$BIN/ccpflows -L 127.0.0.1:6203 -n 100 -C ccp_reno -t 10 -i 200 -r $NSD/cr.ready > $NSD/cr.out 2>&1 &
p1=$!
ns_wait cr && ok=yes || ok=no
nap 1
d1=$(( $(bpf_stat creates) - c0 )) t1=$(calc "$(now) - $s0")
# all 100 need five windows: wait for them while the connections last
for i in $(seq 80); do
	d2=$(( $(bpf_stat creates) - c0 ))
	[ $d2 -ge 100 ] && break
	nap 0.1
done
t2=$(calc "$(now) - $s0")
d_th=$(( $(bpf_stat creates_throttled) - th0 )) d_rf=$(( $(bpf_stat ring_full) - rf0 ))
wait $p1
kill -TERM $CL 2>/dev/null
wait $CL 2>/dev/null
$CCPB policy -C 5000 > /dev/null
# the window is one second, so at most 20 for each second begun (+5: a CPU
# may count into a window another has just restarted)
max1=$(calc "20 * ($t1 + 1) + 5" | cut -d. -f1)
check bpf_create_rate '[ $ok = yes ] && [ $d1 -ge 1 ] && [ $d1 -le $max1 ] && [ $d_th -ge 1 ] && [ $d2 = 100 ]' \
	"create_rate 20, 100 ccp_reno connections to 127.0.0.1 ($(tail -1 $NSD/cr.out | cut -c1-60)): CREATEs +$d1 in the first ${t1}s (at most $max1), all 100 after ${t2}s (+$d2); creates_throttled +$d_th, ring_full +$d_rf"
$CCPB policy > $OUT/bpf-policy.txt 2>&1

# ---------------------------------------------------------------- nobody
# an unprivileged user can neither read, feed, unload nor load
u_listen=$($NOBODY $CCPB listen -t 1 -c 1000 > /dev/null 2>&1; echo $?)
u_stats=$($NOBODY $CCPB stats > /dev/null 2>&1; echo $?)
u_unload=$($NOBODY $CCPB unload > /dev/null 2>&1; echo $?)
u_policy=$($NOBODY $CCPB policy -n 1000 > /dev/null 2>&1; echo $?)
u_load=$($NOBODY $CCPB load > /dev/null 2>&1; echo $?)
u_ls=$($NOBODY ls /sys/fs/bpf/ccp > /dev/null 2>&1; echo $?)
still=$(sysctl -n net.ipv4.tcp_available_congestion_control)
abi=$(bpf_stat abi) abi_h=$(awk '$1=="#define" && $2=="CCPB_ABI" {print $3}' $REPO/datapath/bpf/ccp_bpf.h)
check bpf_unpriv '[ $u_listen != 0 ] && [ $u_stats != 0 ] && [ $u_unload != 0 ] && [ $u_policy != 0 ] && [ $u_load != 0 ] && [ $u_ls != 0 ] && [[ " $still " == *" ccp_cubic "* ]] && [ -n "$abi_h" ] && [ "$abi" = "$abi_h" ]' \
	"as nobody: listen rc $u_listen, stats rc $u_stats, unload rc $u_unload, policy rc $u_policy, load rc $u_load, ls of the pins rc $u_ls; still registered: $still"

# ---------------------------------------------------------------- unload
$CCPB unload > $OUT/bpf-unload.log 2>&1
urc=$?
left=$(sysctl -n net.ipv4.tcp_available_congestion_control | tr ' ' '\n' | grep -c '^ccp')
pins=$(ls /sys/fs/bpf/ccp 2>/dev/null | wc -l)
$CCPB load > $OUT/bpf-reload.log 2>&1
rrc=$?
$CCPB unload >> $OUT/bpf-reload.log 2>&1
check bpf_unload '[ $urc = 0 ] && [ $left = 0 ] && [ $pins = 0 ] && [ $rrc = 0 ]' \
	"unload rc $urc, ccp names left $left, pins left $pins; load again rc $rrc"

dmesg > $OUT/bpf-dmesg.txt 2>&1
bad=$(grep -cE 'BUG:|WARNING:|Oops|Call Trace|lockup' $OUT/bpf-dmesg.txt)
check bpf_kernel_log_clean '[ "$bad" = 0 ]' "$bad suspicious kernel log lines"
cp $T/bpf-*.json $T/bpf-*.out $OUT/ 2>/dev/null
log "bpf tests done"
