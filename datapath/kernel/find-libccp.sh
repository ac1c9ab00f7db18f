#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Print the directory holding libccp's C sources (ccp.c, ccp.h, ...) as
# shipped by the libccp 1.2 crate.  Order: $LIBCCP_DIR, `cargo metadata` of
# the workspace, the cargo registry, and finally `cargo fetch` + retry.
# Usage: find-libccp.sh [workspace-root]
set -u
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
ok() { [ -f "$1/ccp.c" ] && [ -f "$1/ccp.h" ] && [ -f "$1/machine.c" ]; }

if [ -n "${LIBCCP_DIR:-}" ] && ok "$LIBCCP_DIR"; then echo "$LIBCCP_DIR"; exit 0; fi

from_metadata() {
	command -v cargo >/dev/null 2>&1 || return 1
	[ -f "$ROOT/Cargo.toml" ] || return 1
	m=$(cd "$ROOT" && cargo metadata --format-version 1 2>/dev/null |
		grep -o '"manifest_path":"[^"]*/libccp-1\.2\.[0-9][^"/]*/Cargo.toml"' | head -n1 |
		sed 's/^"manifest_path":"//; s/Cargo.toml"$//')
	[ -n "$m" ] && ok "${m}libccp" && echo "${m}libccp"
}

from_registry() {
	for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/libccp-1.2.*/libccp; do
		ok "$d" && { echo "$d"; return 0; }
	done
	return 1
}

from_metadata && exit 0
from_registry && exit 0
if command -v cargo >/dev/null 2>&1 && [ -f "$ROOT/Cargo.toml" ]; then
	(cd "$ROOT" && cargo fetch >/dev/null 2>&1)
	from_metadata && exit 0
	from_registry && exit 0
fi
echo "find-libccp.sh: libccp 1.2 sources not found; run 'cargo fetch' in $ROOT or set LIBCCP_DIR" >&2
exit 1
