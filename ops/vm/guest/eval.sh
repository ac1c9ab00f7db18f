#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Kernel mode of the evaluation harness, run inside the QEMU guest
# (`ops/vm/test.sh --eval LIST` boots it; train/ccp_train/harness/vm.py
# writes LIST and reads the results).
#
# $WORK/eval/list.txt: one scenario a line, "name rate_mbps rtt_ms
# buffer_bdp loss" (loss a fraction; '#' starts a comment); rate_mbps
# "trace=PATH" makes a trace-driven link (setup_trace_link: ccplink with the
# trace PATH, buffer_bdp BDPs at the trace's mean rate, restarted before
# each run so that every transfer meets the trace from its start, and the
# link's statistics, its queueing delay among them, in each run's line).
# $WORK/eval/params: EVAL_SECONDS (transfer length), EVAL_ALGS (the
# agent's algorithms, space-separated), EVAL_NETSTATS (1: in-network
# statistics, below); $WORK/eval/models, when there, replaces
# $REPO/models (a candidate model and its card).
#
# EVAL_NETSTATS=1: the router namespace gets a management link to the
# initial one (mg0 192.168.200.1 -- mg1 192.168.200.2 in rtr), the agent
# polls http://192.168.200.2:9465/netstats, and every ccp_<alg> runs twice:
# "off", no exporter (the poller's connections are refused, the flow's
# statistics stay masked), then "on", ccp-netstats-exporter running in rtr
# on the shaped egress (--link vb=RATE --path 10.0.2.0/24=vb) from 3 s
# before the transfer to its end.  Each line then carries netstats (on|off)
# and the agent's ccp_netstats_polls_ok_total / ccp_netstats_fresh_paths
# read during the transfer (--metrics 127.0.0.1:9464).
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
EVAL_NETSTATS=0
[ -r $WORK/eval/params ] && . $WORK/eval/params
MODELS=$REPO/models
[ -d $WORK/eval/models ] && MODELS=$WORK/eval/models
EXPORTER=$BIN/ccp-netstats-exporter
NS_LISTEN=192.168.200.2:9465
RES=$OUT/eval.jsonl
: > $RES
plan eval_done
log "eval on $(uname -r): ${EVAL_SECONDS}s transfers, algorithms: $EVAL_ALGS, models: $MODELS, netstats: $EVAL_NETSTATS"
[ -r "$LIST" ] || { fail eval_done "no scenario list at $LIST"; exit 0; }
insmod $KO $KO_PARAMS || { fail eval_done "insmod $KO failed"; exit 0; }

FL=$T/flows-eval.jsonl
rm -f $FL
agent=no
AGENT_EXTRA=()
if [ "$EVAL_NETSTATS" = 1 ]; then
	[ -x $EXPORTER ] || { fail eval_done "EVAL_NETSTATS=1 but no exporter at $EXPORTER"; exit 0; }
	ip link set lo up	# the metrics listen on 127.0.0.1 of the initial namespace
	AGENT_EXTRA=(--netstats-url http://$NS_LISTEN/netstats --metrics 127.0.0.1:9464)
fi
if agent_available && agent_start $FL --models $MODELS "${AGENT_EXTRA[@]}"; then
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

# the management link from the initial namespace to rtr (setup_link
# re-creates rtr, which takes the old one with it)
mgmt_link() {
	ip link add mg0 type veth peer name mg1 netns rtr &&
	ip addr add 192.168.200.1/30 dev mg0 && ip link set mg0 up &&
	ip -n rtr addr add 192.168.200.2/30 dev mg1 && ip -n rtr link set mg1 up
}
EXP_PID=
# exporter_serves: GET /netstats answers 200 (bash's /dev/tcp: no curl)
exporter_serves() {
	local fd line
	exec {fd}<>/dev/tcp/${NS_LISTEN%:*}/${NS_LISTEN#*:} 2>/dev/null || return 1
	printf 'GET /netstats HTTP/1.0\r\n\r\n' >&$fd
	read -r -t 2 line <&$fd
	exec {fd}>&-
	[[ $line == HTTP/1.?" 200"* ]]
}
# exporter_start RATE_MBPS: the exporter on rtr's shaped egress; waits
# until it serves a sample (it answers 503 before its first period)
exporter_start() {
	ip netns exec rtr $EXPORTER --link vb=$(awk -v r=$1 'BEGIN{printf "%dkbit", r * 1000}') \
		--path 10.0.2.0/24=vb --listen $NS_LISTEN --period-ms 1000 >> $OUT/exporter.log 2>&1 &
	EXP_PID=$!
	local i
	for i in $(seq 50); do
		nap 0.2
		exporter_serves && return 0
		kill -0 $EXP_PID 2>/dev/null || { EXP_PID=; return 1; }
	done
	return 1
}
exporter_stop() {
	[ -n "$EXP_PID" ] || return 0
	kill -TERM $EXP_PID 2>/dev/null
	wait $EXP_PID 2>/dev/null
	EXP_PID=
}

# one_run SCENARIO-FIELDS... CC [on|off]: a transfer and its JSON line (the
# last argument: with or without the exporter, EVAL_NETSTATS=1 only)
one_run() {
	local name=$1 rate=$2 rtt=$3 bdp=$4 loss=$5 bufb=$6 cc=$7 ns=${8:-} kind alg base
	local linkf=(rate_mbps=$rate)
	base=$T/run-$name-$cc${ns:+-$ns}
	[ -n "$TRACE" ] && linkf=(trace=$TRACE linkstats=$base.link.json)
	if [[ $cc == ccp_* ]]; then kind=ccp; alg=${cc#ccp_}; else kind=native; alg=$cc; fi
	local skip=0 err= nsf=()
	[ $kind = ccp ] && skip=$(wc -l < $FL 2>/dev/null || echo 0)
	if [ $kind = ccp ] && [ $agent != yes ]; then
		err="the agent is not running"
	elif [ -n "$TRACE" ] && ! trace_link_start "$TRACE" $rtt ${bdp}bdp; then
		err="the trace link did not start (see ccplink.log)"
	elif [ "$ns" = on ] && ! exporter_start $rate; then
		err="the exporter did not serve (see exporter.log)"
		exporter_stop
	else
		# off: the last exporter's sample must have gone stale (2.5 s)
		[ "$ns" = off ] && nap 3
		rm -f $T/stop
		sample_bg $base.samples &
		local sp=$!
		iperf_run 5201 $cc $EVAL_SECONDS $base.json -i 0.1 &
		local ip=$!
		if [ -n "$ns" ]; then
			# the poller's view halfway through the transfer
			nap $(( (EVAL_SECONDS + 1) / 2 ))
			scrape $base.metrics || : > $base.metrics
			nsf=(netstats=$ns polls_ok=$(mval $base.metrics ccp_netstats_polls_ok_total)
				fresh_paths=$(mval $base.metrics ccp_netstats_fresh_paths))
		fi
		wait $ip || err="iperf3 failed: $(tail -c 300 $base.json.cli 2>/dev/null | tr '\n"' ' ')"
		touch $T/stop
		wait $sp
		exporter_stop
		if [ -n "$TRACE" ]; then
			trace_link_stop
			cp $TRACE_STATS $base.link.json 2>/dev/null
			cp $TRACE_STATS $OUT/link-$name-$cc.json 2>/dev/null
			# the transfer's 100 ms intervals, for a closer look at a run
			cp $base.json $OUT/iperf-$name-$cc.json 2>/dev/null
			cp $base.json.cli $OUT/iperf-$name-$cc.cli.json 2>/dev/null
		fi
	fi
	[ -n "$ns" ] && [ ${#nsf[@]} = 0 ] && nsf=(netstats=$ns)
	$CHECK evalrun $base.json $base.json.cli $base.samples $FL "$skip" $cc \
		scenario=$name "${linkf[@]}" rtt_ms=$rtt buffer_bdp=$bdp loss=$loss \
		buffer_bytes=$bufb seconds=$EVAL_SECONDS kind=$kind alg=$alg "${nsf[@]}" "error=$err" >> $RES ||
		echo "{\"scenario\": \"$name\", \"cc\": \"$cc\", \"kind\": \"$kind\", \"alg\": \"$alg\", \"error\": \"evalrun failed\"}" >> $RES
	log "$(tail -n1 $RES)"
}

n=0
while read -r name rate rtt bdp loss rest; do
	case "$name" in ''|'#'*) continue ;; esac
	lpct=$(awk -v l=$loss 'BEGIN{printf "%g", l * 100}')
	TRACE=
	if [[ $rate == trace=* ]]; then
		# a trace-driven link (ccplink): its queue in packets, from the trace's mean
		TRACE=${rate#trace=} bufb=0
		log "scenario $name: trace $TRACE, ${rtt} ms, $bdp BDP at its mean rate, loss $lpct %"
		fle "$lpct" 0 && lpct=
		setup_trace_link "$TRACE" $rtt ${bdp}bdp cubic $lpct || log "the trace link did not start: each run records it"
	else
		# queue: buffer_bdp x rate x RTT, at least two full-size packets
		bufb=$(awk -v r=$rate -v t=$rtt -v b=$bdp 'BEGIN{q = int(r * 1e6 / 8 * t / 1000 * b); print (q < 3028 ? 3028 : q)}')
		log "scenario $name: ${rate} Mbit/s, ${rtt} ms, $bdp BDP = $bufb bytes, loss $lpct %"
		setup_link ${rate}mbit $rtt $bufb cubic $lpct
	fi
	# socket buffers for a BDP plus a 4 BDP queue at 200 Mbit/s x 200 ms
	$NS_SND sysctl -qw net.ipv4.tcp_wmem="4096 16384 67108864"
	$NS_RCV sysctl -qw net.ipv4.tcp_rmem="4096 131072 67108864"
	[ "$EVAL_NETSTATS" = 1 ] && { mgmt_link || log "the management link to rtr failed"; }
	for cc in cubic bbr; do one_run $name $rate $rtt $bdp $loss $bufb $cc; n=$((n + 1)); done
	for a in $EVAL_ALGS; do
		if [ "$EVAL_NETSTATS" = 1 ]; then
			for ns in off on; do one_run $name $rate $rtt $bdp $loss $bufb ccp_$a $ns; n=$((n + 1)); done
		else
			one_run $name $rate $rtt $bdp $loss $bufb ccp_$a; n=$((n + 1))
		fi
	done
done < "$LIST"

agent_stop
trace_link_stop
cp $FL $OUT/ 2>/dev/null
dmesg > $OUT/dmesg-eval.txt
bad=$(grep -c '"error": "[^"]' $RES)
check eval_done '[ $n -gt 0 ] && kernel_log_clean' \
	"$n runs in $RES ($bad with an error); kernel log $(kernel_log_clean && echo clean || echo 'NOT clean, see work/out/dmesg-eval.txt')"
log "eval done"
