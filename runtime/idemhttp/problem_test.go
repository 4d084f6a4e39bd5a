package idemhttp_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// allCodes are the runtime's problem codes: every one must have its title in the one table.
var allCodes = []string{
	idemhttp.CodeKeyMissing, idemhttp.CodeKeyInvalid, idemhttp.CodeKeyReused, idemhttp.CodeInProgress,
	idemhttp.CodeStoreUnavailable, idemhttp.CodeBodyInvalid, idemhttp.CodeBodyTooLarge,
	idemhttp.CodeRequestInvalid, idemhttp.CodeNotFound, idemhttp.CodeMethodNotAllowed,
	idemhttp.CodeInternal, idemhttp.CodeHandlerTimeout, idemhttp.CodeMediaTypeUnsupported, idemhttp.CodeNotImplemented,
	idemhttp.CodeOperationUncertain, idemhttp.CodeSignatureInvalid,
}

// TestProblemCodesListsEveryCode: ProblemCodes, what annotate documents, is every code constant,
// once each.
func TestProblemCodesListsEveryCode(t *testing.T) {
	t.Parallel()
	got := idemhttp.ProblemCodes()
	want := slices.Clone(allCodes)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ProblemCodes() = %v; want every Code constant %v", got, want)
	}
}

// TestOneTitlePerProblemType: every runtime code has a title, and a problem made for a code
// carries that code's type and title, whoever makes it.
func TestOneTitlePerProblemType(t *testing.T) {
	t.Parallel()
	titles := map[string]string{}
	for _, code := range allCodes {
		title := idemhttp.ProblemTitle(code)
		if title == "" {
			t.Errorf("code %s has no title", code)
		}
		if other, dup := titles[title]; dup {
			t.Errorf("codes %s and %s share the title %q", other, code, title)
		}
		titles[title] = code
		p := idemhttp.NewProblem(409, code, "detail")
		if p.Type != idemhttp.ProblemTypePrefix+code || p.Title != title || p.Code != code || p.Status != 409 || p.Detail != "detail" {
			t.Errorf("NewProblem(409, %s) = %+v", code, p)
		}
	}
	// The runtime's own problems take their titles from the same table.
	_, missing := idemhttp.ParseKey(nil, idemhttp.KeyRule{Header: "Idempotency-Key", Required: true})
	_, invalid := idemhttp.ParseKey([]string{""}, idemhttp.KeyRule{Header: "Idempotency-Key"})
	for _, p := range []*idemhttp.Problem{missing, invalid} {
		if p.Title != idemhttp.ProblemTitle(p.Code) {
			t.Errorf("problem %s has the title %q; want the table's %q", p.Code, p.Title, idemhttp.ProblemTitle(p.Code))
		}
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "not-capturable") {
				t.Errorf("NewProblem with an application's own code did not panic naming it: %v", r)
			}
		}()
		idemhttp.NewProblem(409, "not-capturable", "")
	}()
	if idemhttp.ProblemTitle("not-capturable") != "" {
		t.Error("ProblemTitle gives a title to a code the runtime does not define")
	}
}
