#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Benchmarks of the CCP kernel datapath in a QEMU guest (Debian 6.12):
# CPU time per byte of ccp_cubic + agent vs native cubic at 200 Mbit/s, and
# report -> cwnd-applied latency p50/p99.  Figures: lines starting with
# BENCH, also in ops/vm/work/out/bench.txt.
exec "$(dirname "$0")/test.sh" --bench "$@"
