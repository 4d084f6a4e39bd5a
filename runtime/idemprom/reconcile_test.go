package idemprom

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemreconcile"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

func TestKeyStatsExportsUncertainKeys(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	store, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	// What a claim of an uncertain-on-loss operation lost after its provider call leaves.
	for _, k := range []string{"a", "b"} {
		if _, err := sch.Pool.Exec(context.Background(), `INSERT INTO `+store.Table()+`
			(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, created_at, provider_at)
			VALUES ('', 's', $1, 'createPayment', 'fp', 'uncertain', gen_random_uuid(), now(), 'infinity', now(),
				now() - interval '20 minutes')`, k); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewKeyStats(store, nil))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP idemgen_idempotency_uncertain_keys Idempotency keys whose outcome is uncertain (an attempt was lost after a provider call), by operation.
# TYPE idemgen_idempotency_uncertain_keys gauge
idemgen_idempotency_uncertain_keys{operation="createPayment"} 2
`), UncertainKeys); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == OldestUncertainSeconds {
			age := mf.GetMetric()[0].GetGauge().GetValue()
			found = age >= 1190 && age < 1500
		}
	}
	if !found {
		t.Errorf("%s: want about 1200 seconds for keys that called their provider 20 minutes ago", OldestUncertainSeconds)
	}
}

func TestReconcileMetrics(t *testing.T) {
	t.Parallel()
	rep := &idemreconcile.Report{RunAt: time.Unix(1796400000, 0), Records: 12,
		Discrepancies: []idemreconcile.Discrepancy{{Kind: idemreconcile.MissingCharge}, {Kind: idemreconcile.MissingCharge}, {Kind: idemreconcile.DuplicateCharge}},
		Resolved:      []idemreconcile.Resolved{{As: "failed"}}}
	path := filepath.Join(t.TempDir(), "reconcile.prom")
	if err := WriteReconcileTextfile(path, rep, prometheus.Labels{"provider": "acquirer"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`idemgen_idempotency_reconcile_discrepancies{kind="missing_charge",provider="acquirer"} 2`,
		`idemgen_idempotency_reconcile_discrepancies{kind="duplicate_charge",provider="acquirer"} 1`,
		`idemgen_idempotency_reconcile_discrepancies{kind="uncertain_not_charged",provider="acquirer"} 0`,
		`idemgen_idempotency_reconcile_resolved_keys{provider="acquirer",resolution="failed"} 1`,
		`idemgen_idempotency_reconcile_records{provider="acquirer"} 12`,
		`idemgen_idempotency_reconcile_last_run_timestamp_seconds{provider="acquirer"} 1.7964e+09`,
	} {
		if !strings.Contains(string(b), line+"\n") {
			t.Errorf("textfile lacks %q:\n%s", line, b)
		}
	}
	c := NewReconcile(nil)
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("before any report: %d metrics; want none, so an alert sees no run", n)
	}
}
