package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// deadRelease is a real pool whose next fail releases run on a connection whose server session
// the test has just terminated: the release really fails, the database stays healthy.
type deadRelease struct {
	*pgxpool.Pool
	t       testing.TB
	release string
	fail    atomic.Int32
	failed  atomic.Int32
}

// Query fails the release (which the Store sends as a query: it reads what it deleted from
// RETURNING) by ending its connection's session first.
func (d *deadRelease) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if sql != d.release || d.fail.Add(-1) < 0 {
		return d.Pool.Query(ctx, sql, args...)
	}
	c, err := d.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	terminate(d.t, c.Conn().PgConn().PID())
	rows, err := c.Query(ctx, sql, args...)
	if err == nil {
		for rows.Next() {
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		d.failed.Add(1)
		return nil, err
	}
	return nil, errors.New("deadRelease: the release on a terminated session did not fail")
}

// terminate ends the server session pid and waits until it is gone.
func terminate(t testing.TB, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(pid)); err != nil {
		t.Fatal(err)
	}
	for {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n); err != nil {
			t.Fatalf("session %d did not end within 10s: %v", pid, err)
		}
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFailedReleaseDoesNotBlockTheKey pins issue 11: a release that fails (its pooled connection
// was dead, the database is fine) no longer leaves the key in progress for the rest of its 60s
// lease. A retry from the same process takes its own abandoned claim back at once; another
// process gets the key as soon as the background retry of the release has gone through.
func TestFailedReleaseDoesNotBlockTheKey(t *testing.T) {
	t.Parallel()
	for _, who := range []string{"the same process", "another process"} {
		t.Run(who, func(t *testing.T) {
			t.Parallel()
			sch := idemtest.TestSchema(t, nil)
			if _, err := sch.Pool.Exec(context.Background(), "CREATE TABLE payments (key text, amount int)"); err != nil {
				t.Fatal(err)
			}
			plain, err := idem.NewStore(sch.Pool, sch.Config())
			if err != nil {
				t.Fatal(err)
			}
			db := &deadRelease{Pool: sch.Pool, t: t, release: idem.ReleaseSQL(plain)}
			s, err := idem.NewStore(db, sch.Config())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			if who == "the same process" {
				idem.NoReleaseRetry(s) // only the claim's own take-back can free the key
			}
			p := &idem.DoParams{Key: "k", Operation: "charge", Fingerprint: "fp"} // the default 60s lease
			boom := errors.New("card declined")
			db.fail.Store(1)
			if _, err := s.Do(context.Background(), p, func(context.Context, pgx.Tx) (*idem.Outcome, error) { return nil, boom }); !errors.Is(err, boom) {
				t.Fatalf("first = %v; want the handler's error", err)
			}
			if db.failed.Load() != 1 {
				t.Fatalf("the release did not fail (%d failures): the test is not testing anything", db.failed.Load())
			}
			retry := s
			if who == "another process" {
				retry = plain // no memory of the abandoned claim: only the background retry helps
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // well below the lease
			defer cancel()
			tries := 0
			for {
				tries++
				r, err := retry.Do(ctx, p, pay(1, "ok"))
				if err == nil && !r.Replayed {
					t.Logf("the retry executed on try %d", tries)
					break
				}
				if !errors.Is(err, idem.ErrInProgress) || ctx.Err() != nil {
					t.Fatalf("retry %d from %s = %+v, %v; want it to execute well within the 60s lease (the failed release blocks the key)", tries, who, r, err)
				}
				if who == "the same process" {
					t.Fatalf("retry from the same process = %v; want it to take its own abandoned claim back at once", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
