#!/usr/bin/env bash
# bench-statements.sh: what `make bench-statements` runs. It counts the instructions PostgreSQL
# spends on each statement of a request, for each bench server (bench/): make
# bench-instructions' per-request totals, split statement by statement, so that the difference
# between two servers can be read where it is.
#
# PostgreSQL runs under valgrind's callgrind (scripts/pg.sh, PG_CALLGRIND=1) with a dump of each
# backend's count before every portal is created (a statement's bind), after every command
# ends (its execute, commit included for a COMMIT) and after every ReadyForQuery (a batch's Sync:
# the commit of an implicit transaction). BenchmarkFirstHandler or BenchmarkReplayHandler runs
# with BENCH_STATEMENTS_TRACE set (bench/statements_test.go), which records every statement each
# backend was sent, in order, and the request it belongs to; this script pairs each backend's
# dumps with that list. Every statement gets three figures: what ran between the previous
# message and its bind ("before": reading messages, starting a transaction, parsing a statement
# the first time), the statement itself from bind to the end of its execute, and, when it ends
# a batch, the Sync after it ("sync"). A row's figures are means over its requests after the
# first WARM (the first ones prepare statements and fill caches); requests in which a
# statement failed are left out.
# BENCH_STATEMENTS_ONLY, a regular expression, keeps the rows whose benchmark (FirstHandler/peer,
# ReplayHandler/lease, ...) it matches; BENCH_STATEMENTS_REQUESTS (60) and BENCH_STATEMENTS_WARM
# (20) set how many requests each row runs and how many of the first it leaves out.
# It needs valgrind (installed by scripts/deps.sh when missing) and PostgreSQL's server binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh valgrind
dir=$(mktemp -d /tmp/idemgen-statements.XXXXXX)
pgdir=$dir/pg
trap 'scripts/pg.sh stop "$pgdir"; rm -rf "$dir"' EXIT
url=$(PG_CALLGRIND=1 PG_CALLGRIND_OPTS='--dump-before=CreatePortal --dump-after=EndCommand --dump-after=ReadyForQuery --dump-instr=no --dump-line=no' \
	scripts/pg.sh start "$pgdir")
echo "bench-statements.sh: PostgreSQL under callgrind at $url" >&2
bin=$dir/payments.test
go test -c -o "$bin" ./bench
requests=${BENCH_STATEMENTS_REQUESTS:-60} warm=${BENCH_STATEMENTS_WARM:-20}
rows=(
	"first executions, idempotency off (ceiling)|FirstHandler/ceiling"
	"first executions, hand-written peer|FirstHandler/peer"
	"first executions, hand-written peer, runtime's row|FirstHandler/peer-row"
	"first executions, hand-written (advisory lock)|FirstHandler/handwritten"
	"first executions, claim: transaction|FirstHandler/transaction"
	"first executions, claim: transaction, history: true|FirstHandler/transaction-history"
	"first executions, hand-written lease peer|FirstHandler/peer-lease"
	"first executions, hand-written lease peer, runtime's row|FirstHandler/peer-lease-row"
	"first executions, claim: lease|FirstHandler/lease"
	"first executions, claim: lease, history: true|FirstHandler/lease-history"
	"replays, hand-written peer|ReplayHandler/peer"
	"replays, hand-written peer, runtime's row|ReplayHandler/peer-row"
	"replays, hand-written (advisory lock)|ReplayHandler/handwritten"
	"replays, claim: transaction|ReplayHandler/transaction"
	"replays, claim: transaction, history: true|ReplayHandler/transaction-history"
	"replays, hand-written lease peer|ReplayHandler/peer-lease"
	"replays, hand-written lease peer, runtime's row|ReplayHandler/peer-lease-row"
	"replays, claim: lease|ReplayHandler/lease"
	"replays, claim: lease, history: true|ReplayHandler/lease-history"
)
for row in "${rows[@]}"; do
	label=${row%%|*} bench=${row#*|}
	[[ $bench =~ ${BENCH_STATEMENTS_ONLY:-.} ]] || continue
	trace=$dir/trace
	before=$(ls "$pgdir/callgrind")
	out=$(cd bench && BENCH_STATEMENTS_TRACE=$trace TEST_DATABASE_URL=$url "$bin" \
		-test.run '^$' -test.bench "^Benchmark${bench%%/*}\$/^${bench#*/}\$" -test.benchtime="${requests}x" 2>&1) || {
		echo "bench-statements.sh: Benchmark$bench failed:" >&2
		echo "$out" >&2
		exit 1
	}
	# Each backend writes its last part as it exits: wait until no new file has appeared for two
	# seconds (at most thirty).
	n=-1 deadline=$((SECONDS + 30))
	while ((SECONDS < deadline)); do
		m=$(ls "$pgdir/callgrind" | wc -l)
		((m == n)) && break
		n=$m
		sleep 2
	done
	# One line per dump of the backends in the trace, in order: PID, trigger, instructions.
	dumps=$dir/dumps
	: >"$dumps"
	for pid in $(cut -f1 "$trace" | sort -u); do
		for f in $(ls "$pgdir/callgrind" | grep -E "^callgrind\.$pid\.[0-9]+$" | sort -t. -k3 -n); do
			awk -v pid="$pid" '/^desc: Trigger:/ {t = $NF} /^(summary|totals):/ {print pid "\t" t "\t" $2; exit}' "$pgdir/callgrind/$f"
		done >>"$dumps"
	done
	echo
	echo "$label (PostgreSQL instructions per request, means over the requests after the first $warm)"
	awk -F'\t' -v warm="$warm" '
		# The trace: the statements of each backend, in order.
		FNR == NR {
			if ($3 == 1) { if (!($2 in failed)) nfailed++; failed[$2] = 1; next }
			i = ++count[$1]; req[$1, i] = $2; line[$1, i] = FNR
			if ($2 > maxreq) maxreq = $2
			sql = $4
			gsub(/"[a-z0-9_]+"\./, "", sql)
			gsub(/"/, "", sql)
			text[$1, i] = sql
			next
		}
		# The dumps, paired with the statements: before the bind of statement i, from its bind to
		# the end of its execute (then i moves on), the Sync behind the last statement run.
		{
			pid = $1; trig = $2; ir = $3
			if (!(pid in at)) at[pid] = 1
			i = at[pid]
			if (trig ~ /CreatePortal/) { cost(pid, i, "before", ir) }
			else if (trig ~ /EndCommand/) { cost(pid, i, "stmt", ir); at[pid] = i + 1 }
			else if (trig ~ /ReadyForQuery/ && i > 1) { cost(pid, i - 1, "sync", ir) }
		}
		function cost(pid, i, part, ir,    r, k) {
			if (!((pid, i) in req)) return
			r = req[pid, i]
			if (r <= warm) return
			seen[r] = 1
			c[r, pid, i, part] += ir
		}
		END {
			for (r in seen) if (!(r in failed)) nreq++
			if (nreq == 0) { print "  no request measured"; exit }
			# Each request: its statements in the order they were sent (the trace line), named by
			# their text and their occurrence within the request; summed per name over requests,
			# in the order of their first appearance.
			for (k in c) {
				split(k, a, SUBSEP); r = a[1]
				if (r in failed || done[a[1], a[2], a[3]]++) continue
				n[r]++; stmts[r, n[r]] = a[2] SUBSEP a[3]
			}
			for (r = warm + 1; r <= maxreq; r++) {
				if (!(r in seen) || r in failed) continue
				m = n[r]
				for (x = 1; x <= m; x++) keys[x] = stmts[r, x]
				for (x = 2; x <= m; x++) { v = keys[x]; for (y = x - 1; y >= 1 && line[keys[y]] > line[v]; y--) keys[y + 1] = keys[y]; keys[y + 1] = v }
				for (x = 1; x <= m; x++) {
					name = substr(text[keys[x]], 1, 72)
					id = name " #" (++occ[r, name])
					if (!(id in slot)) { slot[id] = ++nslots; ids[nslots] = id }
					b[id] += c[r, keys[x], "before"]; s[id] += c[r, keys[x], "stmt"]; y2[id] += c[r, keys[x], "sync"]
				}
			}
			printf "  %-80s %9s %9s %9s %9s\n", "statement", "before", "statement", "sync", "total"
			for (x = 1; x <= nslots; x++) {
				id = ids[x]
				t = b[id] + s[id] + y2[id]
				printf "  %-80s %8.1fk %8.1fk %8.1fk %8.1fk\n", id, b[id] / nreq / 1000, s[id] / nreq / 1000, y2[id] / nreq / 1000, t / nreq / 1000
				tb += b[id]; ts += s[id]; ty += y2[id]
			}
			printf "  %-80s %8.1fk %8.1fk %8.1fk %8.1fk\n", "all (" nreq " requests)", tb / nreq / 1000, ts / nreq / 1000, ty / nreq / 1000, (tb + ts + ty) / nreq / 1000
			# A failed statement has no dump after its execute, and the server skips the rest of
			# its batch: the pairing of the later dumps of that backend cannot be trusted.
			if (nfailed) printf "  warning: %d requests had a failed statement; figures after them may be misattributed\n", nfailed
		}
	' "$trace" "$dumps"
done
echo
echo "Instructions per request in each backend that ran the row's statements: \"before\" is what ran between the previous"
echo "message and the statement's bind, \"statement\" its bind and execute, \"sync\" the Sync behind a batch's last statement"
echo "(an implicit transaction's commit). #2 marks a statement's second run within one request."
