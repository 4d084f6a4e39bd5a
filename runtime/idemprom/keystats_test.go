package idemprom

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

func TestKeyStatsExportsTheKeyTable(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	ctx := context.Background()
	store, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	for _, key := range []string{"a", "b"} {
		if _, err := store.Do(ctx, &idem.DoParams{Scope: "s", Key: key, Operation: "createPayment", Fingerprint: "fp"},
			func(context.Context, pgx.Tx) (*idem.Outcome, error) { return &idem.Outcome{Status: 201}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	abandon := func(key string) {
		t.Helper()
		// What a process that died holding a key leaves: in flight, its lease run out.
		if _, err := sch.Pool.Exec(ctx, `INSERT INTO `+store.Table()+`
			(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, created_at)
			VALUES ('', 's', $1, 'capturePayment', 'fp', 'in_flight', gen_random_uuid(), now() - interval '1 minute',
				now() + interval '1 day', now() - interval '2 minutes')`, key); err != nil {
			t.Fatal(err)
		}
	}
	abandon("c")

	col := NewKeyStats(store, &KeyStatsOptions{MaxAge: time.Hour})
	clock := time.Now()
	col.now = func() time.Time { return clock }
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	want := func(stale string) string {
		return `
# HELP idemgen_idempotency_key_stats_up 1 when the last read of the idempotency key table succeeded, else 0.
# TYPE idemgen_idempotency_key_stats_up gauge
idemgen_idempotency_key_stats_up 1
# HELP idemgen_idempotency_keys Idempotency keys in the key table, by operation and state.
# TYPE idemgen_idempotency_keys gauge
idemgen_idempotency_keys{operation="capturePayment",state="complete"} 0
idemgen_idempotency_keys{operation="capturePayment",state="in_flight"} ` + stale + `
idemgen_idempotency_keys{operation="createPayment",state="complete"} 2
idemgen_idempotency_keys{operation="createPayment",state="in_flight"} 0
# HELP idemgen_idempotency_stale_in_flight_keys In-flight idempotency keys whose lease ran out (their holder died or lost the database), by operation.
# TYPE idemgen_idempotency_stale_in_flight_keys gauge
idemgen_idempotency_stale_in_flight_keys{operation="capturePayment"} ` + stale + `
idemgen_idempotency_stale_in_flight_keys{operation="createPayment"} 0
`
	}
	names := []string{KeyStatsUp, KeysStored, StaleInFlightKeys}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want("1")), names...); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != OldestInFlightSeconds {
			continue
		}
		for _, m := range mf.GetMetric() {
			age := m.GetGauge().GetValue()
			if op := m.GetLabel()[0].GetValue(); (op == "capturePayment") != (age >= 110 && age < 600) {
				t.Errorf("%s{operation=%q} = %v; want about 120 for the abandoned key, 0 for none", OldestInFlightSeconds, op, age)
			}
		}
	}

	// Within MaxAge a scrape reuses the read; past it, the table is read again.
	abandon("d")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want("1")), names...); err != nil {
		t.Errorf("within MaxAge: %v", err)
	}
	clock = clock.Add(2 * time.Hour)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want("2")), names...); err != nil {
		t.Errorf("past MaxAge: %v", err)
	}
}

func TestKeyStatsSaysWhenTheTableCannotBeRead(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	store, err := idem.NewStore(sch.Pool, &idem.Config{Schema: sch.Name, Table: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewKeyStats(store, nil))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP idemgen_idempotency_key_stats_up 1 when the last read of the idempotency key table succeeded, else 0.
# TYPE idemgen_idempotency_key_stats_up gauge
idemgen_idempotency_key_stats_up 0
`)); err != nil {
		t.Error(err)
	}
}
