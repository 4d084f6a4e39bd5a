package idem_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

func TestPurgeRemovesOnlyExpiredRowsInBatches(t *testing.T) {
	t.Parallel()
	var purged []int
	e := newEnv(t, &idem.Config{Observer: func(_ context.Context, ev idem.Event) {
		if ev.Kind == idem.EventPurged {
			purged = append(purged, ev.Count)
		}
	}}, nil)
	ctx := context.Background()
	insert := func(prefix string, n int, state, expires, lease string) {
		t.Helper()
		for i := range n {
			_, err := e.Sch.Pool.Exec(ctx, `INSERT INTO `+e.Store.Table()+`
				(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at)
				VALUES ('', 's', $1, 'op', 'fp', $2, gen_random_uuid(), now() + $3::interval, now() + $4::interval)`,
				fmt.Sprintf("%s-%d", prefix, i), state, lease, expires)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	insert("expired", 23, "complete", "-1 hour", "-2 hours")
	insert("live", 3, "complete", "1 hour", "-1 minute")
	insert("held", 2, "in_flight", "-1 hour", "1 minute")     // TTL gone, but a live request holds it
	insert("abandoned", 2, "in_flight", "-1 hour", "-1 hour") // TTL and lease both gone

	dry, err := e.Store.Purge(ctx, &idem.PurgeOpts{DryRun: true})
	if err != nil || dry.Deleted != 25 || e.Keys() != 30 {
		t.Fatalf("dry run = %+v, %v, %d rows left; want 25 counted and nothing deleted", dry, err, e.Keys())
	}
	var progress []int64
	res, err := e.Store.Purge(ctx, &idem.PurgeOpts{BatchSize: 10, Progress: func(n int64) { progress = append(progress, n) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 25 || res.Batches != 3 || fmt.Sprint(progress) != "[10 20 25]" || fmt.Sprint(purged) != "[10 10 5]" {
		t.Fatalf("Purge = %+v, progress %v, events %v; want 25 rows in batches of 10, 10, 5", res, progress, purged)
	}
	if n := e.Count("SELECT count(*) FROM " + e.Store.Table() + " WHERE key LIKE 'live-%' OR key LIKE 'held-%'"); n != 5 || e.Keys() != 5 {
		t.Fatalf("%d rows left (%d of them live or held); want exactly the 5 live and held rows", e.Keys(), n)
	}
	if res, err := e.Store.Purge(ctx, nil); err != nil || res.Deleted != 0 {
		t.Fatalf("second Purge = %+v, %v; want nothing left to delete", res, err)
	}
}

// Keys of different TTLs sit side by side on the same pages (a day's key written beside a
// minute's): Purge deletes exactly the expired ones on every page, in batches no larger than
// BatchSize, and keeps every live row and every row a live request holds.
func TestPurgeWithMixedTTLsDeletesOnlyExpiredRows(t *testing.T) {
	t.Parallel()
	var batches []int
	e := newEnv(t, &idem.Config{Observer: func(_ context.Context, ev idem.Event) {
		if ev.Kind == idem.EventPurged {
			batches = append(batches, ev.Count)
		}
	}}, nil)
	ctx := context.Background()
	// Row i: i%4 == 0 a long TTL, live; 1 a short TTL, expired; 2 in flight, TTL gone but its
	// lease live (held); 3 in flight, TTL and lease gone (abandoned).
	const rows = 4000
	if _, err := e.Sch.Pool.Exec(ctx, `INSERT INTO `+e.Store.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, status, body)
		SELECT 't' || (i % 7), 's', 'k-' || i, 'op', repeat('f', 64),
			CASE WHEN i % 4 >= 2 THEN 'in_flight' ELSE 'complete' END, gen_random_uuid(),
			now() + CASE i % 4 WHEN 2 THEN interval '1 minute' ELSE interval '-1 hour' END,
			now() + CASE i % 4 WHEN 0 THEN interval '1 day' ELSE interval '-1 minute' END - i * interval '1 ms',
			201, '{"id":1}'::bytea
		FROM generate_series(1, $1::int) AS i`, rows); err != nil {
		t.Fatal(err)
	}
	const batch = 50
	if pages := e.Count("SELECT (pg_relation_size($1::text::regclass) / 8192)::int", e.Store.Table()); pages < 4*batch/8 {
		t.Fatalf("the table has %d pages; want several of Purge's windows", pages)
	}
	res, err := e.Store.Purge(ctx, &idem.PurgeOpts{BatchSize: batch})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != rows/2 || res.Batches != len(batches) {
		t.Fatalf("Purge = %+v (%d batch events); want the %d expired and abandoned rows deleted", res, len(batches), rows/2)
	}
	for _, n := range batches {
		if n > batch {
			t.Fatalf("a batch deleted %d rows; BatchSize is %d (batches %v)", n, batch, batches)
		}
	}
	byKind := func(rem int) int {
		return e.Count("SELECT count(*)::int FROM "+e.Store.Table()+" WHERE substr(key, 3)::int % 4 = $1", rem)
	}
	if live, expired, held, abandoned := byKind(0), byKind(1), byKind(2), byKind(3); live != rows/4 || expired != 0 || held != rows/4 || abandoned != 0 {
		t.Fatalf("left: %d live (want %d), %d expired (want 0), %d held (want %d), %d abandoned (want 0)",
			live, rows/4, expired, held, rows/4, abandoned)
	}
	if res, err := e.Store.Purge(ctx, nil); err != nil || res.Deleted != 0 {
		t.Fatalf("second Purge = %+v, %v; want nothing left to delete", res, err)
	}
}

// A purge statement reads one window of the table's pages (a TID range scan) and deletes by the
// primary key: its work is bounded by the window however large the table, with custom and
// generic plans alike. A sequential scan here would read the whole table for every batch.
func TestPurgeReadsOneWindowOfPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	if _, err := e.Sch.Pool.Exec(ctx, `INSERT INTO `+e.Store.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at)
		SELECT 't', 's', 'k-' || i, 'op', 'fp', 'complete', gen_random_uuid(), now(), now() - interval '1 minute'
		FROM generate_series(1, 20000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Sch.Pool.Exec(ctx, "ANALYZE "+e.Store.Table()); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		var plan []string
		err := pgx.BeginFunc(ctx, e.Sch.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, "EXPLAIN "+idem.PurgeSQL(e.Store), int64(1000), int64(0), int64(125))
			if err != nil {
				return err
			}
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "Tid Range Scan") || strings.Contains(text, "Seq Scan") {
			t.Fatalf("%s: the purge statement does not read just its window of pages:\n%s", mode, text)
		}
	}
}
