package idemclient_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func problem(status int, code string) (http.Header, []byte) {
	h := http.Header{"Content-Type": {"application/problem+json"}}
	return h, fmt.Appendf(nil, `{"type":%q,"title":"t","status":%d,"detail":"d","code":%q}`, idemhttp.ProblemTypePrefix+code, status, code)
}

// TestClassifyTable pins the retry decision for every status class and every problem code the
// runtime writes; docs/client.md prints the same table.
func TestClassifyTable(t *testing.T) {
	t.Parallel()
	op := &idemclient.Operation{Route: "POST /v1/payments", KeyHeader: "Idempotency-Key"} // persist: the default 2xx, 3xx, 4xx
	op5xx := &idemclient.Operation{Route: "POST /v1/payments", KeyHeader: "Idempotency-Key", Persist: []string{"2xx", "502"}}
	type row struct {
		name   string
		op     *idemclient.Operation
		status int
		code   string // a runtime problem code; "" for a plain body
		header map[string]string
		retry  bool
		wait   time.Duration
	}
	rows := []row{
		// The runtime's problems, by code.
		{"key missing", op, 400, idemhttp.CodeKeyMissing, nil, false, 0},
		{"key invalid", op, 400, idemhttp.CodeKeyInvalid, nil, false, 0},
		{"key reused 422", op, 422, idemhttp.CodeKeyReused, nil, false, 0},
		{"key reused 409 (mismatchStatus)", op, 409, idemhttp.CodeKeyReused, nil, false, 0},
		{"key reused 400 (mismatchStatus)", op, 400, idemhttp.CodeKeyReused, nil, false, 0},
		{"in progress", op, 409, idemhttp.CodeInProgress, map[string]string{"Retry-After": "3"}, true, 3 * time.Second},
		{"in progress without Retry-After", op, 409, idemhttp.CodeInProgress, nil, true, 0},
		{"store unavailable", op, 503, idemhttp.CodeStoreUnavailable, map[string]string{"Retry-After": "2"}, true, 2 * time.Second},
		{"handler timeout", op, 503, idemhttp.CodeHandlerTimeout, nil, true, 0},
		{"internal (rolled back)", op, 500, idemhttp.CodeInternal, nil, true, 0},
		{"internal, even where persist stores 5xx", op5xx, 500, idemhttp.CodeInternal, nil, true, 0},
		{"body invalid", op, 400, idemhttp.CodeBodyInvalid, nil, false, 0},
		{"body too large", op, 413, idemhttp.CodeBodyTooLarge, nil, false, 0},
		{"request invalid", op, 400, idemhttp.CodeRequestInvalid, nil, false, 0},
		{"media type unsupported", op, 415, idemhttp.CodeMediaTypeUnsupported, nil, false, 0},
		{"not found", op, 404, idemhttp.CodeNotFound, nil, false, 0},
		{"method not allowed", op, 405, idemhttp.CodeMethodNotAllowed, nil, false, 0},
		{"not implemented (an operation the server does not serve)", op, 501, idemhttp.CodeNotImplemented, nil, false, 0},
		{"operation uncertain (only an operator or a reconciliation settles it)", op, 409, idemhttp.CodeOperationUncertain, nil, false, 0},
		{"operation uncertain, even with a Retry-After", op, 409, idemhttp.CodeOperationUncertain, map[string]string{"Retry-After": "1"}, false, 0},
		// Statuses without a runtime problem.
		{"200", op, 200, "", nil, false, 0},
		{"201", op, 201, "", nil, false, 0},
		{"303", op, 303, "", nil, false, 0},
		{"400", op, 400, "", nil, false, 0},
		{"401", op, 401, "", nil, false, 0},
		{"403", op, 403, "", nil, false, 0},
		{"404", op, 404, "", nil, false, 0},
		{"409 of the API's own", op, 409, "", map[string]string{"Retry-After": "1"}, false, 0},
		{"413", op, 413, "", nil, false, 0},
		{"415", op, 415, "", nil, false, 0},
		{"422", op, 422, "", nil, false, 0},
		{"408", op, 408, "", nil, true, 0},
		{"425", op, 425, "", nil, true, 0},
		{"429 with Retry-After", op, 429, "", map[string]string{"Retry-After": "7"}, true, 7 * time.Second},
		{"429 without", op, 429, "", nil, true, 0},
		{"500 not stored", op, 500, "", nil, true, 0},
		{"502 not stored", op, 502, "", nil, true, 0},
		{"503 not stored", op, 503, "", map[string]string{"Retry-After": "4"}, true, 4 * time.Second},
		{"504 not stored", op, 504, "", nil, true, 0},
		{"502 stored (persist: 502)", op5xx, 502, "", nil, false, 0},
		{"500 not stored (persist: 502)", op5xx, 500, "", nil, true, 0},
		{"a replay is stored, whatever its status", op, 503, "", map[string]string{"Idempotent-Replayed": "true"}, false, 0},
		{"a replayed 201", op, 201, "", map[string]string{"Idempotent-Replayed": "true"}, false, 0},
	}
	// The answers that only say to come back: the key's holder still runs, the store or the
	// server behind a gateway cannot be reached.
	waiting := map[string]bool{"in progress": true, "in progress without Retry-After": true, "store unavailable": true,
		"502 not stored": true, "503 not stored": true, "504 not stored": true}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			h, body := http.Header{}, []byte(`{"message":"x"}`)
			if r.code != "" {
				h, body = problem(r.status, r.code)
			}
			for k, v := range r.header {
				h.Set(k, v)
			}
			d := idemclient.Classify(r.op, r.status, h, body)
			if d.Retry != r.retry || d.Wait != r.wait {
				t.Errorf("Classify(%d %s) = retry %v, wait %s (%s); want retry %v, wait %s", r.status, r.code, d.Retry, d.Wait, d.Reason, r.retry, r.wait)
			}
			if d.Waiting != waiting[r.name] {
				t.Errorf("Classify(%d %s).Waiting = %v, want %v (only come-back answers do not count toward MaxAttempts)", r.status, r.code, d.Waiting, waiting[r.name])
			}
		})
	}
}

// TestClassifyForeignProblem: a problem whose type is not the runtime's is judged by its
// status, whatever its code says.
func TestClassifyForeignProblem(t *testing.T) {
	t.Parallel()
	op := &idemclient.Operation{Route: "POST /x"}
	h := http.Header{"Content-Type": {"application/problem+json"}}
	d := idemclient.Classify(op, 409, h, []byte(`{"type":"https://example.com/busy","code":"in-progress","status":409}`))
	if d.Retry {
		t.Errorf("a foreign 409 problem with code in-progress is retried (%s); want it final", d.Reason)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"99999999999999999999999", 365 * 24 * time.Hour, true},
		{"9999999999", 365 * 24 * time.Hour, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"Fri, 31 Dec 9999 23:59:59 GMT", 365 * 24 * time.Hour, true},
	} {
		got, ok := idemclient.ParseRetryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestNewKeyIsUUIDv4(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		k := idemclient.NewKey()
		if len(k) != 36 || k[14] != '4' || k[8] != '-' || k[13] != '-' || k[18] != '-' || k[23] != '-' || !containsByte("89ab", k[19]) {
			t.Fatalf("NewKey() = %q, not a UUIDv4", k)
		}
		if seen[k] {
			t.Fatalf("NewKey() returned %q twice", k)
		}
		seen[k] = true
	}
}

func containsByte(s string, b byte) bool {
	for i := range len(s) {
		if s[i] == b {
			return true
		}
	}
	return false
}

// TestClassifyRefusalHeader: an API that answers its refusals in its own error format (an Open
// Banking OBErrorResponse1 here, a 409 that is neither problem+json nor the runtime's type) is
// judged by the Idempotency-Refusal header its server sets beside the body: a duplicate in
// progress and a store outage are waited out, a reused key and an uncertain outcome are final
// and match their errors, and the header wins over a body that says otherwise. Without the
// header, the same 409 is the API's own conflict: final.
func TestClassifyRefusalHeader(t *testing.T) {
	t.Parallel()
	op := &idemclient.Operation{Route: "POST /domestic-payments", KeyHeader: "x-idempotency-key"}
	ob := func(status int) []byte {
		return fmt.Appendf(nil, `{"Code":"%d","Message":"m","Errors":[{"ErrorCode":"UK.OBIE.Resource.InvalidConsentStatus","Message":"d"}]}`, status)
	}
	for _, c := range []struct {
		name, code     string
		status         int
		contentType    string
		retry, waiting bool
		is             error
	}{
		{"in progress", idemclient.CodeInProgress, 409, "application/json; charset=utf-8", true, true, nil},
		{"store unavailable", idemclient.CodeStoreUnavailable, 503, "application/json; charset=utf-8", true, true, nil},
		{"handler timeout", idemclient.CodeHandlerTimeout, 503, "application/json", true, false, nil},
		{"key reused", idemclient.CodeKeyReused, 422, "application/json; charset=utf-8", false, false, idemclient.ErrKeyReused},
		{"operation uncertain", idemclient.CodeOperationUncertain, 409, "application/json", false, false, idemclient.ErrOperationUncertain},
		{"key invalid", idemclient.CodeKeyInvalid, 400, "text/plain", false, false, nil},
		{"a code the runtime does not define: the status decides", "out-of-stock", 409, "application/json", false, false, nil},
		{"no header: the API's own 409", "", 409, "application/json; charset=utf-8", false, false, nil},
		{"the header wins over a foreign problem", idemclient.CodeInProgress, 409, "application/problem+json", true, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{"Content-Type": {c.contentType}, "Retry-After": {"2"}}
			if c.code != "" {
				h.Set(idemclient.HeaderRefusal, c.code)
			}
			body := ob(c.status)
			if c.contentType == "application/problem+json" {
				body = []byte(`{"type":"https://example.com/conflict","code":"conflict","status":409}`)
			}
			d := idemclient.Classify(op, c.status, h, body)
			if d.Retry != c.retry || d.Waiting != c.waiting {
				t.Errorf("Classify = retry %v, waiting %v (%s); want retry %v, waiting %v", d.Retry, d.Waiting, d.Reason, c.retry, c.waiting)
			}
			e := idemclient.DecodeError(c.status, h, body)
			if idemwireKnown(c.code) && e.Code != c.code {
				t.Errorf("DecodeError(...).Code = %q, want %q from the header", e.Code, c.code)
			}
			if c.is != nil && !errors.Is(e, c.is) {
				t.Errorf("DecodeError = %v; want it to match %v", e, c.is)
			}
		})
	}
}

func idemwireKnown(code string) bool {
	for _, c := range idemhttp.ProblemCodes() {
		if c == code {
			return true
		}
	}
	return false
}
