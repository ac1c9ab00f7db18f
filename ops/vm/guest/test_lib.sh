#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Host-side unit test of the guest tests' helpers (guest/lib.sh: fge, fle,
# calc, nums, check; guest/check.py's "none"): a measurement that is empty,
# missing, "none", "inf" or "nan" must fail every helper with a message that
# names it, and no guest test's PASS condition may hold when its
# measurements are missing.  Needs bash, awk and python3; no guest, no root.
#   bash ops/vm/guest/test_lib.sh     # last line "test_lib: N passed, M failed"
set -u
cd "$(dirname "$0")/../../.."
REPO=$PWD
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/out CCP_GUEST_T=$TMP/t
mkdir -p "$OUT"
export REPO OUT CCP_GUEST_T
# shellcheck source=lib.sh
. "$REPO/ops/vm/guest/lib.sh"
PY=${PYTHON:-python3}
CHECK="$PY $REPO/ops/vm/guest/check.py"

npass=0 nfail=0
ok() { npass=$((npass + 1)); }
bad() { nfail=$((nfail + 1)); echo "FAIL: $*"; }
# expect_fail DESC CMD...: CMD fails and says why on stderr, naming the value
# (the stderr must contain NAME, given as EXPECT_NAMED, when set)
expect_fail() {
	local desc=$1 err
	shift
	if err=$("$@" 2>&1 >/dev/null); then
		bad "$desc: passed"
	elif [ -z "$err" ]; then
		bad "$desc: failed without a message"
	elif [ -n "${EXPECT_NAMED-}" ] && [[ $err != *"'$EXPECT_NAMED'"* ]]; then
		bad "$desc: message does not name '$EXPECT_NAMED': $err"
	else
		ok
	fi
}
expect_ok() {
	local desc=$1
	shift
	if "$@" 2>"$TMP/err"; then ok; else bad "$desc: failed ($(cat "$TMP/err"))"; fi
}
# expect_eq DESC WANT GOT
expect_eq() { if [ "$2" = "$3" ]; then ok; else bad "$1: want '$2', got '$3'"; fi; }
# expect_false DESC CMD...: CMD is false (two numbers that compare the other way)
expect_false() {
	local desc=$1
	shift
	if "$@" 2>/dev/null; then bad "$desc: held"; else ok; fi
}

# ---------------------------------------------------------------- fge, fle
for f in fge fle; do
	for v in "" none inf -inf nan NaN INF 1e999 abc 1.2.3 "1 2" 0x10 " 5"; do
		EXPECT_NAMED=$v expect_fail "$f '$v' 0.9" $f "$v" 0.9
		EXPECT_NAMED=$v expect_fail "$f 0.9 '$v'" $f 0.9 "$v"
	done
	# unquoted empty value: the threshold slides into the first slot
	X=
	# shellcheck disable=SC2086
	expect_fail "$f \$X 0.9 unquoted, X empty" $f $X 0.9
	expect_fail "$f with no arguments" $f
	expect_fail "$f with 3 arguments" $f 1 2 3
done
# ccp_names_missing: every registry name present -> empty; one absent -> named
all=$(sed -n 's/^[[:space:]]*X("\([a-z0-9_]*\)").*/\1/p' "$REPO/datapath/kernel/ccp_algs.h" | tr '\n' ' ')
expect_eq "ccp_names_missing, all there" "" "$(ccp_names_missing "reno cubic $all")"
expect_eq "ccp_names_missing, ccp_mocc absent" " ccp_mocc" "$(ccp_names_missing "${all/ccp_mocc /}")"
expect_eq "ccp_names_missing, none" "$(for a in $all; do printf ' %s' "$a"; done)" "$(ccp_names_missing "reno cubic")"
# pair_ratios: 1000 ACKs for 0.5 s of cubic, 2000 for 2 s of X of which the agent 0.5 s
expect_eq "pair_ratios" "500000.000 1000000.000 750000.000 2.000 1.500" "$(pair_ratios 1000 0.5 2000 2 0.5)"
# jnum: a number from the agent's SIGUSR1 line, nested or not; absent is 0
L='{"datagrams":12,"bridge":{"records":340,"invokes":338,"decisions":301}}'
expect_eq "jnum nested" "338" "$(jnum invokes "$L")"
expect_eq "jnum top level" "12" "$(jnum datagrams "$L")"
expect_eq "jnum absent" "0" "$(jnum stale_reports "$L")"
expect_eq "jnum no line" "0" "$(jnum invokes "")"
expect_eq "pair_ratios, no ACKs" "500000000.000 0.000 0.000 0.000 0.000" "$(pair_ratios 0 0.5 0 0 0)"
expect_ok "fge 1 0.9" fge 1 0.9
expect_ok "fge 0.9 0.9" fge 0.9 0.9
expect_false "fge 0.8 0.9" fge 0.8 0.9
expect_ok "fle 0.8 0.9" fle 0.8 0.9
expect_false "fle 1 0.9" fle 1 0.9
expect_ok "fge 1e-3 -2.5" fge 1e-3 -2.5
expect_ok "fge 47.13 .5" fge 47.13 .5
expect_ok "fle 3. 3" fle 3. 3
expect_ok "fge +4 4" fge +4 4

# ---------------------------------------------------------------- nums
expect_ok "nums 1 2.5 -3" nums t 1 2.5 -3
EXPECT_NAMED=none expect_fail "nums 1 none" nums t 1 none
EXPECT_NAMED= expect_fail "nums 1 ''" nums t 1 ""
expect_fail "nums with no value" nums t

# ---------------------------------------------------------------- calc
calc_is() { expect_eq "calc '$1'" "$2" "$(calc "$1" 2>/dev/null)"; }
calc_is "47.01 / 47.40" 0.992
calc_is "0.5 * 46.99" 23.495
calc_is "60.08 / max(0, 0.001)" 60080.000
calc_is "1e9 / max(2, 1)" 500000000.000
calc_is "(1 + 2) * 3" 9.000
calc_is "-3 + 5" 2.000
calc_is "5 - -3" 8.000
calc_is "22.5 - 7.25" 15.250
calc_is "max(max(1, 2), 3)" 3.000
# a missing operand, a non-number, a zero reference: "none" and a failure
for e in " / 47.4" "47.4 / " "none / 47.4" "47.4 / none" "inf * 2" "nan + 1" " - 5" \
	"47.4 / 0" "0 / 0" "max(, 0.001)" "60 / max(none, 0.001)" "1 +" "(1 + 2" "1 + 2)" \
	"" "system(\"true\")" "1; 2" "2 ^ 3" "x + 1" "1e999 * 1"; do
	expect_eq "calc '$e' prints none" none "$(calc "$e" 2>/dev/null)"
	expect_fail "calc '$e'" calc "$e"
done
EXPECT_NAMED="none / 47.4" expect_fail "calc names its expression" calc "none / 47.4"

# ---------------------------------------------------------------- check.py
printf '{"start": {}, "intervals": [{"sum": {"start": 0, "end": 1, "by' > "$TMP/truncated.json"
: > "$TMP/empty.json"
echo '{"start": {}, "intervals": [], "end": {}, "error": "unable to connect"}' > "$TMP/noxfer.json"
python3 - "$TMP/good.json" <<'EOF'
import json, sys
iv = [{"sum": {"start": i / 10, "end": (i + 1) / 10, "bytes": 0 if 30 <= i < 45 else 500000}}
      for i in range(100)]
json.dump({"intervals": iv, "end": {"sum_received": {"bits_per_second": 40e6}}}, open(sys.argv[1], "w"))
EOF
for f in missing truncated empty noxfer; do
	expect_eq "check.py thr $f" none "$($CHECK thr "$TMP/$f.json" 2>/dev/null)"
	expect_eq "check.py window $f" none "$($CHECK window "$TMP/$f.json" 0 5 2>/dev/null)"
	expect_eq "check.py gap $f" none "$($CHECK gap "$TMP/$f.json" 0.5 10 2>/dev/null)"
	read -r r _ <<<"$($CHECK rtt "$TMP/$f.json" 2>/dev/null)"
	expect_eq "check.py rtt $f" none "$r"
	expect_eq "check.py retrans $f" none "$($CHECK retrans "$TMP/$f.json" 2>/dev/null)"
	expect_fail "check.py thr $f exits 1" $CHECK thr "$TMP/$f.json"
done
expect_eq "check.py thr good" 40.00 "$($CHECK thr "$TMP/good.json")"
expect_eq "check.py gap good (1.5 s of zero bytes)" 1.50 "$($CHECK gap "$TMP/good.json" 0.5 10)"
# a window the intervals end in: the rest of it had no data
expect_eq "check.py gap past the transfer's end" 5.00 "$($CHECK gap "$TMP/good.json" 5 15)"
expect_eq "check.py window past the end" none "$($CHECK window "$TMP/good.json" 20 25 2>/dev/null)"
expect_eq "check.py decisions, no flow log" "none none none" "$($CHECK decisions "$TMP/missing.jsonl" ccp_mocc 2>/dev/null)"
expect_eq "check.py backoff, no samples file" "none none none" "$($CHECK backoff "$TMP/missing.samples" ccp_reno 2>/dev/null)"
expect_eq "check.py pct empty" "none none" "$($CHECK pct "$TMP/empty.json" 0 50 99 2>/dev/null)"
expect_eq "check.py reports with sid none" none "$($CHECK reports "$TMP/empty.json" none 2>/dev/null)"
# the trace link's rate check (trace_link.sh): no statistics, no samples, a link that never
# started, a broken trace
TRACE=$REPO/datapath/sim/scenarios/traces/TMobile-LTE-short.down
expect_eq "check.py linkrate, no link statistics" "none none none none none" "$($CHECK linkrate "$TRACE" "$TMP/missing.json" "$TMP/missing.rx" 2>/dev/null)"
echo '{"started": false}' > "$TMP/link0.json"
expect_eq "check.py linkrate, a link that never started" "none none none none none" "$($CHECK linkrate "$TRACE" "$TMP/link0.json" "$TMP/missing.rx" 2>/dev/null)"
echo '{"started": true, "start_boottime_s": 10, "fwd_ms": 20, "bin_ms": 100, "wasted_bytes_bins": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]}' > "$TMP/link1.json"
: > "$TMP/empty.rx"
expect_eq "check.py linkrate, no rx samples" "none none none none none" "$($CHECK linkrate "$TRACE" "$TMP/link1.json" "$TMP/empty.rx" 2>/dev/null)"
printf 'x\n' > "$TMP/bad.trace"
printf '10.5 0 0\n12.5 1000 1\n' > "$TMP/two.rx"
sed 's/"started": true/"started": true, "write_errors": 3/' "$TMP/link1.json" > "$TMP/link2.json"
expect_eq "check.py linkrate, a link that failed writes" "none none none none none" "$($CHECK linkrate "$TRACE" "$TMP/link2.json" "$TMP/two.rx" 2>/dev/null)"
expect_eq "check.py linkrate, a broken trace" "none none none none none" "$($CHECK linkrate "$TMP/bad.trace" "$TMP/link1.json" "$TMP/two.rx" 2>/dev/null)"
# a link that delivered the trace's capacity exactly (the oracle's own figures) passes, one at
# half of it does not
read -r c0 c1 <<<"$($PY -c "
import sys; sys.path.insert(0, '$REPO/ops/vm/guest'); import check
t = check.Trace('$TRACE'); print(round(t.bytes_in(0.48, 1.48)), round(t.bytes_in(0.48, 2.48)))")"
printf '10.5 0 0\n11.5 %d 0\n12.5 %d 0\n' "$c0" "$c1" > "$TMP/full.rx"
expect_eq "check.py linkrate, exact" "2 1.000 1.0000 0.0000 0.0000" "$($CHECK linkrate "$TRACE" "$TMP/link1.json" "$TMP/full.rx")"
printf '10.5 0 0\n11.5 %d 0\n12.5 %d 0\n' "$((c0 / 2))" "$((c1 / 2))" > "$TMP/half.rx"
expect_eq "check.py linkrate, half the capacity" "2 0.000 0.5000 0.5000 0.5000" "$($CHECK linkrate "$TRACE" "$TMP/link1.json" "$TMP/half.rx")"
# the sampler's form: realtime before and after each read (start_realtime_s the link's time 0);
# a read that took over 2 ms has no time and is dropped: here the middle one, which leaves one
# window of 2 s (its bytes at the exact capacity would otherwise make two exact windows)
sed 's/"start_boottime_s": 10,/"start_boottime_s": 10, "start_realtime_s": 1000,/' "$TMP/link1.json" > "$TMP/link3.json"
printf '1000.4995 1000.5005 0 0\n1001.499 1001.51 %d 0\n1002.4995 1002.5005 %d 0\n' "$c0" "$c1" > "$TMP/real.rx"
expect_eq "check.py linkrate, realtime samples, an interrupted read dropped" "1 1.000 1.0000 0.0000 0.0000" "$($CHECK linkrate "$TRACE" "$TMP/link3.json" "$TMP/real.rx")"

# ---------------------------------------------------------------- check with a missing measurement
# what baseline_cubic and kill_throughput see when iperf3's JSON is missing
: > "$OUT/results.txt"
BASE=$($CHECK thr "$TMP/missing.json" 2>/dev/null)
check baseline_cubic 'fge "$BASE" 30' "native cubic $BASE Mbit/s" 2>/dev/null >/dev/null
expect_eq "baseline_cubic on a missing JSON" "FAIL baseline_cubic native cubic none Mbit/s [fge: 'none' is not a finite number]" "$(tail -1 "$OUT/results.txt")"
before=$($CHECK window "$TMP/missing.json" 2 7 2>/dev/null)
after=$($CHECK window "$TMP/missing.json" 7 12 2>/dev/null)
ratio=$(calc "$after / max($before, 0.001)" 2>/dev/null)
check kill_throughput 'fge "$before" 5 && fge "$ratio" 0.5' "x" 2>/dev/null >/dev/null
expect_eq "kill_throughput on a missing JSON" FAIL "$(tail -1 "$OUT/results.txt" | cut -d' ' -f1)"
# the old unquoted form, R empty, in a check: still fails
R=
check fallback 'fge $R 0.9' "x" 2>/dev/null >/dev/null
expect_eq "unquoted empty R in a check" "FAIL fallback x [fge: want 2 numbers, got 1 argument(s): '0.9']" "$(tail -1 "$OUT/results.txt")"
X=47.1
check healthy 'fge "$X" 30' "x" >/dev/null
expect_eq "a healthy measurement passes" "PASS healthy x" "$(tail -1 "$OUT/results.txt")"

# ---------------------------------------------------------------- every guest test on nothing
# Each `check NAME 'CONDITION'` of the guest scripts, evaluated with none of
# its values measured (every variable it reads empty, the files it reads
# absent, the kernel log clean): none may hold.
kernel_log_clean() { return 0; }
nruns() { echo $#; }
n=0
for script in ops/vm/guest/tests.sh ops/vm/guest/smoke.sh ops/vm/guest/trace_link.sh; do
	while IFS= read -r line; do
		[[ $line =~ ^[[:space:]]*check\ ([^ ]+)\ \'([^\']*)\' ]] || continue
		name=${BASH_REMATCH[1]} cond=${BASH_REMATCH[2]}
		n=$((n + 1))
		# a subshell per condition: the variables it reads are unset there
		# (names from the condition; lib.sh's constants stay)
		if (
			for v in $(grep -oE '\$\{?[A-Za-z_][A-Za-z0-9_]*' <<<"$cond" | tr -d '${' | sort -u); do
				case $v in T | OUT | REPO | MANY | MANY_BOUND | K | SND_IP6) ;; *) unset "$v" ;; esac
			done
			eval "$cond"
		) >/dev/null 2>&1; then
			bad "$script: $name passes with nothing measured: $cond"
		else
			ok
		fi
	done < "$script"
done
[ $n -ge 29 ] && ok || bad "found only $n check conditions in the guest scripts"

echo "test_lib: $npass passed, $nfail failed"
[ $nfail = 0 ]
