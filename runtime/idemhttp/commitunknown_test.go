package idemhttp_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// TestCommitAnswerLostIsNotLoggedAsRolledBack: a handler error that says the COMMIT's answer was
// lost (the work may have committed) is logged as such, never as "its work was rolled back", and
// answered 503 with Retry-After: a retry with the same key finds out (a replay if it committed).
func TestCommitAnswerLostIsNotLoggedAsRolledBack(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	var logs syncBuffer
	cfg := sch.Config()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	store, err := idem.NewStore(sch.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", nil)
	idemhttp.ResponseErrorHandler(store)(w, r, fmt.Errorf("payments: %w", idem.ErrCommitUnknown))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("answer %d (Retry-After %q); want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	out := logs.String()
	if strings.Contains(out, "rolled back") || !strings.Contains(out, "may have committed") {
		t.Fatalf("log %q; want it to say the work may have committed, not that it was rolled back", out)
	}
}
