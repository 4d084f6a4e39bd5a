#!/usr/bin/env bash
# citus.sh start DIR   start a Citus cluster on loopback: a coordinator (port 9700) and two
#                      workers (9701, 9702), data and logs in DIR; prints the coordinator's URL.
# citus.sh stop DIR    stop the three servers and delete DIR.
# CITUS_PORT moves the coordinator's port (the workers take the next two).
#
# Needs PostgreSQL's server binaries with the Citus extension installed into them (citus.so
# among the server's libraries). Citus is not in Debian's archive; it builds from its source
# release (v13.2.2 here, against Debian's PostgreSQL 15.18, in about a minute):
#
#   apt-get install postgresql-server-dev-15 liblz4-dev libzstd-dev
#   # in the release's source tree: for PostgreSQL < 16, src/include/pg_version_compat.h defines
#   # `static inline bool have_createdb_privilege(void)`, which clashes with the `extern`
#   # declaration 15.18 already has: rename Citus's definition away (one line), then
#   ./configure --without-libcurl
#   make && make install
#
# (--without-libcurl drops only Citus's anonymous usage statistics, which need the network.)
# docs/citus.md has the profile to run on it. As root the servers run as the postgres user, as
# scripts/pg.sh does.
set -euo pipefail
cmd=${1:-}
dir=${2:-}
if [[ -z "$cmd" || -z "$dir" ]]; then
	echo "usage: $0 start|stop DIR" >&2
	exit 2
fi
bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[[ -x "$bindir/initdb" ]] || { echo "citus.sh: no PostgreSQL server binaries (set PG_BINDIR)" >&2; exit 2; }
as_owner() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
user=$(if [[ $(id -u) -eq 0 ]]; then echo postgres; else id -un; fi)
base=${CITUS_PORT:-9700}
ports=("$base" $((base + 1)) $((base + 2)))

case "$cmd" in
start)
	libdir=$("$bindir/pg_config" --pkglibdir 2>/dev/null || echo "$bindir/../lib")
	if [[ ! -e "$libdir/citus.so" ]]; then
		echo "citus.sh: Citus is not installed into $libdir (no citus.so). It is not in Debian's archive:" \
			"build it from source against this server (see the comment at the top of $0), then run again." >&2
		exit 2
	fi
	mkdir -p "$dir"
	[[ $(id -u) -eq 0 ]] && chown postgres "$dir"
	for p in "${ports[@]}"; do
		as_owner "$bindir/initdb" -D "$dir/$p" -U "$user" --auth=trust --no-sync -E UTF8 >"$dir/initdb-$p.log" 2>&1
		as_owner "$bindir/pg_ctl" -D "$dir/$p" -l "$dir/$p.log" -w -t 60 \
			-o "-p $p -k $dir -c listen_addresses=127.0.0.1 -c shared_preload_libraries=citus -c fsync=off -c max_connections=200" start >/dev/null
		as_owner "$bindir/psql" -h "$dir" -p "$p" -U "$user" -d postgres -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION citus' >/dev/null
	done
	as_owner "$bindir/psql" -h "$dir" -p "${ports[0]}" -U "$user" -d postgres -X -q -v ON_ERROR_STOP=1 \
		-c "SELECT citus_set_coordinator_host('127.0.0.1', ${ports[0]})" \
		-c "SELECT citus_add_node('127.0.0.1', ${ports[1]})" \
		-c "SELECT citus_add_node('127.0.0.1', ${ports[2]})" >/dev/null
	echo "postgres://$user@127.0.0.1:${ports[0]}/postgres?sslmode=disable"
	;;
stop)
	for p in "${ports[@]}"; do
		[[ -d "$dir/$p" ]] && as_owner "$bindir/pg_ctl" -D "$dir/$p" -m fast -w stop >/dev/null 2>&1 || true
	done
	rm -rf "$dir"
	;;
*)
	echo "usage: $0 start|stop DIR" >&2
	exit 2
	;;
esac
