package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// TestLogsAnOperatorCanUse pins issue 11's logging: the default logger is slog.Default(); every
// line about a key names its operation and key hash; a client that goes away is logged at Info
// as such, never as a store error or at Warn/Error; the store's and the handler's own trouble (a
// failed release, a timeout, a lost connection, a reference missing) is Warn or Error.
func TestLogsAnOperatorCanUse(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	ctx := context.Background()
	if _, err := sch.Pool.Exec(ctx, "CREATE TABLE payments (key text, amount int)"); err != nil {
		t.Fatal(err)
	}
	if s, err := idem.NewStore(sch.Pool, nil); err != nil || s.Config().Logger != slog.Default() {
		t.Fatalf("the default logger is %v (%v); want slog.Default()", s.Config().Logger, err)
	}
	var buf lockedBuffer
	plain, _ := idem.NewStore(sch.Pool, sch.Config())
	db := &deadRelease{Pool: sch.Pool, t: t, release: idem.ReleaseSQL(plain)}
	cfg := sch.Config()
	cfg.Logger = newDebugLogger(&buf)
	s, err := idem.NewStore(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	serve := func(ctx context.Context, p *idemhttp.Policy, key string, fn idem.HandlerFunc) {
		t.Helper()
		idemhttp.Serve(ctx, s, p, request(key, "fp"), fn)
	}
	keyHash := func(key string) string { return idem.KeyHash("0:|9:operation=13:createPayment", key) }

	// The client goes away while the handler runs.
	cctx, cancel := context.WithCancel(ctx)
	serve(cctx, policy(), "gone", func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		cancel()
		_, err := tx.Exec(ctx, "SELECT 1")
		return nil, err
	})
	// A release that fails (its connection dies), then is retried.
	db.fail.Store(1)
	serve(ctx, policy(), "release", func(context.Context, pgx.Tx) (*idem.Outcome, error) { return nil, errors.New("declined") })
	// A handler past its timeout.
	slow := policy()
	slow.Timeout = 50 * time.Millisecond
	serve(ctx, slow, "slow", func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	// The handler's connection is lost.
	serve(ctx, policy(), "lost", func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		terminate(t, tx.Conn().PgConn().PID())
		_, err := tx.Exec(ctx, "SELECT 1")
		return nil, err
	})
	// A reference-storage handler that forgot its reference.
	ref := policy()
	ref.Storage = idemhttp.StorageReference
	serve(ctx, ref, "noref", func(context.Context, pgx.Tx) (*idem.Outcome, error) { return &idem.Outcome{Status: 201}, nil })
	waitFor(t, 10*time.Second, "the failed release was never retried", func() bool {
		return strings.Contains(buf.String(), "released the key on a retry")
	})

	type record struct {
		Level, Msg, Operation, KeyHash string
		Event                          string
	}
	var records []record
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		str := func(k string) string { v, _ := m[k].(string); return v }
		records = append(records, record{Level: str("level"), Msg: str("msg"), Operation: str("operation"), KeyHash: str("key_hash"), Event: str("event")})
	}
	byKey := map[string][]record{}
	for _, r := range records {
		if strings.Contains(r.Msg, "listen") {
			continue // the listening connection's lines are about the store, not a key
		}
		if r.Operation == "" || r.KeyHash == "" {
			t.Errorf("a line about a key lacks its operation or key hash: %+v", r)
		}
		byKey[r.KeyHash] = append(byKey[r.KeyHash], r)
	}
	has := func(key, level, msg string) {
		t.Helper()
		for _, r := range byKey[keyHash(key)] {
			if r.Level == level && strings.Contains(r.Msg, msg) {
				return
			}
		}
		t.Errorf("no %s line %q for key %s; its lines: %+v", level, msg, key, byKey[keyHash(key)])
	}
	has("gone", "INFO", "client went away")
	for _, r := range byKey[keyHash("gone")] {
		if r.Level == "WARN" || r.Level == "ERROR" || r.Event == string(idem.EventStoreError) {
			t.Errorf("a client that went away was logged as %s %q (event %q); want Info or Debug only", r.Level, r.Msg, r.Event)
		}
	}
	has("release", "WARN", "release failed")
	has("release", "INFO", "released the key on a retry")
	has("slow", "WARN", "ran past its timeout")
	has("lost", "WARN", "store unavailable; answered 503")
	has("noref", "ERROR", "without a reference")
}
