package idem_test

import (
	"context"
	"fmt"
	"testing"

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
