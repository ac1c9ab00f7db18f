#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR MIT
#
# ops/install.sh: install ccp-agent as a system service.
#
#   bash ops/install.sh [--prefix DIR] [--dest DIR] [--no-build] [--no-bpf] [--enable]
#
# Puts in place (DESTDIR-style staging with --dest; nothing outside it is touched then):
#   PREFIX/bin/ccp-agent                     the agent without the simulator (cargo build
#                                            --release -p ccp-agent --no-default-features
#                                            --features bpf, into target/service/): it
#                                            serves the kernel module, or the BPF datapath
#                                            on a kernel without it (--ipc bpf); --no-bpf:
#                                            the module only (no libccp, libbpf, bindgen)
#   PREFIX/share/ccp/models/                 models/*.onnx and their cards
#   PREFIX/lib/ccp/libonnxruntime.so*        onnxruntime (ops/onnxruntime.sh: the .venv's, else
#                                            the wheel's library alone, installed if needed)
#   PREFIX/share/doc/ccp/agent.md            the agent's reference
#   /etc/systemd/system/ccp-agent.service    ops/systemd/ccp-agent.service
#   /etc/modules-load.d/ccp-kernel.conf      load ccp_kernel at boot
#   /etc/ccp/agent.toml                      an example config, only if none exists
#   /etc/ccp/agent.env                       ORT_DYLIB_PATH (and CCP_AGENT_ARGS, yours to
#                                            edit), only if none exists
# then, without --dest, `systemctl daemon-reload` (and with --enable, enable --now).
# The kernel module itself: `make -C datapath/kernel dkms-install` (ops/systemd/README.md).
# PREFIX defaults to /usr/local.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PREFIX=/usr/local
DEST=
BUILD=1
BPF=1
ENABLE=0
while [ $# -gt 0 ]; do
	case "$1" in
	--prefix) PREFIX=${2:?--prefix DIR}; shift 2 ;;
	--dest) DEST=${2:?--dest DIR}; shift 2 ;;
	--no-build) BUILD=0; shift ;;
	--no-bpf) BPF=0; shift ;;
	--enable) ENABLE=1; shift ;;
	-h | --help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "$0: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "$PREFIX" in
/*) ;;
*) echo "$0: --prefix must be an absolute path, got $PREFIX" >&2; exit 2 ;;
esac
if [ -n "$DEST" ]; then
	mkdir -p "$DEST"
	DEST=$(cd "$DEST" && pwd)
elif [ "$(id -u)" != 0 ]; then
	echo "$0: installing into / needs root (or stage it with --dest DIR)" >&2
	exit 2
fi

# the service serves the kernel (the module, or the BPF datapath: feature `bpf`): built
# without the simulator (feature `sim`), in a target folder of its own so that
# target/release/ccp-agent keeps --sim for the harness
TARGET=${CARGO_TARGET_DIR:-$REPO/target}/service
BIN=$TARGET/release/ccp-agent
FEATURES="--features bpf"
[ $BPF = 1 ] || FEATURES=
BUILD_CMD="cargo build --release -p ccp-agent --no-default-features $FEATURES --target-dir $TARGET"
if [ $BUILD = 1 ] && [ $BPF = 1 ] && command -v dpkg-query >/dev/null; then
	# what the BPF datapath's libccp (bindgen, patch) and libbpf (libbpf-sys) build from
	. "$HERE/debpkgs.sh"
	mapfile -t missing < <(deb_missing libclang-dev patch libelf-dev zlib1g-dev pkg-config)
	if [ ${#missing[@]} -gt 0 ]; then
		echo "$0: building the agent with the BPF datapath needs ${missing[*]}: bash ops/setup.sh --serve installs them (or apt-get install ${missing[*]}), or --no-bpf for an agent that serves the kernel module only" >&2
		exit 1
	fi
fi
if [ $BUILD = 1 ]; then
	[ -d "$HOME/.cargo/bin" ] && PATH=$HOME/.cargo/bin:$PATH
	echo "building: $BUILD_CMD"
	(cd "$REPO" && $BUILD_CMD)
fi
[ -x "$BIN" ] || { echo "$0: no agent at $BIN: build it ($BUILD_CMD) or drop --no-build" >&2; exit 1; }

put() { # MODE SRC DST
	install -D -m "$1" "$2" "$DEST$3"
	echo "  $3"
}
echo "installing into ${DEST:-/} (prefix $PREFIX):"
put 0755 "$BIN" "$PREFIX/bin/ccp-agent"
for f in "$REPO"/models/*.onnx "$REPO"/models/*.json; do
	[ -e "$f" ] && put 0644 "$f" "$PREFIX/share/ccp/models/$(basename "$f")"
done
put 0644 "$REPO/docs/agent.md" "$PREFIX/share/doc/ccp/agent.md"
ORT=
# the training .venv's onnxruntime, else the library alone (installed if needed; no training stack)
if ORT_SRC=$(bash "$REPO/ops/onnxruntime.sh"); then
	for lib in "$(dirname "$ORT_SRC")"/libonnxruntime.so*; do
		[ -f "$lib" ] || continue
		put 0644 "$lib" "$PREFIX/lib/ccp/$(basename "$lib")"
		ORT=$PREFIX/lib/ccp/$(basename "$lib")
	done
fi
[ -n "$ORT" ] || echo "  (no onnxruntime: the learned algorithms stay unavailable until ORT_DYLIB_PATH names one in /etc/ccp/agent.env; bash ops/onnxruntime.sh installs it)"
UNIT=$(mktemp)
trap 'rm -f "$UNIT"' EXIT
sed "s|@PREFIX@|$PREFIX|g" "$REPO/ops/systemd/ccp-agent.service" > "$UNIT"
put 0644 "$UNIT" /etc/systemd/system/ccp-agent.service
put 0644 "$REPO/ops/systemd/ccp-kernel.conf" /etc/modules-load.d/ccp-kernel.conf
if [ -e "$DEST/etc/ccp/agent.toml" ]; then
	echo "  /etc/ccp/agent.toml exists: kept"
else
	put 0644 "$REPO/ops/systemd/agent.toml" /etc/ccp/agent.toml
fi
if [ -e "$DEST/etc/ccp/agent.env" ]; then
	echo "  /etc/ccp/agent.env exists: kept"
else
	mkdir -p "$DEST/etc/ccp"
	{
		echo "# ccp-agent's environment (systemd EnvironmentFile)"
		echo "# extra flags, e.g. --alg cubic --w 0.4,0.5,0.1 --metrics 127.0.0.1:9464 --flow-log /var/log/ccp/flows.jsonl"
		echo "CCP_AGENT_ARGS=\"--alg cubic\""
		echo "CCP_LOG=info"
		if [ -n "$ORT" ]; then echo "ORT_DYLIB_PATH=$ORT"; else echo "#ORT_DYLIB_PATH=/path/to/libonnxruntime.so"; fi
	} > "$DEST/etc/ccp/agent.env"
	chmod 0644 "$DEST/etc/ccp/agent.env"
	echo "  /etc/ccp/agent.env"
fi

if [ -z "$DEST" ] && command -v systemctl > /dev/null && [ -d /run/systemd/system ]; then
	systemctl daemon-reload
	if [ $ENABLE = 1 ]; then
		systemctl enable --now ccp-agent.service
	fi
fi
cat <<EOF
next:
  make -C datapath/kernel dkms-install       # the module, rebuilt for every kernel (DKMS)
  modprobe ccp_kernel                        # now; /etc/modules-load.d loads it at boot
    # or, a kernel without the module (6.1+): the BPF datapath, which the agent then picks
    # itself: make -C datapath/bpf && datapath/bpf/build/ccp-bpf load   (datapath/bpf/README.md)
  systemctl enable --now ccp-agent           # the agent; systemctl reload ccp-agent re-reads models and rules
  $PREFIX/bin/ccp-agent ctl flows              # flows, their algorithm and preference
EOF
