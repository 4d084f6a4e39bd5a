package annotate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
)

// TestKeyPatternNotRE2: a key header whose pattern Go's regexp cannot compile does not stop
// annotate. Every operation it can annotate is annotated (the upload is left out, for its own
// reason), the pattern is reported once for all of them with the line that resolves it and
// where it goes, and the result is incomplete (the command exits non-zero). generate refuses the
// result until that line is added, and accepts it after; a second run changes nothing.
func TestKeyPatternNotRE2(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		fix        func(out []byte) []byte // applies what the message says; nil: nothing derivable
	}{
		{"key-pattern", "specs/key-pattern.yaml", func(out []byte) []byte {
			return append([]byte("x-idempotency: {key: {pattern: '^\\S(.*\\S)?$'}}\n"), out...)
		}},
		{"key-pattern-json", "specs/key-pattern.json", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			res, err := Annotate(tc.file, in, Options{})
			if err != nil {
				t.Fatalf("Annotate: %v", err)
			}
			diff, err := UnifiedDiff(tc.file, in, res.Output)
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			for _, s := range res.Skipped {
				stderr.WriteString(s.String() + "\n")
			}
			for _, k := range res.KeyPatterns {
				stderr.WriteString(k.String() + "\n")
			}
			golden(t, tc.name+".diff", diff)
			golden(t, tc.name+".stderr", stderr.String())
			if len(res.KeyPatterns) != 1 || !res.Incomplete() {
				t.Fatalf("KeyPatterns %v, Incomplete %v: want one pattern reported and an incomplete result", res.KeyPatterns, res.Incomplete())
			}
			if k := res.KeyPatterns[0]; !slices.Equal(k.Routes, res.Annotated) || len(res.Annotated) == 0 {
				t.Errorf("annotated %v, reported with the pattern %v: want every annotated operation, once", res.Annotated, k.Routes)
			}
			again, err := Annotate(tc.file, res.Output, Options{})
			if err != nil || string(again.Output) != string(res.Output) {
				t.Errorf("second run: %v, changed %v", err, again != nil && again.Changed())
			}
			// What generate sees: the pattern refused, at its place, for each annotated operation.
			s, err := spec.LoadData(tc.file, res.Output, nil)
			if err != nil {
				t.Fatal(err)
			}
			errs := s.Errors()
			if len(errs) != len(res.Annotated) {
				t.Errorf("errors %v: want one key-pattern-invalid per annotated operation", errs)
			}
			for _, d := range errs {
				if d.Rule != policy.RuleKeyPatternInvalid || d.Pos.Line == 0 {
					t.Errorf("error %s: want key-pattern-invalid with its place", d)
				}
			}
			if tc.fix == nil {
				if res.KeyPatterns[0].RE2 != "" {
					t.Errorf("derived %q from %q: want none", res.KeyPatterns[0].RE2, res.KeyPatterns[0].Pattern)
				}
				return
			}
			fixed, err := spec.LoadData(tc.file, tc.fix(res.Output), nil)
			if err != nil {
				t.Fatal(err)
			}
			if errs := fixed.Errors(); len(errs) > 0 {
				t.Errorf("with the line the message gives, still errors: %v", errs)
			}
			for _, op := range fixed.Model.Idempotent() {
				if op.Policy.Key.Pattern != `^\S(.*\S)?$` || op.Policy.Key.MaxLength != 40 {
					t.Errorf("%s: key pattern %q, maxLength %d: want the RE2 form and the parameter's maxLength", op.Route(), op.Policy.Key.Pattern, op.Policy.Key.MaxLength)
				}
			}
		})
	}
}
