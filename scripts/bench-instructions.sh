#!/usr/bin/env bash
# bench-instructions.sh: what `make bench-instructions` runs. It counts the instructions each
# bench server (bench/, serving examples/payments) spends per request, in PostgreSQL and in Go, with valgrind's
# callgrind: a count, not a time, so the same code gives the same figure to about 1% on any
# machine, busy or not, where make bench-http's ratios move by 10% or more from run to run.
#
# Each row runs BenchmarkFirstHandler or BenchmarkReplayHandler (bench/handler_test.go: one
# request at a time, in process, through the server's real HTTP handler) twice, with 20 and with
# 220 requests, and reports the difference divided by 200, so that what both runs share (the
# schema's set-up, the first request's statement preparation) cancels out:
#   - PostgreSQL: a throwaway server (scripts/pg.sh, PG_CALLGRIND=1) whose processes all run under
#     callgrind; the count is the sum over the backends that ended during the run (every
#     connection the benchmark opened);
#   - Go: the test binary itself under callgrind, run by scripts/go-callgrind.sh (one thread, the
#     collector off, its settings explained there); the allocations the collector would collect
#     are reported beside, in allocs and bytes per request.
# BENCH_INSTRUCTIONS_ONLY, a regular expression, keeps the rows whose benchmark (FirstHandler/lease,
# ReplayHandler/transaction-history, ...) it matches, and the peers their ratios need.
# It needs valgrind (installed by scripts/deps.sh when missing) and PostgreSQL's server binaries,
# and takes a few minutes: everything runs about fifty times slower under callgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh valgrind

dir=$(mktemp -d /tmp/idemgen-instr.XXXXXX)
pgdir=$dir/pg
trap 'scripts/pg.sh stop "$pgdir"; rm -rf "$dir"' EXIT
url=$(PG_CALLGRIND=1 scripts/pg.sh start "$pgdir")
echo "bench-instructions.sh: PostgreSQL under callgrind at $url" >&2
bin=$dir/payments.test
go test -c -o "$bin" ./bench

small=20 big=220
rows=(
	"first executions, idempotency off (ceiling)|FirstHandler/ceiling"
	"first executions, hand-written peer|FirstHandler/peer"
	"first executions, hand-written peer, runtime's row|FirstHandler/peer-row"
	"first executions, hand-written peer, runtime's row and guarantees|FirstHandler/peer-row-guarded"
	"first executions, hand-written lease peer|FirstHandler/peer-lease"
	"first executions, hand-written lease peer, runtime's row|FirstHandler/peer-lease-row"
	"first executions, hand-written (advisory lock)|FirstHandler/handwritten"
	"first executions, claim: lease|FirstHandler/lease"
	"first executions, claim: lease, history: true|FirstHandler/lease-history"
	"first executions, claim: transaction|FirstHandler/transaction"
	"first executions, claim: transaction, history: true|FirstHandler/transaction-history"
	"replays, hand-written peer|ReplayHandler/peer"
	"replays, hand-written peer, runtime's row|ReplayHandler/peer-row"
	"replays, hand-written peer, runtime's row and guarantees|ReplayHandler/peer-row-guarded"
	"replays, hand-written lease peer|ReplayHandler/peer-lease"
	"replays, hand-written lease peer, runtime's row|ReplayHandler/peer-lease-row"
	"replays, hand-written (advisory lock)|ReplayHandler/handwritten"
	"replays, claim: lease|ReplayHandler/lease"
	"replays, claim: lease, history: true|ReplayHandler/lease-history"
	"replays, claim: transaction|ReplayHandler/transaction"
	"replays, claim: transaction, history: true|ReplayHandler/transaction-history"
)

# total FILES...: the sum of the Ir totals of callgrind output files.
total() {
	local sum=0 f ir
	for f in "$@"; do
		ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
		sum=$((sum + ${ir:-0}))
	done
	echo "$sum"
}

# measure BENCH N: runs the benchmark with N requests; prints "pg go allocs bytes".
measure() {
	local before after new out gofile
	before=$(ls "$pgdir/callgrind")
	gofile=$dir/go.callgrind
	out=$(TEST_DATABASE_URL=$url GO_CALLGRIND_BIN=$bin scripts/go-callgrind.sh "$gofile" "$1" "$2" 2>&1) || {
		echo "bench-instructions.sh: Benchmark$1 with $2 requests failed:" >&2
		echo "$out" >&2
		exit 1
	}
	# The benchmark's pools close as it ends, and each backend writes its count as it exits:
	# wait until no new count has appeared for two seconds (at most thirty).
	local n=-1 deadline=$((SECONDS + 30))
	while ((SECONDS < deadline)); do
		local m
		m=$(ls "$pgdir/callgrind" | wc -l)
		((m == n)) && break
		n=$m
		sleep 2
	done
	after=$(ls "$pgdir/callgrind")
	new=$(comm -13 <(echo "$before" | sort) <(echo "$after" | sort) | sed "s|^|$pgdir/callgrind/|")
	# shellcheck disable=SC2086
	echo "$(total $new) $(total "$gofile") $(echo "$out" | awk '/allocs\/op/ {for (i = 2; i <= NF; i++) {if ($i == "allocs/op") a = $(i-1); if ($i == "B/op") b = $(i-1)}} END {print a+0, b+0}')"
	rm -f "$gofile"
}

if [[ -n ${BENCH_INSTRUCTIONS_ONLY:-} ]]; then
	kept=()
	for row in "${rows[@]}"; do
		# A row's ratios need its peers: they are kept too.
		if [[ ${row#*|} =~ $BENCH_INSTRUCTIONS_ONLY || ${row#*|} =~ /peer(-lease)?$ ]]; then kept+=("$row"); fi
	done
	rows=("${kept[@]}")
fi

declare -A pg go allocs bytes
for row in "${rows[@]}"; do
	bench=${row#*|}
	read -r pg1 go1 _ _ <<<"$(measure "$bench" $small)"
	read -r pg2 go2 a b <<<"$(measure "$bench" $big)"
	pg[$bench]=$(((pg2 - pg1) / (big - small))) go[$bench]=$(((go2 - go1) / (big - small)))
	allocs[$bench]=$a bytes[$bench]=$b
done
# ratio A B: A / B to two decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
printf '%-66s %13s %7s %7s %13s %7s %7s %10s %8s\n' row "PG instr/req" "× peer" "× lp" "Go instr/req" "× peer" "× lp" allocs/req B/req
for row in "${rows[@]}"; do
	label=${row%%|*} bench=${row#*|}
	peer=${bench%%/*}/peer leasePeer=${bench%%/*}/peer-lease
	lpPG="" lpGo=""
	if [[ $bench == */lease || $bench == */lease-history || $bench == */peer-lease || $bench == */peer-lease-row ]]; then
		lpPG=$(ratio "${pg[$bench]}" "${pg[$leasePeer]}") lpGo=$(ratio "${go[$bench]}" "${go[$leasePeer]}")
	fi
	printf '%-66s %13d %7s %7s %13d %7s %7s %10s %8s\n' "$label" "${pg[$bench]}" "$(ratio "${pg[$bench]}" "${pg[$peer]}")" "$lpPG" \
		"${go[$bench]}" "$(ratio "${go[$bench]}" "${go[$peer]}")" "$lpGo" "${allocs[$bench]}" "${bytes[$bench]}"
done
echo
echo "instructions per request: (count with $big requests - count with $small) / $((big - small)); PostgreSQL's over every backend"
echo "of the run, Go's over the whole test binary (GOMAXPROCS=1, GOGC=off: the collector's share is not counted)."
echo "× peer is the ratio to the hand-written peer of the same kind of request (bench/peer_test.go); × lp, for lease mode,"
echo "to the hand-written lease peer's (bench/peer_lease_test.go)."
