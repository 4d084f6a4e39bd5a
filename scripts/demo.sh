#!/usr/bin/env bash
# demo.sh: build the payments example, start it on a free loopback port against $DATABASE_URL, fire
# the duplicate-request scenario at it (examples/payments/demo) and stop the server again, whatever
# happens. `make demo` runs it under scripts/with-pg.sh, which provides a throwaway PostgreSQL when
# DATABASE_URL is not set.
set -euo pipefail

if [[ -z "${DATABASE_URL:-}" ]]; then
	echo "demo.sh: DATABASE_URL is not set; run \`make demo\` (it starts a throwaway PostgreSQL)" \
		"or set DATABASE_URL to a PostgreSQL server the example may create tables in" >&2
	exit 2
fi
cd "$(dirname "$0")/.."

work=$(mktemp -d /tmp/idemgen-demo.XXXXXX)
server_pid=
cleanup() {
	local status=$?
	if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	if [[ $status -ne 0 && -s "$work/server.log" ]]; then
		echo "demo.sh: failed; the server's log:" >&2
		tail -n 30 "$work/server.log" >&2
	fi
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "demo.sh: building the payments example" >&2
go build -o "$work/payments" ./examples/payments/cmd/payments
go build -o "$work/demo" ./examples/payments/demo
go build -o "$work/idemgen" ./cmd/idemgen

# The support page's password, fresh for each run.
admin_token=$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')
# The secret the bank signs its settlement webhooks with (Standard Webhooks: whsec_ and base64),
# fresh for each run: the server verifies with it, the driver signs as the bank.
webhook_secret="whsec_$(head -c 24 /dev/urandom | base64 | tr -d '\n')"

# Port 0: the kernel picks a free port, and the server logs which one.
"$work/payments" -addr 127.0.0.1:0 -database-url "$DATABASE_URL" -admin-token "$admin_token" \
	-bank-webhook-secrets "$webhook_secret" >"$work/server.log" 2>&1 &
server_pid=$!

addr=
for _ in $(seq 1 300); do
	addr=$(sed -n 's/.*msg=listening addr=\([0-9.:]*\).*/\1/p' "$work/server.log" | head -n 1)
	[[ -n "$addr" ]] && break
	if ! kill -0 "$server_pid" 2>/dev/null; then
		echo "demo.sh: the server exited during start-up" >&2
		exit 1
	fi
	sleep 0.1
done
if [[ -z "$addr" ]]; then
	echo "demo.sh: the server did not report its address within 30s" >&2
	exit 1
fi
echo "demo.sh: the server listens on $addr (log: $work/server.log)" >&2

# The driver waits for /healthz before it starts.
bank_url=$(sed -n 's/.*msg="fake bank listening" url=\([^ ]*\).*/\1/p' "$work/server.log" | head -n 1)
"$work/demo" -url "http://$addr" -database-url "$DATABASE_URL" \
	-idemgen "$work/idemgen" -payments "$work/payments" -bank-url "$bank_url" \
	-bank-webhook-secret "$webhook_secret"

echo
if [[ -t 0 && -t 1 ]]; then
	# On a terminal the server stays up so that the support page can be opened; its address is
	# printed only then, since it answers only while the server runs.
	echo "The support page (read-only; user admin, password $admin_token):"
	echo "  http://admin:$admin_token@$addr/admin/idempotency"
	read -r -p "The server keeps running: press Enter to stop it. " _ || true
fi
# Stopped here rather than at exit, so that the last line is true when it is printed.
kill -TERM "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
server_pid=
if [[ -t 0 && -t 1 ]]; then
	echo "The server has stopped."
else
	# Nobody (CI, a pipe) could have opened the support page before the server stopped.
	echo "The server has stopped. Run make demo in a terminal to keep it running and open its support page."
fi
