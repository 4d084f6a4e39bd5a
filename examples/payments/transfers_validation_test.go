package payments

import (
	"net/http"
	"testing"
)

// TestTransferAccountTheBankWouldRefuseIsInvalid: an account the bank cannot take (a NUL byte, a
// control character, a space) is refused by validation, before any key is claimed, so no client
// can create a key that the bank refuses after the claim and an operator must settle.
func TestTransferAccountTheBankWouldRefuseIsInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, account := range []string{`a\u0000b`, `a\u001bb`, `DE02 0001`, `konto\u00e9`} {
		resp := e.send(request{method: http.MethodPost, path: "/v1/transfers", tenant: "acme", key: "bad-account-" + string(rune('a'+i)),
			body: `{"account":"` + account + `","amount_minor":2500,"currency":"EUR"}`})
		wantProblem(t, "a transfer to account "+account, resp, http.StatusBadRequest, "request-invalid")
	}
	if n := e.keyRows(); n != 0 {
		t.Fatalf("%d keys claimed for transfers refused by validation; want none", n)
	}
	// A valid account passes validation and reaches the handler (here without a bank: 503).
	resp := e.send(request{method: http.MethodPost, path: "/v1/transfers", tenant: "acme", key: "good-account",
		body: `{"account":"DE02-0001","amount_minor":2500,"currency":"EUR"}`})
	if resp.status == http.StatusBadRequest {
		t.Fatalf("a valid account was refused: %d %s", resp.status, resp.body)
	}
}
