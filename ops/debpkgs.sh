# SPDX-License-Identifier: GPL-2.0-only OR MIT
# Sourced by ops/setup.sh, ops/fuzz.sh, ops/install.sh and ops/vm/test.sh:
#   deb_missing PKG...   prints the Debian packages of PKG... that are not installed
deb_missing() {
	local pkg
	for pkg in "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
	done
}
