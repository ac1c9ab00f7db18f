#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Developer aid (bash ops/vm/test.sh --guest ops/vm/guest/restart_stress.sh):
# the restart of an agent under live flows of every algorithm, many times.
# Each round starts one flow per algorithm, stops the agent (SIGTERM, or
# SIGKILL every third round) a random 1 to 4 s in, and starts another.  A
# kernel bug on this path panics the guest (CI saw one in restart_reattach).
set -u
. "$REPO/ops/vm/guest/lib.sh"
ROUNDS=${ROUNDS:-12}
plan restart_stress
insmod $KO $KO_PARAMS || { fail restart_stress "insmod failed"; exit 0; }
setup_link 50mbit 40 250000
ALGS="reno cubic bbr iris mocc jury owl nuwa auto"
ANEXT="reno cubic bbr iris mocc"
AGENT_ALG=cubic agent_start $T/fl-0.jsonl --models $REPO/models || { fail restart_stress "agent"; exit 0; }
for r in $(seq $ROUNDS); do
	port=5300 pids=
	for a in $ALGS; do
		$NS_RCV iperf3 -s -1 -p $port >/dev/null 2>&1 &
		port=$((port + 1))
	done
	nap 0.5
	port=5300
	for a in $ALGS; do
		$NS_SND iperf3 -c $RCV_IP -p $port -t 8 -C ccp_$a >/dev/null 2>&1 &
		pids="$pids $!"
		port=$((port + 1))
	done
	nap $((1 + RANDOM % 4)).$((RANDOM % 10))
	if [ $((r % 3)) = 0 ]; then kill -9 $AGENT_PID; wait $AGENT_PID 2>/dev/null; AGENT_PID=; else agent_stop; fi
	nxt=$(echo $ANEXT | cut -d' ' -f$((1 + r % 5)))
	AGENT_ALG=$nxt agent_start $T/fl-$r.jsonl --models $REPO/models
	log "round $r: agent --alg $nxt; $(grep -E '^(agent_closed|program_resets|fallbacks|reattaches) ' /proc/net/ccp | tr '\n' ' ')"
	wait $pids
	pkill -f 'iperf3 -s' 2>/dev/null
	nap 0.3
done
agent_stop
check restart_stress 'true' "$ROUNDS rounds survived; $(grep -E '^(agent_closed|program_resets|fallbacks|reattaches|invoke_errors) ' /proc/net/ccp | tr '\n' ' ')"
