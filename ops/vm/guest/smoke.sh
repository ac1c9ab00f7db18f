#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Build-and-smoke run on an older kernel (Debian 12's 6.1): insmod, what
# an unprivileged user may do with the genl family (nlfuzz -u: every
# attempt refused, registering as the agent included), one short ccp_reno
# transfer under the agent, rmmod.
# An agent that is missing or does not start fails the test (the flow would
# run the in-kernel Reno and prove nothing about the agent on 6.1).
set -u
. "$REPO/ops/vm/guest/lib.sh"
K=$(uname -r)
plan smoke_$K
if ! insmod $KO $KO_PARAMS; then
	fail smoke_$K "insmod $KO failed"
	exit 0
fi
$BIN/nlfuzz -u -n 5 > $T/unpriv-$K.out 2>&1
urc=$?
cat $T/unpriv-$K.out
unpriv="nobody refused: $([ $urc = 0 ] && echo all || echo NOT all) ($(grep -E 'command [13] ' $T/unpriv-$K.out | sed 's/^nlfuzz: unprivileged: //' | tr '\n' ';'))"
setup_link 50mbit 40 250000
FL=$T/flows-smoke.jsonl
rm -f $FL
if ! agent_available; then
	agent="no agent binary at $AGENT"
elif agent_start $FL; then
	agent=running
else
	agent="the agent did not start: $(tail -2 $OUT/agent.log | tr '\n' ' ')"
fi
( nap 3; cat /proc/net/ccp_flows > $T/smoke.flows ) &
bg=$!
iperf_run 5201 ccp_reno 5 $T/smoke.json
wait $bg
X=$($CHECK thr $T/smoke.json)
agent_stop
nap 0.5
attached=$(ctr attaches)
reattached=$(ctr reattaches)
cp /proc/net/ccp $OUT/smoke-$K.ctr
rmmod ccp_kernel
rrc=$?
cp $FL $OUT/ 2>/dev/null
dmesg > $OUT/dmesg-smoke-$K.txt
nccp=$(awk 'NR>1 && $2=="ccp_reno" && $3=="ccp"' $T/smoke.flows 2>/dev/null | wc -l)
check smoke_$K '[ "$agent" = running ] && fge "$X" 20 && nums smoke "$attached" "$reattached" && [ $((attached + reattached)) -ge 1 ] && [ $nccp -ge 1 ] && [ $rrc = 0 ] && [ $urc = 0 ] && kernel_log_clean' \
	"ccp_reno under the agent ($agent): $X Mbit/s, attaches $attached+$reattached, flows: $(awk 'NR>1{print $2":"$3}' $T/smoke.flows 2>/dev/null | tr '\n' ' ')(in mode ccp: $nccp); rmmod rc $rrc; $unpriv"
