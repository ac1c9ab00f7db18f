#!/usr/bin/env bash
# The evaluation harness on the simulator: builds the agent, then runs
# `python -m ccp_train.harness` with these arguments (default: the eval split of every suite,
# 5 seeds, into results/eval). `bash ops/eval.sh --help` lists the flags.
#   bash ops/eval.sh                                   # the full eval matrix
#   bash ops/eval.sh --quick --out /tmp/q              # the CI subset
#   bash ops/eval.sh --split tune --algs mocc,cubic,bbr --out /tmp/tune
set -euo pipefail
cd "$(dirname "$0")/.."
bash ops/setup.sh
cargo build --release --quiet -p ccp-agent
if [ $# -eq 0 ]; then
    set -- --out results/eval
fi
PYTHONPATH=train exec .venv/bin/python -m ccp_train.harness "$@"
