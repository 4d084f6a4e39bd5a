package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// On a database with Citus the Store sends none of the guards that fail on purpose to skip the
// rest of a batch (runtime/idem/citus.go): the statements a guard would skip run, and the answers
// must decide the same. These tests run the claim's guarantees both ways on plain PostgreSQL, in
// both claim modes: a storm of duplicates executes once, a replay answers the stored outcome, an
// abandoned claim is taken over, a different request is refused while the first is in flight,
// and a lost lease cannot commit.

var guardModes = []struct {
	name     string
	noGuards bool
}{{"guards", false}, {"no guards (Citus)", true}}

func newGuardEnv(t *testing.T, noGuards bool, conns int32) *env {
	t.Helper()
	e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: conns})
	if noGuards {
		idem.SendNoGuards(e.Store)
	}
	return e
}

// endLease ends the lease of key's holder now, as if it had run out.
func endLease(t *testing.T, e *env, key string) {
	t.Helper()
	tag, err := e.Sch.Pool.Exec(context.Background(),
		"UPDATE "+pgx.Identifier{e.Sch.Name, e.Sch.Table}.Sanitize()+" SET lease_expires_at = statement_timestamp() - interval '1 second' WHERE key = $1", key)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("end the lease of key %s: %v, %d rows; want 1", key, err, tag.RowsAffected())
	}
}

func TestGuardModesStormExecutesOnceAndReplays(t *testing.T) {
	t.Parallel()
	for _, g := range guardModes {
		for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
			t.Run(g.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				e := newGuardEnv(t, g.noGuards, 16)
				e.Warm(16)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var (
					mu                    sync.Mutex
					runs, replays, others int
					start                 = make(chan struct{})
					wg                    sync.WaitGroup
				)
				fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					mu.Lock()
					runs++
					mu.Unlock()
					return pay(1, "once")(ctx, tx)
				}
				p := &idem.DoParams{Scope: "s", Key: "storm", Operation: "op", Fingerprint: "fp", Claim: mode, Wait: 20 * time.Second}
				for range 48 {
					wg.Go(func() {
						<-start
						r, err := e.Store.Do(ctx, p, fn)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err != nil:
							t.Errorf("a duplicate: %v; want the replay", err)
						case r.Replayed && string(r.Outcome.Body) == "once":
							replays++
						case !r.Replayed:
						default:
							others++
						}
					})
				}
				close(start)
				wg.Wait()
				if runs != 1 || replays != 47 || others != 0 || e.Payments() != 1 || e.Keys() != 1 {
					t.Fatalf("48 duplicates: the handler ran %d times, %d replays, %d other answers, %d payments, %d key rows; want 1, 47, 0, 1, 1",
						runs, replays, others, e.Payments(), e.Keys())
				}
				r, err := e.Store.Do(ctx, p, fn)
				if err != nil || !r.Replayed || string(r.Outcome.Body) != "once" || runs != 1 {
					t.Fatalf("a retry after the storm: %+v, %v (%d runs); want the stored outcome replayed", r, err, runs)
				}
			})
		}
	}
}

func TestGuardModesTakeOverAndRefuse(t *testing.T) {
	t.Parallel()
	for _, g := range guardModes {
		for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
			t.Run(g.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				e := newGuardEnv(t, g.noGuards, 4)
				ctx := context.Background()
				// A crash: claimed, never completed nor released.
				dead, err := e.Store.Claim(ctx, &idem.ClaimParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Lease: time.Hour})
				if err != nil || dead.Status != idem.ClaimAcquired {
					t.Fatalf("claim = %+v, %v", dead, err)
				}
				p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Claim: mode, Wait: time.Millisecond}
				other := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "other", Claim: mode, Wait: time.Millisecond}
				if _, err := e.Store.Do(ctx, p, pay(1, "x")); !errors.Is(err, idem.ErrInProgress) {
					t.Fatalf("during the dead holder's lease: %v; want ErrInProgress", err)
				}
				if _, err := e.Store.Do(ctx, other, pay(1, "x")); !errors.Is(err, idem.ErrKeyReused) {
					t.Fatalf("another request while the first is in flight: %v; want ErrKeyReused", err)
				}
				endLease(t, e, "k")
				if _, err := e.Store.Do(ctx, other, pay(1, "x")); !errors.Is(err, idem.ErrKeyReused) {
					t.Fatalf("another request after the holder's lease: %v; want ErrKeyReused", err)
				}
				var attempt int
				r, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					c, _ := idem.ClaimFromContext(ctx)
					attempt = c.Attempt
					return pay(1, "taken over")(ctx, tx)
				})
				if err != nil || r.Replayed || string(r.Outcome.Body) != "taken over" || attempt != 2 {
					t.Fatalf("after the lease: %+v, %v, attempt %d; want executed as attempt 2", r, err, attempt)
				}
				err = pgx.BeginFunc(ctx, e.Sch.Pool, func(tx pgx.Tx) error {
					return e.Store.CompleteTx(ctx, tx, dead.Claim, &idem.Outcome{Status: 200}, time.Hour)
				})
				if !errors.Is(err, idem.ErrLeaseLost) {
					t.Fatalf("the dead holder completes: %v; want ErrLeaseLost", err)
				}
				r, err = e.Store.Do(ctx, p, pay(1, "again"))
				if err != nil || !r.Replayed || string(r.Outcome.Body) != "taken over" {
					t.Fatalf("after the takeover completed: %+v, %v; want the replay of its outcome", r, err)
				}
				if n := e.Payments(); n != 1 {
					t.Fatalf("%d payments; want 1", n)
				}
			})
		}
	}
}
