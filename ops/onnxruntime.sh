#!/usr/bin/env bash
# Prints the path of onnxruntime's shared library (what the agent loads for the learned
# algorithms; ORT_DYLIB_PATH), installing it first if needed. Serving needs only this.
#   1. the training virtualenv's (.venv: `bash ops/setup.sh` installs the full stack), else
#   2. a small cached virtualenv holding only the onnxruntime wheel (--no-deps: the agent
#      loads the library, not the Python package), at the version train/requirements.txt pins.
# CCP_VENV_CACHE moves the cache (default ~/.cache/ccp-portfolio). Messages go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

newest() { # the last existing file among the arguments (sorted: the versioned name last)
    local f found=
    for f in "$@"; do [ -f "$f" ] && found=$f; done
    [ -n "$found" ] && echo "$found"
}

if lib=$(newest .venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so*); then
    echo "$lib"
    exit 0
fi
version=$(sed -n 's/^onnxruntime==\([^ ]*\).*/\1/p' train/requirements.txt)
[ -n "$version" ] || { echo "onnxruntime.sh: no onnxruntime==VERSION in train/requirements.txt" >&2; exit 1; }
py=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
dir=${CCP_VENV_CACHE:-$HOME/.cache/ccp-portfolio}/onnxruntime-$version-py$py
if [ ! -f "$dir/.complete" ]; then
    echo "setup: installing onnxruntime $version (the library only) in $dir" >&2
    rm -rf "$dir"
    python3 -m venv "$dir" >&2
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "onnxruntime==$version" >&2
    touch "$dir/.complete"
fi
lib=$(newest "$dir"/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so*) || {
    echo "onnxruntime.sh: no libonnxruntime.so* in $dir" >&2
    exit 1
}
echo "$lib"
