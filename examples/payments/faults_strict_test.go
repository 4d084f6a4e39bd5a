package payments

// The strict fault tests: the guarantees the runtime once broke (a 500 for a connection lost in
// the handler, a key held for a whole lease after a failed release), asserted as they must be.

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestFaultStrictRestartUnderStormNeverAnswers500: a database restart under load must give 503,
// also to the requests whose handler was running when the server went down, and every request
// answered 503 must run when retried after the restart.
func TestFaultStrictRestartUnderStormNeverAnswers500(t *testing.T) {
	t.Parallel()
	stormAcrossRestart(t).check(t, true)
}

// TestFaultStrictBackendTerminatedInsideTheHandlerIs503: a connection killed while the handler
// writes is a store outage, answered 503 store-unavailable with Retry-After.
func TestFaultStrictBackendTerminatedInsideTheHandlerIs503(t *testing.T) {
	t.Parallel()
	e, tr := newFaultEnv(t, 4, nil)
	admin := adminConn(t, e.schema.URL)
	var killErr error
	fired := tr.arm(atLedgerInsert, func(_ context.Context, conn *pgx.Conn) { killErr = terminate(admin, conn) })
	const tenant, key = "acme", "killed-in-handler"
	resp := e.send(create(tenant, key, body19900))
	select {
	case <-fired:
	default:
		t.Fatal("the handler's ledger insert never ran: the fault was never injected")
	}
	if killErr != nil {
		t.Fatal(killErr)
	}
	wantProblem(t, "request whose backend was terminated inside the handler", resp, http.StatusServiceUnavailable, "store-unavailable")
	if resp.header.Get("Retry-After") == "" {
		t.Error("the 503 has no Retry-After")
	}
	e.waitReleased(tenant, key)
	e.wantFreshRetry(tenant, key)
	e.wantLedgerMatchesKeys()
}

// TestFaultStrictFailedReleaseIsRetried: when the connection of the release dies (the handler
// failed, so the key must be given back), the key is still given back soon, not held for the
// whole lease.
func TestFaultStrictFailedReleaseIsRetried(t *testing.T) {
	t.Parallel()
	e, tr := newFaultEnv(t, 4, nil)
	admin := adminConn(t, e.schema.URL)
	var killErr error
	fired := tr.arm(atRelease, func(_ context.Context, conn *pgx.Conn) { killErr = terminate(admin, conn) })
	const tenant, key = "acme", "release-fails"
	resp := e.send(create(tenant, key, `{"amount_minor": 19900, "currency": "RUB", "simulate_failure": true}`))
	select {
	case <-fired:
	default:
		t.Fatal("the release never ran: the fault was never injected")
	}
	if killErr != nil {
		t.Fatal(killErr)
	}
	if resp.status != http.StatusInternalServerError {
		t.Fatalf("simulated handler failure: %d, want its 500; body %s", resp.status, resp.body)
	}
	e.waitReleased(tenant, key)
	e.wantFreshRetry(tenant, key)
	e.wantLedgerMatchesKeys()
}
