#!/usr/bin/env bash
# citus.sh verify      run the runtime's Citus verification (make citus): on the coordinator
#                      CITUS_DATABASE_URL names, else on a loopback cluster started from the
#                      Citus extension installed into this machine's PostgreSQL (start, below).
# citus.sh start DIR   start a Citus cluster on loopback: a coordinator (port 9700) and two
#                      workers (9701, 9702), data and logs in DIR; prints the coordinator's URL.
# citus.sh stop DIR    stop the three servers and delete DIR.
# CITUS_PORT moves the coordinator's port (the workers take the next two).
#
# Citus is installed the way its own documentation says (docs/citus.md, "Getting a cluster");
# this script only uses it. start needs the extension in this machine's PostgreSQL (citus.so
# among the server's libraries); verify with CITUS_DATABASE_URL needs only a coordinator. As
# root the servers run as the postgres user, as scripts/pg.sh does.
set -euo pipefail
cmd=${1:-}
dir=${2:-}
usage() {
	echo "usage: $0 verify | start DIR | stop DIR" >&2
	exit 2
}
[[ -n "$cmd" ]] || usage
[[ "$cmd" == verify || -n "$dir" ]] || usage
here=$(cd "$(dirname "$0")" && pwd)
bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
as_owner() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
user=$(if [[ $(id -u) -eq 0 ]]; then echo postgres; else id -un; fi)
base=${CITUS_PORT:-9700}
ports=("$base" $((base + 1)) $((base + 2)))
howto="see docs/citus.md, \"Getting a cluster\""

# libdir prints the directory the server loads extensions from.
libdir() { "$bindir/pg_config" --pkglibdir 2>/dev/null || echo "$bindir/../lib"; }

# stop_pids stops the servers whose postmaster PIDs are given (a fast shutdown: SIGINT) and waits
# until each has exited.
stop_pids() {
	local pid i
	for pid in "$@"; do kill -INT "$pid" 2>/dev/null || true; done
	for pid in "$@"; do
		for ((i = 0; i < 600; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "citus.sh: server PID $pid still runs 60s after a fast shutdown; stopping it at once" >&2
			kill -QUIT "$pid" 2>/dev/null || true
		fi
	done
}

start() {
	[[ -x "$bindir/initdb" ]] || { echo "citus.sh: no PostgreSQL server binaries (set PG_BINDIR)" >&2; exit 2; }
	if [[ ! -e "$(libdir)/citus.so" ]]; then
		echo "citus.sh: the Citus extension is not installed into this PostgreSQL ($(libdir) has no citus.so);" \
			"install it ($howto), or set CITUS_DATABASE_URL to a Citus coordinator you run" >&2
		exit 2
	fi
	mkdir -p "$dir"
	[[ $(id -u) -eq 0 ]] && chown postgres "$dir"
	# The nodes started so far, by postmaster PID: a start that fails stops them before it deletes
	# their directory, so no server is left running on files that are gone.
	started=() node=0 what=""
	local p
	trap 'rc=$?; if ((rc != 0)); then
		echo "citus.sh: start failed at node $((node + 1)) of 3 (port ${ports[node]}: $what); stopping the ${#started[@]} node(s) it started (PIDs ${started[*]:-none}) and deleting $dir" >&2
		[[ -f "$dir/${ports[node]}.log" ]] && tail -5 "$dir/${ports[node]}.log" >&2
		stop_pids "${started[@]}"; rm -rf "$dir"; fi' EXIT
	for p in "${ports[@]}"; do
		what="initdb"
		as_owner "$bindir/initdb" -D "$dir/$p" -U "$user" --auth=trust --no-sync -E UTF8 >"$dir/initdb-$p.log" 2>&1
		what="server start"
		as_owner "$bindir/pg_ctl" -D "$dir/$p" -l "$dir/$p.log" -w -t 60 \
			-o "-p $p -k $dir -c listen_addresses=127.0.0.1 -c shared_preload_libraries=citus -c fsync=off -c max_connections=200" \
			start >/dev/null || {
			# pg_ctl gives up on a server that did not come up in time, which may still run.
			if [[ -f "$dir/$p/postmaster.pid" ]]; then started+=("$(head -1 "$dir/$p/postmaster.pid")"); fi
			exit 1
		}
		started+=("$(head -1 "$dir/$p/postmaster.pid")")
		what="CREATE EXTENSION citus"
		as_owner "$bindir/psql" -h "$dir" -p "$p" -U "$user" -d postgres -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION citus' >/dev/null
		node=$((node + 1))
	done
	node=0 what="adding the workers to the coordinator"
	as_owner "$bindir/psql" -h "$dir" -p "${ports[0]}" -U "$user" -d postgres -X -q -v ON_ERROR_STOP=1 \
		-c "SELECT citus_set_coordinator_host('127.0.0.1', ${ports[0]})" \
		-c "SELECT citus_add_node('127.0.0.1', ${ports[1]})" \
		-c "SELECT citus_add_node('127.0.0.1', ${ports[2]})" >/dev/null
	trap - EXIT
	echo "postgres://$user@127.0.0.1:${ports[0]}/postgres?sslmode=disable"
}

stop() {
	local p pids=()
	for p in "${ports[@]}"; do
		[[ -f "$dir/$p/postmaster.pid" ]] && pids+=("$(head -1 "$dir/$p/postmaster.pid")")
	done
	stop_pids "${pids[@]}"
	rm -rf "$dir"
}

# verify runs the TestCitus… tests of runtime/idem/citus_*test.go and examples/payments/citus_test.go
# on a coordinator. The test works in
# a schema of its own, which it drops when it ends; beside the cluster it times the same calls
# on plain PostgreSQL (TEST_DATABASE_URL, or a throwaway server scripts/with-pg.sh starts).
verify() {
	local go=${GO:-go} url=${CITUS_DATABASE_URL:-} rc=0 left
	tmp="" # global: the EXIT trap reads it after verify has returned
	local test=("$go" test -tags citus -count=1 -v -timeout 15m -run '^TestCitus(Cluster|Guarantees|DetectedWhenTheDatabaseComesUp|PlainStatementsReadReturning|KeyStats|RequestStatements|HistoryStormPreparesNothing|TopologyChecked)$' ./runtime/idem)
	# The example on the cluster: docs/citus.md's distribution of its tables, then the service on them.
	local example=("$go" test -tags citus -count=1 -v -timeout 10m -run '^TestCitusExample' ./examples/payments)
	if [[ -n "$url" ]]; then
		local psql="$bindir/psql"
		[[ -x "$psql" ]] || psql=$(command -v psql || true)
		[[ -n "$psql" ]] || { echo "citus.sh: CITUS_DATABASE_URL is set, and checking it needs psql (PostgreSQL's client)" >&2; exit 2; }
		local version
		version=$("$psql" "$url" -X -A -t -q -v ON_ERROR_STOP=1 -c "SELECT extversion FROM pg_extension WHERE extname = 'citus'" 2>&1) || {
			echo "citus.sh: CITUS_DATABASE_URL names no coordinator this machine can reach: $version" >&2
			echo "citus.sh: point it at a Citus coordinator, or unset it to start a loopback cluster from the installed extension ($howto)" >&2
			exit 2
		}
		if [[ -z "$version" ]]; then
			echo "citus.sh: CITUS_DATABASE_URL names a server without the citus extension (CREATE EXTENSION citus on the coordinator, $howto)," \
				"or unset it to start a loopback cluster from the installed extension" >&2
			exit 2
		fi
		echo "citus.sh: verifying the coordinator CITUS_DATABASE_URL names (Citus $version), in a schema of the test's own" >&2
		local before after
		before=$("$psql" "$url" -X -A -t -q -c "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'idemcitus\\_%' ORDER BY 1")
		CITUS_DATABASE_URL=$url "$here/with-pg.sh" TEST_DATABASE_URL "${test[@]}" || rc=$?
		CITUS_DATABASE_URL=$url "${example[@]}" || rc=$?
		after=$("$psql" "$url" -X -A -t -q -c "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'idemcitus\\_%' ORDER BY 1")
		left=$(comm -13 <(echo "$before") <(echo "$after"))
		if [[ -n "$left" ]]; then
			echo "citus.sh: the verification left its schema behind (it was stopped before its cleanup ran): drop it with DROP SCHEMA ... CASCADE:" $left >&2
			if ((rc == 0)); then rc=1; fi
		fi
		return "$rc"
	fi
	if [[ ! -x "$bindir/initdb" || ! -e "$(libdir)/citus.so" ]]; then
		echo "citus.sh: make citus needs a Citus cluster: set CITUS_DATABASE_URL to a coordinator you run, or install the Citus" \
			"extension into this machine's PostgreSQL (${bindir:-no server binaries found}; $(libdir 2>/dev/null)/citus.so is missing) so that" \
			"a loopback cluster can be started from it; $howto" >&2
		exit 2
	fi
	tmp=$(mktemp -d /tmp/idem-citus.XXXXXX)
	trap '"$here/citus.sh" stop "$tmp"' EXIT
	url=$("$here/citus.sh" start "$tmp")
	echo "citus.sh: verifying a loopback cluster started from the installed extension ($url)" >&2
	CITUS_DATABASE_URL=$url "$here/with-pg.sh" TEST_DATABASE_URL "${test[@]}" || rc=$?
	CITUS_DATABASE_URL=$url "${example[@]}" || rc=$?
	# This script's own start, on ports beside the cluster's (scripts/citus_test.go).
	"$go" test -tags citus -count=1 -v -timeout 10m -run '^TestCitusStart' ./scripts || rc=$?
	return "$rc"
}

case "$cmd" in
verify) verify ;;
start) start ;;
stop) stop ;;
*) usage ;;
esac
