#!/usr/bin/env bash
# Installs what this repository needs on a fresh Debian 12 machine; safe to run again.
#   bash ops/setup.sh           # everything: training, evaluation and the tests (ops/test.sh)
#   bash ops/setup.sh --serve   # only what serving needs (ops/run.sh): no training stack
# Both:
#   - libclang-dev: bindgen (datapath/libccp/build.rs) generates the libccp FFI with it
#   - patch: both datapaths' builds apply datapath/libccp/libccp-1.2.0.patch to libccp's C
#   - clang, libbpf-dev, libelf-dev, zlib1g-dev: the BPF datapath (datapath/bpf: its BPF
#     objects are compiled with clang's BPF target, its loader ccp-bpf links libbpf)
#   - the Rust crates (cargo fetch), so builds and the kernel module find libccp's C sources
# --serve: onnxruntime's shared library alone (ops/onnxruntime.sh; a ~20 MB wheel)
# otherwise: the Python virtualenv at .venv with the training stack (torch, SB3, Ray, ...:
#   train/requirements.txt; the training package and its tests live there)
set -euo pipefail
cd "$(dirname "$0")/.."
serve=0
case ${1:-} in
    --serve) serve=1 ;;
    "") ;;
    *) echo "usage: bash ops/setup.sh [--serve]" >&2; exit 2 ;;
esac

. ops/debpkgs.sh
mapfile -t missing < <(deb_missing libclang-dev pkg-config patch clang libbpf-dev libelf-dev zlib1g-dev)
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
cargo fetch --quiet

if [ $serve = 1 ]; then
    bash ops/onnxruntime.sh > /dev/null
    exit 0
fi

# The virtualenv lives in a cache keyed by the requirements' hash (torch alone is ~2.4 GB of
# wheels); .venv in the repo links to it. CCP_VENV_CACHE moves the cache.
req=train/requirements.txt
key=$( (cat "$req"; python3 --version) | sha256sum | cut -c1-16)
cache=${CCP_VENV_CACHE:-$HOME/.cache/ccp-portfolio}/venv-$key
# Built under a lock, so setups run at once (two checkouts, CI beside a session) never remove
# or use each other's half-built environment: the second waits, then finds it complete. pip
# keeps no cache of its own (--no-cache-dir: the wheels would double the ~5 GB on disk).
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9
if [ ! -f "$cache/.complete" ] || ! "$cache/bin/python" -c "" 2>/dev/null; then
    echo "setup: building the Python virtualenv in $cache (first time: a few minutes)"
    rm -rf "$cache"
    python3 -m venv "$cache"
    "$cache/bin/python" -m pip install --quiet --no-cache-dir --upgrade pip
    "$cache/bin/python" -m pip install --quiet --no-cache-dir -r "$req"
    touch "$cache/.complete"
fi
flock -u 9
if [ "$(readlink .venv 2>/dev/null)" != "$cache" ]; then
    rm -rf .venv
    ln -s "$cache" .venv
fi
