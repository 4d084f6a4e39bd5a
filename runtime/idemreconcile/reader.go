package idemreconcile

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Columns map a provider's export onto Record: the CSV header's column names, or the member
// names of a JSON lines object. An empty name takes the default in parentheses.
type Columns struct {
	Key       string // the derived idempotency key the provider received ("key"); required
	Reference string // the provider's id of the charge ("reference"); optional
	Amount    string // ("amount"); required
	Currency  string // ("currency"); required
	At        string // when the provider recorded the charge ("at"); required
	Tenant    string // ("tenant"); optional
	Provider  string // ("provider"); optional
	// AmountScale says how amounts are written: 0 (the default) as an integer of minor units
	// ("1250"); n > 0 as a decimal with at most n fraction digits, the number of minor units in
	// a major one ("12.50" with 2 is 1250). A decimal with more fraction digits than
	// AmountScale is an error, never rounded.
	AmountScale int
	// TimeLayout is the layout of At: "" or "rfc3339" for RFC 3339 times
	// ("2026-12-04T09:30:00Z", fractions of a second allowed), "date" for days ("2026-12-04"),
	// or a Go time layout.
	TimeLayout string
	// Location is the time zone of times written without one (days, or a layout without a
	// zone); default UTC.
	Location *time.Location
}

// Column defaults.
const (
	DefaultKeyColumn       = "key"
	DefaultReferenceColumn = "reference"
	DefaultAmountColumn    = "amount"
	DefaultCurrencyColumn  = "currency"
	DefaultAtColumn        = "at"
	DefaultTenantColumn    = "tenant"
	DefaultProviderColumn  = "provider"
)

// field is one Record field and the column that holds it.
type field struct {
	name     string // the column's name in the input
	required bool   // the input must have the column; explicitly named optional ones too
	set      func(r *Record, v string, c *Columns) error
}

func (c *Columns) fields() ([]field, error) {
	if c.AmountScale < 0 || c.AmountScale > 9 {
		return nil, fmt.Errorf("amount scale %d: want 0 (minor units) to 9", c.AmountScale)
	}
	switch strings.ToLower(c.TimeLayout) {
	case "", "rfc3339", "date":
	default:
		if !strings.ContainsAny(c.TimeLayout, "0123456789") {
			return nil, fmt.Errorf("time layout %q: want rfc3339, date or a Go time layout (2006-01-02 15:04:05)", c.TimeLayout)
		}
	}
	name := func(v, def string) (string, bool) {
		if v == "" {
			return def, false
		}
		return v, true
	}
	key, _ := name(c.Key, DefaultKeyColumn)
	ref, refSet := name(c.Reference, DefaultReferenceColumn)
	amount, _ := name(c.Amount, DefaultAmountColumn)
	currency, _ := name(c.Currency, DefaultCurrencyColumn)
	at, _ := name(c.At, DefaultAtColumn)
	tenant, tenantSet := name(c.Tenant, DefaultTenantColumn)
	provider, providerSet := name(c.Provider, DefaultProviderColumn)
	return []field{
		{key, true, func(r *Record, v string, _ *Columns) error {
			if v = strings.TrimSpace(v); v == "" {
				return errors.New("the key is empty")
			}
			r.Key = v
			return nil
		}},
		{ref, refSet, func(r *Record, v string, _ *Columns) error { r.Reference = strings.TrimSpace(v); return nil }},
		{amount, true, func(r *Record, v string, c *Columns) (err error) {
			r.Amount, err = ParseAmount(v, c.AmountScale)
			return err
		}},
		{currency, true, func(r *Record, v string, _ *Columns) error {
			v = strings.ToUpper(strings.TrimSpace(v))
			if len(v) != 3 || strings.Trim(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
				return fmt.Errorf("%q is not an ISO 4217 currency code (three letters)", v)
			}
			r.Currency = v
			return nil
		}},
		{at, true, func(r *Record, v string, c *Columns) (err error) {
			r.At, err = c.parseTime(v)
			return err
		}},
		{tenant, tenantSet, func(r *Record, v string, _ *Columns) error { r.Tenant = v; return nil }},
		{provider, providerSet, func(r *Record, v string, _ *Columns) error { r.Provider = strings.TrimSpace(v); return nil }},
	}, nil
}

func (c *Columns) parseTime(v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	loc := c.Location
	if loc == nil {
		loc = time.UTC
	}
	switch strings.ToLower(c.TimeLayout) {
	case "", "rfc3339":
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2026-12-04T09:30:00Z)", v)
		}
		return t, nil
	case "date":
		t, err := time.ParseInLocation(time.DateOnly, v, loc)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q is not a date (2026-12-04)", v)
		}
		return t, nil
	}
	t, err := time.ParseInLocation(c.TimeLayout, v, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q does not match the time layout %q", v, c.TimeLayout)
	}
	return t, nil
}

// ParseAmount reads an amount written as scale says (see Columns.AmountScale) and returns it in
// minor units. A sign may lead; no thousands separators, no exponent, no rounding.
func ParseAmount(v string, scale int) (int64, error) {
	s := strings.TrimSpace(v)
	bad := func() (int64, error) {
		if scale == 0 {
			return 0, fmt.Errorf("%q is not an amount in minor units (an integer: 1250)", v)
		}
		return 0, fmt.Errorf("%q is not a decimal amount with at most %d fraction digits (12.50)", v, scale)
	}
	neg := false
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		s, neg = rest, true
	} else {
		s = strings.TrimPrefix(s, "+")
	}
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || (dot && (scale == 0 || frac == "" || len(frac) > scale)) || !digits(whole) || !digits(frac) {
		return bad()
	}
	frac += strings.Repeat("0", scale-len(frac))
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", v)
	}
	if neg {
		n = -n
	}
	return n, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// InputError is a record that could not be read: where it is (the file's name and line, and the
// column when one is to blame) and why.
type InputError struct {
	File   string
	Line   int
	Column string // empty when the line as a whole is wrong
	Err    error
}

func (e *InputError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: column %q: %v", e.File, e.Line, e.Column, e.Err)
}

func (e *InputError) Unwrap() error { return e.Err }

// ReadCSV reads a CSV export: a header row naming the columns, then one record per row. name
// names the input in errors (the file's path). The first bad row ends the read with an
// *InputError and no records: a reconciliation on part of a file would report charges as
// missing that are only unread.
func ReadCSV(r io.Reader, name string, c Columns) (Records, error) {
	fields, err := c.fields()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, &InputError{File: name, Line: 1, Err: errors.New("the file is empty: want a header row naming the columns")}
	}
	if err != nil {
		return nil, csvError(name, err)
	}
	index := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, dup := index[h]; dup {
			return nil, &InputError{File: name, Line: 1, Column: h, Err: errors.New("the header names this column twice")}
		}
		index[h] = i
	}
	cols := make([]int, len(fields))
	for i, f := range fields {
		j, ok := index[f.name]
		if !ok && f.required {
			return nil, &InputError{File: name, Line: 1, Column: f.name,
				Err: fmt.Errorf("the header has no such column (it has %s): map the column with Columns or --column-* flags", strings.Join(header, ", "))}
		}
		if !ok {
			j = -1
		}
		cols[i] = j
	}
	var out Records
	for {
		row, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, csvError(name, err)
		}
		line, _ := cr.FieldPos(0)
		var rec Record
		for i, f := range fields {
			if cols[i] < 0 {
				continue
			}
			if err := f.set(&rec, row[cols[i]], &c); err != nil {
				return nil, &InputError{File: name, Line: line, Column: f.name, Err: err}
			}
		}
		out = append(out, rec)
	}
}

func csvError(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &InputError{File: name, Line: pe.Line, Err: pe.Err}
	}
	return fmt.Errorf("%s: %w", name, err)
}

// ReadJSONL reads JSON lines (one object per line, blank lines skipped), with the members
// Columns names. An amount may be a JSON number or a string; other members are strings. The
// first bad line ends the read with an *InputError and no records, as in ReadCSV.
func ReadJSONL(r io.Reader, name string, c Columns) (Records, error) {
	fields, err := c.fields()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	br := bufio.NewReader(r)
	var out Records
	for line := 1; ; line++ {
		text, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if t := bytes.TrimSpace(text); len(t) > 0 {
			rec, ierr := jsonRecord(t, fields, &c)
			if ierr != nil {
				ierr.File, ierr.Line = name, line
				return nil, ierr
			}
			out = append(out, rec)
		}
		if err == io.EOF {
			return out, nil
		}
	}
}

func jsonRecord(text []byte, fields []field, c *Columns) (Record, *InputError) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return Record{}, &InputError{Err: fmt.Errorf("not a JSON object: %v", err)}
	}
	if obj == nil {
		return Record{}, &InputError{Err: errors.New("not a JSON object: null")}
	}
	if dec.More() {
		return Record{}, &InputError{Err: errors.New("more than one JSON value on the line")}
	}
	var rec Record
	for _, f := range fields {
		v, ok := obj[f.name]
		if !ok || v == nil {
			if f.required {
				return Record{}, &InputError{Column: f.name, Err: errors.New("the member is missing")}
			}
			continue
		}
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case json.Number:
			s = v.String()
		default:
			return Record{}, &InputError{Column: f.name, Err: fmt.Errorf("want a string or a number, got %s", jsonType(v))}
		}
		if err := f.set(&rec, s, c); err != nil {
			return Record{}, &InputError{Column: f.name, Err: err}
		}
	}
	return rec, nil
}

func jsonType(v any) string {
	switch v.(type) {
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
