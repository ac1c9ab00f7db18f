#!/usr/bin/env bash
# Every test: formatting and lints, the Rust workspace's tests, the Python package's tests,
# and the kernel datapath's QEMU guest suite. Prints one summary line per suite and exits
# non-zero if any failed.
#   bash ops/test.sh            # everything
#   SKIP_VM=1 bash ops/test.sh  # without the QEMU guest suite
#   CCP_NO_SKIPS=1 bash ops/test.sh  # a Rust or Python test that cannot run here fails instead of skipping
# A Rust test whose precondition is missing here (no generic netlink socket, not root, no
# rtnetlink, the kernel module loaded) prints "SKIP <test>: <reason>"
# (ccp_runtime::testing::skip); the summary lists them.
set -uo pipefail
cd "$(dirname "$0")/.."
bash ops/setup.sh || exit 1

declare -a summary
fail=0
suite() {
    local name=$1; shift
    echo "=== $name: $*"
    local start=$SECONDS
    if "$@"; then
        summary+=("PASS $name ($((SECONDS - start)) s)")
    else
        summary+=("FAIL $name ($((SECONDS - start)) s)")
        fail=1
    fi
}

suite fmt cargo fmt --all -- --check
suite clippy cargo clippy --workspace --all-targets --quiet -- -D warnings
# the training bindings before the Rust tests: the policy tests build their fixture models
# with `python -m ccp_train.fixtures`, and the package (its cards, its Gymnasium ids) imports
# the native module `ccp_train._native`
suite python-build .venv/bin/maturin develop --release --quiet
mkdir -p target
rust_tests() {
    cargo test --workspace --no-fail-fast 2>&1 | tee target/test-rust.log
    return "${PIPESTATUS[0]}"
}
suite rust rust_tests
suite fuzz bash ops/fuzz.sh
suite agent-build cargo build --release --quiet -p ccp-agent
# the service's agent (ops/install.sh): builds without the simulator, with the BPF datapath
# or without it, and links none of the simulator
agent_no_sim() {
    local f
    for f in "" "--features bpf"; do
        # shellcheck disable=SC2086
        cargo check --quiet -p ccp-agent --no-default-features $f || return 1
        # shellcheck disable=SC2086
        if cargo tree -p ccp-agent --no-default-features $f -e normal,build | grep -q ccp-sim; then
            echo "ccp-agent --no-default-features $f depends on ccp-sim"; return 1
        fi
    done
}
suite agent-no-sim agent_no_sim
suite ruff .venv/bin/ruff check train ops/bench ops/import_cycles.py ops/doc_provenance.py
# no import loop between the top-level modules of the algorithms, the runtime, the simulator
import_cycles() { local d; for d in algs/src portus-agent/runtime/src datapath/libccp/src datapath/sim/src; do python3 ops/import_cycles.py "$d" || return 1; done; }
suite import-cycles import_cycles
# every results table in README.md and docs/ names the command that measured it (issue 49)
suite doc-provenance python3 ops/doc_provenance.py
# -rs: a skipped Python test says why (listed in the summary)
python_tests() {
    # the toy algorithm's test needs its own native build: the toy-algorithm suite runs it
    .venv/bin/python -m pytest train/tests -q -rs --ignore=train/tests/test_toy_algorithm.py \
        2>&1 | tee target/test-python.log
    return "${PIPESTATUS[0]}"
}
suite python python_tests
# adding a learned algorithm = its folder + one registry line (the test-only toy)
suite toy-algorithm bash ops/toy_algorithm.sh
# the QEMU guest tests' helpers, host-side: no guest test passes on a missing measurement
suite guest-helpers bash ops/vm/guest/test_lib.sh
# the kernel datapath's user-space C unit tests (validator, values, policy; the VM suite
# runs them too, as validator_unit): here also when SKIP_VM=1 skips the VM suite
suite kernel-unit make -s -C datapath/kernel check
# the evaluation harness's CI subset (eval scenarios marked quick, 2 seeds): every run must work;
# then the regression guard: each shipped model on the tune split (seeds 1-2) against the
# figures recorded in its card (evaluation.guard; rule: ccp_train/harness/guard.py)
suite harness-quick .venv/bin/python -m ccp_train.harness --quick --no-plots --out target/eval-quick
suite harness-guard .venv/bin/python -m ccp_train.harness.guard --out target/guard
if [ -x ops/vm/test.sh ] && [ -z "${SKIP_VM:-}" ]; then
    suite kernel-vm bash ops/vm/test.sh
else
    summary+=("SKIP kernel-vm (SKIP_VM=1 or no ops/vm/test.sh: the QEMU guest suite did not run)")
fi

echo "=== summary (suites)"
printf '%s\n' "${summary[@]}"
npass=$(printf '%s\n' "${summary[@]}" | grep -c '^PASS')
nfail=$(printf '%s\n' "${summary[@]}" | grep -c '^FAIL')
nskip=$(printf '%s\n' "${summary[@]}" | grep -c '^SKIP')
echo "suites: $npass passed, $nfail failed, $nskip skipped"
# tests that could not run here (the line may follow "test x ... " on the same line)
skipped=$( (grep -ohE 'SKIP [^ ]+: .*' target/test-rust.log; grep -h '^SKIPPED ' target/test-python.log) 2>/dev/null | sort -u)
if [ -n "$skipped" ]; then
    echo "=== skipped tests ($(wc -l <<<"$skipped"); CCP_NO_SKIPS=1 makes them fail)"
    echo "$skipped"
else
    echo "skipped tests: 0"
fi
exit $fail
