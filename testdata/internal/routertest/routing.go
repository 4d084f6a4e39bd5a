package routertest

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// allowRouters are the routers whose wiring answers a method a path does not have with a 405
// problem that carries Allow (README's "What a client sees"); the others answer with their
// framework's default (docs/routers.md).
var allowRouters = []string{"chi", "gorilla", "std-http"}

var routingCases = []testCase{
	{"method-not-allowed-405-with-allow", func(t *testing.T, e *env, c *client) {
		if !slices.Contains(allowRouters, e.router) {
			// The framework's own default answers: the method is refused (404 or 405), never
			// served and never a server error.
			for _, m := range []string{http.MethodDelete, http.MethodPut} {
				if a := c.send(t, m, "/v1/orders", ""); a.Status != http.StatusMethodNotAllowed && a.Status != http.StatusNotFound {
					t.Errorf("%s: %s /v1/orders: %d %s, want its framework's 404 or 405", e.router, m, a.Status, a.Body)
				}
			}
			return
		}
		for _, tc := range []struct {
			method, path string
			allow        []string // the path's methods; GET may bring HEAD along
		}{
			{http.MethodDelete, "/v1/orders", []string{http.MethodPost}},
			{http.MethodPut, "/v1/orders/x", []string{http.MethodGet}},
			{http.MethodGet, "/v1/payments/x", []string{http.MethodPatch}},
		} {
			a := c.send(t, tc.method, tc.path, "")
			c.problem(t, tc.method+" "+tc.path, a, http.StatusMethodNotAllowed, "method-not-allowed")
			var got []string
			for _, v := range a.Header.Values("Allow") {
				for m := range strings.SplitSeq(v, ",") {
					got = append(got, strings.TrimSpace(m))
				}
			}
			want := slices.Clone(tc.allow)
			if slices.Contains(want, http.MethodGet) && slices.Contains(got, http.MethodHead) {
				want = append(want, http.MethodHead)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s: %s %s: Allow %q, want the path's methods %v", e.router, tc.method, tc.path, a.Header.Values("Allow"), tc.allow)
			}
		}
	}},
}
