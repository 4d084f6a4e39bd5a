package idemhttp

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestProblemStatusIsWhatTheRuntimeAnswers: the status the table gives each code (what idemgen
// lint compares a spec's responses with) is the status of the problem the runtime writes.
func TestProblemStatusIsWhatTheRuntimeAnswers(t *testing.T) {
	t.Parallel()
	_, missing := ParseKey(nil, KeyRule{Header: "Idempotency-Key", Required: true})
	_, invalid := ParseKey([]string{""}, KeyRule{Header: "Idempotency-Key"})
	ctx := WithBody(context.Background(), &Body{ContentType: "text/plain", Bytes: []byte("x")})
	made := []*Problem{
		missing, invalid,
		problemInProgress(time.Second),
		problemUnavailable(time.Second),
		problemHandlerTimeout(),
		problemUncertain(),
		problemBodyTooLarge(1),
		problemNotCaptured(),
		RequestProblem(errors.New("x")),
		ParamProblem("id"),
		mediaTypeProblem(ctx, &Policy{BodyTypes: []string{"application/json"}}),
	}
	seen := map[string]bool{}
	for _, p := range made {
		if p == nil {
			t.Fatal("a problem constructor returned nil")
		}
		seen[p.Code] = true
		if want := ProblemStatus(p.Code); p.Status != want {
			t.Errorf("problem %s is answered %d; ProblemStatus says %d", p.Code, p.Status, want)
		}
	}
	for _, reused := range []int{400, 409, 422} {
		if p := problemKeyReused(reused); ProblemStatus(p.Code) != 0 || p.Status != reused {
			t.Errorf("key-reused: ProblemStatus %d, answered %d; want 0 (the policy's status) and %d", ProblemStatus(p.Code), p.Status, reused)
		}
	}
	if ProblemStatus("not-capturable") != -1 {
		t.Error("ProblemStatus gives a status to a code the runtime does not define")
	}
	if len(seen) < 8 {
		t.Errorf("only %d codes exercised", len(seen))
	}
}
