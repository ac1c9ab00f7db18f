#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Test trace_link_rate (issue 46): the trace-driven bottleneck (ccplink, set
# up by setup_trace_link) delivers what its trace offers.  Sourced by
# tests.sh (no agent needed; the link of the later tests is set up again
# afterwards); alone:
#   bash ops/vm/test.sh --guest ops/vm/guest/trace_link.sh
#
# Per trace (a mahimahi file and a throughput log of the corpus's eval
# split), a UDP flood above the trace's peak rate (iperf3 -u, 1500-byte IP
# packets) through a 1000-packet queue for TL_SECS s, so the queue never
# empties; the receiver's veth counters (rx bytes and packets in the
# receiver's namespace, every 0.25 s, with the guest's uptime) give the
# delivered IP bytes per window of >= 1 s, and `check.py linkrate` compares
# each window with the trace's capacity over the same window of the
# trace's clock (read from the trace by check.py itself, shifted by the
# link's forward delay), counting only windows in which the link wasted
# < 1 % of the capacity on an empty queue.
#
# Passes when, for each trace, >= 10 such windows were measured, >= 90 % of
# them within +-10 % of the trace's capacity, and all of them together
# within +-3 %.  The tolerances were set before the first measurement: the
# window edges come from bash reading /proc/uptime in a TCG guest (a few ms
# late at worst, < 1 % of a window), ccplink wakes a few ms late under load
# (which moves packets across a window's edge: +-2 % per window, nothing
# over the run), and a packet is 0.1-0.4 % of a window's bytes at these
# rates; +-10 % leaves room for a stall several times that, while a link
# running off its trace by a second, or at a wrong scale, misses it in most
# windows of a varying trace.  The total can only be off by what the first
# and last windows straddle, or by capacity the link failed to use.
if [ -z "${IN_SUITE-}" ]; then
	set -u
	. "$REPO/ops/vm/guest/lib.sh"
	RATE=50mbit
	RTT_MS=40
	BDP=250000
	plan trace_link_rate
fi
TL_SECS=${TL_SECS:-15}
TL_TRACES="$REPO/datapath/sim/scenarios/traces/TMobile-LTE-short.down:40M
$REPO/datapath/sim/scenarios/traces/corpus/starlink-autobahn/seg16_20240419T171134.up.tput:30M"

# rx_sampler FILE: "t_before t_after rx_bytes rx_packets" of vr every 0.25 s
# until $T/rx.stop exists (in the receiver's namespace: /proc/net/dev is
# its); the times are $EPOCHREALTIME (us) just before and after reading the
# counters, so that check.py can drop a sample whose read was interrupted
# (the guest's vCPU preempted by the host: seen for up to 0.9 s with three
# TCG guests on this 2-core host)
rx_sampler() {
	$NS_RCV bash -c '
		exec {fd}<>'"$T"'/nap.fifo
		while [ ! -e '"$T"'/rx.stop ]; do
			t0=$EPOCHREALTIME
			mapfile -t dev < /proc/net/dev
			t1=$EPOCHREALTIME
			for line in "${dev[@]}"; do
				line=${line/:/ }
				set -- $line
				[ "$1" = vr ] && echo "$t0 $t1 $2 $3"
			done
			read -rt 0.25 -u $fd
		done' > "$1"
}

tl_detail=
tl_pass=0	# traces measured and within the bounds
tl_bad=0	# traces that were not
for spec in $TL_TRACES; do
	tr=${spec%:*} flood=${spec##*:} name=$(basename ${spec%:*})
	if ! setup_trace_link $tr 40 1000 cubic; then
		tl_bad=$((tl_bad + 1)) tl_detail="$tl_detail $name: the link did not start;"
		continue
	fi
	rm -f $T/rx.stop
	rx_sampler $T/rx-$name.txt &
	rxp=$!
	iperf_srv 5201 $T/tl-$name.json
	$NS_SND iperf3 -c $RCV_IP -p 5201 -u -b $flood -l 1472 -t $TL_SECS -J > $T/tl-$name.json.cli 2>&1
	iperf_srv_wait
	touch $T/rx.stop
	wait $rxp
	trace_link_stop
	cp $TRACE_STATS $OUT/link-$name.json 2>/dev/null
	cp $T/rx-$name.txt $OUT/ 2>/dev/null
	read -r n within ratio med mx < <($CHECK linkrate $tr $TRACE_STATS $T/rx-$name.txt 0.10)
	# how far the link itself fell behind its trace (a diagnosis, not a condition)
	late=$($PY -c "import json, sys; d = json.load(open(sys.argv[1])).get('late_ms') or {}; print(d.get('p99', 'none'), d.get('max', 'none'))" $TRACE_STATS 2>/dev/null)
	log "trace link $name: $n saturated windows, $within within 10 %, delivered/trace $ratio, median |error| $med, max $mx"
	NUM_ERRS=
	if fge "$n" 10 && fge "$within" 0.9 && fge "$ratio" 0.97 && fle "$ratio" 1.03; then
		tl_pass=$((tl_pass + 1))
	else
		tl_bad=$((tl_bad + 1))
	fi
	tl_detail="$tl_detail $name: $n windows, ${within} within 10 %, total ${ratio}x the trace, |err| median $med max $mx, link late p99/max ${late:-none} ms${NUM_ERRS:+ [$NUM_ERRS]};"
done
check trace_link_rate 'fge "$tl_pass" 2 && [ "$tl_bad" = 0 ]' "UDP flood through ccplink, ${TL_SECS}s per trace:$tl_detail"
[ -n "${IN_SUITE-}" ] && setup_link $RATE $RTT_MS $BDP
