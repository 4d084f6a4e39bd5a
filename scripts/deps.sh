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
#   valgrind   -> valgrind (make bench-instructions)
#   nats-server -> nats-server (the NATS JetStream consumer tests, runtime/idemnats)
set -euo pipefail

pkg_for() {
	case "$1" in
	pgbouncer) echo pgbouncer ;;
	promtool) echo prometheus ;;
	chromium) echo chromium ;;
	valgrind) echo valgrind ;;
	nats-server) echo nats-server ;;
	*) echo "deps.sh: no package is known for command '$1' (add it to scripts/deps.sh)" >&2; return 2 ;;
	esac
}

found() {
	command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" || -x "/usr/bin/$1" ]]
}

missing_packages() {
	missing=()
	for cmd in "$@"; do
		found "$cmd" && continue
		missing+=("$(pkg_for "$cmd")")
	done
}
missing_packages "$@"
[[ ${#missing[@]} -eq 0 ]] && exit 0

# Tests run in parallel, and several may find the same command missing at once (apt-get itself
# refuses to run beside another apt-get): one installs while the others wait for the lock here,
# then check again and find the command. The lock is released when this script exits.
lockfile=${TMPDIR:-/tmp}/idemgen-deps.lock
if [[ -e "$lockfile" && ! -w "$lockfile" ]]; then
	exec 9<"$lockfile" # another user's lock file: a read-only descriptor locks as well
else
	exec 9>>"$lockfile"
	chmod a+rw "$lockfile" 2>/dev/null || true
fi
if command -v flock >/dev/null 2>&1; then
	flock -w 600 9 || { echo "deps.sh: waited 10 minutes for another deps.sh ($lockfile) to finish installing" >&2; exit 1; }
fi

missing_packages "$@"
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
# DPkg::Lock::Timeout waits for an apt-get run by something else (an unattended upgrade, say)
# instead of failing at once.
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts services its packages ship; the tests start their own, on their own sockets.
for p in "${missing[@]}"; do
	case "$p" in
	pgbouncer) "${sudo[@]}" systemctl stop pgbouncer >/dev/null 2>&1 || "${sudo[@]}" service pgbouncer stop >/dev/null 2>&1 || true ;;
	prometheus) "${sudo[@]}" systemctl stop prometheus >/dev/null 2>&1 || "${sudo[@]}" service prometheus stop >/dev/null 2>&1 || true ;;
	nats-server) "${sudo[@]}" systemctl stop nats-server >/dev/null 2>&1 || "${sudo[@]}" service nats-server stop >/dev/null 2>&1 || true ;;
	esac
done
for cmd in "$@"; do
	found "$cmd" || { echo "deps.sh: installed ${missing[*]} but '$cmd' is still not found" >&2; exit 1; }
done
