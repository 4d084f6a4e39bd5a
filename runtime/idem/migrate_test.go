package idem_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

func TestMigrations(t *testing.T) {
	t.Parallel()
	ms, err := mustMigrator(t, nil).Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 || !strings.Contains(ms[0].Up, `CREATE TABLE "public"."idempotency_keys"`) ||
		!strings.Contains(ms[0].Down, `DROP TABLE IF EXISTS "public"."idempotency_keys"`) {
		t.Fatalf("default migrations: %+v", ms)
	}
	odd, err := mustMigrator(t, &idem.Config{Schema: `we"ird`, Table: "keys v2"}).Migrations()
	if err != nil || !strings.Contains(odd[0].Up, `"we""ird"."keys v2"`) {
		t.Fatalf("names are not sanitised: %v\n%s", err, odd[0].Up)
	}
	if strings.Contains(odd[0].Up, "{{") {
		t.Fatalf("unrendered placeholder:\n%s", odd[0].Up)
	}
}

func TestMigrateIsIdempotentConcurrentAndReversible(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{NoMigrate: true})
	ctx := context.Background()
	// A schema and table name that need quoting, in a schema Migrate has to create.
	opts := &idem.Config{Schema: sch.Name + `_Odd "Schema"`, Table: "keys-v2"}
	m, err := idem.NewMigrator(sch.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sch.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{opts.Schema}.Sanitize()+" CASCADE")
	})

	var wg sync.WaitGroup
	applied := make([][]int, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := m.Migrate(ctx, idem.DirectionUp, nil)
			errs[i] = err
			if r != nil {
				applied[i] = versions(r)
			}
		}()
	}
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate %d: %v", i, err)
		}
		total += len(applied[i])
	}
	if total != 7 {
		t.Fatalf("concurrent Migrate applied %v; want versions 1 to 7 applied exactly once", applied)
	}
	if r, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil || len(r.Versions) != 0 {
		t.Fatalf("second Migrate = %+v, %v; want a no-op", r, err)
	}
	s, err := idem.NewStore(sch.Pool, &idem.Config{Schema: opts.Schema, Table: opts.Table})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Do(ctx, &idem.DoParams{Key: "k", Fingerprint: "fp"}, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		return &idem.Outcome{Status: 200}, nil
	})
	if err != nil || r.Replayed {
		t.Fatalf("Do on the oddly named table = %+v, %v", r, err)
	}
	// Times come from the database clock.
	var skew time.Duration
	if err := sch.Pool.QueryRow(ctx, "SELECT (extract(epoch FROM now() - created_at) * 1e9)::bigint FROM "+s.Table()).Scan(&skew); err != nil {
		t.Fatal(err)
	}
	if skew < 0 || skew > time.Minute {
		t.Fatalf("created_at is %s before the database's now()", skew)
	}

	if r, err := m.Migrate(ctx, idem.DirectionDown, &idem.MigrateOpts{DryRun: true}); err != nil || fmt.Sprint(versions(r)) != "[7 6 5 4 3 2 1]" {
		t.Fatalf("dry run down = %+v, %v; want versions 7, 6, 5, 4, 3, 2 and 1 listed", r, err)
	}
	if r, err := m.Migrate(ctx, idem.DirectionDown, nil); err != nil || fmt.Sprint(versions(r)) != "[7 6 5 4 3 2 1]" {
		t.Fatalf("MigrateDown = %+v, %v", r, err)
	}
	var exists bool
	sch.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.Table()).Scan(&exists)
	if exists {
		t.Fatal("MigrateDown left the table")
	}
	if r, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil || fmt.Sprint(versions(r)) != "[1 2 3 4 5 6 7]" {
		t.Fatalf("Migrate after MigrateDown = %+v, %v; want versions 1 to 7 again", r, err)
	}
}

func mustMigrator(t *testing.T, cfg *idem.Config) *idem.Migrator {
	t.Helper()
	m, err := idem.NewMigrator(&pgxpool.Pool{}, cfg) // Migrations reads no database
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// versions lists a migration result's versions in the order they ran.
func versions(r *idem.MigrateResult) []int {
	var vs []int
	for _, m := range r.Versions {
		vs = append(vs, m.Version)
	}
	return vs
}

// Version 2 rewrites the rows version 1 stored ambiguously: a tenant that was not text ("x" and
// hex) moves to the escape no text is stored as, and a tenant that was text stays itself, also
// when it looks like hex; text beginning with the escape is escaped. Afterwards each tenant finds
// its own row, and reverting restores what version 1 had.
func TestMigrationEscapesStoredText(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{NoMigrate: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := idem.NewMigrator(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, idem.DirectionUp, &idem.MigrateOpts{MaxSteps: 1}); err != nil {
		t.Fatal(err)
	}
	s, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	// Rows as version 1 stored them, each under the tenant a request of its own carried.
	old := map[string]string{ // the tenant a request carried: how version 1 stored it
		"\xff":    "xff",
		"a\x00":   "x6100",
		"x616263": "x616263", // text that looks like an escape of text: a plain tenant
		"\x01abc": "\x01abc",
		"acme":    "acme",
	}
	for tenant, stored := range old {
		if _, err := sch.Pool.Exec(ctx, "INSERT INTO "+s.Table()+` (tenant, scope, key, operation, fingerprint, state,
			owner_token, lease_expires_at, status, body, expires_at)
			VALUES ($1, 's', 'k', 'op', 'fp', 'complete', gen_random_uuid(), now(), 201, $2, now() + interval '1 hour')`,
			stored, []byte(fmt.Sprintf("%q", tenant))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil {
		t.Fatalf("migrate to version 2: %v", err)
	}
	replayed := func(when string) {
		t.Helper()
		for tenant := range old {
			r, err := s.Do(ctx, &idem.DoParams{Tenant: tenant, Scope: "s", Key: "k", Fingerprint: "fp"}, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
				return nil, fmt.Errorf("tenant %q executed: its row was not found", tenant)
			})
			if err != nil || !r.Replayed || string(r.Outcome.Body) != fmt.Sprintf("%q", tenant) {
				t.Fatalf("%s: tenant %q: %+v, %v; want its own stored outcome replayed", when, tenant, r, err)
			}
		}
	}
	replayed("after version 2")
	// Back to version 1: versions 7 (the history's resolution), 6 (the history), 5 (the checks),
	// 4 (the expiry index) and 3 (the key table's fillfactor) go first.
	if _, err := m.Migrate(ctx, idem.DirectionDown, &idem.MigrateOpts{MaxSteps: 6}); err != nil {
		t.Fatalf("revert version 2: %v", err)
	}
	for tenant, stored := range old {
		if n := countRows(t, sch.Pool, "SELECT count(*) FROM "+s.Table()+" WHERE tenant = $1 AND body = $2", stored, []byte(fmt.Sprintf("%q", tenant))); n != 1 {
			t.Errorf("after reverting version 2, tenant %q is not stored as %q again", tenant, stored)
		}
	}
	if _, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil {
		t.Fatalf("migrate to version 2 again: %v", err)
	}
	replayed("after version 2 again")
}

// The migration tells the old escape ("x" and the hex of bytes that are not text) from a plain
// tenant that looks like one by matching the hex against UTF-8 in SQL: it agrees with Go's
// utf8.ValidString on every byte string, sequences around the edges of UTF-8 included.
func TestMigrationTellsTextAsGoDoes(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{NoMigrate: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, _ := idem.NewMigrator(sch.Pool, sch.Config())
	if _, err := m.Migrate(ctx, idem.DirectionUp, &idem.MigrateOpts{MaxSteps: 1}); err != nil {
		t.Fatal(err)
	}
	edges := []byte{0x00, 0x01, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff, 'a'}
	r := rand.New(rand.NewPCG(2, 16))
	tenants := map[string]bool{}
	for len(tenants) < 2000 {
		b := make([]byte, 1+r.IntN(5))
		for i := range b {
			b[i] = edges[r.IntN(len(edges))]
		}
		tenants[string(b)] = true
	}
	table := pgx.Identifier{sch.Name, sch.Table}.Sanitize()
	var escaped []string
	for tn := range tenants {
		escaped = append(escaped, "x"+hex.EncodeToString([]byte(tn)))
	}
	if _, err := sch.Pool.Exec(ctx, "INSERT INTO "+table+` (tenant, scope, key, operation, fingerprint, state,
		owner_token, lease_expires_at, expires_at)
		SELECT t, 's', 'k', 'op', 'fp', 'complete', gen_random_uuid(), now(), now() FROM unnest($1::text[]) AS t`, escaped); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	var stored []string
	if err := pgx.BeginFunc(ctx, sch.Pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, "SELECT tenant FROM "+table)
		var err error
		stored, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, s := range stored {
		have[s] = true
	}
	for tn := range tenants {
		want := "\x01" + hex.EncodeToString([]byte(tn)) // the old escape of bytes that are not text
		if utf8.ValidString(tn) && !strings.ContainsRune(tn, 0) {
			want = "x" + hex.EncodeToString([]byte(tn)) // a plain tenant that looks like one
		}
		if !have[want] {
			t.Fatalf("bytes %x: the migration did not store their row's tenant as %q", tn, want)
		}
	}
}

func countRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// Version 4 drops the btree on expires_at (the request path never reads it, and Purge walks the
// table instead); reverting it builds the btree again. The key table lives in a schema that is
// not on the connections' search_path, beside one that is and holds an index of the same name:
// the migration drops the key table's index and leaves the other alone.
func TestMigrationDropsTheExpiryIndex(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{NoMigrate: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := &idem.Config{Schema: sch.Name + "_keys", Table: "keys"}
	t.Cleanup(func() {
		sch.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{cfg.Schema}.Sanitize()+" CASCADE")
	})
	// The decoy, on the search_path: same index name, another table.
	if _, err := sch.Pool.Exec(ctx, `CREATE TABLE decoy (expires_at timestamptz);
		CREATE INDEX keys_expires_at_idx ON decoy (expires_at)`); err != nil {
		t.Fatal(err)
	}
	m, err := idem.NewMigrator(sch.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	indexes := func(schema, table string) string {
		t.Helper()
		return joinedRows(t, ctx, sch.Pool, `SELECT indexname || ': ' || regexp_replace(indexdef, '^.* USING ', '')
			FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 ORDER BY indexname`, schema, table)
	}
	const pk, btree = "keys_pkey: btree (tenant, scope, key)", "keys_expires_at_idx: btree (expires_at)"
	if _, err := m.Migrate(ctx, idem.DirectionUp, &idem.MigrateOpts{MaxSteps: 3}); err != nil {
		t.Fatal(err)
	}
	if got := indexes(cfg.Schema, "keys"); got != btree+"; "+pk {
		t.Fatalf("version 3 indexes: %s", got)
	}
	if r, err := m.Migrate(ctx, idem.DirectionUp, &idem.MigrateOpts{MaxSteps: 1}); err != nil || fmt.Sprint(versions(r)) != "[4]" {
		t.Fatalf("migrate to version 4 = %+v, %v", r, err)
	}
	if got := indexes(cfg.Schema, "keys"); got != pk {
		t.Fatalf("after version 4 the key table's indexes are %q; want only its primary key", got)
	}
	if got := indexes(sch.Name, "decoy"); got != btree {
		t.Fatalf("version 4 dropped an index of another schema: the decoy's indexes are %q", got)
	}
	if r, err := m.Migrate(ctx, idem.DirectionDown, &idem.MigrateOpts{MaxSteps: 1}); err != nil || fmt.Sprint(versions(r)) != "[4]" {
		t.Fatalf("revert version 4 = %+v, %v", r, err)
	}
	if got := indexes(cfg.Schema, "keys"); got != btree+"; "+pk {
		t.Fatalf("after reverting version 4 the key table's indexes are %q; want the btree on expires_at back", got)
	}
	// An index dropped beforehand by hand (DROP INDEX CONCURRENTLY, to avoid the migration's
	// lock) leaves version 4 nothing to do.
	if _, err := sch.Pool.Exec(ctx, "DROP INDEX CONCURRENTLY "+pgx.Identifier{cfg.Schema, "keys_expires_at_idx"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil {
		t.Fatalf("migrate to version 4 with the index already gone: %v", err)
	}
	if got := indexes(cfg.Schema, "keys"); got != pk {
		t.Fatalf("after version 4 again the key table's indexes are %q; want only its primary key", got)
	}
}

// Version 5 drops version 1's CHECK constraints by the names PostgreSQL gave them, which it
// shortens for long table names; reverting puts them back under the same names, and they check
// again.
func TestMigrationDropsTheCheckConstraints(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{NoMigrate: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, table := range []string{
		"keys",
		strings.Repeat("k", 50),          // state_check fits, attempt_check does not
		"kk" + strings.Repeat("ключ", 6), // 50 bytes, attempt_check's cut inside a character
		"Keys \"quoted\"",
	} {
		cfg := &idem.Config{Schema: sch.Name + "_checks", Table: table}
		m, err := idem.NewMigrator(sch.Pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checks := func() string {
			t.Helper()
			return joinedRows(t, ctx, sch.Pool, `SELECT pg_get_constraintdef(c.oid) FROM pg_constraint AS c
				JOIN pg_class AS r ON r.oid = c.conrelid JOIN pg_namespace AS n ON n.oid = r.relnamespace
				WHERE n.nspname = $1 AND c.contype = 'c' ORDER BY 1`, cfg.Schema)
		}
		const both = "CHECK ((attempt >= 1)); CHECK ((state = ANY (ARRAY['in_flight'::text, 'complete'::text])))"
		if _, err := m.Migrate(ctx, idem.DirectionUp, &idem.MigrateOpts{MaxSteps: 4}); err != nil {
			t.Fatalf("table %q: %v", table, err)
		}
		if got := checks(); got != both {
			t.Fatalf("table %q at version 4 has the checks %q; want %q", table, got, both)
		}
		if r, err := m.Migrate(ctx, idem.DirectionUp, &idem.MigrateOpts{MaxSteps: 1}); err != nil || fmt.Sprint(versions(r)) != "[5]" {
			t.Fatalf("table %q: migrate to version 5 = %+v, %v", table, r, err)
		}
		if got := checks(); got != "" {
			t.Fatalf("table %q: version 5 left the checks %q: their names are not the ones PostgreSQL chose", table, got)
		}
		if r, err := m.Migrate(ctx, idem.DirectionDown, &idem.MigrateOpts{MaxSteps: 1}); err != nil || fmt.Sprint(versions(r)) != "[5]" {
			t.Fatalf("table %q: revert version 5 = %+v, %v", table, r, err)
		}
		if got := checks(); got != both {
			t.Fatalf("table %q: after reverting version 5 the checks are %q; want %q", table, got, both)
		}
		s, err := idem.NewStore(sch.Pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = sch.Pool.Exec(ctx, "INSERT INTO "+s.Table()+` (tenant, scope, key, operation, fingerprint, state, owner_token,
			lease_expires_at, expires_at) VALUES ('', '', 'k', 'op', 'fp', 'lost', gen_random_uuid(), now(), now())`)
		if err == nil || !strings.Contains(err.Error(), "23514") {
			t.Fatalf("table %q: after reverting version 5 a row in state \"lost\" was accepted (%v); want a check violation", table, err)
		}
		// Up again, and the next table in a fresh schema.
		if _, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil {
			t.Fatal(err)
		}
		if got := checks(); got != "" {
			t.Fatalf("table %q: version 5 again left the checks %q", table, got)
		}
		if _, err := sch.Pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{cfg.Schema}.Sanitize()+" CASCADE"); err != nil {
			t.Fatal(err)
		}
	}
}

// joinedRows is the one text column of sql's rows, joined by "; ".
func joinedRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) string {
	t.Helper()
	rows, err := pool.Query(ctx, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(defs, "; ")
}

// A key table name may be as long as PostgreSQL keeps names with room for its companions'
// suffixes (idem.MaxTableBytes): such a table migrates up, serves, and migrates down. A longer
// one is refused by NewMigrator and NewStore with an error that says the limit, before
// anything is created: PostgreSQL would cut <table>_migrations and <table>_expires_at_idx (or the
// table itself) to one name, and migration 1 would fail with a bare "already exists".
func TestTableNameLengthLimit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	longest := []string{
		strings.Repeat("k", idem.MaxTableBytes),
		"k" + strings.Repeat("ю", (idem.MaxTableBytes-1)/2), // two-byte characters up to the limit
	}
	for _, table := range longest {
		if len(table) != idem.MaxTableBytes {
			t.Fatalf("test table %q is %d bytes; want %d", table, len(table), idem.MaxTableBytes)
		}
		sch := idemtest.TestSchema(t, nil)
		cfg := &idem.Config{Schema: sch.Name, Table: table}
		m, err := idem.NewMigrator(sch.Pool, cfg)
		if err != nil {
			t.Fatalf("NewMigrator(%d-byte table): %v", len(table), err)
		}
		if _, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil {
			t.Fatalf("migrate up a %d-byte table: %v", len(table), err)
		}
		s, err := idem.NewStore(sch.Pool, cfg)
		if err != nil {
			t.Fatalf("NewStore(%d-byte table): %v", len(table), err)
		}
		for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
			p := &idem.DoParams{Scope: "s", Key: "k-" + mode.String(), Operation: "op", Fingerprint: "fp", Claim: mode}
			for i := range 2 {
				r, err := s.Do(ctx, p, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
					return &idem.Outcome{Status: 201, Body: []byte("done")}, nil
				})
				if err != nil || r.Replayed != (i == 1) {
					t.Fatalf("%s request %d on a %d-byte table: %+v, %v; want executed, then replayed", mode, i+1, len(table), r, err)
				}
			}
		}
		if _, err := m.Migrate(ctx, idem.DirectionDown, nil); err != nil {
			t.Fatalf("migrate down a %d-byte table: %v", len(table), err)
		}
	}
	for _, n := range []int{idem.MaxTableBytes + 1, 63, 64, 100} {
		sch := idemtest.TestSchema(t, nil)
		cfg := &idem.Config{Schema: sch.Name, Table: strings.Repeat("k", n)}
		want := fmt.Sprintf("at most %d", idem.MaxTableBytes)
		if _, err := idem.NewMigrator(sch.Pool, cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewMigrator with a %d-byte table: %v; want an error saying %q", n, err, want)
		}
		if _, err := idem.NewStore(sch.Pool, cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewStore with a %d-byte table: %v; want an error saying %q", n, err, want)
		}
		var objects int
		if err := sch.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname LIKE 'kk%'", sch.Name).Scan(&objects); err != nil || objects != 0 {
			t.Errorf("after refusing a %d-byte table, the schema has %d objects named after it (%v); want none", n, objects, err)
		}
	}
}
