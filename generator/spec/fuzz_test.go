package spec

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadData: no input may panic, and what loads has its diagnostics sorted and positioned.
// The seeds are every golden case; `go test -fuzz FuzzLoadData` explores from there.
func FuzzLoadData(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*", "openapi.yaml"))
	more, _ := filepath.Glob(filepath.Join("testdata", "valid", "*", "openapi.yaml"))
	for _, p := range append(seeds, more...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// A path in a fresh directory, so relative $refs in fuzzed input find nothing to read.
		s, err := LoadData(filepath.Join(t.TempDir(), "openapi.yaml"), data, nil)
		if err != nil {
			return
		}
		for i, d := range s.Diagnostics {
			if d.Rule == "" || d.Message == "" {
				t.Errorf("diagnostic %d has no rule or message: %+v", i, d)
			}
			if i > 0 {
				p, q := s.Diagnostics[i-1].Pos, d.Pos
				if p.Line > q.Line || (p.Line == q.Line && p.Col > q.Col) {
					t.Errorf("diagnostics out of order: %v then %v", p, q)
				}
			}
		}
	})
}
