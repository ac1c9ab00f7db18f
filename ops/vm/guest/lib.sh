# SPDX-License-Identifier: GPL-2.0
# Helpers for the guest test scripts (sourced; runs chrooted in the guest).
# Environment from /init: OUT (results dir, writable), KO (module path),
# REPO (work tree), WORK (ops/vm/work, read-only), BIN (host-built
# helpers), MODE.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
PY=/usr/bin/python3
# insmod $KO $KO_PARAMS: the tests' flows live in the namespaces snd and rcv,
# which get no connection slots by default (the module's namespace policy),
# and some talk to local listeners, which get none by default either
# (loopback=0; the loopback_no_slot test checks that default)
KO_PARAMS="netns_quota=1024 netns_total=2048 loopback=1"
CHECK="$PY $REPO/ops/vm/guest/check.py"
AGENT=$REPO/target/release/ccp-agent
T=${CCP_GUEST_T:-/tmp/ccp}
mkdir -p "$T"
AGENT_PID=
NS_SND="ip netns exec snd"
NS_RCV="ip netns exec rcv"

log() { local u r; read -r u r < /proc/uptime; echo "[$u] $*"; }
result() {
	local st=$1 name=$2
	shift 2
	echo "RESULT $st $name $*"
	echo "$st $name $*" >> $OUT/results.txt
}
# plan NAME...: the tests this script will report; the host counts any of
# them that never reported (script crash, hang) as failed
plan() { echo "PLAN $*" >> $OUT/results.txt; }
pass() { result PASS "$@"; }
fail() { result FAIL "$@"; }
# check NAME COND DETAIL: pass or fail on a shell condition; a helper below
# that refused a value (not a finite number) adds why to a failure's detail
check() {
	NUM_ERRS=
	if eval "$2"; then pass "$1" "$3"; else fail "$1" "$3${NUM_ERRS:+ [$NUM_ERRS]}"; fi
}
now() { local u r; read -r u r < /proc/uptime; echo $u; }

# Numbers.  A measurement is a finite decimal number; whatever else comes
# back (empty: a check.py that failed, a file never written; "none": check.py
# had nothing to measure; "inf"/"nan": a zero reference) fails every helper
# below, with a message naming the value (on stderr, and in NUM_ERRS, which
# check adds to the test's detail).  No forks but awk's (a fork costs in a
# TCG guest).  The exponent is kept to two digits: 1e999 is inf to awk.
NUM_RE='^[-+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][-+]?[0-9]{1,2})?$'
numerr() {
	echo "$1: $2" >&2
	NUM_ERRS="${NUM_ERRS:+$NUM_ERRS; }$1: $2"
	return 1
}
# isnum V: V is a finite number (quiet)
isnum() { [[ ${1-} =~ $NUM_RE ]]; }
# nums WHO V...: every V is a finite number (at least one V)
nums() {
	local who=$1 v
	shift
	[ $# -ge 1 ] || { numerr "$who" "no value"; return 1; }
	for v in "$@"; do
		isnum "$v" || { numerr "$who" "'$v' is not a finite number"; return 1; }
	done
}
# fge A B, fle A B: A >= B, A <= B; exactly two finite numbers (an unquoted
# empty A shifts B into A's place: the count catches that too)
fcmp() {
	local who=$1 op=$2
	shift 2
	[ $# = 2 ] || { numerr "$who" "want 2 numbers, got $# argument(s): '$*'"; return 1; }
	nums "$who" "$1" "$2" || return 1
	awk -v a="$1" -v b="$2" "BEGIN{exit !(a+0 $op b+0)}"
}
fge() { fcmp fge '>=' "$@"; }
fle() { fcmp fle '<=' "$@"; }
# calc EXPR: EXPR's value with 3 decimals; EXPR holds finite numbers, the
# binary operators + - * /, parentheses and max(a, b) only (a value that is
# empty, "none", "inf" or "nan" breaks that).  On any error, or a result that
# is not finite (a zero reference), it prints "none" (which fails fge/fle)
# and returns 1.
calc() {
	local e=$1 rest=$1 want=operand depth=0 tok bad=
	local re_num='^[[:space:]]*([-+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][-+]?[0-9]{1,2})?)(.*)$'
	local re_tok='^[[:space:]]*(max[[:space:]]*\(|[-+*/(),])(.*)$'
	while [[ $rest =~ [^[:space:]] ]]; do
		if [ $want = operand ] && [[ $rest =~ $re_num ]]; then
			rest=${BASH_REMATCH[5]} want=operator
		elif [[ $rest =~ $re_tok ]]; then
			tok=${BASH_REMATCH[1]} rest=${BASH_REMATCH[2]}
			case $want/$tok in
			operand/max*|operand/"(") depth=$((depth + 1)) ;;
			operator/")") depth=$((depth - 1)); [ $depth -ge 0 ] || { bad="unbalanced ')'"; break; } ;;
			operator/[-+*/,]) want=operand ;;
			*) bad="'$tok' where a number belongs"; break ;;
			esac
		else
			bad="'${rest#"${rest%%[![:space:]]*}"}' is not a finite number"
			break
		fi
	done
	[ -n "$bad" ] || [ $want = operator ] || bad="a number missing at the end"
	[ -n "$bad" ] || [ $depth = 0 ] || bad="unbalanced '('"
	if [ -z "$bad" ] && awk "function max(a,b){return a>b?a:b} BEGIN{v = sprintf(\"%.3f\", $e); if (v !~ /^-?[0-9]+[.][0-9]+\$/) exit 1; print v}" 2>/dev/null; then
		return 0
	fi
	echo none
	numerr calc "'$e': ${bad:-not a finite number (a zero reference?)}"
}
ctr() { awk -v k="$1" '$1==k{print $2}' /proc/net/ccp 2>/dev/null; }

# setup_link RATE DELAY_MS BUFFER_BYTES [CC [LOSS_PCT]]: three namespaces,
#   snd 10.0.1.1 -- 10.0.1.2 rtr 10.0.2.1 -- 10.0.2.2 rcv
#   (IPv6: fd00:1::1 -- fd00:1::2 rtr fd00:2::1 -- fd00:2::2)
# The router shapes the data (snd->rcv) with a tbf of RATE and BUFFER
# bytes of queue and delays the ACKs (rcv->snd) by DELAY_MS (the whole
# base RTT) with netem.  Shaping in a middle namespace keeps the queue out
# of the sender's own qdisc, where TCP small queues would throttle it.
# CC: default congestion control of the end namespaces (default cubic;
# "" leaves the namespaces' default alone).
# LOSS_PCT (given, even 0): a per-packet link: the sender hands the stack
# one segment per skb (gso_max_segs 1; a GSO skb would be lost as a
# whole), and when LOSS_PCT > 0 a netem on the sender's veth drops that
# percentage of the data packets at random (a drop there is silent: TCP
# learns of it from the receiver, as of a loss on the wire).
setup_link() {
	link_topology
	tc -n rtr qdisc add dev vb root tbf rate $1 burst 32k limit $3
	tc -n rtr qdisc add dev va root netem delay ${2}ms limit 100000
	link_ends "${4-cubic}" "${5-}"
}
# link_topology: the three namespaces and their veths, addresses, routes
# (no shaping: setup_link and setup_trace_link add theirs)
link_topology() {
	local ns
	trace_link_stop
	for ns in snd rtr rcv; do ip netns del $ns 2>/dev/null; done
	for ns in snd rtr rcv; do ip netns add $ns; ip -n $ns link set lo up; done
	ip link add vs netns snd type veth peer name va netns rtr
	ip link add vb netns rtr type veth peer name vr netns rcv
	ip -n snd addr add 10.0.1.1/24 dev vs
	ip -n rtr addr add 10.0.1.2/24 dev va
	ip -n rtr addr add 10.0.2.1/24 dev vb
	ip -n rcv addr add 10.0.2.2/24 dev vr
	ip -n snd addr add fd00:1::1/64 dev vs nodad
	ip -n rtr addr add fd00:1::2/64 dev va nodad
	ip -n rtr addr add fd00:2::1/64 dev vb nodad
	ip -n rcv addr add fd00:2::2/64 dev vr nodad
	ip -n snd link set vs up
	ip -n rtr link set va up
	ip -n rtr link set vb up
	ip -n rcv link set vr up
	ip -n snd route add default via 10.0.1.2
	ip -n rcv route add default via 10.0.2.1
	ip -n snd -6 route add default via fd00:1::2
	ip -n rcv -6 route add default via fd00:2::1
	ip netns exec rtr sysctl -qw net.ipv4.ip_forward=1
	ip netns exec rtr sysctl -qw net.ipv6.conf.all.forwarding=1
	# A veth delivers into the backlog of the CPU that sent, so a flow whose
	# packets leave from both CPUs arrives reordered, which a real link
	# never does (and which reads as loss).  Steer every veth's receive
	# processing to CPU 0 (RPS), which keeps each direction in order.
	local nsdev
	for nsdev in snd/vs rtr/va rtr/vb rcv/vr; do
		ip netns exec ${nsdev%/*} sh -c "echo 1 > /sys/class/net/${nsdev#*/}/queues/rx-0/rps_cpus"
	done
}
# link_ends CC LOSS_PCT: the end namespaces' congestion control and the
# sender's random loss (setup_link's CC and LOSS_PCT)
link_ends() {
	if [ -n "${2-}" ]; then
		ip -n snd link set dev vs gso_max_segs 1
		fle "$2" 0 || tc -n snd qdisc add dev vs root netem loss ${2}% limit 100000
	fi
	if [ -n "${1-cubic}" ]; then
		$NS_SND sysctl -qw net.ipv4.tcp_congestion_control=${1:-cubic}
		$NS_RCV sysctl -qw net.ipv4.tcp_congestion_control=${1:-cubic}
	fi
	# keep every test's flow independent of the previous ones
	$NS_SND sysctl -qw net.ipv4.tcp_no_metrics_save=1
}

# setup_trace_link TRACE RTT_MS BUFFER [CC [LOSS_PCT]]: the namespaces of
# setup_link with a trace-driven bottleneck instead of tbf + netem: the
# router hands every packet from the sender (in on va) to the TUN device
# lka and every packet from the receiver (in on vb) to lkb (policy routing by
# input device), where ccplink (ops/vm/ccplink.c) serves the data from a
# drop-tail queue at the trace's delivery opportunities and delays each
# direction by RTT_MS/2; what it writes back into lkb (data) or lka (ACKs)
# the router forwards on as usual.  BUFFER: "NUMBERbdp" (BDPs at the trace's
# mean rate and RTT_MS, rounded to packets as the simulator does) or a
# number of packets.  The trace's clock starts at the first packet of
# 1000 bytes or more from the sender (a transfer's first full segment; the
# packets before it pass with the base delay only).  IPv4 only (IPv6 is
# off on the TUNs).  trace_link_stop ends the link and writes its
# statistics ($TRACE_STATS, JSON: see ccplink.c); TRACE_LINK_PID is its pid.
TRACE_STATS=$T/link.json
TRACE_LINK_PID=
setup_trace_link() {
	local trace=$1 rtt=$2 buf=$3
	link_topology
	local a
	for a in all default va vb; do
		ip netns exec rtr sysctl -qw net.ipv4.conf.$a.rp_filter=0
	done
	ip -n rtr rule add iif va lookup 101
	ip -n rtr rule add iif vb lookup 102
	trace_link_start "$trace" "$rtt" "$buf" || return 1
	link_ends "${4-cubic}" "${5-}"
}
# trace_link_start TRACE RTT_MS BUFFER: (re)start ccplink on the topology
# of setup_trace_link (a fresh queue, the trace's clock at 0 again)
trace_link_start() {
	local trace=$1 rtt=$2 buf=$3 half qarg i
	trace_link_stop
	half=$(awk -v r="$rtt" 'BEGIN{printf "%g", r / 2}')
	case $buf in
	*bdp) qarg="-b ${buf%bdp}" ;;
	*) qarg="-q $buf" ;;
	esac
	rm -f $TRACE_STATS
	ip netns exec rtr $BIN/ccplink -t "$trace" -a lka -z lkb -f $half -r $half $qarg \
		-s $TRACE_STATS -w 1000 2>> $OUT/ccplink.log &
	TRACE_LINK_PID=$!
	for i in $(seq 100); do
		ip -n rtr link show lkb > /dev/null 2>&1 && break
		kill -0 $TRACE_LINK_PID 2>/dev/null || { TRACE_LINK_PID=; log "ccplink exited: $(tail -2 $OUT/ccplink.log)"; return 1; }
		nap 0.05
	done
	# IPv4 only: IPv6 on a TUN sends the kernel's own MLD reports across the
	# link as it comes up, while the other TUN may still be down (a write into
	# a down TUN fails)
	for a in lka lkb; do
		ip netns exec rtr sysctl -qw net.ipv6.conf.$a.disable_ipv6=1
		ip netns exec rtr sysctl -qw net.ipv4.conf.$a.rp_filter=0
	done
	ip -n rtr link set lka up txqueuelen 10000
	ip -n rtr link set lkb up txqueuelen 10000
	ip -n rtr route add default dev lka table 101 &&
	ip -n rtr route add default dev lkb table 102
}
# trace_link_stop: end ccplink (it writes $TRACE_STATS); 0 if none ran
trace_link_stop() {
	[ -n "${TRACE_LINK_PID-}" ] || return 0
	kill -TERM $TRACE_LINK_PID 2>/dev/null
	wait $TRACE_LINK_PID 2>/dev/null
	TRACE_LINK_PID=
}
RCV_IP=10.0.2.2
RCV_IP6=fd00:2::2
SND_IP6=fd00:1::1

# sleep without forking (fork+exec is slow in a TCG guest)
mkfifo $T/nap.fifo 2>/dev/null
exec {NAPFD}<> $T/nap.fifo
nap() { read -rt "$1" -u $NAPFD 2>/dev/null; }

# pair_ratios ACKS_C CPU_C ACKS_X CPU_X HELPER_X: one benchmark pair (native
# cubic's ACKs and busy CPU seconds, then the datapath's, and of those the
# agent's own seconds): "ns/ACK cubic, ns/ACK X, ns/ACK X without the agent,
# ratio, ratio without the agent" (guest/bench.sh, guest/bpf_bench.sh)
pair_ratios() {
	local nc nx nk
	nc=$(calc "$2 * 1e9 / max($1, 1)")
	nx=$(calc "$4 * 1e9 / max($3, 1)")
	nk=$(calc "($4 - $5) * 1e9 / max($3, 1)")
	echo "$nc $nx $nk $(calc "$nx / max($nc, 1e-9)") $(calc "$nk / max($nc, 1e-9)")"
}

# ccp_names_missing AVAILABLE: the names of the generated table
# (datapath/kernel/ccp_algs.h, the agent's registry) not in AVAILABLE (the
# sysctl's list); empty when every one is there
ccp_names_missing() {
	local a names missing=
	names=$(sed -n 's/^[[:space:]]*X("\([a-z0-9_]*\)").*/\1/p' $REPO/datapath/kernel/ccp_algs.h)
	[ -n "$names" ] || { echo " (no names in datapath/kernel/ccp_algs.h)"; return; }
	for a in $names; do
		[[ " $1 " == *" $a "* ]] || missing="$missing $a"
	done
	echo "$missing"
}

# ns_flows TAG SECS: as nobody, in a new unprivileged user+net namespace, 5
# ccp_reno connections (ccpflows) to a listener of its own on 127.0.0.1:6200,
# for SECS; its files in $NSD (the caller's), its pid in NS_PID
ns_flows() {
	rm -f $NSD/$1.ready
	setpriv --reuid=65534 --regid=65534 --clear-groups -- \
		unshare -Urn sh -c "ip link set lo up && exec $BIN/ccpflows -L 127.0.0.1:6200 -n 5 -C ccp_reno -t $2 -i 200 -r $NSD/$1.ready" \
		> $NSD/$1.out 2>&1 &
	NS_PID=$!
}
# ns_wait TAG: until ccpflows TAG has connected (15 s at most)
ns_wait() { local i; for i in $(seq 150); do [ -e $NSD/$1.ready ] && return 0; nap 0.1; done; return 1; }

# sample_flows FILE COUNT: COUNT snapshots of /proc/net/ccp_flows, 10 per
# second, each line prefixed with the guest uptime
sample_flows() {
	local f=$1 n=$2 i up rest line
	for ((i = 0; i < n; i++)); do
		read -r up rest < /proc/uptime
		while read -r line; do echo "$up $line"; done < /proc/net/ccp_flows >> $f
		nap 0.1
	done
}

# iperf_srv PORT JSONFILE: a one-off receiver reporting every 100 ms;
# SRV_PID is its pid (ip netns exec execs iperf3)
iperf_srv() {
	rm -f $2
	$NS_RCV iperf3 -s -1 -p $1 -i 0.1 -J --logfile $2 >/dev/null 2>&1 &
	SRV_PID=$!
	local i
	for i in $(seq 40); do
		nap 0.25
		$NS_RCV ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
	done
	return 1
}
# wait for the receiver of iperf_srv to write its report
iperf_srv_wait() {
	local i
	for i in $(seq 100); do
		kill -0 $SRV_PID 2>/dev/null || break
		nap 0.1
	done
	kill $SRV_PID 2>/dev/null
	wait $SRV_PID 2>/dev/null
}

# iperf_run PORT CC SECONDS SRVJSON [iperf3 options]: one transfer
iperf_run() {
	local port=$1 cc=$2 secs=$3 srv=$4
	shift 4
	iperf_srv $port $srv || { log "iperf3 server on $port did not start"; return 1; }
	$NS_SND iperf3 -c $RCV_IP -p $port -t $secs ${cc:+-C $cc} -J "$@" > $srv.cli 2>&1
	local rc=$?
	iperf_srv_wait
	return $rc
}

# agent_stats LOG PID: the agent's counters (kill -USR1), a new whole line of LOG
agent_stats() {
	local n j
	n=$(grep -c '^ccp-agent stats: {.*}$' $1)
	kill -USR1 $2 2>/dev/null
	for j in $(seq 50); do
		[ "$(grep -c '^ccp-agent stats: {.*}$' $1)" -gt "$n" ] && break
		nap 0.1
	done
	grep '^ccp-agent stats: {.*}$' $1 | tail -1 | sed 's/.*stats: //'
}
# jnum KEY LINE: the number after "KEY": in a JSON line (0 if absent)
jnum() { local v; v=$(grep -o "\"$1\":[0-9]*" <<<"$2" | head -1 | cut -d: -f2); echo ${v:-0}; }
agent_available() { [ -x $AGENT ]; }

# scrape FILE: GET /metrics from an agent started with --metrics
# 127.0.0.1:9464 (bash's /dev/tcp: no curl); mval FILE NAME: a metric's
# value in FILE ("none" if absent)
scrape() {
	local fd
	exec {fd}<>/dev/tcp/127.0.0.1/9464 || return 1
	printf 'GET /metrics HTTP/1.0\r\n\r\n' >&$fd
	cat <&$fd > $1
	exec {fd}>&-
}
mval() { awk -v n="$2" '$1==n {print $2; f=1} END {if (!f) print "none"}' $1; }

# the socket the datapath sends to: the newest registered agent
# (CCP_CMD_AGENT_HELLO), "agent_listener" in /proc/net/ccp; 0: none, empty
# if the module is not loaded.  No subshell: forks are slow in a TCG guest.
# The file is read whole with mapfile first: bash's read builtin reads a
# seekable file ahead and seeks back after every line, and a seek makes a
# seq_file in /proc generate its text again, which has changed meanwhile
# (counters, agent_last_msg_ms_ago), so lines came out garbled now and then.
listener_read() {
	local line
	local -a lines
	LISTENER=
	mapfile -t lines 2>/dev/null < /proc/net/ccp
	for line in "${lines[@]}"; do
		[ "${line%% *}" = agent_listener ] && { LISTENER=${line#* }; break; }
	done
	[[ $LISTENER =~ ^[0-9]+$ ]] || { LISTENER=; return 1; }
}

# agent_start FLOWLOG [args]: start the agent (--alg $AGENT_ALG, default
# cubic), wait until it listens (has registered: the datapath's listener is
# a new socket)
agent_start() {
	local flowlog=$1
	shift
	echo "---- [$(now)] agent --alg ${AGENT_ALG:-cubic} $*" >> $OUT/agent.log
	local l0
	listener_read; l0=$LISTENER
	CCP_LOG=${CCP_LOG:-warn} $AGENT --ipc netlink --alg ${AGENT_ALG:-cubic} --flow-log $flowlog "$@" \
		>> $OUT/agent.log 2>&1 &
	AGENT_PID=$!
	local i
	for i in $(seq 100); do
		listener_read && [ "$LISTENER" != 0 ] && [ "$LISTENER" != "$l0" ] && return 0
		kill -0 $AGENT_PID 2>/dev/null || { log "agent exited: $(tail -3 $OUT/agent.log)"; AGENT_PID=; return 1; }
		nap 0.05
	done
	log "agent did not register with the datapath (agent_listener ${LISTENER:-?}, was ${l0:-?})"
	return 1
}

# the netlink port id the datapath sends to (the agent's); fails if none
agent_port() {
	listener_read
	echo ${LISTENER:-0}
	[ "${LISTENER:-0}" != 0 ]
}

agent_stop() {
	[ -n "$AGENT_PID" ] || return 0
	kill -TERM $AGENT_PID 2>/dev/null
	local i
	for i in $(seq 50); do kill -0 $AGENT_PID 2>/dev/null || break; nap 0.1; done
	kill -9 $AGENT_PID 2>/dev/null
	wait $AGENT_PID 2>/dev/null
	AGENT_PID=
}

# the data flow's line in /proc/net/ccp_flows: "sid alg mode cwnd ..."
# (largest cwnd among the flows of algorithm $1)
data_flow() {
	awk -v a="$1" 'NR>1 && $2==a {print}' /proc/net/ccp_flows | sort -k4 -n | tail -n1
}

# all_ccp: every flow in /proc/net/ccp_flows is under agent control
all_ccp() {
	local n=0 bad=0 sid alg mode rest
	{
		read -r rest
		while read -r sid alg mode rest; do
			n=$((n + 1))
			[ "$mode" = ccp ] || bad=1
		done
	} < /proc/net/ccp_flows
	[ $n -gt 0 ] && [ $bad = 0 ]
}

kernel_log_clean() {
	! dmesg | grep -E "BUG:|WARNING:|Oops|soft lockup|hung_task|general protection|UBSAN|KASAN|Call Trace" >/dev/null
}
