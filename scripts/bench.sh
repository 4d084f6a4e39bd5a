#!/usr/bin/env bash
# bench.sh [go test args...]: runs the runtime benchmarks and prints each one's time per op as a
# ratio of the baseline measured in the same run (BenchmarkBaseline*), since absolute times on
# a shared machine say little. Needs TEST_DATABASE_URL (make bench provides it).
set -euo pipefail
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench . -benchmem -count=1 "$@" ./runtime/... | tee "$out"
echo
echo "ratios against the baseline of the same run (lower is better):"
awk '
	/^Benchmark/ && /ns\/op/ {
		name = $1; sub(/-[0-9]+$/, "", name)
		for (i = 2; i <= NF; i++) if ($(i) == "ns/op") ns[name] = $(i-1)
		order[++n] = name
		if (name ~ /^BenchmarkBaseline/ && base == "") base = name
	}
	END {
		if (base == "") { print "  no BenchmarkBaseline* in this run"; exit 1 }
		for (i = 1; i <= n; i++) printf "  %-40s %10.0f ns/op  %5.2fx %s\n", order[i], ns[order[i]], ns[order[i]] / ns[base], (order[i] == base ? "(baseline)" : "")
	}' "$out"
