#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Test name_clash (issue 50 item 7): sourced by tests.sh with ccp_kernel not
# loaded and no agent running; alone:
#   bash ops/vm/test.sh --guest ops/vm/guest/name_clash.sh
if [ -z "${IN_SUITE-}" ]; then
	set -u
	. "$REPO/ops/vm/guest/lib.sh"
	plan name_clash
fi

# Another module (ops/vm/clash/ccp_clash.ko) holds "ccp_auto", the last name
# ccp-kernel registers, so its init fails there after the nine names before
# it went live.  A socket may select one of those in that window and take a
# reference to a module whose failed init then frees it (the module loader
# does, whatever the count): its next ACK or its close runs freed code.
#  1. A plain insmod must fail with EEXIST, naming the name, and leave none
#     of ccp-kernel's names registered and no module.
#  2. The same insmod, repeated while a process selects ccp_reno on new
#     sockets as fast as it can and keeps those that got it: each load is
#     either refused as in 1 (no socket got in) or, if sockets got in, the
#     module stays loaded with no name registered and says so (its init
#     returns 0, so insmod succeeds: failing would free the module under
#     those sockets); once those sockets close, rmmod works.  No oops, no
#     BUG, no warning.
#  3. Without the other module, ccp-kernel loads with all its names.
CKO=$(dirname $KO)/ccp_clash.ko
# hammer_start: a process that selects ccp_reno on new sockets until
# $T/hammer.stop exists, keeping those that got it (then prints "tries
# held" to $T/hammer.out and closes them); its pid in $hp
hammer_start() {
	rm -f $T/hammer.stop
	$PY - $T/hammer.stop >> $T/hammer.out 2>&1 <<'PYEOF' &
import os, socket, sys
held, tries = [], 0
while not os.path.exists(sys.argv[1]):
    s = socket.socket()
    tries += 1
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"ccp_reno")
        held.append(s)
    except OSError:
        s.close()
print(tries, len(held), flush=True)
PYEOF
	hp=$!
}
NAMES=$(grep -c '^[[:space:]]*X("ccp' $REPO/datapath/kernel/ccp_algs.h)
ccp_names() { tr ' ' '\n' < /proc/sys/net/ipv4/tcp_available_congestion_control | grep '^ccp' | grep -vx ccp_auto | tr '\n' ' '; }
dmc0=$(dmesg | wc -l)
for i in $(seq 50); do [ -d /sys/module/ccp_kernel ] || break; rmmod ccp_kernel 2>/dev/null; nap 0.1; done
if [ -d /sys/module/ccp_kernel ]; then
	fail name_clash "ccp_kernel could not be removed before the test"
elif [ ! -e "$CKO" ]; then
	fail name_clash "no $CKO (ops/vm/clash did not build?)"
elif ! insmod $CKO name=ccp_auto 2> $T/clash.err; then
	fail name_clash "insmod ccp_clash.ko failed: $(head -c 100 $T/clash.err)"
else
	# 1. a plain clash
	insmod $KO $KO_PARAMS 2> $T/clash-insmod.err && prc=0 || prc=$?
	[ -d /sys/module/ccp_kernel ] && ploaded=yes || ploaded=no
	pleft=$(ccp_names)
	pmsg=$(dmesg | tail -n +$((dmc0 + 1)) | grep -c 'cannot register ccp_auto: -17')
	[ $ploaded = yes ] && rmmod ccp_kernel
	# 2. the same while sockets select ccp_reno
	rm -f $T/hammer.stop $T/hammer.out
	hammer_start
	nap 1
	refused=0 stayed=0 odd= loads=0
	for i in $(seq 12); do
		dmi=$(dmesg | wc -l)
		loads=$((loads + 1))
		insmod $KO $KO_PARAMS 2>/dev/null && irc=0 || irc=$?
		if [ -d /sys/module/ccp_kernel ]; then
			[ $irc = 0 ] || odd="$odd load$i:loaded-but-rc$irc"
			# sockets got in: loaded, no name, and said so; they close, then rmmod
			stayed=$((stayed + 1))
			dmesg | tail -n +$((dmi + 1)) | grep -q 'staying loaded with no name registered' || odd="$odd load$i:silent"
			[ -z "$(ccp_names)" ] || odd="$odd load$i:names-left($(ccp_names))"
			touch $T/hammer.stop
			wait $hp
			for j in $(seq 50); do rmmod ccp_kernel 2>/dev/null && break; nap 0.1; done
			[ -d /sys/module/ccp_kernel ] && { odd="$odd load$i:rmmod-failed"; break; }
			hammer_start
			nap 0.5
		else
			refused=$((refused + 1))
			[ $irc != 0 ] || odd="$odd load$i:rc0-not-loaded"
			[ -z "$(ccp_names)" ] || odd="$odd load$i:names-left($(ccp_names))"
		fi
	done
	touch $T/hammer.stop
	wait $hp
	hsum=$(awk '{t += $1; h += $2} END {printf "%d selections tried, %d held", t, h}' $T/hammer.out)
	rmmod ccp_clash 2> $T/clash-rmmod.err || odd="$odd rmmod-clash-failed"
	# 3. no clash: every name
	insmod $KO $KO_PARAMS 2> $T/clash-final.err && frc=0 || frc=$?
	fnames=$(tr ' ' '\n' < /proc/sys/net/ipv4/tcp_available_congestion_control | grep -c '^ccp')
	for i in $(seq 50); do rmmod ccp_kernel 2>/dev/null && break; nap 0.1; done
	dmesg | tail -n +$((dmc0 + 1)) > $T/dmesg-clash.txt
	bad=$(grep -cE "BUG:|WARNING:|Oops|general protection|UBSAN|KASAN|Call Trace" $T/dmesg-clash.txt)
	check name_clash '[ $prc != 0 ] && [ $ploaded = no ] && [ -z "$pleft" ] && [ $pmsg -ge 1 ] && [ -z "$odd" ] && [ $((refused + stayed)) = $loads ] && [ $frc = 0 ] && [ "$fnames" = "$NAMES" ] && [ $bad = 0 ]' \
		"ccp_clash holds ccp_auto: plain insmod rc $prc, module left: $ploaded, ccp names left: ${pleft:-none}, logged: $pmsg; under a process selecting ccp_reno ($hsum): $loads loads, $refused refused cleanly, $stayed stayed loaded with no name until its sockets closed (then removed)${odd:+; wrong:$odd}; without the clash: rc $frc, $fnames ccp names (want $NAMES); dmesg lines with BUG/WARNING/Oops: $bad"
fi
