//go:build citus

package payments

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// The example on a Citus cluster (make citus): docs/citus.md's distribution statements, taken
// from the page, run on the example's schema, and the service then runs on the distributed
// tables. CITUS_DATABASE_URL names the coordinator.
const envCitus = "CITUS_DATABASE_URL"

// docDistribution is the distribution block of docs/citus.md ("Distribution"): the SQL block
// that distributes the example's payments, one statement per element.
func docDistribution(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/citus.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range sqlBlock.FindAllStringSubmatch(string(doc), -1) {
		if !strings.Contains(m[1], "create_distributed_table('payments'") {
			continue
		}
		var stmts []string
		for _, s := range strings.Split(m[1], ";") {
			if s = strings.TrimSpace(s); s != "" {
				stmts = append(stmts, s)
			}
		}
		return stmts
	}
	t.Fatal("docs/citus.md has no SQL block that distributes payments")
	return nil
}

var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

// TestCitusExampleDistribution: on the example's schema (its migrations, River's included), the
// service warns at start that its tables are local; docs/citus.md's statements distribute every
// table the example's migrations create (and idemgen's two), co-located with the key table, so the
// warning is gone; and the service then serves payments, captures and refunds exactly once on the
// distributed tables.
func TestCitusExampleDistribution(t *testing.T) {
	url := os.Getenv(envCitus)
	if url == "" {
		t.Fatalf("%s is not set: run `make citus`, or point %s at a Citus coordinator", envCitus, envCitus)
	}
	t.Setenv(idemtest.EnvURL, url) // the schema is the cluster's
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 16})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var mu sync.Mutex
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	if err := Migrate(ctx, sch.Pool); err != nil {
		t.Fatal(err)
	}
	if err := migratePayouts(ctx, sch.Pool, sch.Name, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	want := exampleTables(sch.Table)
	warnLocalOnCitus(ctx, sch.Pool, sch.Name, sch.Table, log)
	mu.Lock()
	warned := logs.String()
	logs.Reset()
	mu.Unlock()
	t.Logf("at start, before the distribution: %s", strings.TrimSpace(warned))
	if !strings.Contains(warned, "not distributed") || !strings.Contains(warned, "docs/citus.md") {
		t.Errorf("the service did not warn that its tables are local on Citus: %q", warned)
	}
	for _, table := range want {
		if !strings.Contains(warned, table) {
			t.Errorf("the warning does not name the local table %s: %q", table, warned)
		}
	}

	stmts := docDistribution(t)
	var named []string
	for _, s := range stmts {
		if _, err := sch.Pool.Exec(ctx, s); err != nil {
			t.Fatalf("docs/citus.md's %s on the example's schema: %v", s, err)
		}
		if m := regexp.MustCompile(`create_distributed_table\('(\w+)'`).FindStringSubmatch(s); m != nil {
			named = append(named, m[1])
		}
	}
	slices.Sort(named)
	sorted := slices.Sorted(slices.Values(want))
	t.Logf("docs/citus.md distributes %v; the example's migrations create %v", named, sorted)
	if !slices.Equal(named, sorted) {
		t.Errorf("docs/citus.md distributes %v; the example's tables are %v", named, sorted)
	}
	if local, err := localOnCitus(ctx, sch.Pool, sch.Name, sch.Table); err != nil || len(local) > 0 {
		t.Errorf("after docs/citus.md's statements, tables left local: %v (%v)", local, err)
	}
	rows, err := sch.Pool.Query(ctx, `SELECT logicalrelid::text, colocationid FROM pg_dist_partition
		WHERE logicalrelid = ANY ($1::regclass[]) ORDER BY 1`, func() []string {
		var q []string
		for _, table := range want {
			q = append(q, sch.Name+"."+table)
		}
		return q
	}())
	if err != nil {
		t.Fatal(err)
	}
	groups, n := map[int]bool{}, 0
	for rows.Next() {
		var rel string
		var colocation int
		if err := rows.Scan(&rel, &colocation); err != nil {
			t.Fatal(err)
		}
		groups[colocation], n = true, n+1
	}
	if rows.Err() != nil || len(groups) != 1 || n != len(want) {
		t.Errorf("%d of the example's %d tables distributed, in %d co-location groups (%v); want all, in one", n, len(want), len(groups), rows.Err())
	}
	warnLocalOnCitus(ctx, sch.Pool, sch.Name, sch.Table, log)
	mu.Lock()
	if logs.Len() > 0 {
		t.Errorf("the service warns at start with every table distributed: %q", logs.String())
	}
	mu.Unlock()

	// The service on the distributed tables: a payment, its capture and a refund, each sent twice.
	cfg := sch.Config()
	cfg.StoreTimeout = 30 * time.Second
	h, store, err := newService(sch.Pool, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	if store.Topology() != idem.TopologyCitus {
		t.Errorf("the example's Store settled on %s on a Citus coordinator; want citus", store.Topology())
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL, client: srv.Client(), schema: sch}
	id := e.createPayment("acme", "k-pay")
	for _, r := range []request{
		create("acme", "k-pay", body19900),
		{method: "POST", path: "/v1/payments/" + id + "/capture", tenant: "acme", key: "k-capture"},
		{method: "POST", path: "/v1/payments/" + id + "/refunds", body: `{"amount_minor": 100}`, tenant: "acme", key: "k-refund"},
	} {
		for i := range 2 {
			resp := e.send(r)
			t.Logf("%s %s (%d): %d, replayed %v", r.method, r.path, i+1, resp.status, resp.replayed())
			if resp.status >= 300 || resp.replayed() != (i == 1 || r.key == "k-pay") {
				t.Errorf("%s %s, request %d: status %d, replayed %v; body %s", r.method, r.path, i+1, resp.status, resp.replayed(), resp.body)
			}
		}
	}
	for kind, key := range map[string]string{"authorized": "k-pay", "captured": "k-capture", "refunded": "k-refund"} {
		if n := e.events(kind, key); n != 1 {
			t.Errorf("%d %s events for %s on the distributed tables; want 1", n, kind, key)
		}
	}
}
