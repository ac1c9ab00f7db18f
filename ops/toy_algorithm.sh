#!/usr/bin/env bash
# The claim of docs/adding-an-algorithm.md, checked: a learned algorithm that is one folder
# (algs/src/toy/) and one line of the registry (algs/src/registry.rs; both under the
# test-only feature `toy`, which no shipped build switches on) reaches `ccp-agent --list`,
# the agent's portus adapters (a ccp_toy flow runs it), the kernel module's name table,
# the bindings, the harness's default algorithms and the portfolio's candidates.
#   bash ops/toy_algorithm.sh
# Builds the agent's tests and a native module with the feature, in target/ beside the
# shipped builds (other feature sets, other artifacts); nothing shipped is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --quiet -p ccp-agent --features toy --test toy_algorithm
cargo build --quiet -p ccp-train --features python,pyo3/extension-module,toy
CCP_TOY_NATIVE=$PWD/target/debug/lib_native.so \
    .venv/bin/python -m pytest -q -p no:cacheprovider train/tests/test_toy_algorithm.py
