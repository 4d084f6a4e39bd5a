package bench

// The statement trace behind make bench-statements (scripts/bench-statements.sh): with
// BENCH_STATEMENTS_TRACE naming a file, every bench server built by inProcess records each
// statement its pool runs, in the order its connection sends it, with the connection's backend
// PID and the number of the request it belongs to. The script runs PostgreSQL under callgrind
// with a dump of the backend's count before each statement's bind and after its execute, and
// pairs the dumps of each backend with this trace, statement by statement: what PostgreSQL
// spends on each statement of a request, and between them (the Sync that ends a batch, the
// commit of its implicit transaction, reading the next messages).

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

const envStatementsTrace = "BENCH_STATEMENTS_TRACE"

// statementTrace writes one line per statement: backend PID, request number, 0 and the
// statement's text on one line, its comments left out; or, for a failure, PID, request number
// and 1.
type statementTrace struct {
	mu  sync.Mutex
	w   *bufio.Writer
	f   *os.File
	req atomic.Int64 // the request being served (set by inProcess before each)
}

var (
	_ pgx.QueryTracer = (*statementTrace)(nil)
	_ pgx.BatchTracer = (*statementTrace)(nil)
)

// newStatementTrace opens the trace file that BENCH_STATEMENTS_TRACE names, or returns nil
// when it is unset.
func newStatementTrace(b testing.TB) *statementTrace {
	path := os.Getenv(envStatementsTrace)
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatalf("%s: %v", envStatementsTrace, err)
	}
	t := &statementTrace{w: bufio.NewWriter(f), f: f}
	b.Cleanup(func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if err := t.w.Flush(); err != nil {
			b.Errorf("%s: %v", envStatementsTrace, err)
		}
		if err := t.f.Close(); err != nil {
			b.Errorf("%s: %v", envStatementsTrace, err)
		}
	})
	return t
}

func (t *statementTrace) record(conn *pgx.Conn, sql string, failed bool) {
	fail := 0
	if failed {
		fail = 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%d\t%d\t%d\t%s\n", conn.PgConn().PID(), t.req.Load(), fail, oneLine(sql))
}

// oneLine is sql without its comment lines, its whitespace collapsed.
func oneLine(sql string) string {
	var words []string
	for line := range strings.SplitSeq(sql, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		words = append(words, strings.Fields(line)...)
	}
	return strings.Join(words, " ")
}

// A query is recorded when it starts; a batch's queries when the batch starts, in the order
// they are sent (pgx may read their results in another: a batch's BEGIN is read last). A
// request during which a statement failed is marked, and the script leaves it out: a failed
// statement's execution ends without the dump after it, and the server skips the rest of its
// batch.
func (t *statementTrace) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	t.record(conn, data.SQL, false)
	return ctx
}
func (t *statementTrace) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err != nil {
		t.record(conn, "", true)
	}
}
func (t *statementTrace) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	for _, q := range data.Batch.QueuedQueries {
		t.record(conn, q.SQL, false)
	}
	return ctx
}
func (t *statementTrace) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if data.Err != nil {
		t.record(conn, "", true)
	}
}
func (t *statementTrace) TraceBatchEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	if data.Err != nil {
		t.record(conn, "", true)
	}
}
