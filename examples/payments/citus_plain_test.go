package payments

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemtest"
)

// On plain PostgreSQL the start's Citus check finds no extension and says nothing; the tables it
// would look for are the ones the example's migrations create, with idemgen's two.
// (TestCitusExampleDistribution, in make citus, checks the warning on a cluster.)
func TestNoCitusWarningOnPlainPostgreSQL(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Migrate(ctx, sch.Pool); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs bytes.Buffer
	warnLocalOnCitus(ctx, sch.Pool, sch.Name, sch.Table, slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)))
	mu.Lock()
	defer mu.Unlock()
	if logs.Len() > 0 {
		t.Errorf("the Citus check logged on plain PostgreSQL: %q", logs.String())
	}
	want := []string{"payments", "refunds", "payment_events", "transfers", "payouts", sch.Table, sch.Table + "_events"}
	if got := exampleTables(sch.Table); !slices.Equal(got, want) {
		t.Errorf("exampleTables = %v; want %v", got, want)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
