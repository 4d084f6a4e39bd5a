package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// serverSaid records what a pool's server said besides results, once started: every statement
// that failed (a batch's statements one by one) and every notice or warning.
type serverSaid struct {
	mu   sync.Mutex
	on   bool
	said []string
}

var (
	_ pgx.QueryTracer = (*serverSaid)(nil)
	_ pgx.BatchTracer = (*serverSaid)(nil)
)

func (s *serverSaid) add(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		s.said = append(s.said, what)
	}
}

func (s *serverSaid) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on, s.said = true, nil
}

func (s *serverSaid) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (s *serverSaid) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err != nil {
		s.add("a statement failed: " + d.Err.Error())
	}
}

func (s *serverSaid) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *serverSaid) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if d.Err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(d.SQL), "\n")
		s.add(fmt.Sprintf("a batch's statement failed: %v (%s…)", d.Err, first))
	}
}

func (s *serverSaid) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (s *serverSaid) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	s.add(fmt.Sprintf("the server said %s: %s", n.Severity, n.Message))
}

// TestClaimsRaiseNothing: the requests every API serves every day (new keys, replays, a key
// reused with another request) make the server raise no error and send no warning, in either
// claim mode. PostgreSQL writes every error, with its statement's text, and every warning to
// its log, so a claim that failed on purpose (to skip the rest of its batch) filled the
// operator's log with a "division by zero" per replay, and a lease-mode claim committed without
// a BEGIN logged "there is no transaction in progress" per first execution; an error also costs
// the server more CPU than the ROLLBACK that replaces it.
func TestClaimsRaiseNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			said := &serverSaid{}
			// A pool of 4: from 4 connections on, a replay's ROLLBACK rides in the next batch (owed.go).
			e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: 4, Tracer: said, OnNotice: said.notice})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			said.start()
			for i := range 5 {
				p := &idem.DoParams{Scope: "s", Key: fmt.Sprintf("k%d", i), Operation: "op", Fingerprint: "fp", Claim: mode}
				if r, err := e.Store.Do(ctx, p, pay(1, "paid")); err != nil || r.Replayed {
					t.Fatalf("key %d: %+v, %v; want its execution", i, r, err)
				}
				if r, err := e.Store.Do(ctx, p, pay(1, "again")); err != nil || !r.Replayed {
					t.Fatalf("key %d again: %+v, %v; want the replay", i, r, err)
				}
				q := *p
				q.Fingerprint = "other"
				if _, err := e.Store.Do(ctx, &q, pay(1, "other")); !errors.Is(err, idem.ErrKeyReused) {
					t.Fatalf("key %d with another request: %v; want ErrKeyReused", i, err)
				}
			}
			said.mu.Lock()
			defer said.mu.Unlock()
			if len(said.said) > 0 {
				t.Errorf("5 executions, 5 replays and 5 mismatches made the server say %d things; want none:\n%s",
					len(said.said), strings.Join(said.said, "\n"))
			}
			if n := e.Payments(); n != 5 {
				t.Errorf("%d payments; want 5", n)
			}
		})
	}
}

// A replay leaves its connection with the business transaction it began for nothing, for the
// next batch to roll back (owed.go). Without a next batch the sweeper rolls it back and gives it
// to the pool within tens of milliseconds; Store.Close does at once. Either way no connection
// stays out of the pool, in a transaction.
func TestOwedRollbacksComeBack(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: 4})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Claim: mode}
			if _, err := e.Store.Do(ctx, p, pay(1, "paid")); err != nil {
				t.Fatal(err)
			}
			replay := func() {
				t.Helper()
				if r, err := e.Store.Do(ctx, p, pay(1, "again")); err != nil || !r.Replayed {
					t.Fatalf("replay: %+v, %v; want the replay", r, err)
				}
			}
			replay()
			deadline := time.Now().Add(2 * time.Second)
			for e.Sch.Pool.Stat().AcquiredConns() > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d connections still out of the pool 2s after a replay; want the sweeper to have rolled back the replay's transaction and given its connection back", e.Sch.Pool.Stat().AcquiredConns())
				}
				time.Sleep(5 * time.Millisecond)
			}
			replay()
			e.Store.Close()
			if n := e.Sch.Pool.Stat().AcquiredConns(); n != 0 {
				t.Fatalf("%d connections out of the pool after Store.Close; want 0", n)
			}
		})
	}
}

// A pool keeps at most half its connections owed, and beyond that, up to all but one, only while
// it still has an idle connection to give its other users: replays on a busy pool then rarely pay
// a ROLLBACK round trip of their own, and nobody else waits for a connection a replay keeps.
func TestOwedConnectionsLeaveTheRestOfThePool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: 4}) // at most 2 owed, 3 with an idle one left
	idem.KeepOwedRollbacks(e.Store)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := e.Sch.Pool
	acquire := func() *pgxpool.Conn {
		t.Helper()
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "BEGIN"); err != nil { // as a replay's connection: a transaction open
			t.Fatal(err)
		}
		return c
	}
	release := func(c *pgxpool.Conn) {
		if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	conns := []*pgxpool.Conn{acquire(), acquire(), acquire(), acquire()} // the pool has none idle
	for i, want := range []bool{true, true, false} {
		if got := idem.Owe(e.Store, conns[i]); got != want {
			t.Fatalf("owe connection %d of 4 with none idle: %v; want %v", i+1, got, want)
		}
	}
	release(conns[3]) // one idle again
	if !idem.Owe(e.Store, conns[2]) {
		t.Fatal("owe a third connection while the pool has an idle one: refused; want it kept")
	}
	last := acquire()
	if idem.Owe(e.Store, last) {
		t.Fatal("owe the pool's last connection: kept; want refused (all but one at most)")
	}
	release(last)
	idem.SettleOwedRollbacks(e.Store)
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections out of the pool after the owed ones were settled; want 0", n)
	}
}
