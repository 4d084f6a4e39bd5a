package idem_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// TestStoreGoingDownFailsClosedAndRecovers takes a working store's database away (its sessions
// are terminated and new ones refused, as when the server stops) and brings it back.
func TestStoreGoingDownFailsClosedAndRecovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	rand.Read(b[:])
	name := "idemtest_down_" + hex.EncodeToString(b[:])
	db := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin, err := pgx.Connect(context.Background(), idemtest.URL(t))
		if err != nil {
			t.Error(err)
			return
		}
		defer admin.Close(context.Background())
		if _, err := admin.Exec(context.Background(), "DROP DATABASE "+db+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m, err := idem.NewMigrator(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		runs++
		return &idem.Outcome{Status: 201}, nil
	}
	serve := func(key string) *idemhttp.Result {
		t.Helper()
		r, err := idemhttp.Serve(ctx, store, policy(), request(key, "fp"), fn)
		if err != nil {
			t.Fatalf("Serve(%s): %v", key, err)
		}
		return r
	}
	if r := serve("before"); r.Kind != idemhttp.ResultExecuted || runs != 1 {
		t.Fatalf("before the outage: %s", kindName(r))
	}

	if _, err := admin.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"during-1", "during-2", "before"} { // dead pooled sessions, then refused ones
		if r := serve(key); r.Kind != idemhttp.ResultProblem || r.Problem.Code != idemhttp.CodeStoreUnavailable || runs != 1 {
			t.Fatalf("during the outage, key %s: %s (runs %d); want store-unavailable and no run", key, kindName(r), runs)
		}
	}

	if _, err := admin.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true"); err != nil {
		t.Fatal(err)
	}
	if r := serve("during-1"); r.Kind != idemhttp.ResultExecuted || runs != 2 {
		t.Fatalf("after the outage, a key refused during it: %s; want executed", kindName(r))
	}
	if r := serve("before"); r.Kind != idemhttp.ResultReplayed || runs != 2 {
		t.Fatalf("after the outage, a key completed before it: %s; want replayed", kindName(r))
	}
}
