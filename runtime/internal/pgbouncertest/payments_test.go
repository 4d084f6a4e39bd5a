package pgbouncertest_test

// The payments example (examples/payments) started through a real pgbouncer in transaction mode
// with pgx's describe_exec mode, which cannot work there. It lives here because only the
// runtime's packages may use this harness.

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/internal/pgbouncertest"
)

// TestExampleRefusesAPoolerModeFirst: instances of the example started together through
// pgbouncer in transaction mode with default_query_exec_mode=describe_exec each exit with the
// store's refusal (idem.ErrPoolerMode and what to set instead), and nothing of the start-up ran
// before it: no table was created in the schema (the runtime's, the example's or River's), so no
// statement could have run crossed with another instance's (SQLSTATE 26000, 08P01) first.
func TestExampleRefusesAPoolerModeFirst(t *testing.T) {
	t.Parallel()
	const instances = 4
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{NoMigrate: true, MaxConns: 2})
	b := pgbouncertest.Start(t, &pgbouncertest.Opts{SearchPath: sch.Name})
	url := b.URLWith(pgx.QueryExecModeDescribeExec)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	codes := make([]int, instances)
	logs := make([]bytes.Buffer, instances)
	for i := range instances {
		wg.Go(func() {
			codes[i] = payments.Main(ctx, []string{"-addr", "127.0.0.1:0", "-database-url", url}, &logs[i])
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		cancel()
		<-done
		t.Fatal("the instances did not exit within 90s of starting through pgbouncer with describe_exec")
	}
	for i := range instances {
		log := logs[i].String()
		if codes[i] != 1 || !strings.Contains(log, "default_query_exec_mode=describe_exec cannot work there") || !strings.Contains(log, "default_query_exec_mode=cache_describe") {
			t.Errorf("instance %d of %d: exit %d, want 1 with the store's refusal of describe_exec naming the fix; its log:\n%s", i+1, instances, codes[i], log)
		}
		if strings.Contains(log, "msg=migrated") || strings.Contains(log, "SQLSTATE") {
			t.Errorf("instance %d of %d ran statements before the refusal; its log:\n%s", i+1, instances, log)
		}
	}
	var tables []string
	rows, err := sch.Pool.Query(context.Background(), `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, sch.Name)
	if err == nil {
		tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) > 0 {
		t.Errorf("the refused instances created %s in the schema: the start-up touched the database before the refusal", strings.Join(tables, ", "))
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the instances ran into the test's deadline")
	}
}
