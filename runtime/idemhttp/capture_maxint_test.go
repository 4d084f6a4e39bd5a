package idemhttp_test

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// TestCaptureWithTheLargestLimit: Capture(math.MaxInt64), a limit meaning "any body", hands the
// body on whole, chunked or with a Content-Length. (readBody computed max+1, which overflows: its
// read room was sliced to a negative length and every request with a body panicked; before it,
// io.LimitReader(body, max+1) read nothing and the handler saw an empty body.)
func TestCaptureWithTheLargestLimit(t *testing.T) {
	t.Parallel()
	for _, length := range []int64{-1, 5} {
		var got string
		h := idemhttp.Capture(math.MaxInt64)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got = string(b)
		}))
		req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("hello"))
		req.ContentLength = length
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("Content-Length %d: Capture(math.MaxInt64) panicked: %v", length, p)
				}
			}()
			h.ServeHTTP(rec, req)
		}()
		if rec.Code != http.StatusOK || got != "hello" {
			t.Errorf("Content-Length %d: status %d, the handler read %q; want 200 and the body whole", length, rec.Code, got)
		}
	}
}
