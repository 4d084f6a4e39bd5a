package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// kinds is the history's kinds and attempts, "kind/attempt", oldest first.
func kinds(evs []idem.HistoryEvent) string {
	var b []string
	for _, ev := range evs {
		b = append(b, fmt.Sprintf("%s/%d", ev.Kind, ev.Attempt))
	}
	return strings.Join(b, " ")
}

func history(t *testing.T, s *idem.Store, scope, key string) []idem.HistoryEvent {
	t.Helper()
	evs, err := s.History(context.Background(), "", scope, key)
	if err != nil {
		t.Fatalf("History(%s): %v", key, err)
	}
	return evs
}

func (g *guaranteeEnv) events() string {
	return pgx.Identifier{g.sch.Name, idem.HistoryTableName(g.sch.Table)}.Sanitize()
}

// guaranteeHistory: a completion and a release each leave the key's history, in order, on every
// path; a replay is counted; an operation without history writes none.
func guaranteeHistory(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	var runs atomic.Int32
	p := &idem.DoParams{Scope: "h", Key: "done", Operation: "op", Fingerprint: "fp", Claim: mode, History: true}
	if _, err := g.do(ctx, g.store, p, counted(&runs, 0)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if r, err := g.do(ctx, g.store, p, counted(&runs, 0)); err != nil || !r.Replayed {
			t.Fatalf("replay: %+v, %v", r, err)
		}
	}
	idem.FlushReplays(g.store)
	evs := history(t, g.store, "h", "done")
	if got := kinds(evs); got != "acquired/1 completed/1 replayed/0" {
		t.Fatalf("history of a completed key: %s; want acquired/1 completed/1 replayed/0", got)
	}
	if evs[1].Status != 201 || evs[2].Replays != 3 {
		t.Fatalf("completed with status %d, replays counted %d; want 201 and 3", evs[1].Status, evs[2].Replays)
	}

	f := *p
	f.Key = "failed"
	if _, err := g.do(ctx, g.store, &f, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		return nil, errors.New("card declined")
	}); err == nil || err.Error() != "card declined" {
		t.Fatalf("a failing handler: %v; want its error", err)
	}
	evs = history(t, g.store, "h", "failed")
	if got := kinds(evs); got != "acquired/1 released/1" || !strings.Contains(evs[1].Detail, "card declined") {
		t.Fatalf("history of a released key: %s (%q); want acquired/1 released/1 saying why", got, evs[len(evs)-1].Detail)
	}

	plain := *p
	plain.Key, plain.History = "plain", false
	if _, err := g.do(ctx, g.store, &plain, counted(&runs, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.do(ctx, g.store, &plain, counted(&runs, 0)); err != nil {
		t.Fatal(err)
	}
	idem.FlushReplays(g.store)
	if n := g.count(t, "SELECT count(*) FROM "+g.events()+" WHERE key = 'plain'"); n != 0 {
		t.Fatalf("an operation without history wrote %d history rows; want none", n)
	}
}

// guaranteeUncertain: in lease mode, a holder that asked for a provider key and then lost its
// claim (its lease ran out, or its handler failed) leaves the key uncertain: retries get
// ErrUncertain and never run, the holder cannot commit, and Resolve settles it. Transaction mode
// refuses UncertainOnLoss before claiming.
var errAcquirerTimedOut = errors.New("acquirer timed out")

func guaranteeUncertain(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	var runs atomic.Int32
	p := &idem.DoParams{Scope: "u", Key: "lost", Operation: "pay", Fingerprint: "fp", Claim: mode, UncertainOnLoss: true,
		Lease: 150 * time.Millisecond, Timeout: 10 * time.Second}
	if mode == idem.ClaimTransaction {
		if _, err := g.do(ctx, g.store, p, counted(&runs, 0)); err == nil || runs.Load() != 0 {
			t.Fatalf("UncertainOnLoss in transaction mode: %v, %d runs; want an error before any claim", err, runs.Load())
		}
		return
	}
	slow := g.newStore(t)
	idem.DisableRenewal(slow)
	entered, finish := make(chan string, 1), make(chan struct{})
	release := letGo(t, finish)
	first := make(chan error, 1)
	go func() {
		_, err := g.do(ctx, slow, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			key, err := idem.ProviderKey(ctx, idem.ProviderCall{Provider: "acquirer", Amount: 500, Currency: "EUR"})
			entered <- key
			if err != nil {
				return nil, err
			}
			<-finish
			return counted(&runs, 0)(ctx, tx)
		})
		first <- err
	}()
	if key := recv(t, entered, 10*time.Second, "the holder never asked for a provider key"); key == "" {
		t.Fatal("ProviderKey gave no key")
	}
	time.Sleep(300 * time.Millisecond) // past the lease: the holder is as good as crashed
	if _, err := g.do(ctx, g.store, p, counted(&runs, 0)); !errors.Is(err, idem.ErrUncertain) {
		t.Fatalf("a retry after the holder was lost past a provider call: %v; want ErrUncertain", err)
	}
	if _, err := g.do(ctx, g.store, p, counted(&runs, 0)); !errors.Is(err, idem.ErrUncertain) {
		t.Fatalf("a retry of an uncertain key: %v; want ErrUncertain", err)
	}
	release()
	if err := recv(t, first, 10*time.Second, "the holder never returned"); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the lost holder's completion: %v; want ErrLeaseLost", err)
	}
	if n, rows := runs.Load(), g.count(t, "SELECT count(*) FROM payments WHERE key = 'lost'"); n != 1 || rows != 0 {
		t.Fatalf("%d runs, %d business rows committed; want only the lost holder's run, and nothing committed", n, rows)
	}
	evs := history(t, g.store, "u", "lost")
	if got := kinds(evs); got != "acquired/1 provider_call/1 uncertain/1 lease_lost/1" {
		t.Fatalf("history: %s; want acquired/1 provider_call/1 uncertain/1 lease_lost/1", got)
	}
	if pc := evs[1]; pc.Provider != "acquirer" || pc.ProviderKey == "" || pc.Amount != 500 || pc.Currency != "EUR" {
		t.Fatalf("provider call recorded as %+v", pc)
	}
	if n := g.count(t, "SELECT count(*) FROM "+g.table()+" WHERE key = 'lost' AND state = 'uncertain' AND expires_at = 'infinity'"); n != 1 {
		t.Fatalf("the key's row is not uncertain for good (%d rows)", n)
	}
	if res, err := g.store.Purge(ctx, nil); err != nil || g.count(t, "SELECT count(*) FROM "+g.table()+" WHERE key = 'lost'") != 1 {
		t.Fatalf("purge: %+v, %v; want the uncertain key kept", res, err)
	}
	if err := g.store.Resolve(ctx, &idem.ResolveParams{Scope: "u", Key: "lost", As: idem.ResolveCompleted,
		Outcome: &idem.Outcome{Status: 201, Body: []byte("charged")}, Actor: "ops", Evidence: "acquirer record"}); err != nil {
		t.Fatal(err)
	}
	if r, err := g.do(ctx, g.store, p, counted(&runs, 0)); err != nil || !r.Replayed || string(r.Outcome.Body) != "charged" {
		t.Fatalf("a retry after Resolve(completed): %+v, %v; want the resolved outcome replayed", r, err)
	}

	// A handler that fails after its provider call leaves the key uncertain too.
	q := *p
	q.Key = "failed"
	_, err := g.do(ctx, g.store, &q, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		if _, err := idem.ProviderKey(ctx, idem.ProviderCall{Provider: "acquirer"}); err != nil {
			return nil, err
		}
		return nil, errAcquirerTimedOut
	})
	if !errors.Is(err, errAcquirerTimedOut) || !errors.Is(err, idem.ErrUncertain) {
		t.Fatalf("a handler failing after its provider call: %v; want its own error, saying the key is uncertain", err)
	}
	if _, err := g.do(ctx, g.store, &q, counted(&runs, 0)); !errors.Is(err, idem.ErrUncertain) {
		t.Fatalf("its retry: %v; want ErrUncertain", err)
	}
	if got := kinds(history(t, g.store, "u", "failed")); got != "acquired/1 provider_call/1 uncertain/1" {
		t.Fatalf("history: %s; want acquired/1 provider_call/1 uncertain/1", got)
	}
	if err := g.store.Resolve(ctx, &idem.ResolveParams{Scope: "u", Key: "failed", As: idem.ResolveFailed, Actor: "ops", Evidence: "no record"}); err != nil {
		t.Fatal(err)
	}
	if r, err := g.do(ctx, g.store, &q, counted(&runs, 0)); err != nil || r.Replayed || runs.Load() != 2 {
		t.Fatalf("a retry after Resolve(failed): %+v, %v, %d runs; want it to run", r, err, runs.Load())
	}
}

// TestUncertainRetriesAtOnce: many identical retries that find the key's holder gone after a
// provider call all get ErrUncertain, and exactly one of them turns the key (one uncertain row
// in its history, one EventUncertain).
func TestUncertainRetriesAtOnce(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 12})
	var observed atomic.Int32
	cfg := *sch.Config()
	cfg.Observer = func(ctx context.Context, e idem.Event) {
		if e.Kind == idem.EventUncertain {
			observed.Add(1)
		}
	}
	store, err := idem.NewStore(sch.Pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	holder, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(holder.Close)
	idem.DisableRenewal(holder)
	ctx := gctx(t)
	p := &idem.DoParams{Scope: "u", Key: "k", Operation: "pay", Fingerprint: "fp", UncertainOnLoss: true,
		Lease: 100 * time.Millisecond, Timeout: 10 * time.Second}
	called, finish := make(chan struct{}), make(chan struct{})
	release := letGo(t, finish)
	done := make(chan error, 1)
	go func() {
		_, err := holder.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			if _, err := idem.ProviderKey(ctx, idem.ProviderCall{Provider: "acquirer"}); err != nil {
				return nil, err
			}
			close(called)
			<-finish
			return &idem.Outcome{Status: 201}, nil
		})
		done <- err
	}()
	recv(t, called, 10*time.Second, "the holder never recorded its provider call")
	time.Sleep(200 * time.Millisecond)
	const n = 8
	var runs atomic.Int32
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			_, err := store.Do(ctx, p, counted(&runs, 0))
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, idem.ErrUncertain) {
			t.Errorf("a retry: %v; want ErrUncertain", err)
		}
	}
	release()
	if err := recv(t, done, 10*time.Second, "the holder never returned"); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the holder: %v; want ErrLeaseLost", err)
	}
	evs := history(t, store, "u", "k")
	uncertain := 0
	for _, ev := range evs {
		if ev.Kind == idem.EventUncertain {
			uncertain++
			if !strings.Contains(ev.Detail, "lease of attempt 1 expired after a provider call") {
				t.Errorf("uncertain row's detail %q", ev.Detail)
			}
		}
	}
	if uncertain != 1 || observed.Load() != 1 || runs.Load() != 0 {
		t.Fatalf("%d uncertain rows (%s), %d EventUncertain, %d runs; want 1, 1, 0", uncertain, kinds(evs), observed.Load(), runs.Load())
	}
}

// TestHistoryTimeline: a history-only operation's key, claimed, lost to a holder that stopped
// renewing (taken over, its own completion then refused), completed by the takeover, and
// refused to another request: its history says so in order.
func TestHistoryTimeline(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 8})
	store, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	slow, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Close)
	idem.DisableRenewal(slow)
	ctx := gctx(t)
	p := &idem.DoParams{Scope: "t", Key: "k", Operation: "pay", Fingerprint: "fp", History: true,
		Lease: 100 * time.Millisecond, Timeout: 10 * time.Second}
	entered, finish := make(chan struct{}), make(chan struct{})
	release := letGo(t, finish)
	first := make(chan error, 1)
	go func() {
		_, err := slow.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			close(entered)
			<-finish
			return &idem.Outcome{Status: 201}, nil
		})
		first <- err
	}()
	recv(t, entered, 10*time.Second, "the first holder never started")
	time.Sleep(200 * time.Millisecond)
	if r, err := store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		return &idem.Outcome{Status: 201}, nil
	}); err != nil || r.Replayed {
		t.Fatalf("the takeover: %+v, %v", r, err)
	}
	release()
	if err := recv(t, first, 10*time.Second, "the first holder never returned"); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the first holder: %v; want ErrLeaseLost", err)
	}
	other := *p
	other.Fingerprint = "another"
	if _, err := store.Do(ctx, &other, ok201); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("another request: %v; want ErrKeyReused", err)
	}
	idem.FlushReplays(store) // mismatches are counted, as replays are
	evs := history(t, store, "t", "k")
	const want = "acquired/1 taken_over/2 completed/2 lease_lost/1 key_reused/0"
	if got := kinds(evs); got != want {
		t.Fatalf("history: %s; want %s", got, want)
	}
	if !strings.HasPrefix(evs[4].Detail, "another fingerprint") || evs[4].Replays != 1 {
		t.Fatalf("key_reused detail %q, counting %d; want another fingerprint, 1", evs[4].Detail, evs[4].Replays)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].At.Before(evs[i-1].At) {
			t.Fatalf("history out of time order at %d: %v", i, evs)
		}
	}
}

// TestHistoryReplaysFlushedAtClose: replays are counted in memory and written as one replayed
// row per key, periodically and at Close.
func TestHistoryReplaysFlushedAtClose(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 4})
	store, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := gctx(t)
	p := &idem.DoParams{Scope: "r", Key: "k", Operation: "pay", Fingerprint: "fp", History: true}
	for range 6 {
		if _, err := store.Do(ctx, p, ok201); err != nil {
			t.Fatal(err)
		}
	}
	if got := kinds(history(t, store, "r", "k")); got != "acquired/1 completed/1" {
		t.Fatalf("before a flush: %s; want the replays still counted in memory", got)
	}
	store.Close()
	evs := history(t, store, "r", "k")
	if got := kinds(evs); got != "acquired/1 completed/1 replayed/0" || evs[2].Replays != 5 {
		t.Fatalf("after Close: %s (%d replays); want one replayed row counting 5", got, evs[len(evs)-1].Replays)
	}
}

// TestHistoryPurgedAfterRetention: Purge deletes history rows older than the retention, and
// keeps the others.
func TestHistoryPurgedAfterRetention(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 4})
	cfg := *sch.Config()
	cfg.HistoryRetention = time.Hour
	store, err := idem.NewStore(sch.Pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ctx := gctx(t)
	for i := range 5 {
		p := &idem.DoParams{Scope: "p", Key: fmt.Sprint(i), Operation: "pay", Fingerprint: "fp", History: true}
		if _, err := store.Do(ctx, p, ok201); err != nil {
			t.Fatal(err)
		}
	}
	events := pgx.Identifier{sch.Name, idem.HistoryTableName(sch.Table)}.Sanitize()
	if _, err := sch.Pool.Exec(ctx, "UPDATE "+events+" SET at = at - interval '2 hours' WHERE key IN ('0', '1', '2')"); err != nil {
		t.Fatal(err)
	}
	dry, err := store.Purge(ctx, &idem.PurgeOpts{DryRun: true})
	if err != nil || dry.HistoryDeleted != 6 {
		t.Fatalf("dry run: %+v, %v; want 6 old history rows", dry, err)
	}
	res, err := store.Purge(ctx, &idem.PurgeOpts{BatchSize: 4})
	if err != nil || res.HistoryDeleted != 6 {
		t.Fatalf("purge: %+v, %v; want 6 history rows deleted", res, err)
	}
	var left int
	if err := sch.Pool.QueryRow(ctx, "SELECT count(*) FROM "+events).Scan(&left); err != nil || left != 4 {
		t.Fatalf("%d history rows left (%v); want 4", left, err)
	}
}

func ok201(context.Context, pgx.Tx) (*idem.Outcome, error) { return &idem.Outcome{Status: 201}, nil }

// TestHistoryReplaysFlushedByTheTickerAndBounded: the flusher writes the counted replays on its
// own; while it cannot (its statement fails), it keeps at most its limit of keys, counts nothing
// beyond it, says so, and warns once for the outage, not at every tick; once the statement
// works again, the next flush writes what it kept and says so.
func TestHistoryReplaysFlushedByTheTickerAndBounded(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 4})
	var buf lockedBuffer
	cfg := sch.Config()
	cfg.Logger = newDebugLogger(&buf)
	db := &failingFlush{Pool: sch.Pool}
	store, err := idem.NewStore(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	db.flush = idem.HistoryReplaysSQL(store)
	idem.SetReplayFlush(store, 50*time.Millisecond, 2)
	ctx := gctx(t)
	do := func(key string) {
		t.Helper()
		p := &idem.DoParams{Scope: "b", Key: key, Operation: "pay", Fingerprint: "fp", History: true}
		if _, err := store.Do(ctx, p, ok201); err != nil {
			t.Fatal(err)
		}
	}
	// The ticker alone writes a replay.
	do("ticked")
	do("ticked")
	waitFor(t, 5*time.Second, "the flusher never wrote the replay of 'ticked' on its own", func() bool {
		return kinds(history(t, store, "b", "ticked")) == "acquired/1 completed/1 replayed/0"
	})

	db.failing.Store(true)
	for _, k := range []string{"a", "b", "c"} {
		do(k)
	}
	for _, k := range []string{"a", "b", "c"} { // c is past the limit of 2 keys: not counted
		do(k)
	}
	waitFor(t, 5*time.Second, "no flush failed while its statement did", func() bool { return db.failed.Load() >= 3 })
	db.failing.Store(false)
	waitFor(t, 5*time.Second, "the replays kept through the outage were never written once the statement worked", func() bool {
		return kinds(history(t, store, "b", "a")) == "acquired/1 completed/1 replayed/0" &&
			kinds(history(t, store, "b", "b")) == "acquired/1 completed/1 replayed/0"
	})
	if got := kinds(history(t, store, "b", "c")); got != "acquired/1 completed/1" {
		t.Errorf("c, replayed past the limit: %s; want its replay not counted", got)
	}
	logs := buf.String()
	if n := strings.Count(logs, "could not write the replays"); n != 1 {
		t.Errorf("%d failed flushes were warned about %d times; want once:\n%s", db.failed.Load(), n, logs)
	}
	for _, want := range []string{"were not counted", "written again"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}
}

// failingFlush is a pool whose replays' flush fails while failing is set.
type failingFlush struct {
	*pgxpool.Pool
	flush   string
	failing atomic.Bool
	failed  atomic.Int32
}

func (f *failingFlush) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if sql == f.flush && f.failing.Load() {
		f.failed.Add(1)
		return pgconn.CommandTag{}, errors.New("the history is out of reach")
	}
	return f.Pool.Exec(ctx, sql, args...)
}

// TestGoneKeysKeepTheirHistory: a key released after a failure has no row, so LookupKey finds
// nothing, but its history is kept: GoneKeys finds it by key and by hash, with its tenant and
// operation, and not a key that still has its row, nor one whose operation keeps no history.
func TestGoneKeysKeepTheirHistory(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 4})
	store, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ctx := gctx(t)
	declined := func(context.Context, pgx.Tx) (*idem.Outcome, error) { return nil, errors.New("declined") }
	for _, p := range []*idem.DoParams{
		{Tenant: "acme", Scope: "g", Key: "failed", Operation: "pay", Fingerprint: "fp", History: true},
		{Tenant: "acme", Scope: "g", Key: "plain", Operation: "pay", Fingerprint: "fp"},
	} {
		if _, err := store.Do(ctx, p, declined); err == nil {
			t.Fatalf("%s: the handler declined, and Do said nothing", p.Key)
		}
	}
	done := &idem.DoParams{Tenant: "acme", Scope: "g", Key: "done", Operation: "pay", Fingerprint: "fp", History: true}
	if _, err := store.Do(ctx, done, ok201); err != nil {
		t.Fatal(err)
	}
	if _, err := store.LookupKey(ctx, &idem.LookupKeyParams{Key: "failed"}); !errors.Is(err, idem.ErrNoSuchKey) {
		t.Fatalf("LookupKey of a released key: %v; want ErrNoSuchKey", err)
	}
	acme := "acme"
	for _, p := range []*idem.LookupKeyParams{
		{Key: "failed"},
		{Key: "failed", Tenant: &acme, Operation: "pay"},
		{KeyHash: idem.KeyHash("g", "failed")},
	} {
		gone, err := store.GoneKeys(ctx, p)
		if err != nil || len(gone) != 1 {
			t.Fatalf("GoneKeys(%+v): %+v, %v; want the released key", p, gone, err)
		}
		k := gone[0]
		if k.State != idem.KeyGone || k.Tenant != "acme" || k.Scope != "g" || k.Key != "failed" || k.Operation != "pay" || k.KeyHash != idem.KeyHash("g", "failed") || k.CreatedAt.IsZero() {
			t.Fatalf("GoneKeys(%+v) = %+v", p, k)
		}
		evs, err := store.History(ctx, k.Tenant, k.Scope, k.Key)
		if got := kinds(evs); err != nil || !strings.HasPrefix(got, "acquired/1 released/1") {
			t.Fatalf("its history: %s, %v; want its claim and its release", got, err)
		}
	}
	for _, key := range []string{"plain", "done", "never"} {
		if gone, err := store.GoneKeys(ctx, &idem.LookupKeyParams{Key: key}); err != nil || len(gone) != 0 {
			t.Errorf("GoneKeys(%s): %+v, %v; want none", key, gone, err)
		}
	}
}
