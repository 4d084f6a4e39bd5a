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
			t.Skipf("%s answers an unrouted method with its framework's default, as docs/routers.md says", e.router)
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
