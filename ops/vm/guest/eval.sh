#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Kernel mode of the evaluation harness, run inside the QEMU guest
# (`ops/vm/test.sh --eval LIST` boots it; train/ccp_train/harness/vm.py
# writes LIST and reads the results).
#
# $WORK/eval/list.txt: one scenario a line, "name rate_mbps rtt_ms
# buffer_bdp loss" (loss a fraction; '#' starts a comment).
# $WORK/eval/params: EVAL_SECONDS (transfer length) and EVAL_ALGS (the
# agent's algorithms, space-separated).
#
# For each scenario: the link of setup_link with that rate, base RTT, a
# tbf queue of buffer_bdp x BDP bytes and, per packet, the random loss;
# then one transfer each of native cubic, native bbr and ccp_<alg> under
# the agent (--models $REPO/models) for every alg.  One JSON line per run
# into $OUT/eval.jsonl: receiver throughput, the sender's smoothed RTT
# (mean and p95 over iperf3's 100 ms intervals), retransmissions and, for
# ccp flows, whether /proc/net/ccp_flows showed the flow under agent
# control and which algorithm the agent created for it.
set -u
. "$REPO/ops/vm/guest/lib.sh"
LIST=$WORK/eval/list.txt
EVAL_SECONDS=10
EVAL_ALGS="reno cubic bbr iris mocc"
[ -r $WORK/eval/params ] && . $WORK/eval/params
RES=$OUT/eval.jsonl
: > $RES
plan eval_done
log "eval on $(uname -r): ${EVAL_SECONDS}s transfers, algorithms: $EVAL_ALGS"
[ -r "$LIST" ] || { fail eval_done "no scenario list at $LIST"; exit 0; }
insmod $KO $KO_PARAMS || { fail eval_done "insmod $KO failed"; exit 0; }

FL=$T/flows-eval.jsonl
rm -f $FL
agent=no
if agent_available && agent_start $FL --models $REPO/models; then
	agent=yes
else
	log "agent not running: ccp runs are recorded with an error"
fi

# snapshots of /proc/net/ccp_flows every 0.5 s until $T/stop exists
sample_bg() {
	local f=$1 up rest line
	: > $f
	while [ ! -e $T/stop ]; do
		read -r up rest < /proc/uptime
		while read -r line; do echo "$up $line"; done < /proc/net/ccp_flows >> $f
		nap 0.5
	done
}

# one_run SCENARIO-FIELDS... CC: a transfer and its JSON line
one_run() {
	local name=$1 rate=$2 rtt=$3 bdp=$4 loss=$5 bufb=$6 cc=$7 kind alg base
	base=$T/run-$name-$cc
	if [[ $cc == ccp_* ]]; then kind=ccp; alg=${cc#ccp_}; else kind=native; alg=$cc; fi
	local skip=0 err=
	[ $kind = ccp ] && skip=$(wc -l < $FL 2>/dev/null || echo 0)
	if [ $kind = ccp ] && [ $agent != yes ]; then
		err="the agent is not running"
	else
		rm -f $T/stop
		sample_bg $base.samples &
		local sp=$!
		iperf_run 5201 $cc $EVAL_SECONDS $base.json -i 0.1 || err="iperf3 failed: $(tail -c 300 $base.json.cli 2>/dev/null | tr '\n"' ' ')"
		touch $T/stop
		wait $sp
	fi
	$CHECK evalrun $base.json $base.json.cli $base.samples $FL "$skip" $cc \
		scenario=$name rate_mbps=$rate rtt_ms=$rtt buffer_bdp=$bdp loss=$loss \
		buffer_bytes=$bufb seconds=$EVAL_SECONDS kind=$kind alg=$alg "error=$err" >> $RES ||
		echo "{\"scenario\": \"$name\", \"cc\": \"$cc\", \"kind\": \"$kind\", \"alg\": \"$alg\", \"error\": \"evalrun failed\"}" >> $RES
	log "$(tail -n1 $RES)"
}

n=0
while read -r name rate rtt bdp loss rest; do
	case "$name" in ''|'#'*) continue ;; esac
	# queue: buffer_bdp x rate x RTT, at least two full-size packets
	bufb=$(awk -v r=$rate -v t=$rtt -v b=$bdp 'BEGIN{q = int(r * 1e6 / 8 * t / 1000 * b); print (q < 3028 ? 3028 : q)}')
	lpct=$(awk -v l=$loss 'BEGIN{printf "%g", l * 100}')
	log "scenario $name: ${rate} Mbit/s, ${rtt} ms, $bdp BDP = $bufb bytes, loss $lpct %"
	setup_link ${rate}mbit $rtt $bufb cubic $lpct
	# socket buffers for a BDP plus a 4 BDP queue at 200 Mbit/s x 200 ms
	$NS_SND sysctl -qw net.ipv4.tcp_wmem="4096 16384 67108864"
	$NS_RCV sysctl -qw net.ipv4.tcp_rmem="4096 131072 67108864"
	for cc in cubic bbr; do one_run $name $rate $rtt $bdp $loss $bufb $cc; n=$((n + 1)); done
	for a in $EVAL_ALGS; do one_run $name $rate $rtt $bdp $loss $bufb ccp_$a; n=$((n + 1)); done
done < "$LIST"

agent_stop
cp $FL $OUT/ 2>/dev/null
dmesg > $OUT/dmesg-eval.txt
bad=$(grep -c '"error": "[^"]' $RES)
check eval_done '[ $n -gt 0 ] && kernel_log_clean' \
	"$n runs in $RES ($bad with an error); kernel log $(kernel_log_clean && echo clean || echo 'NOT clean, see work/out/dmesg-eval.txt')"
log "eval done"
