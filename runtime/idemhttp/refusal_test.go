package idemhttp_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// TestRefusalsAreLoggedAtDebug: every request Handle refuses (400, 415, 422) is logged at debug
// with the operation and the code the client got, so that a developer asking why a request was
// refused finds the answer in the log; and an empty key header is a malformed key, not a
// missing one.
func TestRefusalsAreLoggedAtDebug(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	e := newEnv(t, &idem.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, nil)
	ctx := context.Background()
	p := &idemhttp.Policy{
		Operation: "createPayment",
		Route:     "POST /v1/payments",
		Key:       idemhttp.KeyRule{Header: "Idempotency-Key", Required: true},
		Body:      true,
		BodyTypes: []string{"application/json"},
	}
	op := func(key any) *idemhttp.Op[answer] {
		return &idemhttp.Op[answer]{
			Key:   key,
			Scope: []idemhttp.Part{{Name: "operation"}},
			Run: func(ctx context.Context, tx pgx.Tx) (answer, error) {
				_, err := tx.Exec(ctx, "INSERT INTO payments (key, amount) VALUES ('p', 1)")
				return answer{201}, err
			},
			Record: recordAnswer,
		}
	}
	body := func(contentType, b string) context.Context {
		return idemhttp.WithBody(ctx, &idemhttp.Body{ContentType: contentType, Bytes: []byte(b)})
	}
	empty, k := "", "k1"
	for _, c := range []struct {
		name   string
		ctx    context.Context
		key    any
		status int
		code   string
	}{
		{"no key", body("application/json", `{}`), (*string)(nil), 400, idemhttp.CodeKeyMissing},
		{"an empty key header", body("application/json", `{}`), &empty, 400, idemhttp.CodeKeyInvalid},
		{"a body of another media type", body("text/plain", `hi`), &k, 415, idemhttp.CodeMediaTypeUnsupported},
		{"a malformed body", body("application/json", `{"a":1}x`), &k, 400, idemhttp.CodeBodyInvalid},
	} {
		logs.Reset()
		r, err := idemhttp.Handle(c.ctx, e.Store, p, op(c.key))
		if err != nil || r.Kind != idemhttp.ResultProblem || r.Problem.Status != c.status || r.Problem.Code != c.code {
			t.Errorf("%s: Handle = %+v, %v; want the %d %s problem", c.name, r, err, c.status, c.code)
			continue
		}
		line := logs.String()
		if !strings.Contains(line, "level=DEBUG") || !strings.Contains(line, "request refused") ||
			!strings.Contains(line, "operation=createPayment") || !strings.Contains(line, "code="+c.code) {
			t.Errorf("%s: logged %q; want a debug line with the operation and code %s", c.name, line, c.code)
		}
	}
	// The same key with another request: 422, logged with its code too.
	if r, err := idemhttp.Handle(body("application/json", `{"a":1}`), e.Store, p, op(&k)); err != nil || r.Kind != idemhttp.ResultExecuted {
		t.Fatalf("first request = %+v, %v; want executed", r, err)
	}
	logs.Reset()
	if r, err := idemhttp.Handle(body("application/json", `{"a":2}`), e.Store, p, op(&k)); err != nil || r.Problem == nil || r.Problem.Status != 422 {
		t.Fatalf("reused key = %+v, %v; want 422", r, err)
	}
	if line := logs.String(); !strings.Contains(line, "request refused") || !strings.Contains(line, "code="+idemhttp.CodeKeyReused) {
		t.Errorf("reused key: logged %q; want the refusal with code %s", line, idemhttp.CodeKeyReused)
	}

	// A body that was never captured is the wiring's fault: a 500 problem naming the fix,
	// nothing claimed, and an error in the log.
	logs.Reset()
	r, err := idemhttp.Handle(ctx, e.Store, p, op(&k))
	if err != nil || r.Kind != idemhttp.ResultProblem || r.Problem.Status != 500 || r.Problem.Code != idemhttp.CodeInternal ||
		!strings.Contains(r.Problem.Detail, "NewIdempotentHandler") {
		t.Fatalf("uncaptured body = %+v, %v; want a 500 internal problem naming NewIdempotentHandler", r, err)
	}
	if line := logs.String(); !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "operation=createPayment") {
		t.Errorf("uncaptured body: logged %q; want an error naming the operation", line)
	}
	if n := e.Keys(); n != 1 {
		t.Errorf("%d key rows; want only the executed request's", n)
	}
}
