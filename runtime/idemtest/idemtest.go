// Package idemtest gives tests a real PostgreSQL schema of their own, freshly migrated, and a
// conformance kit for idempotent handlers.
//
// The server comes from TEST_DATABASE_URL (`make test` starts a throwaway one and sets it). When
// the variable is missing, tests fail with a message that says how to provide it; they never skip.
package idemtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// EnvURL names the environment variable holding the test server's URL.
const EnvURL = "TEST_DATABASE_URL"

// URL returns the test database URL or fails tb with instructions.
func URL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		tb.Fatalf("%s is not set: run the tests with `make test` (it starts a throwaway PostgreSQL), "+
			"or point %s at a PostgreSQL server you may create schemas in", EnvURL, EnvURL)
	}
	return u
}

// SchemaOpts tune TestSchema; nil means defaults.
type SchemaOpts struct {
	MaxConns  int32 // pool size; default 8
	Table     string
	NoMigrate bool // create the schema but do not run idem's migrations
	// Tracer, when set, traces every query of the pool's connections (e.g. to count round
	// trips); it also sees the migration's queries, so count differences.
	Tracer pgx.QueryTracer
	// DialFunc, when set, opens the pool's connections, and the cancel requests pgx sends when a
	// statement's context ends (e.g. to delay those, as a slow network does).
	DialFunc pgconn.DialFunc
}

// Schema is a test's own schema and a pool whose search_path points at it.
type Schema struct {
	Name string
	Pool *pgxpool.Pool
	URL  string // URL of the server (without the search_path)
	// Table is the key table's name inside Name.
	Table string
}

// TestSchema creates a uniquely named schema, migrates idem's table into it, and returns a pool
// whose connections use it as search_path. Everything is dropped when tb ends.
func TestSchema(tb testing.TB, opts *SchemaOpts) *Schema {
	tb.Helper()
	if opts == nil {
		opts = &SchemaOpts{}
	}
	url := URL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "idemtest_" + hex.EncodeToString(b[:])

	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("idemtest: connect to %s=%q: %v", EnvURL, url, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("idemtest: create schema %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			tb.Errorf("idemtest: drop schema %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("idemtest: drop schema %s: %v", name, err)
		}
	})

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("idemtest: parse %s: %v", EnvURL, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	cfg.MaxConns = 8
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	cfg.ConnConfig.Tracer = opts.Tracer
	if opts.DialFunc != nil {
		cfg.ConnConfig.DialFunc = opts.DialFunc
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("idemtest: pool: %v", err)
	}
	tb.Cleanup(pool.Close) // runs before the schema is dropped (cleanups run last-in first-out)

	table := opts.Table
	if table == "" {
		table = "idempotency_keys"
	}
	if !opts.NoMigrate {
		m, err := idem.NewMigrator(pool, &idem.Config{Schema: name, Table: table})
		if err == nil {
			_, err = m.Migrate(ctx, idem.DirectionUp, nil)
		}
		if err != nil {
			tb.Fatalf("idemtest: migrate schema %s: %v", name, err)
		}
	}
	return &Schema{Name: name, Pool: pool, URL: url, Table: table}
}

// Config returns an idem.Config for this schema.
func (s *Schema) Config() *idem.Config {
	return &idem.Config{Schema: s.Name, Table: s.Table}
}

// String is the schema name.
func (s *Schema) String() string { return fmt.Sprintf("schema %s", s.Name) }
