#!/usr/bin/env bash
# deps.sh CMD...   make sure each named command is on this machine, installing the Debian package
#                  that provides it when it is missing (apt-get; as root, or through sudo).
#
# The project's tests use real programs (PostgreSQL, pgbouncer, a browser, promtool). A fresh
# machine of this project's kind has only PostgreSQL's server binaries, so every other program a
# test needs is installed here, by the project itself, before the tests run. A command already on
# the PATH (or in the package's usual place) is left alone, and nothing is installed twice.
#
# Known commands and their packages:
#   pgbouncer  -> pgbouncer
#   promtool   -> prometheus
#   chromium   -> chromium
set -euo pipefail

pkg_for() {
	case "$1" in
	pgbouncer) echo pgbouncer ;;
	promtool) echo prometheus ;;
	chromium) echo chromium ;;
	*) echo "deps.sh: no package is known for command '$1' (add it to scripts/deps.sh)" >&2; return 2 ;;
	esac
}

found() {
	command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" || -x "/usr/bin/$1" ]]
}

missing=()
for cmd in "$@"; do
	found "$cmd" && continue
	missing+=("$(pkg_for "$cmd")")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null 2>&1 || {
		echo "deps.sh: ${missing[*]} missing and not root: install them (apt-get install ${missing[*]}) and run again" >&2
		exit 2
	}
	sudo=(sudo)
fi
echo "deps.sh: installing ${missing[*]} (Debian packages)" >&2
export DEBIAN_FRONTEND=noninteractive
# A package list that is old or absent cannot find the package: refresh it once, then install.
"${sudo[@]}" apt-get update -qq >/dev/null
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts services its packages ship; the tests start their own, on their own sockets.
for p in "${missing[@]}"; do
	case "$p" in
	pgbouncer) "${sudo[@]}" systemctl stop pgbouncer >/dev/null 2>&1 || "${sudo[@]}" service pgbouncer stop >/dev/null 2>&1 || true ;;
	prometheus) "${sudo[@]}" systemctl stop prometheus >/dev/null 2>&1 || "${sudo[@]}" service prometheus stop >/dev/null 2>&1 || true ;;
	esac
done
for cmd in "$@"; do
	found "$cmd" || { echo "deps.sh: installed ${missing[*]} but '$cmd' is still not found" >&2; exit 1; }
done
