#!/usr/bin/env bash
# The main job: set up what serving needs (the agent and onnxruntime, no training stack),
# build the agent, and run it on the simulated datapath.
#   bash ops/run.sh                          # the portfolio on an LTE path (scenarios/portfolio.toml)
#   bash ops/run.sh --alg mocc --w 0.1,0.8,0.1   # the same scenario with agent flags
#   bash ops/run.sh --plot /tmp/portfolio.svg    # and a picture of every flow over time
#   bash ops/run.sh --sim datapath/sim/scenarios/rtt-unfair.toml --alg reno --json
# Arguments go to ccp-agent; without --sim (and unless they ask for --help, --version,
# --list or `ctl`) the default scenario is added. To serve the kernel datapath, run
# target/release/ccp-agent yourself (README, "Using it").
set -euo pipefail
cd "$(dirname "$0")/.."
DEFAULT_SCENARIO=datapath/sim/scenarios/portfolio.toml
bash ops/setup.sh --serve
cargo build --release --quiet -p ccp-agent
if [ -z "${ORT_DYLIB_PATH:-}" ]; then
    ORT_DYLIB_PATH=$(bash ops/onnxruntime.sh)
    export ORT_DYLIB_PATH
fi
add_default=1
for a in "$@"; do
    case $a in
        --sim|--sim=*|--help|-h|--version|-V|--list|ctl) add_default=0 ;;
    esac
done
if [ $add_default = 1 ]; then
    set -- --sim "$DEFAULT_SCENARIO" "$@"
fi
exec target/release/ccp-agent "$@"
