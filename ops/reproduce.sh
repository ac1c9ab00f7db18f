#!/usr/bin/env bash
# Regenerate a shipped model from its card's training command and compare sha256.
#   bash ops/reproduce.sh models/mocc.json [--keep]
#   bash ops/reproduce.sh models/mocc.json --from-checkpoint START.pt   # only the chain's last
#       part, from the checkpoint it started from (minutes instead of the whole chain)
set -euo pipefail
cd "$(dirname "$0")/.."
bash ops/setup.sh
.venv/bin/maturin develop --release --quiet
exec .venv/bin/python -m ccp_train.reproduce "$@"
