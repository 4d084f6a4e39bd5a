package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// Capture's cap is the one it is given: a body over it is refused 413 (declared or streamed),
// one at the cap passes, and only a cap of zero or less means the 1 MiB default.
func TestCaptureHonoursItsCap(t *testing.T) {
	t.Parallel()
	served := func(max int64, body string, chunked bool) int {
		t.Helper()
		h := idemhttp.Capture(max)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		if chunked {
			req.ContentLength = -1
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	for _, chunked := range []bool{false, true} {
		if code := served(100, strings.Repeat("x", 101), chunked); code != http.StatusRequestEntityTooLarge {
			t.Errorf("a 101-byte body under a 100-byte cap (chunked %v): %d; want 413", chunked, code)
		}
		if code := served(100, strings.Repeat("x", 100), chunked); code != http.StatusNoContent {
			t.Errorf("a 100-byte body under a 100-byte cap (chunked %v): %d; want it served", chunked, code)
		}
		if code := served(0, strings.Repeat("x", 4096), chunked); code != http.StatusNoContent {
			t.Errorf("a 4 KiB body under the default cap (chunked %v): %d; want it served", chunked, code)
		}
	}
}
