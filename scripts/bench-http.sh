#!/usr/bin/env bash
# bench-http.sh: what `make bench-http` runs. First BenchmarkGenerate (internal/generator/: idemgen generate
# against oapi-codegen alone), then BenchmarkHTTP (bench/: the payments example over HTTP with
# and without idempotency, beside the hand-written peers and the hand-written net/http handler),
# which prints one table with both and writes it as JSON to $BENCH_HTTP_JSON (default
# bench-http.json). BENCH_HTTP_PROFILE=DIR also writes the CPU and alloc profiles of both claim
# modes, both peers, the guarded row peer and the hand-written handler, and a database profile
# per server and row (pgss-*.txt), to DIR.
#
# BENCH_HTTP_BASE=REV (a git revision; default 5481ae6) also serves the claim: lease and
# claim: transaction servers of that revision in the same rounds, beside today's: their rows end
# in "(REV)" and carry their ratios to today's ceiling and peers. The script builds REV's bench
# test binary and idemgen from `git archive REV` in a temporary directory (removed on exit) and
# names them to BenchmarkHTTP with BENCH_HTTP_BASE_DIR and BENCH_HTTP_BASE_REV (bench/base_test.go).
# BENCH_HTTP_BASE=none, or set but empty (BENCH_HTTP_BASE=), runs today's servers alone.
# docs/performance.md lists the other knobs. Needs TEST_DATABASE_URL (make bench-http provides it).
set -euo pipefail
if [[ -z "${TEST_DATABASE_URL:-}" ]]; then
	echo "bench-http.sh: TEST_DATABASE_URL is not set; run \`make bench-http\` (it starts a throwaway PostgreSQL)" \
		"or set TEST_DATABASE_URL to a PostgreSQL server you may create schemas in" >&2
	exit 2
fi
cd "$(dirname "$0")/.."

# go test runs each package in its own directory: make the paths absolute first.
export BENCH_HTTP_JSON=$(realpath -m "${BENCH_HTTP_JSON:-bench-http.json}")
if [[ -n "${BENCH_HTTP_PROFILE:-}" ]]; then
	export BENCH_HTTP_PROFILE=$(realpath -m "$BENCH_HTTP_PROFILE")
fi

gen=$(mktemp)
basedir=
trap 'rm -f "$gen"; [[ -z $basedir ]] || rm -rf "$basedir"' EXIT

# The base revision's servers (bench/base_test.go): unset means the default, none or empty means off.
base=${BENCH_HTTP_BASE-5481ae6}
unset BENCH_HTTP_BASE_DIR BENCH_HTTP_BASE_REV
if [[ -n $base && $base != none ]]; then
	if ! git rev-parse --verify --quiet "$base^{commit}" >/dev/null; then
		echo "bench-http.sh: BENCH_HTTP_BASE=$base is not a commit of this repository (BENCH_HTTP_BASE=none runs without it)" >&2
		exit 1
	fi
	rev=$(git rev-parse --short "$base^{commit}")
	basedir=$(mktemp -d /tmp/idemgen-bench-base.XXXXXX)
	mkdir "$basedir/src"
	git archive "$rev" | tar -x -C "$basedir/src"
	if [[ ! -f $basedir/src/bench/servers_test.go ]]; then
		echo "bench-http.sh: BENCH_HTTP_BASE=$base ($rev) has no bench/servers_test.go, whose child servers the benchmark starts" >&2
		exit 1
	fi
	echo "bench-http.sh: building the claim: lease and claim: transaction servers of $rev (BENCH_HTTP_BASE=$base)" >&2
	(cd "$basedir/src" && go test -c -o "$basedir/bench.test" ./bench && go build -o "$basedir/idemgen" ./cmd/idemgen)
	cp "$basedir/src/examples/payments/schema.sql" "$basedir/payments-schema.sql"
	rm -rf "$basedir/src"
	export BENCH_HTTP_BASE_DIR=$basedir BENCH_HTTP_BASE_REV=$rev
fi

go test -run '^$' -bench '^BenchmarkGenerate$' -benchtime="${BENCH_GENERATE_TIMES:-7x}" ./internal/generator | tee "$gen"
BENCH_HTTP_GENERATOR=$(awk '
	/^BenchmarkGenerate/ {
		n = $2
		for (i = 3; i <= NF; i++) {
			if ($(i) == "idemgen-ms/op") a = $(i-1)
			if ($(i) == "oapi-codegen-ms/op") o = $(i-1)
			if ($(i) == "x-oapi-codegen") r = $(i-1)
		}
	}
	END {
		if (r == "") exit 1
		printf "spec=internal/annotate/testdata/corpus/adyen/CheckoutService-v71.json, annotated;idemgen-ms=%s;oapi-codegen-ms=%s;ratio=%s;n=%s", a, o, r, n
	}' "$gen") || { echo "bench-http.sh: BenchmarkGenerate printed no x-oapi-codegen metric" >&2; exit 1; }
export BENCH_HTTP_GENERATOR
echo
go test -run '^$' -bench '^BenchmarkHTTP$' -benchtime=1x -timeout 12m ./bench
