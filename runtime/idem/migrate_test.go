package idem_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
	if total != 1 {
		t.Fatalf("concurrent Migrate applied %v; want version 1 applied exactly once", applied)
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

	if r, err := m.Migrate(ctx, idem.DirectionDown, &idem.MigrateOpts{DryRun: true}); err != nil || fmt.Sprint(versions(r)) != "[1]" {
		t.Fatalf("dry run down = %+v, %v; want version 1 listed", r, err)
	}
	if r, err := m.Migrate(ctx, idem.DirectionDown, nil); err != nil || fmt.Sprint(versions(r)) != "[1]" {
		t.Fatalf("MigrateDown = %+v, %v", r, err)
	}
	var exists bool
	sch.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.Table()).Scan(&exists)
	if exists {
		t.Fatal("MigrateDown left the table")
	}
	if r, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil || fmt.Sprint(versions(r)) != "[1]" {
		t.Fatalf("Migrate after MigrateDown = %+v, %v; want version 1 again", r, err)
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
