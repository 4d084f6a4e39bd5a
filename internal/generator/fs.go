package generator

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

// FS is the directory generated files go to. Generation itself never touches the disk; writing
// and checking are a few lines over this interface, so tests can use a map.
type FS interface {
	// ReadFile returns the file's contents, or an error satisfying errors.Is(err, fs.ErrNotExist).
	ReadFile(name string) ([]byte, error)
	// WriteFile replaces the file's contents, creating the directory if needed.
	WriteFile(name string, data []byte) error
}

// DirFS is an FS on an OS directory.
type DirFS string

// ReadFile reads name inside the directory.
func (d DirFS) ReadFile(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(string(d), name))
}

// WriteFile writes name inside the directory through a temporary file and a rename, so a reader
// (or an interrupted run) never sees half a file.
func (d DirFS) WriteFile(name string, data []byte) error {
	if err := os.MkdirAll(string(d), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(string(d), ".idemgen-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(string(d), name))
}

// Names returns the file names in sorted order.
func (f Files) Names() []string {
	names := make([]string, 0, len(f))
	for n := range f {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Write writes every file whose contents differ from what dst holds and returns the names it
// wrote; unchanged files keep their modification times.
func Write(dst FS, files Files) ([]string, error) {
	var wrote []string
	for _, name := range files.Names() {
		old, err := dst.ReadFile(name)
		if err == nil && bytes.Equal(old, files[name]) {
			continue
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return wrote, err
		}
		if err := dst.WriteFile(name, files[name]); err != nil {
			return wrote, err
		}
		wrote = append(wrote, name)
	}
	return wrote, nil
}

// Check compares files with what dst holds and writes a unified diff for every stale or missing
// file to w; dir labels the paths in the diff. It reports whether anything is stale and never
// writes to dst.
func Check(dst FS, dir string, files Files, w io.Writer) (stale bool, err error) {
	// A file whose only change is its embedded spec is shown after the others: what a reader
	// reviews comes first.
	var diffs, embeddedOnly []string
	for _, name := range files.Names() {
		old, err := dst.ReadFile(name)
		from := filepath.ToSlash(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			old, from = nil, "/dev/null"
		case err != nil:
			return stale, err
		case bytes.Equal(old, files[name]):
			continue
		}
		stale = true
		a, b := summariseEmbedded(splitLines(old)), summariseEmbedded(splitLines(files[name]))
		diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
			A:        a,
			B:        b,
			FromFile: from,
			ToFile:   filepath.ToSlash(filepath.Join(dir, name)),
			Context:  3,
		})
		if err != nil {
			return stale, err
		}
		if old != nil && onlyEmbeddedDiffers(a, b) {
			embeddedOnly = append(embeddedOnly, diff)
			continue
		}
		diffs = append(diffs, diff)
	}
	for _, d := range append(diffs, embeddedOnly...) {
		if _, err := fmt.Fprint(w, d); err != nil {
			return stale, err
		}
	}
	return stale, nil
}

// onlyEmbeddedDiffers reports two summarised files that differ in their embedded spec's line
// alone.
func onlyEmbeddedDiffers(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	differ := 0
	for i := range a {
		if a[i] != b[i] {
			if !strings.HasPrefix(a[i], embeddedLine) {
				return false
			}
			differ++
		}
	}
	return differ == 1
}

// embeddedStart opens the spec oapi-codegen embeds (gzip, then base64, in lines of 76
// characters): dozens of lines no reader can review.
const embeddedStart = "var swaggerSpec = []string{"

// embeddedLine starts the line that stands for the embedded spec's lines in a diff.
const embeddedLine = "\t// the embedded spec: "

// summariseEmbedded replaces the lines of the embedded spec with one line that holds their count
// and a hash of them: a diff of two files whose embedded specs differ shows that one line
// changed, among the changes a reader can review, instead of opening with its base64.
func summariseEmbedded(lines []string) []string {
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, embeddedStart) })
	if start < 0 {
		return lines
	}
	end := start + 1
	for end < len(lines) && strings.TrimRight(lines[end], "\n") != "}" {
		end++
	}
	if end == len(lines) {
		return lines
	}
	sum := sha256.Sum256([]byte(strings.Join(lines[start+1:end], "")))
	out := slices.Clip(lines[:start+1])
	out = append(out, fmt.Sprintf("%s%d lines of base64, sha256 %x (its lines are left out of this diff)\n", embeddedLine, end-start-1, sum[:8]))
	return append(out, lines[end:]...)
}

// splitLines splits after each newline. difflib.SplitLines would add an empty last line to
// every file that ends in a newline, and show it in every diff.
func splitLines(b []byte) []string {
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}
