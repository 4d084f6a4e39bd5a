package idemhttp_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// A request that declares a Content-Length over the cap is refused 413 on its headers alone:
// Capture reads none of its body. The client here sends the headers and then nothing, so a
// Capture that read the body first would wait for bytes that never come. The declared length is
// over the 256 KiB that net/http's server itself reads of a body the handler left, before it
// answers (below that, the server waits for the body whatever Capture does).
func TestCaptureRefusesADeclaredLengthOverTheCapBeforeReading(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(idemhttp.Capture(100)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the handler ran for a body declared over the cap")
		w.WriteHeader(http.StatusNoContent)
	})))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/payments HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within 10s to headers declaring 1 MiB under a 100-byte cap, its body not sent (did Capture wait to read it?): %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "body-too-large") {
		t.Errorf("declared 1 MiB under a 100-byte cap: %d %s; want 413 body-too-large", res.StatusCode, body)
	}
}
