#!/usr/bin/env bash
# The main job: set up, build, and run the agent on the simulated datapath.
#   bash ops/run.sh                         # three staggered flows, default algorithm
#   bash ops/run.sh --alg reno --sim datapath/sim/scenarios/one-flow.toml --json
set -euo pipefail
cd "$(dirname "$0")/.."
bash ops/setup.sh
cargo build --release --quiet -p ccp-agent
if [ $# -eq 0 ]; then
    set -- --sim datapath/sim/scenarios/three-staggered.toml
fi
exec target/release/ccp-agent "$@"
