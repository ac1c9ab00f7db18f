#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Test auto_switch (issue 43): sourced by tests.sh with the module loaded, the
# link set up and no agent running; alone:
#   bash ops/vm/test.sh --guest ops/vm/guest/auto_switch.sh
if [ -z "${IN_SUITE-}" ]; then
	set -u
	. "$REPO/ops/vm/guest/lib.sh"
	RATE=50mbit
	RTT_MS=40
	BDP=250000
	PF="$PY $REPO/ops/vm/guest/prefflow.py"
	plan auto_switch
	insmod $KO $KO_PARAMS || { fail auto_switch "insmod $KO failed"; exit 0; }
	setup_link $RATE $RTT_MS $BDP
fi

# One ccp_auto flow for 30 s under an agent whose table (prefflow.py
# switch-table) runs Cubic first, BBR on a "links" path and Cubic on a
# "cellular" one, with a hand-set rule: the mechanism is under test, not the
# fitted classifier. The path is the suite's 50 Mbit/s, 40 ms link; at 15 s
# its delay becomes 100 ms (one netem change; a rate that changes every few
# hundred ms is not testable here: each tc exec stalls a TCG guest's
# forwarding for 100-200 ms, which reads as the flow stalling). The flow
# must switch to BBR (RTT near its minimum) and back to Cubic (RTT inflated
# past 2.2x its minimum), each new program installed by CHANGE_PROG with the
# window handed over; around each switch no 100 ms interval falls below half
# the rate of the second before, nor does srtt rise more than a base RTT
# (40 ms) above it.
AM=$T/auto-models
FLS=$T/flows-switch.jsonl
mkdir -p $AM
rm -f $FLS $T/switch.*
$PF switch-table > $AM/portfolio.json
if ! AGENT_ALG=cubic agent_start $FLS --models $AM; then
	fail auto_switch "the agent did not start: $(tail -2 $OUT/agent.log | tr '\n' ' ')"
else
	$NS_RCV $PF sink 5241 $T/switch.sink > /dev/null 2>&1 &
	sk=$!
	for i in $(seq 300); do [ -e $T/switch.sink.ready ] && break; nap 0.1; done
	( nap 15; tc -n rtr qdisc change dev va root netem delay 100ms limit 100000 ) &
	vl=$!
	$NS_SND $PF send $RCV_IP 5241 30 $T/switch.send --cc ccp_auto > /dev/null 2>&1
	wait $sk $vl
	tc -n rtr qdisc change dev va root netem delay ${RTT_MS}ms limit 100000
	LS=$(sed -n 's/.*"local": "\([0-9.:]*\)".*/\1/p' $T/switch.send)
	SW=$($PF switches $FLS ${LS:-none} 2>/dev/null)
	AR=$($PF around $T/switch.sink $T/switch.send $FLS ${LS:-none} $RTT_MS 2>&1 | tail -1)
	read s1 s2 rest <<<"$SW"
	check auto_switch '[[ "$s1" == cubic\>bbr:links@* ]] && [[ "$s2" == bbr\>cubic:cellular@* ]] && [[ "$AR" == ok* ]]' \
		"switches: ${SW:-none}; around them: $AR"
fi
agent_stop
cp $T/switch.* $T/flows-switch.jsonl $OUT/ 2>/dev/null
