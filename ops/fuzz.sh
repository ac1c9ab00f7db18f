#!/usr/bin/env bash
# Coverage-guided fuzzing of the agent's datapath-message handling (fuzz/, issue 25): the
# libFuzzer target `datapath_msgs` drives the IPC guard (the portus path) and the in-process
# agent with every model-free controller. Built on stable Rust with LLVM's sanitizer-coverage
# instrumentation (what cargo-fuzz does, without nightly or cargo-fuzz); libFuzzer itself
# comes from the libfuzzer-sys crate (crates.io) and needs a C++ compiler. Installs what is
# missing (g++, libclang-dev) and exits non-zero on a crash (saved under target/fuzz/).
#   bash ops/fuzz.sh                     # 60 s, both cores' worth of one job
#   FUZZ_SECONDS=600 bash ops/fuzz.sh    # longer
#   bash ops/fuzz.sh -runs=10000000      # libFuzzer flags pass through (then no time limit)
#   bash ops/fuzz.sh target/fuzz/artifacts/crash-...   # replay one input
set -euo pipefail
cd "$(dirname "$0")/.."

. ops/debpkgs.sh
mapfile -t missing < <(deb_missing g++ libclang-dev)
if [ ${#missing[@]} -gt 0 ]; then
    echo "fuzz: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "fuzz: cargo not found; install Rust (rustup) first" >&2; exit 1; }

host=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR=$PWD/target/fuzz
# --target keeps build scripts uninstrumented; overflow checks and debug assertions on
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
cargo build --quiet --release --locked --manifest-path fuzz/Cargo.toml --target "$host" --bin datapath_msgs
bin=$CARGO_TARGET_DIR/$host/release/datapath_msgs

# new inputs go to a work corpus under target/, the committed seeds stay as they are
work=$CARGO_TARGET_DIR/corpus/datapath_msgs
mkdir -p "$work" "$CARGO_TARGET_DIR/artifacts"
if [ $# -gt 0 ] && [ -f "$1" ]; then
    exec "$bin" "$@"
fi
limit=(-max_total_time="${FUZZ_SECONDS:-60}")
for a in "$@"; do
    case $a in -runs=* | -max_total_time=*) limit=() ;; esac
done
exec "$bin" "$work" fuzz/corpus/datapath_msgs "${limit[@]}" \
    -artifact_prefix="$CARGO_TARGET_DIR/artifacts/" -print_final_stats=1 -max_len=8192 \
    -rss_limit_mb=2048 "$@"
