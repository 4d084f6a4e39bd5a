package idemhttp_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/runtime/internal/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The setup shared with the other runtime package's tests (runtime/internal/storetest).
type (
	env          = storetest.Env
	lockedBuffer = storetest.LockedBuffer
)

var (
	newEnv         = storetest.NewEnv
	insertPayment  = storetest.InsertPayment
	policy         = storetest.Policy
	request        = storetest.Request
	written        = storetest.Written
	kindName       = storetest.KindName
	newDebugLogger = storetest.NewDebugLogger
)

// idemtestPool is a pool on e's server that is already closed, as at a shutdown racing a request.
func idemtestPool(t testing.TB, e *env) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), e.Sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	return p
}
