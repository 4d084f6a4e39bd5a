package idemhttp_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// The headers a spec declares on a stored response are replayed like replayHeaders, with the
// same exceptions: credentials, cookies and hop-by-hop headers never are, even when declared.
func TestReplayCarriesDeclaredHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	p := policy()
	p.DeclaredHeaders = []string{"X-Jws-Signature", "x-fapi-interaction-id", "Set-Cookie", "Authorization", "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Status", "TE", "Trailer", "Transfer-Encoding", "Upgrade"}
	p.ReplayHeaders = []string{"X-Cost"}
	sent := http.Header{
		"X-Jws-Signature":       {"sig.a", "sig.b"},
		"X-Fapi-Interaction-Id": {"93bac548"},
		"X-Cost":                {"3"},
		"X-Undeclared":          {"dropped"},
	}
	for _, h := range []string{"Set-Cookie", "Authorization", "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Status", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		sent[h] = []string{"never replayed"}
	}
	fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		w := idemhttp.NewRecorder()
		for k, vs := range sent {
			w.Header()[k] = vs
		}
		w.WriteHeader(201)
		w.Write([]byte(`{}`))
		return w.Outcome(), nil
	}
	for i := range 2 {
		r, err := idemhttp.Serve(context.Background(), e.Store, p, request("k", "fp"), fn)
		if err != nil || r.Kind != []idemhttp.ResultKind{idemhttp.ResultExecuted, idemhttp.ResultReplayed}[i] {
			t.Fatalf("request %d = %+v, %v", i+1, r, err)
		}
		if i == 0 {
			continue
		}
		h := written(t, r).Header()
		for _, k := range []string{"X-Jws-Signature", "X-Fapi-Interaction-Id", "X-Cost"} {
			if !slices.Equal(h.Values(k), sent[k]) {
				t.Errorf("replay %s = %q; want %q", k, h.Values(k), sent[k])
			}
		}
		for k := range sent {
			if idemhttp.NeverReplayed(k) || k == "X-Undeclared" {
				if v := h.Values(k); v != nil {
					t.Errorf("replay carries %s: %q", k, v)
				}
			}
		}
	}
	// What is stored is what a replay may carry: the row holds no forbidden header either.
	var stored map[string][]string
	q := `SELECT headers FROM ` + pgx.Identifier{e.Sch.Name, e.Sch.Table}.Sanitize()
	if err := e.Sch.Pool.QueryRow(context.Background(), q).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) != 3 {
		t.Errorf("the stored headers are %v; want the two declared ones and the listed one", stored)
	}
	for k := range stored {
		if _, ok := map[string]bool{"X-Jws-Signature": true, "X-Fapi-Interaction-Id": true, "X-Cost": true}[k]; !ok {
			t.Errorf("the stored headers %v hold %s", stored, k)
		}
	}
}

func TestNeverReplayed(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"set-cookie": true, "Authorization": true, "connection": true, "Keep-Alive": true, "Proxy-Connection": true,
		"proxy-authorization": true, "TE": true, "Trailer": true, "Transfer-Encoding": true, "upgrade": true,
		"X-Jws-Signature": false, "Location": false, "Retry-After": false, "X-Proxy-Id": false,
	} {
		if got := idemhttp.NeverReplayed(name); got != want {
			t.Errorf("NeverReplayed(%q) = %v, want %v", name, got, want)
		}
	}
}
