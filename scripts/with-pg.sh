#!/usr/bin/env bash
# with-pg.sh VAR CMD...  runs CMD with the environment variable VAR naming a PostgreSQL database URL.
# When VAR is already set, that server is used as it is, once scripts/pgcheck has found it usable
# (reachable, a superuser, room for the connections): otherwise the run stops at once, saying
# what it needs. Otherwise a throwaway server is started
# (scripts/pg.sh) and stopped again when CMD ends, whatever its exit status. pg.sh's options pass
# through the environment: PG_DURABLE=1 keeps the durable defaults, PG_STATEMENTS=1 loads
# pg_stat_statements.
set -euo pipefail
var=${1:?usage: with-pg.sh VAR CMD...}
shift
here=$(cd "$(dirname "$0")" && pwd)
if [[ -n "${!var:-}" ]]; then
	(cd "$here/.." && "${GO:-go}" run ./scripts/pgcheck "$var") || exit 2
	exec "$@"
fi
dir=$(mktemp -d /tmp/idemgen-pg.XXXXXX)
trap '"$here/pg.sh" stop "$dir"' EXIT
url=$("$here/pg.sh" start "$dir")
echo "with-pg.sh: started a throwaway PostgreSQL for this run ($var=$url)" >&2
export "$var=$url"
"$@"
