#!/usr/bin/env bash
# bench-compare.sh: what `make bench-compare` runs. It counts the Go instructions each bench
# server (bench/) spends per request in two builds side by side: the work tree and
# BASE (a git revision, default HEAD), so that a change's effect on the runtime's own Go work can
# be read off in one run, beside the hand-written row twins (the peers that store the runtime's
# key row) measured in the same runs.
#
# The count is make bench-instructions' Go count (callgrind on the test binary, run by
# scripts/go-callgrind.sh), with more requests: the count with 520
# requests minus the count with 20, divided by 500. Two runs of the same build still differ by a
# few thousand instructions per request (the scheduler's and sysmon's share depends on timing),
# more than many changes save, so the two builds alternate row by row, round after round
# (BENCH_COMPARE_ROUNDS, default 2), and the table shows every round's count and the mean change.
# PostgreSQL runs at full speed (scripts/pg.sh): only Go is counted.
#
#   BASE=main~3 make bench-compare
#   BENCH_COMPARE_ONLY='FirstHandler/(transaction|peer-row)$' make bench-compare
#
# It needs valgrind (installed by scripts/deps.sh when missing) and PostgreSQL's server binaries,
# and takes about two minutes per round.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh valgrind

base=${BASE:-HEAD}
rounds=${BENCH_COMPARE_ROUNDS:-2}
only=${BENCH_COMPARE_ONLY:-}
if ! git rev-parse --verify --quiet "$base^{commit}" >/dev/null; then
	echo "bench-compare.sh: BASE=$base is not a commit of this repository" >&2
	exit 1
fi
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
	echo "bench-compare.sh: BENCH_COMPARE_ROUNDS=$rounds is not a positive number" >&2
	exit 1
fi

rows=(
	FirstHandler/peer-row FirstHandler/peer-row-guarded FirstHandler/transaction FirstHandler/transaction-history
	FirstHandler/peer-lease-row FirstHandler/lease FirstHandler/lease-history
	ReplayHandler/peer-row ReplayHandler/peer-row-guarded ReplayHandler/transaction ReplayHandler/transaction-history
	ReplayHandler/peer-lease-row ReplayHandler/lease ReplayHandler/lease-history
)
if [[ -n $only ]]; then
	kept=()
	for r in "${rows[@]}"; do
		if [[ $r =~ $only ]]; then kept+=("$r"); fi
	done
	rows=("${kept[@]}")
	if ((${#rows[@]} == 0)); then
		echo "bench-compare.sh: BENCH_COMPARE_ONLY=$only selects no row" >&2
		exit 1
	fi
fi

dir=$(mktemp -d /tmp/idemgen-compare.XXXXXX)
trap 'scripts/pg.sh stop "$dir/pg" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
mkdir "$dir/base-src"
git archive "$base" | tar -x -C "$dir/base-src"
echo "bench-compare.sh: building $base ($(git rev-parse --short "$base")) and the work tree" >&2
# The benchmarks moved from examples/payments to bench/: a BASE from before the move builds them
# where they were.
basepkg=./bench
[[ -d $dir/base-src/bench ]] || basepkg=./examples/payments
(cd "$dir/base-src" && go test -c -o "$dir/base.test" "$basepkg")
go test -c -o "$dir/work.test" ./bench
url=$(scripts/pg.sh start "$dir/pg")

# count BIN ROW N prints the callgrind total of build BIN running benchmark ROW with N requests
# and its allocations per request, or "absent" when BIN has no such benchmark.
count() {
	local out cg=$dir/run.cg
	out=$(TEST_DATABASE_URL=$url GO_CALLGRIND_BIN=$dir/$1.test scripts/go-callgrind.sh "$cg" "$2" "$3" -test.benchmem 2>&1) || {
		echo "bench-compare.sh: Benchmark$2 with $3 requests failed in the $1 build:" >&2
		echo "$out" >&2
		exit 1
	}
	if ! grep -q 'allocs/op' <<<"$out"; then
		echo absent
		return
	fi
	echo "$(awk '/^(summary|totals):/ {print $2; exit}' "$cg") $(grep -o '[0-9]* allocs/op' <<<"$out" | head -1 | cut -d' ' -f1)"
}

declare -A got allocs
for ((round = 1; round <= rounds; round++)); do
	for r in "${rows[@]}"; do
		for bin in base work; do
			small=$(count "$bin" "$r" 20)
			big=$(count "$bin" "$r" 520)
			if [[ $small == absent || $big == absent ]]; then
				got[$bin,$r]+=" -"
				continue
			fi
			got[$bin,$r]+=" $(((${big% *} - ${small% *}) / 500))"
			allocs[$bin,$r]=${big#* }
		done
	done
	echo "bench-compare.sh: round $round of $rounds done" >&2
done

# mean LIST: the mean of the numbers in LIST, or "-" when a round had none.
mean() {
	awk '{ n = 0; s = 0; for (i = 1; i <= NF; i++) { if ($i == "-") { print "-"; exit } s += $i; n++ } if (n) printf "%.0f\n", s / n; else print "-" }' <<<"$1"
}

printf '%-30s %-24s %-24s %9s %7s %13s\n' row "base ($(git rev-parse --short "$base"))" "work tree" change "" allocs/req
for r in "${rows[@]}"; do
	b=$(mean "${got[base,$r]}")
	w=$(mean "${got[work,$r]}")
	change=- pct=
	if [[ $b != - && $w != - ]]; then
		change=$((w - b))
		pct=$(awk -v b="$b" -v w="$w" 'BEGIN { printf "%+.1f%%", 100 * (w - b) / b }')
	fi
	printf '%-30s %-24s %-24s %9s %7s %13s\n' "$r" "${got[base,$r]# }" "${got[work,$r]# }" "$change" "$pct" \
		"${allocs[base,$r]:--} -> ${allocs[work,$r]:--}"
done
cat <<'EOF'

Go instructions per request: (count with 520 requests - count with 20) / 500, each round's, base and work tree
alternating row by row; change is the work tree's mean minus the base's. The row twins (peer-row, peer-lease-row)
are hand-written handlers storing the runtime's key row: a change to the runtime leaves them where they were, so
their change is the noise of this run. peer-row-guarded is peer-row with the runtime's guarantees written by hand;
it calls the runtime's Fingerprinter, so a change to the fingerprint moves it too. "-": no such benchmark in that
build.
EOF
