#!/usr/bin/env bash
# pg.sh start DIR   initialise and start a throwaway PostgreSQL whose data and socket live in DIR;
#                   prints its database URL on stdout.
# pg.sh stop DIR    stop it and delete DIR.
#
# The server listens only on a Unix socket inside DIR, so parallel runs never fight over a port.
# It skips fsync, synchronous commit and full-page writes, which makes tests fast; PG_DURABLE=1
# keeps PostgreSQL's durable defaults instead, for benchmarks whose cost is largely the commits.
# PG_STATEMENTS=1 also loads pg_stat_statements (with planning time) and creates the extension in
# the postgres database, so a profile can read what each statement cost; it is off by default,
# since every statement then pays for its bookkeeping.
# PG_CALLGRIND=1 runs every server process under valgrind's callgrind (instructions counted per
# process, written to DIR/callgrind when it exits; valgrind must be installed), for
# make bench-instructions. PG_CALLGRIND_OPTS adds options of callgrind's own (make
# bench-statements: a dump of the count at each statement's bind and execute).
# PG_MAX_CONNECTIONS=N sets max_connections (PostgreSQL's default is 100); make bench-http, whose
# servers each keep a pool, needs more.
# PostgreSQL refuses to run as root: as root the server runs as the `postgres` user.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [[ -z "$cmd" || -z "$dir" ]]; then
	echo "usage: $0 start|stop DIR" >&2
	exit 2
fi

find_bindir() {
	if [[ -n "${PG_BINDIR:-}" ]]; then echo "$PG_BINDIR"; return; fi
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[[ -x "$d/initdb" ]] && { echo "$d"; return; }
	done
	if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return; fi
	echo "pg.sh: no PostgreSQL server binaries found (install postgresql-15, or set PG_BINDIR," \
		"or set TEST_DATABASE_URL to a server you already run)" >&2
	exit 2
}

as_owner() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

case "$cmd" in
start)
	bindir=$(find_bindir)
	mkdir -p "$dir"
	if [[ $(id -u) -eq 0 ]]; then
		id postgres >/dev/null 2>&1 || { echo "pg.sh: running as root needs a 'postgres' user" >&2; exit 2; }
		chown postgres "$dir"
		# The postgres user must be able to reach DIR through its parents.
		chmod o+x "$(dirname "$dir")" 2>/dev/null || true
	fi
	user=$(if [[ $(id -u) -eq 0 ]]; then echo postgres; else id -un; fi)
	as_owner "$bindir/initdb" -D "$dir/data" -U "$user" --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 || {
		echo "pg.sh: initdb failed; see $dir/initdb.log:" >&2; tail -20 "$dir/initdb.log" >&2; exit 1; }
	opts="-k $dir -c listen_addresses=''"
	if [[ "${PG_DURABLE:-}" != 1 ]]; then
		opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	fi
	if [[ -n "${PG_MAX_CONNECTIONS:-}" ]]; then
		[[ "$PG_MAX_CONNECTIONS" =~ ^[1-9][0-9]*$ ]] || {
			echo "pg.sh: PG_MAX_CONNECTIONS=$PG_MAX_CONNECTIONS: want a whole number" >&2; exit 2; }
		opts+=" -c max_connections=$PG_MAX_CONNECTIONS"
	fi
	hint=""
	if [[ "${PG_STATEMENTS:-}" == 1 ]]; then
		opts+=" -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
		hint=" (PG_STATEMENTS=1 needs the pg_stat_statements library: Debian's postgresql-15 ships it, other systems a contrib package; or unset PG_STATEMENTS)"
	fi
	postgres=()
	if [[ "${PG_CALLGRIND:-}" == 1 ]]; then
		# Every server process runs under valgrind's callgrind, which counts the instructions it
		# executes and writes them to $dir/callgrind/callgrind.PID when the process exits (a
		# backend: when its connection closes). Autovacuum is off, so that no worker's count
		# lands among a measurement's backends. make bench-instructions uses it.
		mkdir -p "$dir/callgrind"
		[[ $(id -u) -eq 0 ]] && chown postgres "$dir/callgrind"
		printf '#!/bin/sh\nexec valgrind -q --tool=callgrind --trace-children=yes %s --callgrind-out-file=%s/callgrind/callgrind.%%p %s/postgres "$@"\n' \
			"${PG_CALLGRIND_OPTS:-}" "$dir" "$bindir" >"$dir/postgres-callgrind"
		chmod 755 "$dir/postgres-callgrind"
		postgres=(-p "$dir/postgres-callgrind")
		opts+=" -c autovacuum=off"
	fi
	as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 120 -o "$opts" "${postgres[@]}" \
		start >/dev/null || { echo "pg.sh: server did not start$hint; see $dir/server.log:" >&2; tail -20 "$dir/server.log" >&2; exit 1; }
	if [[ "${PG_STATEMENTS:-}" == 1 ]]; then
		as_owner "$bindir/psql" -h "$dir" -U "$user" -d postgres -X -q -v ON_ERROR_STOP=1 \
			-c 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' >"$dir/extension.log" 2>&1 || {
			echo "pg.sh: CREATE EXTENSION pg_stat_statements failed$hint:" >&2; cat "$dir/extension.log" >&2; exit 1; }
	fi
	echo "postgres://$user@/postgres?host=$dir&sslmode=disable"
	;;
stop)
	bindir=$(find_bindir)
	if [[ -d "$dir/data" ]]; then
		as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
	fi
	# Under callgrind (PG_CALLGRIND) a server process can still be writing its count into the
	# directory after the server has stopped: try again for a few seconds before giving up.
	for _ in $(seq 50); do
		rm -rf "$dir" 2>/dev/null && break
		sleep 0.1
	done
	rm -rf "$dir"
	;;
*)
	echo "usage: $0 start|stop DIR" >&2
	exit 2
	;;
esac
