package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// eventKinds is an Observer that keeps the kinds of the events it sees.
type eventKinds struct {
	mu    sync.Mutex
	kinds []idem.EventKind
}

func (e *eventKinds) observe(_ context.Context, ev idem.Event) {
	e.mu.Lock()
	e.kinds = append(e.kinds, ev.Kind)
	e.mu.Unlock()
}

func (e *eventKinds) seen(k idem.EventKind) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.kinds, k)
}

// TestAStarvedClaimIsAStoreError: a claim that cannot get a connection before the store timeout
// runs out fails as store-unavailable, in both claim modes, and reports a store_error event,
// though the bound that ran out is the context the event is reported under (only a caller that
// left makes a store error go unreported). The handler never runs.
func TestAStarvedClaimIsAStoreError(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var held []*pgxpool.Conn
	for range 4 {
		c, err := sch.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for _, mode := range []idem.ClaimMode{idem.ClaimTransaction, idem.ClaimLease} {
		events := &eventKinds{}
		cfg := sch.Config()
		cfg.StoreTimeout = 300 * time.Millisecond
		cfg.Observer = events.observe
		cfg.Logger = slog.New(slog.DiscardHandler)
		s, err := idem.NewStore(sch.Pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		_, err = s.Do(ctx, &idem.DoParams{Scope: "s", Key: "starved-" + mode.String(), Fingerprint: "fp", Operation: "op", Claim: mode},
			func(context.Context, pgx.Tx) (*idem.Outcome, error) {
				ran = true
				return &idem.Outcome{Status: 201}, nil
			})
		if !errors.Is(err, idem.ErrStoreUnavailable) || ran {
			t.Errorf("%s: Do with every connection taken = %v (handler ran: %v); want ErrStoreUnavailable", mode, err, ran)
		}
		if !events.seen(idem.EventStoreError) {
			t.Errorf("%s: events %v; want a store_error for a claim starved of connections", mode, events.kinds)
		}
	}
}

// TestALeaseClaimIsBoundedAsAWhole: the store timeout bounds a lease-mode claim as a whole, not
// each of its batches. Here each batch that inserts into the key table takes 60% of the store
// timeout (a trigger sleeps), and the key is held by an abandoned claim, so the claim needs two
// such batches: the fast path's, which cannot decide, and the full claim's, which takes the key
// over. Together they outlast the store timeout: the request fails as store-unavailable, the
// handler does not run, and the key is given back (a later request with time to spare runs it
// once). On a machine so slow that one batch alone outlasts the timeout, the answer is the same.
func TestALeaseClaimIsBoundedAsAWhole(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := sch.Config()
	cfg.StoreTimeout = 2 * time.Second
	s, err := idem.NewStore(sch.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	table := s.Table()
	if _, err := sch.Pool.Exec(ctx, `INSERT INTO `+table+` (tenant, scope, key, operation, fingerprint, state, owner_token,
		lease_expires_at, attempt, created_at, expires_at)
		VALUES ('', 's', 'k', 'op', 'fp', 'in_flight', gen_random_uuid(), now() - interval '1 minute', 1,
		now() - interval '2 minutes', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if _, err := sch.Pool.Exec(ctx, `CREATE FUNCTION slow_claim() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(1.2); RETURN NEW; END $$;
		CREATE TRIGGER slow_claim BEFORE INSERT ON `+table+` FOR EACH ROW EXECUTE FUNCTION slow_claim()`); err != nil {
		t.Fatal(err)
	}
	runs := 0
	fn := func(context.Context, pgx.Tx) (*idem.Outcome, error) {
		runs++
		return &idem.Outcome{Status: 201}, nil
	}
	p := &idem.DoParams{Scope: "s", Key: "k", Fingerprint: "fp", Operation: "op", Claim: idem.ClaimLease}
	if _, err := s.Do(ctx, p, fn); !errors.Is(err, idem.ErrStoreUnavailable) || runs != 0 {
		t.Fatalf("a claim of two slow batches = %v, handler runs %d; want ErrStoreUnavailable and none", err, runs)
	}
	if _, err := sch.Pool.Exec(ctx, `DROP TRIGGER slow_claim ON `+table); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Do(ctx, p, fn); err != nil || r.Replayed || runs != 1 {
		t.Fatalf("the retry after the store recovered = %+v, %v, handler runs %d; want it run once", r, err, runs)
	}
}
