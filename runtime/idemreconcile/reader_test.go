package idemreconcile_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemreconcile"
)

func TestReadCSV(t *testing.T) {
	t.Parallel()
	in := "id,idem_key,value,ccy,date,merchant\n" +
		"ch_1,p-1,12.50,eur,2026-12-04,acme\n" +
		"ch_2,p-2,-3,USD,2026-12-04,\n"
	cols := idemreconcile.Columns{Key: "idem_key", Reference: "id", Amount: "value", Currency: "ccy", At: "date", Tenant: "merchant",
		AmountScale: 2, TimeLayout: "date"}
	recs, err := idemreconcile.ReadCSV(strings.NewReader(in), "sett.csv", cols)
	if err != nil {
		t.Fatal(err)
	}
	want := idemreconcile.Records{
		{Key: "p-1", Reference: "ch_1", Amount: 1250, Currency: "EUR", At: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC), Tenant: "acme"},
		{Key: "p-2", Reference: "ch_2", Amount: -300, Currency: "USD", At: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)},
	}
	if len(recs) != 2 || recs[0] != want[0] || recs[1] != want[1] {
		t.Errorf("records %+v; want %+v", recs, want)
	}
}

func TestReadCSVRefusesBadInput(t *testing.T) {
	t.Parallel()
	header := "key,reference,amount,currency,at\n"
	for _, c := range []struct{ in, want string }{
		{header + "p-1,ch_1,12.5,EUR,2026-12-04T10:00:00Z\n", `s.csv:2: column "amount": "12.5" is not an amount in minor units`},
		{header + "p-1,ch_1,1250,EUR,2026-12-04T10:00:00Z\np-2,ch_2,1,EURO,2026-12-04T10:00:00Z\n", `s.csv:3: column "currency": "EURO" is not an ISO 4217`},
		{header + "p-1,ch_1,1250,EUR,yesterday\n", `s.csv:2: column "at": "yesterday" is not an RFC 3339 time`},
		{header + ",ch_1,1250,EUR,2026-12-04T10:00:00Z\n", `s.csv:2: column "key": the key is empty`},
		{"key,amount,at\n", `s.csv:1: column "currency": the header has no such column`},
		{header + "p-1,ch_1,1250\n", `s.csv:2: wrong number of fields`},
		{"", `s.csv:1: the file is empty`},
	} {
		recs, err := idemreconcile.ReadCSV(strings.NewReader(c.in), "s.csv", idemreconcile.Columns{})
		var ie *idemreconcile.InputError
		if err == nil || !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), c.want) || recs != nil {
			t.Errorf("ReadCSV(%q) = %v, %v; want no records and an error starting %q", c.in, recs, err, c.want)
		}
	}
}

func TestReadJSONL(t *testing.T) {
	t.Parallel()
	in := `{"key":"p-1","reference":"ch_1","amount":1250,"currency":"EUR","at":"2026-12-04T10:00:00Z","provider":"acquirer"}` + "\n\n" +
		`{"key":"p-2","amount":"7","currency":"EUR","at":"2026-12-04T11:00:00.5+01:00"}`
	recs, err := idemreconcile.ReadJSONL(strings.NewReader(in), "r.jsonl", idemreconcile.Columns{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Amount != 1250 || recs[0].Provider != "acquirer" || recs[1].Amount != 7 ||
		!recs[1].At.Equal(time.Date(2026, 12, 4, 10, 0, 0, 5e8, time.UTC)) {
		t.Errorf("records %+v", recs)
	}
	for _, c := range []struct{ in, want string }{
		{`{"key":"p-1","amount":12.5,"currency":"EUR","at":"2026-12-04T10:00:00Z"}`, `r.jsonl:1: column "amount": "12.5" is not an amount`},
		{`{"key":"p-1","currency":"EUR","at":"2026-12-04T10:00:00Z"}`, `r.jsonl:1: column "amount": the member is missing`},
		{"\n" + `[1]`, `r.jsonl:2: not a JSON object`},
		{`{"key":true,"amount":1,"currency":"EUR","at":"2026-12-04T10:00:00Z"}`, `r.jsonl:1: column "key": want a string or a number, got a boolean`},
		{`{"key":"p","amount":1,"currency":"EUR","at":"2026-12-04T10:00:00Z"} {}`, `r.jsonl:1: more than one JSON value`},
	} {
		recs, err := idemreconcile.ReadJSONL(strings.NewReader(c.in), "r.jsonl", idemreconcile.Columns{})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || recs != nil {
			t.Errorf("ReadJSONL(%q) = %v, %v; want an error starting %q", c.in, recs, err, c.want)
		}
	}
}

func TestParseAmount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in    string
		scale int
		want  int64
		ok    bool
	}{
		{"1250", 0, 1250, true}, {"12.50", 2, 1250, true}, {"12.5", 2, 1250, true}, {"12", 2, 1200, true},
		{"-0.01", 2, -1, true}, {"12.345", 2, 0, false}, {"1,000", 2, 0, false}, {"1e3", 0, 0, false},
		{"12.", 2, 0, false}, {".5", 2, 0, false}, {"99999999999999999999", 0, 0, false},
	} {
		got, err := idemreconcile.ParseAmount(c.in, c.scale)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseAmount(%q, %d) = %d, %v; want %d (ok %v)", c.in, c.scale, got, err, c.want, c.ok)
		}
	}
}

// nuls is an input of n NUL bytes, made as it is read.
type nuls struct{ n, read int64 }

func (z *nuls) Read(p []byte) (int, error) {
	if z.read >= z.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n-z.read)
	clear(p[:k])
	z.read += k
	return int(k), nil
}

// A 1 GiB file of NULs (or any line without its end) fails as soon as the line passes
// MaxLineBytes, with a short message that does not echo the line.
func TestReadersRefuseOverlongLines(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		src  func(io.Reader) idemreconcile.Source
	}{
		{"csv", func(r io.Reader) idemreconcile.Source {
			return idemreconcile.CSVSource(r, "z.csv", idemreconcile.Columns{})
		}},
		{"jsonl", func(r io.Reader) idemreconcile.Source {
			return idemreconcile.JSONLSource(r, "z.jsonl", idemreconcile.Columns{})
		}},
	} {
		z := &nuls{n: 1 << 30}
		var err error
		for _, e := range c.src(z).Records(context.Background(), time.Time{}, time.Time{}) {
			if e != nil {
				err = e
				break
			}
		}
		var ie *idemreconcile.InputError
		if !errors.As(err, &ie) || ie.Line != 1 || !strings.Contains(err.Error(), "longer than") || len(err.Error()) > 300 {
			t.Errorf("%s: a file of NULs: %v; want a short *InputError on line 1 saying the line is too long", c.name, err)
		}
		if z.read > 2*idemreconcile.MaxLineBytes {
			t.Errorf("%s: read %d bytes of the NULs before failing; want at most %d", c.name, z.read, 2*idemreconcile.MaxLineBytes)
		}
	}
}

// Error messages quote values escaped and cut: a header or a value holding a terminal escape
// does not reach the terminal as one, and a long value is not echoed whole.
func TestReaderErrorsAreEscapedAndBounded(t *testing.T) {
	t.Parallel()
	esc := "\x1b]0;owned\x07\x1b[2J"
	long := strings.Repeat("9", 10000) + "x"
	for _, in := range []string{
		"key,amount," + esc + "\np,1,EUR,2026-12-04T00:00:00Z\n",
		"key,amount,currency,at\np," + long + ",EUR,2026-12-04T00:00:00Z\n",
		"key,amount,currency,at\np,1," + esc + ",2026-12-04T00:00:00Z\n",
	} {
		_, err := idemreconcile.ReadCSV(strings.NewReader(in), "s.csv", idemreconcile.Columns{})
		if err == nil || strings.ContainsAny(err.Error(), "\x1b\x07") || len(err.Error()) > 400 {
			t.Errorf("ReadCSV: %q; want an error with no control character, at most 400 bytes", err)
		}
	}
	_, err := idemreconcile.ReadJSONL(strings.NewReader(`{"key":"p","amount":"`+long+`","currency":"EUR","at":"2026-12-04T00:00:00Z"}`), "s.jsonl", idemreconcile.Columns{})
	if err == nil || len(err.Error()) > 400 {
		t.Errorf("ReadJSONL: %q; want a short error", err)
	}
}

// countingReader counts what was read of r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// rows is a CSV export of n rows, made as it is read.
func rows(n int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriter(pw)
		fmt.Fprintln(w, "key,reference,amount,currency,at")
		for i := range n {
			fmt.Fprintf(w, "p-%d,ch_%d,%d,EUR,2026-12-04T10:00:00Z\n", i, i, i)
		}
		w.Flush()
		pw.Close()
	}()
	return pr
}

// CSVSource yields each record as its row is read, not after the whole file: the first record
// comes before more than a few buffers of a million-row file are read.
func TestCSVSourceStreams(t *testing.T) {
	t.Parallel()
	cr := &countingReader{r: rows(1_000_000)}
	n := 0
	for r, err := range idemreconcile.CSVSource(cr, "big.csv", idemreconcile.Columns{}).Records(context.Background(), time.Time{}, time.Time{}) {
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && (r.Key != "p-0" || cr.n > 64<<10) {
			t.Fatalf("first record %+v after %d bytes read; want p-0 after at most 64 KiB", r, cr.n)
		}
		n++
	}
	if n != 1_000_000 {
		t.Errorf("%d records; want 1000000", n)
	}
}
