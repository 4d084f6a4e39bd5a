package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// cachedStore is a Store with the replay cache on, on a pool whose round trips are counted, and
// a second Store on the same table without one (another process, say).
func cachedStore(t *testing.T) (cached, other *idem.Store, trips *queryCounter, sch *idemtest.Schema) {
	t.Helper()
	trips = &queryCounter{}
	sch = idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 4, Tracer: trips})
	cfg := sch.Config()
	cfg.ReplayCacheBytes = 1 << 20
	cached, err := idem.NewStore(sch.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	other, err = idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	idem.KeepOwedRollbacks(cached) // the tests count round trips: no ROLLBACK of the sweeper's
	idem.KeepOwedRollbacks(other)
	t.Cleanup(cached.Close) // their owed rollbacks, before the pool closes
	t.Cleanup(other.Close)
	return cached, other, trips, sch
}

func created(body string, runs *int) idem.HandlerFunc {
	return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		*runs++
		return &idem.Outcome{Status: 201, Header: http.Header{"Location": {"/p/1"}}, Body: []byte(body)}, nil
	}
}

// With the cache on, a key this process completed replays, and is refused to another request,
// without a single round trip; the answer is the stored one, in both claim modes.
func TestReplayCacheAnswersWithoutTheDatabase(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			s, _, trips, _ := cachedStore(t)
			ctx := context.Background()
			p := &idem.DoParams{Scope: "s", Key: "k", Fingerprint: "fp", Claim: mode}
			runs := 0
			if _, err := s.Do(ctx, p, created(`{"id":1}`, &runs)); err != nil {
				t.Fatal(err)
			}
			before := trips.n.Load()
			for i := range 3 {
				r, err := s.Do(ctx, p, created(`{"id":2}`, &runs))
				if err != nil {
					t.Fatal(err)
				}
				if !r.Replayed || r.Outcome.Status != 201 || string(r.Outcome.Body) != `{"id":1}` || r.Outcome.Header.Get("Location") != "/p/1" {
					t.Fatalf("replay %d: replayed %v, %d %v %s; want the stored 201 with its Location and body", i, r.Replayed, r.Outcome.Status, r.Outcome.Header, r.Outcome.Body)
				}
				// The caller may change what it got: the cache keeps its own copy.
				r.Outcome.Body[0] = 'X'
				r.Outcome.Header.Set("Location", "/elsewhere")
			}
			other := *p
			other.Fingerprint = "other"
			if _, err := s.Do(ctx, &other, created(`{}`, &runs)); !errors.Is(err, idem.ErrKeyReused) {
				t.Fatalf("another request with the key: %v; want ErrKeyReused", err)
			}
			if n := trips.n.Load() - before; n != 0 {
				t.Fatalf("cached replays made %d round trips; want 0", n)
			}
			if runs != 1 {
				t.Fatalf("the handler ran %d times; want once", runs)
			}
		})
	}
}

// An outcome read from the database (completed by another process) is kept too: the first
// replay reads it, the next ones do not.
func TestReplayCacheKeepsWhatItReads(t *testing.T) {
	t.Parallel()
	s, other, trips, _ := cachedStore(t)
	ctx := context.Background()
	p := &idem.DoParams{Scope: "s", Key: "k", Fingerprint: "fp"}
	runs := 0
	if _, err := other.Do(ctx, p, created(`{"id":1}`, &runs)); err != nil {
		t.Fatal(err)
	}
	before := trips.n.Load()
	if r, err := s.Do(ctx, p, created(`{}`, &runs)); err != nil || !r.Replayed {
		t.Fatalf("first replay: %v, %+v; want a replay", err, r)
	}
	if n := trips.n.Load() - before; n != 1 {
		t.Fatalf("the first replay made %d round trips; want 1 (the claim)", n)
	}
	before = trips.n.Load()
	if r, err := s.Do(ctx, p, created(`{}`, &runs)); err != nil || !r.Replayed || string(r.Outcome.Body) != `{"id":1}` {
		t.Fatalf("second replay: %v, %+v; want the stored body", err, r)
	}
	if n := trips.n.Load() - before; n != 0 {
		t.Fatalf("the second replay made %d round trips; want 0", n)
	}
}

// The cache never answers for another tenant or scope: the same key there is another key.
func TestReplayCacheNeverCrossesTenants(t *testing.T) {
	t.Parallel()
	s, _, _, _ := cachedStore(t)
	ctx := context.Background()
	runs := 0
	for _, p := range []*idem.DoParams{
		{Tenant: "acme", Scope: "s", Key: "k", Fingerprint: "fp"},
		{Tenant: "globex", Scope: "s", Key: "k", Fingerprint: "fp"},
		{Tenant: "acme", Scope: "t", Key: "k", Fingerprint: "fp"},
	} {
		r, err := s.Do(ctx, p, created(`{"tenant":"`+p.Tenant+`"}`, &runs))
		if err != nil {
			t.Fatal(err)
		}
		if r.Replayed {
			t.Fatalf("tenant %q scope %q: replayed %s; want a first execution of its own", p.Tenant, p.Scope, r.Outcome.Body)
		}
	}
	if runs != 3 {
		t.Fatalf("the handler ran %d times; want 3 (one per tenant and scope)", runs)
	}
}

// A cached outcome goes no later than its key expires: once the database says the key has
// expired, the key executes anew, and is not replayed from memory.
func TestReplayCacheRespectsExpiry(t *testing.T) {
	t.Parallel()
	s, _, _, sch := cachedStore(t)
	ctx := context.Background()
	p := &idem.DoParams{Scope: "s", Key: "k", Fingerprint: "fp", TTL: 300 * time.Millisecond, Timeout: 100 * time.Millisecond}
	runs := 0
	if _, err := s.Do(ctx, p, created(`{"id":1}`, &runs)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var expired bool
		if err := sch.Pool.QueryRow(ctx, "SELECT expires_at <= now() FROM "+s.Table()+" WHERE key = 'k'").Scan(&expired); err != nil {
			t.Fatal(err)
		}
		if expired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key did not expire within 10s of its 300ms TTL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, err := s.Do(ctx, p, created(`{"id":2}`, &runs))
	if err != nil {
		t.Fatal(err)
	}
	if r.Replayed || string(r.Outcome.Body) != `{"id":2}` || runs != 2 {
		t.Fatalf("after expiry: replayed %v with %s, %d runs; want a new execution", r.Replayed, r.Outcome.Body, runs)
	}
}

// Identical requests from many goroutines, half of them first executions of new keys, half
// replays: every key runs once, and every replay gets its own key's outcome (run with -race).
func TestReplayCacheUnderConcurrency(t *testing.T) {
	t.Parallel()
	s, _, _, _ := cachedStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const keys, perKey = 8, 6
	var mu sync.Mutex
	runs := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, keys*perKey)
	for k := range keys {
		key := string(rune('a' + k))
		for range perKey {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					r, err := s.Do(ctx, &idem.DoParams{Scope: "s", Key: key, Fingerprint: "fp", Wait: 10 * time.Second},
						func(context.Context, pgx.Tx) (*idem.Outcome, error) {
							mu.Lock()
							runs[key]++
							mu.Unlock()
							return &idem.Outcome{Status: 201, Body: []byte(key)}, nil
						})
					if err != nil {
						errs <- err
						return
					}
					if string(r.Outcome.Body) != key {
						errs <- errors.New("key " + key + " answered " + string(r.Outcome.Body))
						return
					}
					if r.Replayed {
						return
					}
				}
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the concurrent requests did not all finish within 30s")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k, n := range runs {
		if n != 1 {
			t.Fatalf("key %s ran %d times; want once", k, n)
		}
	}
}

// Two Stores on one table, one with the replay cache and one without, send replay checks of
// different texts (the cache's also returns the row's expiry): on a connection they share, each
// prepares its own, rather than taking the other's mark for its statements and leaving pgx to
// prepare its check anew after every batch that fails.
func TestStoresWithAndWithoutTheCacheEachPrepareTheirReplayCheck(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 1}) // one connection, shared
	cfg := sch.Config()
	cfg.ReplayCacheBytes = 1 << 20
	cached, err := idem.NewStore(sch.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cached.Close)
	other, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs := 0
	for i, s := range []*idem.Store{cached, other} {
		p := &idem.DoParams{Scope: "s", Key: fmt.Sprint("k", i), Fingerprint: "fp", Claim: idem.ClaimLease}
		if _, err := s.Do(ctx, p, created(`{"id":1}`, &runs)); err != nil {
			t.Fatal(err)
		}
	}
	var checks int
	// The Store prepares its statements by name (pgx names them stmt_…; what pgx prepares on its
	// own for a batch is stmtcache_…).
	if err := sch.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements
		WHERE name LIKE 'stmt\_%' AND statement LIKE 'SELECT k.fingerprint, k.status, k.headers, k.body, k.reference%'`).Scan(&checks); err != nil {
		t.Fatal(err)
	}
	if checks != 2 {
		t.Fatalf("%d replay checks prepared by name on the shared connection; want 2, one per Store", checks)
	}
}
