#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# ops/vm/test.sh: build and test the CCP kernel datapath in QEMU guests.
#
#   bash ops/vm/test.sh            full suite (Debian 6.12 guest) + 6.1 smoke
#   bash ops/vm/test.sh --bench    benchmarks instead (see ops/vm/bench.sh)
#   bash ops/vm/test.sh --eval LIST [SECONDS [ALGS]]
#                                  kernel mode of the evaluation harness:
#                                  the scenarios of LIST (one a line: name
#                                  rate_mbps rtt_ms buffer_bdp loss) in the
#                                  6.12 guest (ops/vm/guest/eval.sh), native
#                                  cubic and bbr and ccp_<alg> for each of
#                                  ALGS (default reno,cubic,bbr,iris,mocc),
#                                  SECONDS (default 10) a transfer; one JSON
#                                  line per run in ops/vm/work/out/eval.jsonl
#                                  (train/ccp_train/harness/vm.py drives it);
#                                  CCP_VM_EVAL_MODELS=DIR runs the agent
#                                  on DIR's models instead of models/,
#                                  CCP_VM_EVAL_NETSTATS=1 runs every ccp
#                                  algorithm without and with
#                                  ccp-netstats-exporter in the router
#                                  namespace (ops/vm/guest/eval.sh)
#
# 1. installs the packages it needs (apt; Debian 12),
# 2. builds ccp-kernel.ko for Debian's 6.12 and 6.1 kernels (warning-free),
#    runs the validator unit test, builds the agent
#    (cargo build --release -p ccp-agent; from another CARGO_TARGET_DIR it
#    is copied to target/release, where the guest runs it), the netlink
#    fuzzer (nlfuzz: the ccp genl family) and the guest tools ccpflows and
#    fakeagent,
# 3. boots Debian's 6.12 kernel under QEMU (TCG unless real KVM) with a
#    busybox initramfs; the guest mounts this machine's / read-only over 9p,
#    chroots into it and runs ops/vm/guest/tests.sh (the agent and tools
#    come from the work tree), writing results to ops/vm/work/out,
# 4. boots the 6.1 kernel for a build-and-smoke run (ops/vm/guest/smoke.sh),
# 5. on each kernel, boots a guest without the module for the BPF datapath
#    (make -C datapath/bpf; ops/vm/guest/bpf.sh: the agent's --ipc bpf).
#
# The last line of output is "N passed, M failed"; the exit status is
# non-zero when anything failed.  Work files: ops/vm/work/ (git-ignored).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${CCP_VM_WORK:-$HERE/work}
OUTD=$WORK/out
BIN=$WORK/bin
MODE=test
case "${1:-}" in
--bench) MODE=bench ;;
--guest)
	# developer aid: boot a guest running SCRIPT (chrooted, same
	# environment as the tests) with the modules built by a previous run
	MODE=guest
	GUEST_SCRIPT=$(realpath "${2:?usage: $0 --guest SCRIPT [KERNEL-RELEASE]}")
	GUEST_KV=${3:-} ;;
--eval)
	MODE=eval
	EVAL_LIST=$(realpath "${2:?usage: $0 --eval LIST [SECONDS [ALGS]]}")
	EVAL_SECONDS=${3:-10}
	EVAL_ALGS=${4:-reno,cubic,bbr,iris,mocc}
	[ -r "$EVAL_LIST" ] || { echo "$0: cannot read the scenario list $EVAL_LIST" >&2; exit 2; }
	[[ $EVAL_SECONDS =~ ^[0-9]+$ ]] && [ "$EVAL_SECONDS" -ge 1 ] && [ "$EVAL_SECONDS" -le 600 ] ||
		{ echo "$0: SECONDS is '$EVAL_SECONDS': give a whole number from 1 to 600" >&2; exit 2; }
	[[ $EVAL_ALGS =~ ^[a-z0-9_]+(,[a-z0-9_]+)*$ ]] ||
		{ echo "$0: ALGS is '$EVAL_ALGS': give comma-separated algorithm names" >&2; exit 2; } ;;
"") ;;
*) echo "usage: $0 [--bench | --eval LIST [SECONDS [ALGS]] | --guest SCRIPT [KERNEL-RELEASE]]" >&2; exit 2 ;;
esac
[ -d "$HOME/.cargo/bin" ] && PATH=$HOME/.cargo/bin:$PATH
export PATH

T_START=$(date +%s)
PASS=0
FAIL=0
SUMMARY=()
DIED=()		# console logs of guests that did not finish
say() { echo "[$(( $(date +%s) - T_START ))s] $*"; }
hres() { # PASS|FAIL name detail
	SUMMARY+=("$1 $2 ${3:-}")
	if [ "$1" = PASS ]; then PASS=$((PASS + 1)); else FAIL=$((FAIL + 1)); fi
	echo "RESULT $1 $2 ${3:-}"
}
# oops_digest CONSOLE-LOG: the lines of a kernel oops that name code
# (BUG/Oops/RIP/Comm, the call trace's frames, IRQ markers), at most 40
oops_digest() {
	grep -E 'BUG:|Oops:|RIP: |Comm: |Call Trace|<IRQ>|</IRQ>|<TASK>|Kernel panic|\] +(\? )?[A-Za-z_][A-Za-z0-9_.]*\+0x[0-9a-f]+/0x[0-9a-f]+' "$1" |
		sed -E 's/^\[ *[0-9.]+\] //' | head -40
}
finish() {
	echo
	echo "==== summary ($(( $(date +%s) - T_START )) s)"
	local l
	for l in "${SUMMARY[@]}"; do echo "  $l"; done
	# a guest that died: what its console and its agent said last (CI
	# shows only the tail of this output, and the logs stay behind)
	for l in "${DIED[@]}"; do
		echo "---- $l: the kernel's last words (panic, Oops, BUG, WARNING, OOM, with 12 lines after)"
		grep -n -A12 -E 'Kernel panic|Oops|BUG:|WARNING:|Out of memory|invoked oom-killer|watchdog: ' "$l" | head -80
		echo "---- $l: last 20 lines"
		tail -20 "$l"
	done
	if [ ${#DIED[@]} -gt 0 ] && [ -f "$OUTD/agent.log" ]; then
		echo "---- $OUTD/agent.log: last 10 lines"
		tail -10 "$OUTD/agent.log"
	fi
	# last, where a CI log's tail shows it: where each guest died (the
	# faulting function and the call trace's functions, one line each)
	for l in "${DIED[@]}"; do
		echo "---- $l: oops digest"
		oops_digest "$l"
	done
	echo "$PASS passed, $FAIL failed"
	[ $FAIL = 0 ]
	exit
}

mkdir -p "$WORK" "$OUTD" "$BIN"
if [ "$MODE" = eval ]; then
	# the guest reads these from the (read-only) work share; copied before
	# out/ is emptied, in case LIST lives there
	rm -rf "$WORK/eval"
	mkdir -p "$WORK/eval"
	cp "$EVAL_LIST" "$WORK/eval/list.txt"
	EVAL_NETSTATS=${CCP_VM_EVAL_NETSTATS:-0}
	[[ $EVAL_NETSTATS =~ ^[01]$ ]] ||
		{ echo "$0: CCP_VM_EVAL_NETSTATS is '$EVAL_NETSTATS': give 0 or 1" >&2; exit 2; }
	printf 'EVAL_SECONDS=%s\nEVAL_ALGS="%s"\nEVAL_NETSTATS=%s\n' "$EVAL_SECONDS" "${EVAL_ALGS//,/ }" \
		"$EVAL_NETSTATS" > "$WORK/eval/params"
	if [ -n "${CCP_VM_EVAL_MODELS:-}" ]; then
		# the guest covers /tmp with a tmpfs: the models travel in the work share
		[ -d "$CCP_VM_EVAL_MODELS" ] && ls "$CCP_VM_EVAL_MODELS"/*.json > /dev/null 2>&1 ||
			{ echo "$0: CCP_VM_EVAL_MODELS=$CCP_VM_EVAL_MODELS is not a folder of models and cards" >&2; exit 2; }
		cp -r "$CCP_VM_EVAL_MODELS" "$WORK/eval/models"
	fi
	EVAL_N=$(grep -cvE '^[[:space:]]*(#|$)' "$WORK/eval/list.txt")
fi
rm -rf "${OUTD:?}"/*

# ------------------------------------------------------------------ packages
PKGS="linux-image-6.12-amd64 linux-headers-6.12-amd64 linux-image-amd64 linux-headers-amd64
      qemu-system-x86 busybox-static iperf3 iproute2 cpio kmod xz-utils make gcc libc6-dev python3
      clang libbpf-dev libelf-dev zlib1g-dev"
. "$REPO/ops/debpkgs.sh"
# shellcheck disable=SC2086  # one word per package
missing=$(deb_missing $PKGS | xargs)
if [ -n "$missing" ]; then
	SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
	say "installing: $missing"
	$SUDO apt-get update -q > "$WORK/apt.log" 2>&1
	if ! $SUDO env INITRD=No DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends $missing >> "$WORK/apt.log" 2>&1; then
		hres FAIL host_packages "apt-get install failed, see $WORK/apt.log"
		finish
	fi
fi
kv_of() { dpkg-query -W -f='${Depends}' "$1" | tr ',' '\n' | sed -n 's/^ *linux-headers-\([^ ]*\).*/\1/p' | head -n1; }
KV612=$(kv_of linux-headers-6.12-amd64)
KV61=$(kv_of linux-headers-amd64)
say "kernels: $KV612 and $KV61"

if [ "$MODE" = guest ]; then
	KV612=${GUEST_KV:-$KV612}
	MODE_GUEST_SKIP_BUILD=1
fi

# ------------------------------------------------------------------ builds
build_module() { # KV
	local kv=$1 log=$WORK/build-$1.log
	make -C "$REPO/datapath/kernel" KVER="$kv" clean > /dev/null 2>&1
	if make -C "$REPO/datapath/kernel" KVER="$kv" > "$log" 2>&1; then
		local w
		w=$(grep -ciE "warning" "$log")
		mkdir -p "$WORK/ko/$kv"
		cp "$REPO/datapath/kernel/ccp-kernel.ko" "$WORK/ko/$kv/"
		# the name_clash test's module, holding one of ccp-kernel's names
		make -C "$REPO/ops/vm/clash" KVER="$kv" clean > /dev/null 2>&1
		if make -C "$REPO/ops/vm/clash" KVER="$kv" >> "$log" 2>&1; then
			cp "$REPO/ops/vm/clash/ccp_clash.ko" "$WORK/ko/$kv/"
			make -C "$REPO/ops/vm/clash" KVER="$kv" clean > /dev/null 2>&1
		else
			hres FAIL "build_clash_$kv" "ops/vm/clash did not build, see $log"
		fi
		if [ "$w" = 0 ]; then
			hres PASS "build_$kv" "ccp-kernel.ko, 0 warnings"
		else
			hres FAIL "build_$kv" "$w warnings, see $log"
		fi
	else
		hres FAIL "build_$kv" "build failed: $(grep -m1 -i error "$log")"
		return 1
	fi
}
ok612=0 ok61=0
if [ -z "${MODE_GUEST_SKIP_BUILD:-}" ]; then
say "building ccp-kernel.ko"
build_module "$KV612"; ok612=$?
build_module "$KV61"; ok61=$?
make -C "$REPO/datapath/kernel" clean > /dev/null 2>&1

if make -C "$REPO/datapath/kernel" check > "$WORK/validate-test.log" 2>&1; then
	hres PASS validator_unit "$(grep -m1 'checks,' "$WORK/validate-test.log")"
else
	hres FAIL validator_unit "see $WORK/validate-test.log"
fi

say "building the agent (cargo build --release -p ccp-agent)"
# the guest runs $REPO/target/release/ccp-agent (it covers /tmp with a
# tmpfs): a build in another CARGO_TARGET_DIR is copied there
tgt=${CARGO_TARGET_DIR:-$REPO/target}
if (cd "$REPO" && cargo build --release -p ccp-agent) > "$WORK/agent-build.log" 2>&1 &&
   { [ "$(realpath -m "$tgt")" = "$(realpath -m "$REPO/target")" ] ||
     { mkdir -p "$REPO/target/release" && cp -f "$tgt/release/ccp-agent" "$REPO/target/release/ccp-agent"; }; } &&
   [ -x "$REPO/target/release/ccp-agent" ]; then
	hres PASS agent_build "target/release/ccp-agent"
else
	hres FAIL agent_build "see $WORK/agent-build.log: $(grep -m1 -E '^error' "$WORK/agent-build.log")"
fi

# the BPF datapath (datapath/bpf: BPF objects and the ccp-bpf loader; the
# agent's --ipc bpf serves it), tested by ops/vm/guest/bpf.sh on both kernels
okbpf=1
if [ "$MODE" = test ]; then
	say "building the BPF datapath (make -C datapath/bpf)"
	if make -C "$REPO/datapath/bpf" > "$WORK/bpf-build.log" 2>&1; then
		okbpf=0
		w=$(grep -ciE "warning" "$WORK/bpf-build.log")
		if [ "$w" = 0 ]; then
			hres PASS bpf_build "datapath/bpf/build: the BPF objects and ccp-bpf, 0 warnings"
		else
			hres FAIL bpf_build "$w warnings, see $WORK/bpf-build.log"
		fi
	else
		hres FAIL bpf_build "see $WORK/bpf-build.log: $(grep -m1 -iE 'error' "$WORK/bpf-build.log")"
	fi
fi

if [ "$MODE" = eval ] && [ "$EVAL_NETSTATS" = 1 ]; then
	# the router's statistics endpoint (Owl), run in the guest's router namespace
	if (cd "$REPO" && cargo build --release -p ccp-netstats-exporter) > "$WORK/exporter-build.log" 2>&1 &&
	   cp -f "$tgt/release/ccp-netstats-exporter" "$BIN/"; then
		:
	else
		hres FAIL exporter_build "see $WORK/exporter-build.log"
	fi
fi

if gcc -O2 -Wall -Wextra -Werror -o "$BIN/nlfuzz" "$HERE/nlfuzz.c" > "$WORK/nlfuzz-build.log" 2>&1; then
	:
else
	hres FAIL nlfuzz_build "see $WORK/nlfuzz-build.log"
fi
# many connections at once (ccpflows.c), a fake agent whose program faults
# (fakeagent.c), the trace-driven bottleneck (ccplink.c)
for t in ccpflows fakeagent ccplink; do
	gcc -O2 -Wall -Wextra -Werror -o "$BIN/$t" "$HERE/$t.c" -lm > "$WORK/$t-build.log" 2>&1 ||
		hres FAIL ${t}_build "see $WORK/$t-build.log"
done
fi

# ------------------------------------------------------------------ initramfs
# add_ko KV PATH DIR: a module and (first) its dependencies, decompressed
add_ko() {
	local kv=$1 p=$2 d=$3 base line dep
	base=$(basename "$p"); base=${base%.xz}; base=${base%.zst}
	grep -qx "$base" "$d/modlist" 2>/dev/null && return 0
	line=$(grep -E "^$p:" "/lib/modules/$kv/modules.dep")
	for dep in ${line#*:}; do add_ko "$kv" "$dep" "$d"; done
	case "$p" in
	*.xz) xz -dc "/lib/modules/$kv/$p" > "$d/mods/$base" ;;
	*.zst) zstd -dqc "/lib/modules/$kv/$p" > "$d/mods/$base" ;;
	*) cp "/lib/modules/$kv/$p" "$d/mods/$base" ;;
	esac
	echo "$base" >> "$d/modlist"
}
mkinitrd() { # KV
	local kv=$1 d=$WORK/initrd-$1 m p
	rm -rf "$d"
	mkdir -p "$d/bin" "$d/mods"
	: > "$d/modlist"
	cp /bin/busybox "$d/bin/busybox"
	cp "$HERE/guest/init" "$d/init"
	chmod +x "$d/init"
	for m in virtio_pci veth tun sch_netem sch_tbf inet_diag tcp_diag tcp_bbr netfs 9pnet 9pnet_virtio 9p; do
		p=$(grep -oE "^[^:]*/$m\.ko(\.xz|\.zst)?:" "/lib/modules/$kv/modules.dep" | head -n1)
		[ -n "$p" ] && add_ko "$kv" "${p%:}" "$d"
	done
	(cd "$d" && find . | cpio -o -H newc --quiet | gzip -1) > "$WORK/initrd-$kv.img"
}

# boot KV SCRIPT TIMEOUT: run ops/vm/guest/SCRIPT in a guest
boot() {
	local kv=$1 script=$2 tmo=$3 log accel
	case "$script" in /*) ;; *) script=$HERE/guest/$script ;; esac
	log=$WORK/console-$kv-$(basename "${script%.sh}").log
	accel="-accel tcg -cpu max"
	if { [ -e /sys/module/kvm_intel ] || [ -e /sys/module/kvm_amd ]; } && [ -w /dev/kvm ]; then
		accel="-accel kvm -cpu host"
	fi
	rm -f "$OUTD/results.txt"
	say "booting $kv under QEMU (${accel% -cpu*}) for $script"
	timeout "$tmo" qemu-system-x86_64 $accel -smp 2 -m 2048 \
		-kernel "/boot/vmlinuz-$kv" -initrd "$WORK/initrd-$kv.img" \
		-append "console=ttyS0 panic=-1 rdinit=/init loglevel=5 ccp.out=$OUTD ccp.script=$script ccp.ko=$WORK/ko/$kv/ccp-kernel.ko ccp.repo=$REPO ccp.work=$WORK ccp.bin=$BIN ccp.mode=$MODE" \
		-serial stdio -display none -monitor none -nic none -no-reboot \
		-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
		-virtfs "local,path=$REPO,mount_tag=repo,security_model=none,readonly=on,multidevs=remap" \
		-virtfs "local,path=$WORK,mount_tag=work,security_model=none,readonly=on,multidevs=remap" \
		-virtfs "local,path=$OUTD,mount_tag=out,security_model=none,multidevs=remap" \
		< /dev/null 2>&1 | sed -u 's/\r$//' | tee "$log" |
		grep --line-buffered -E '^(RESULT|BENCH|\[|guest:|nlfuzz:)|Kernel panic|BUG:|WARNING:'
	local rc=${PIPESTATUS[0]}
	if ! grep -q '^guest: done' "$log"; then
		hres FAIL "guest_${kv}_$(basename "${script%.sh}")" "guest did not finish (qemu rc $rc), see $log (its tail below the summary)"
		DIED+=("$log")
	fi
	# the guest appends "PASS|FAIL name detail" to out/results.txt (the
	# console may interleave kernel messages with the RESULT lines)
	while read -r st name detail; do
		SUMMARY+=("$st $name $detail")
		if [ "$st" = PASS ]; then PASS=$((PASS + 1)); else FAIL=$((FAIL + 1)); fi
	done < <(grep -E '^(PASS|FAIL) ' "$OUTD/results.txt" 2>/dev/null)
	# tests the guest announced (PLAN) but never reported
	local t
	for t in $(sed -n 's/^PLAN //p' "$OUTD/results.txt" 2>/dev/null); do
		grep -qE "^(PASS|FAIL) $t( |$)" "$OUTD/results.txt" ||
			hres FAIL "$t" "never reported (guest script died or hung), see $log"
	done
	[ -f "$OUTD/results.txt" ] || hres FAIL "guest_$(basename "${script%.sh}")" "no results from the guest, see $log"
	[ -f "$OUTD/results.txt" ] && mv "$OUTD/results.txt" "$OUTD/results-$kv-$(basename "${script%.sh}").txt"
}

if [ "$MODE" = guest ]; then
	mkinitrd "$KV612"
	boot "$KV612" "$GUEST_SCRIPT" 900
	finish
fi
if [ "$MODE" = eval ]; then
	if [ $ok612 = 0 ]; then
		mkinitrd "$KV612"
		# per run: the transfer, plus about 20 s of set-up in a TCG guest (30 s on a
		# trace link, which is set up again for every run, on a loaded host)
		nalgs=$(( $(tr -cd , <<<"$EVAL_ALGS" | wc -c) + 1 ))
		boot "$KV612" eval.sh $(( EVAL_N * (nalgs + 2) * (EVAL_SECONDS + 30) + 180 ))
		say "eval: $EVAL_N scenarios x (native cubic, native bbr, ccp_{${EVAL_ALGS}}), ${EVAL_SECONDS}s each"
		echo "EVAL_RESULTS $OUTD/eval.jsonl"
	fi
	finish
fi
if [ "$MODE" = bench ]; then
	[ $ok612 = 0 ] && { mkinitrd "$KV612"; boot "$KV612" bench.sh 1500; }
	finish
fi

if [ $ok612 = 0 ]; then
	mkinitrd "$KV612"
	boot "$KV612" tests.sh 1500
fi
# the BPF datapath needs no module: on both kernels whatever the module's build did
[ $ok612 = 0 ] || mkinitrd "$KV612"
[ $okbpf = 0 ] && boot "$KV612" bpf.sh 900
if [ $ok61 = 0 ]; then
	mkinitrd "$KV61"
	boot "$KV61" smoke.sh 300
fi
[ $ok61 = 0 ] || mkinitrd "$KV61"
[ $okbpf = 0 ] && boot "$KV61" bpf.sh 900
finish
