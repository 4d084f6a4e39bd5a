package idemhttp

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// TestCanonicalKeyIsCanonicalHeaderKey: the names canonicalKey recognises without the general
// check are in canonical form, and every other name is canonicalised as net/http does.
func TestCanonicalKeyIsCanonicalHeaderKey(t *testing.T) {
	t.Parallel()
	for _, k := range []string{
		"Content-Type", "Location", "Content-Language", "Etag", "Last-Modified", "Link", "Cache-Control",
		"Retry-After", HeaderReplayed, HeaderBodyOmitted,
		"content-type", "ETag", "LOCATION", "x-request-id", "X-Custom", "Set-Cookie", "bad name", "",
	} {
		if got, want := canonicalKey(k), http.CanonicalHeaderKey(k); got != want {
			t.Errorf("canonicalKey(%q) = %q, want %q", k, got, want)
		}
	}
}

// TestReplayHeadersKeepsCopies: what replayHeaders keeps is allow-listed, under canonical
// names, an empty list as nil, and copied: changing the answer's header afterwards changes
// nothing stored.
func TestReplayHeadersKeepsCopies(t *testing.T) {
	t.Parallel()
	p := &Policy{DeclaredHeaders: []string{"retry-after"}, ReplayHeaders: []string{"X-Trace"}}
	h := http.Header{
		"content-type": {"application/json"},
		"Location":     {"/v1/payments/1"},
		"Retry-After":  {"3"},
		"X-Trace":      {"a", "b"},
		"X-Empty":      {},
		"Link":         {},
		"Set-Cookie":   {"s=1"},
		"X-Other":      {"dropped"},
	}
	got := replayHeaders(h, p)
	want := http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/v1/payments/1"},
		"Retry-After":  {"3"},
		"X-Trace":      {"a", "b"},
		"Link":         nil,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replayHeaders = %#v, want %#v", got, want)
	}
	h["Location"][0] = "changed"
	h["X-Trace"][1] = "changed"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replayHeaders shares the answer's values: %#v after a change, want %#v", got, want)
	}
	got["Location"] = append(got["Location"], "appended")
	if got["Retry-After"][0] != "3" || got["X-Trace"][0] != "a" {
		t.Fatalf("appending to one kept list changed another: %#v", got)
	}
	if got := replayHeaders(http.Header{"X-Other": {"v"}}, p); got != nil {
		t.Fatalf("replayHeaders with nothing allowed = %#v, want nil", got)
	}
}

// TestReadBodyIsReadAllOfLimitReader: readBody reads what io.ReadAll(io.LimitReader(body,
// max+1)) reads, whatever the declared length says (right, unknown, too small, too large), for
// bodies on either side of its first buffer and of max, read whole or a byte at a time, and
// passes a read error on with what came before it.
func TestReadBodyIsReadAllOfLimitReader(t *testing.T) {
	t.Parallel()
	const max = 2000
	for _, size := range []int{0, 1, 40, 511, 512, 513, 1500, max, max + 1, max + 700} {
		data := bytes.Repeat([]byte("0123456789"), size/10+1)[:size]
		for _, length := range []int64{int64(size), -1, 0, int64(size) / 2, int64(size) + 100} {
			for _, slow := range []bool{false, true} {
				reader := func() io.Reader {
					if slow {
						return iotest.OneByteReader(bytes.NewReader(data))
					}
					return bytes.NewReader(data)
				}
				want, wantErr := io.ReadAll(io.LimitReader(reader(), max+1))
				got, err := readBody(reader(), length, max)
				if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
					t.Errorf("size %d, length %d, slow %v: %d bytes, %v; want %d bytes, %v", size, length, slow, len(got), err, len(want), wantErr)
				}
			}
		}
	}
	broken := io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(errors.New("reset")))
	if got, err := readBody(broken, 10, max); string(got) != "abc" || err == nil || err.Error() != "reset" {
		t.Errorf("a read error: %q, %v; want \"abc\", reset", got, err)
	}
}

// TestCapturedBodyReadsTheBytes: the body handed on reads back the captured bytes, by Read or
// WriteTo, and closes without error.
func TestCapturedBodyReadsTheBytes(t *testing.T) {
	t.Parallel()
	reader := func(raw string) io.ReadCloser {
		c := &captured{}
		c.reader.r.Reset([]byte(raw))
		return &c.reader
	}
	b := reader(`{"a":1}`)
	got, err := io.ReadAll(b)
	if string(got) != `{"a":1}` || err != nil || b.Close() != nil {
		t.Fatalf("ReadAll = %q, %v", got, err)
	}
	var buf bytes.Buffer
	if n, err := reader("xyz").(io.WriterTo).WriteTo(&buf); n != 3 || err != nil || buf.String() != "xyz" {
		t.Fatalf("WriteTo = %d, %v, %q", n, err, buf.String())
	}
}
