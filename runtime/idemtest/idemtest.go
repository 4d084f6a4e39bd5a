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
	// OnNotice, when set, receives every notice and warning the server sends the pool's
	// connections.
	OnNotice pgconn.NoticeHandler
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
	maxConns := int32(8)
	if opts.MaxConns > 0 {
		maxConns = opts.MaxConns
	}
	// The pool, the admin connection and a store's listener.
	if err := reserveConnections(context.Background(), admin, int(maxConns)+2); err != nil {
		admin.Close(context.Background())
		tb.Fatalf("idemtest: %v", err)
	}
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second) // the wait above is not setup time
	defer cancel()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		admin.Close(context.Background())
		tb.Fatalf("idemtest: create schema %s: %v", name, err)
	}
	tb.Cleanup(func() { // the admin connection ends last: closing it hands the reservation back
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		defer admin.Close(ctx)
		drop := "DROP SCHEMA " + pgx.Identifier{name}.Sanitize() + " CASCADE"
		if _, err := admin.Exec(ctx, drop); err != nil && admin.IsClosed() { // a test ended the session
			c, cerr := pgx.Connect(ctx, url)
			if cerr != nil {
				tb.Errorf("idemtest: drop schema %s: %v", name, cerr)
				return
			}
			defer c.Close(ctx)
			_, err = c.Exec(ctx, drop)
			if err != nil {
				tb.Errorf("idemtest: drop schema %s: %v", name, err)
			}
		} else if err != nil {
			tb.Errorf("idemtest: drop schema %s: %v", name, err)
		}
	})

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("idemtest: parse %s: %v", EnvURL, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	app := "idemtest-" + name
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = maxConns
	cfg.ConnConfig.Tracer = opts.Tracer
	if opts.DialFunc != nil {
		cfg.ConnConfig.DialFunc = opts.DialFunc
	}
	if opts.OnNotice != nil {
		cfg.ConnConfig.OnNotice = opts.OnNotice
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("idemtest: pool: %v", err)
	}
	// Before the schema is dropped (cleanups run last-in first-out).
	tb.Cleanup(func() { closePool(tb, pool, admin, app) })

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

// closePool closes pool once every connection is back. A connection still held after 10s (a
// handler the test left blocked, a transaction nobody ends) would make pgxpool's Close wait
// forever: it fails the test instead, naming the leak, and ends those sessions, so that the
// schema can still be dropped and the run goes on.
func closePool(tb testing.TB, pool *pgxpool.Pool, admin *pgx.Conn, app string) {
	deadline := time.Now().Add(10 * time.Second)
	for pool.Stat().AcquiredConns() > 0 {
		if time.Now().After(deadline) {
			tb.Errorf("idemtest: %d connections of the test's pool were never given back (a blocked handler, or a transaction nobody ends); ending their sessions",
				pool.Stat().AcquiredConns())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = admin.Exec(ctx, "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1", app)
			return // the pool stays open: its Close would wait for the lost connections
		}
		time.Sleep(20 * time.Millisecond)
	}
	pool.Close()
}

// reserveWait bounds how long a test waits for its share of the server's connections.
const reserveWait = 3 * time.Minute

// reserveSlack is how many of the server's connections are left out of the reservations: for
// the connections tests open on their own (to kill a backend, read a row) and for whoever else
// uses the server.
const reserveSlack = 10

// reserveConnections reserves n of the test server's connections for admin's session, so that
// tests running at once (in this process and in the other test binaries of one go test run)
// never ask the server for more connections than its max_connections: a stock server (100)
// runs the whole suite, and a test waits for connections instead of failing with "too many
// clients". A reservation is n session-level advisory locks out of max_connections minus
// reserveSlack; it ends with the session. A test that needs more than the server can give fails
// at once, naming the setting.
func reserveConnections(ctx context.Context, admin *pgx.Conn, n int) error {
	var limit int
	if err := admin.QueryRow(ctx, "SELECT current_setting('max_connections')::int").Scan(&limit); err != nil {
		return fmt.Errorf("read max_connections: %w", err)
	}
	slots := limit - reserveSlack
	if n > slots {
		return fmt.Errorf("this test needs %d connections, and %s's server has max_connections = %d (%d for tests): raise max_connections to at least %d",
			n, EnvURL, limit, slots, n+reserveSlack)
	}
	ctx, cancel := context.WithTimeout(ctx, reserveWait)
	defer cancel()
	backoff := 5 * time.Millisecond
	for {
		// Each free slot taken is locked; a partial take is given back, so that two tests that
		// each hold half of what they need never wait for each other.
		var took []int64
		err := admin.QueryRow(ctx, `SELECT coalesce(array_agg(i), '{}') FROM (
			SELECT i FROM generate_series(1, $1::int) AS i WHERE pg_try_advisory_lock($2::int, i) LIMIT $3::int) AS free`,
			slots, reserveClass, n).Scan(&took)
		if err != nil {
			return fmt.Errorf("reserve %d connections: %w", n, err)
		}
		if len(took) == n {
			return nil
		}
		if _, err := admin.Exec(ctx, "SELECT pg_advisory_unlock($1::int, i::int) FROM unnest($2::bigint[]) AS i", reserveClass, took); err != nil {
			return fmt.Errorf("reserve %d connections: %w", n, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited %s for %d of the test server's connections (max_connections = %d), held by other tests all along", reserveWait, n, limit)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// reserveClass is the first key of the advisory locks reserveConnections takes ("idem").
const reserveClass = 0x6964656d
