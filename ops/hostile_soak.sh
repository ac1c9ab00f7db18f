#!/usr/bin/env bash
# Hostile-peer soak (issue 42; a benchmark command, not a test): healthy datapaths drive
# flows through `ccp-agent --ipc unix` while 100 hostile peers come and go for 60 s
# (datapaths that open flows and vanish, that never read, that read slowly). Prints the
# healthy datapaths' answer latency (p50/p99/max), missed answers, the agent's counters and
# memory, and a verdict (healthy p99 <= 1 ms, no missed answer, a new datapath served
# afterwards); exits 1 when it does not hold.
#   bash ops/hostile_soak.sh                                  # 60 s, 100 hostile, 4 healthy
#   bash ops/hostile_soak.sh --duration-s 20 --hostile 30
#   bash ops/hostile_soak.sh --agent /path/to/older/ccp-agent # reproduce issue 42 items 1, 2
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p ccp-agent --bin ccp-agent --example hostile_soak
exec target/release/examples/hostile_soak "$@"
