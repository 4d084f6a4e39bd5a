package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// eventLog records the Store's events by kind.
type eventLog struct {
	mu    sync.Mutex
	kinds map[idem.EventKind]int
}

func (l *eventLog) observe(_ context.Context, e idem.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kinds[e.Kind]++
}

func (l *eventLog) count(k idem.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kinds[k]
}

// TestHandlerAbortedIsNotAStoreError: a handler whose own insert hits a unique violation, and
// which answers 400 without rolling the statement back, leaves its transaction aborted (25P02).
// That is the handler's failure, not an outage: ErrHandlerAborted, the handler_failed event and
// its log line, never store_error; the key is given back and the pool stays healthy; an HTTP
// server answers a 500 problem naming no SQL. The same handler with the insert in a savepoint
// (tx.Begin) commits its 400 with the rest of its work.
func TestHandlerAbortedIsNotAStoreError(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			events := &eventLog{kinds: map[idem.EventKind]int{}}
			var logs bytes.Buffer
			var logMu sync.Mutex
			logger := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
			e := newEnv(t, &idem.Config{Observer: events.observe, Logger: logger}, &idemtest.SchemaOpts{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := e.Sch.Pool.Exec(ctx, `CREATE TABLE accounts (name text PRIMARY KEY);
				CREATE TABLE audit (what text NOT NULL);
				INSERT INTO accounts VALUES ('taken')`); err != nil {
				t.Fatal(err)
			}
			// openAccount inserts an account, answering 400 when the name is taken; with
			// savepoint, the insert runs in a nested transaction rolled back on its error.
			openAccount := func(savepoint bool) idem.HandlerFunc {
				return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					if _, err := tx.Exec(ctx, `INSERT INTO audit VALUES ('attempt')`); err != nil {
						return nil, err
					}
					q := tx
					if savepoint {
						sp, err := tx.Begin(ctx)
						if err != nil {
							return nil, err
						}
						defer sp.Rollback(ctx) // after a Commit, a no-op
						q = sp
					}
					_, err := q.Exec(ctx, `INSERT INTO accounts VALUES ('taken')`)
					var pgErr *pgconn.PgError
					if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
						return nil, errors.New("want a unique violation from the insert, got: " + errString(err))
					}
					if savepoint {
						if err := q.Rollback(ctx); err != nil {
							return nil, err
						}
					}
					return &idem.Outcome{Status: 400, Body: []byte(`{"error":"name taken"}`)}, nil
				}
			}

			p := &idem.DoParams{Scope: "s", Key: "no-savepoint", Operation: "openAccount", Fingerprint: "fp", Claim: mode}
			res, err := e.Store.Do(ctx, p, openAccount(false))
			if !errors.Is(err, idem.ErrHandlerAborted) || errors.Is(err, idem.ErrStoreUnavailable) {
				t.Fatalf("Do with an aborted transaction = %+v, %v; want ErrHandlerAborted", res, err)
			}
			if n := events.count(idem.EventHandlerFailed); n != 1 {
				t.Errorf("%d handler_failed events, want 1", n)
			}
			if n := events.count(idem.EventStoreError); n != 0 {
				t.Errorf("%d store_error events for a handler's own failed statement, want 0", n)
			}
			if n := events.count(idem.EventReleased); n != 0 {
				t.Errorf("%d released events beside handler_failed, want 0 (one event per run)", n)
			}
			logMu.Lock()
			logged := logs.String()
			logMu.Unlock()
			if !strings.Contains(logged, "aborted its transaction") || !strings.Contains(logged, "savepoint") || strings.Contains(logged, "no-savepoint") {
				t.Errorf("log %q: want a line saying the handler's transaction was aborted, pointing at savepoints, without the raw key", logged)
			}
			if n := e.Count(`SELECT count(*) FROM audit`); n != 0 {
				t.Errorf("%d audit rows after the aborted run, want 0 (its work rolled back)", n)
			}
			if n := e.Keys(); n != 0 {
				t.Errorf("%d key rows after the aborted run, want 0 (the key given back)", n)
			}
			w := httptest.NewRecorder()
			idemhttp.ResponseErrorHandler(e.Store)(w, httptest.NewRequest(http.MethodPost, "/accounts", nil), err)
			body := w.Body.String()
			if w.Code != http.StatusInternalServerError || !strings.Contains(body, `"internal"`) {
				t.Errorf("HTTP answer %d %s; want the 500 internal problem", w.Code, body)
			}
			for _, leak := range []string{"25P02", "23505", "SQLSTATE", "aborted", "duplicate", "accounts"} {
				if strings.Contains(body, leak) {
					t.Errorf("HTTP answer %s carries %q: no SQL or driver text may reach a client", body, leak)
				}
			}

			// The savepoint keeps the transaction usable: the 400 commits with the audit row.
			p.Key = "savepoint"
			res, err = e.Store.Do(ctx, p, openAccount(true))
			if err != nil || res.Outcome.Status != 400 {
				t.Fatalf("Do with a savepoint = %+v, %v; want the handler's 400", res, err)
			}
			if n := e.Count(`SELECT count(*) FROM audit`); n != 1 {
				t.Errorf("%d audit rows after the savepoint run, want 1", n)
			}
			if n := events.count(idem.EventCompleted); n != 1 {
				t.Errorf("%d completed events, want 1", n)
			}
			if n := events.count(idem.EventStoreError); n != 0 {
				t.Errorf("%d store_error events, want 0", n)
			}
			// The replay answers the stored 400; the pool's connections are all usable.
			res, err = e.Store.Do(ctx, p, openAccount(true))
			if err != nil || !res.Replayed || res.Outcome.Status != 400 {
				t.Errorf("replay = %+v, %v; want the stored 400", res, err)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
