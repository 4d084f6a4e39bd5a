#!/usr/bin/env bash
# go-callgrind.sh OUT BENCH N [ARGS...]: runs bench/'s benchmark BENCH
# ("FirstHandler/transaction") with N requests in the test binary $GO_CALLGRIND_BIN under
# valgrind's callgrind, writing the count to OUT, from bench/ (TEST_DATABASE_URL must
# name the database). ARGS go to the test binary too. It is how make bench-instructions and make
# bench-compare count Go, so that both count the same way:
#   - GOMAXPROCS=1: one thread, so no spinning scheduler thread is in the count;
#   - GOGC=off: the collector's work depends on when it happens to run (the allocations it would
#     collect are reported beside the count instead, with -test.benchmem);
#   - GODEBUG=asyncpreemptoff=1: callgrind cannot follow Go's preemption signals;
#   - GODEBUG=memprofilerate=0: the heap profiler's sampling records a stack trace (about 60k
#     instructions) at random allocations, one per 512 KiB on average: a few per run, a few
#     thousand instructions per request up or down at random;
#   - GODEBUG=cpu.rdtscp=off: valgrind's CPU says it has RDTSCP, which Go's clock then uses, and
#     valgrind 3.19 cannot run it (SIGILL in runtime.cputicks on machines whose own CPU lacks it).
# Each level of the -test.bench pattern is anchored at both ends: "lease$" alone would also run
# peer-lease.
set -euo pipefail
out=$1 bench=$2 n=$3
shift 3
cd "$(dirname "$0")/../bench"
GOMAXPROCS=1 GOGC=off GODEBUG=asyncpreemptoff=1,memprofilerate=0,cpu.rdtscp=off exec valgrind -q --tool=callgrind \
	--callgrind-out-file="$out" "$GO_CALLGRIND_BIN" \
	-test.run '^$' -test.bench "^Benchmark${bench%%/*}\$/^${bench#*/}\$" -test.benchtime="${n}x" "$@"
