package idem_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// BenchmarkPurgeAtScale loads IDEM_BENCH_PURGE_KEYS expired keys (default 2,000,000, spread over
// 100 tenants) with one generate_series insert, then runs a first-execution load (new keys, the
// lease-mode claim and completion) from 4 workers: for a few seconds alone, while Purge deletes
// every expired key in its default batches, and a few seconds after. It reports the purge rate
// and the load's latency in each phase: what an operator's expiry job costs the requests beside
// it. Then it loads as many live keys and times a purge run that finds none expired. One run is
// one op (b.N stays 1).
func BenchmarkPurgeAtScale(b *testing.B) {
	keys := 2_000_000
	if v := os.Getenv("IDEM_BENCH_PURGE_KEYS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("IDEM_BENCH_PURGE_KEYS=%q: want a positive number", v)
		}
		keys = n
	}
	sch := idemtest.TestSchema(b, &idemtest.SchemaOpts{MaxConns: 6})
	ctx := context.Background()
	s, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	loadStart := time.Now()
	if _, err := sch.Pool.Exec(ctx, `INSERT INTO `+s.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, created_at, completed_at, expires_at, status, body)
		SELECT 't' || (i % 100), 'createPayment', 'expired-' || i, 'createPayment', 'fp', 'complete', gen_random_uuid(),
			now() - interval '2 days', now() - interval '2 days', now() - interval '2 days',
			now() - interval '1 day' + i * interval '1 microsecond', 201, '{"id":1}'::bytea
		FROM generate_series(1, $1::int) AS i`, keys); err != nil {
		b.Fatal(err)
	}
	if _, err := sch.Pool.Exec(ctx, "ANALYZE "+s.Table()); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d expired keys in %s", keys, time.Since(loadStart).Round(time.Millisecond))

	type sample struct {
		at time.Time
		d  time.Duration
	}
	var (
		mu      sync.Mutex
		samples []sample
		stop    atomic.Bool
		failed  atomic.Int64
		seq     atomic.Int64
		wg      sync.WaitGroup
	)
	handler := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		return &idem.Outcome{Status: 201, Body: []byte(`{"id":1}`)}, nil
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				n := seq.Add(1)
				p := &idem.DoParams{Tenant: "t" + strconv.FormatInt(n%100, 10), Scope: "createPayment",
					Key: fmt.Sprintf("new-%d", n), Operation: "createPayment", Fingerprint: "fp"}
				began := time.Now()
				if _, err := s.Do(ctx, p, handler); err != nil {
					failed.Add(1)
					continue
				}
				d := time.Since(began)
				mu.Lock()
				samples = append(samples, sample{began, d})
				mu.Unlock()
			}
		}()
	}
	const alone = 3 * time.Second
	b.ResetTimer()
	time.Sleep(alone)
	purgeStart := time.Now()
	res, err := s.Purge(ctx, nil)
	purgeEnd := time.Now()
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(alone)
	stop.Store(true)
	wg.Wait()
	b.StopTimer()
	if res.Deleted != int64(keys) {
		b.Errorf("purge deleted %d keys; want the %d expired ones", res.Deleted, keys)
	}
	if n := failed.Load(); n > 0 {
		b.Errorf("%d requests of the load failed", n)
	}

	phase := func(from, to time.Time) (n int, p50, p99, max time.Duration) {
		var ds []time.Duration
		for _, s := range samples {
			if !s.at.Before(from) && s.at.Before(to) {
				ds = append(ds, s.d)
			}
		}
		if len(ds) == 0 {
			return 0, 0, 0, 0
		}
		slices.Sort(ds)
		return len(ds), ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1]
	}
	took := purgeEnd.Sub(purgeStart)
	rate := float64(res.Deleted) / took.Seconds()
	b.Logf("purge: %d keys in %d batches of %d, %s: %.0f keys/s", res.Deleted, res.Batches, idem.DefaultPurgeBatchSize, took.Round(time.Millisecond), rate)
	b.Logf("%-8s %9s %9s %9s %9s %9s", "phase", "requests", "req/s", "p50", "p99", "max")
	for _, ph := range []struct {
		name     string
		from, to time.Time
	}{{"before", purgeStart.Add(-alone), purgeStart}, {"during", purgeStart, purgeEnd}, {"after", purgeEnd, purgeEnd.Add(alone)}} {
		n, p50, p99, mx := phase(ph.from, ph.to)
		b.Logf("%-8s %9d %9.0f %9s %9s %9s", ph.name, n, float64(n)/ph.to.Sub(ph.from).Seconds(),
			p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), mx.Round(10*time.Microsecond))
		if ph.name == "during" {
			b.ReportMetric(float64(p50.Microseconds()), "claim-p50-during-µs")
			b.ReportMetric(float64(p99.Microseconds()), "claim-p99-during-µs")
		}
	}
	b.ReportMetric(rate, "purged-keys/s")

	// A run over a table of live keys (the same number, none expired) deletes nothing: what a
	// purge that comes often costs when the table is large and little has expired since the last.
	if _, err := sch.Pool.Exec(ctx, `INSERT INTO `+s.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, created_at, completed_at, expires_at, status, body)
		SELECT 't' || (i % 100), 'createPayment', 'live-' || i, 'createPayment', 'fp', 'complete', gen_random_uuid(),
			now(), now(), now(), now() + interval '1 day', 201, '{"id":1}'::bytea
		FROM generate_series(1, $1::int) AS i`, keys); err != nil {
		b.Fatal(err)
	}
	if _, err := sch.Pool.Exec(ctx, "VACUUM ANALYZE "+s.Table()); err != nil {
		b.Fatal(err)
	}
	liveStart := time.Now()
	live, err := s.Purge(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	liveTook := time.Since(liveStart)
	if live.Deleted != 0 {
		b.Errorf("purge over live keys deleted %d", live.Deleted)
	}
	b.Logf("purge over %d live keys (none expired): %s", keys, liveTook.Round(time.Millisecond))
	b.ReportMetric(float64(liveTook.Milliseconds()), "purge-live-table-ms")
}
