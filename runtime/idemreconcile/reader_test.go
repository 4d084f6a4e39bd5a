package idemreconcile_test

import (
	"errors"
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
