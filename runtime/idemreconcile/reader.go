package idemreconcile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
			return nil, fmt.Errorf("time layout %s: want rfc3339, date or a Go time layout (2006-01-02 15:04:05)", clip(c.TimeLayout))
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
				return fmt.Errorf("%s is not an ISO 4217 currency code (three letters)", clip(v))
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
			return time.Time{}, fmt.Errorf("%s is not an RFC 3339 time (2026-12-04T09:30:00Z)", clip(v))
		}
		return t, nil
	case "date":
		t, err := time.ParseInLocation(time.DateOnly, v, loc)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s is not a date (2026-12-04)", clip(v))
		}
		return t, nil
	}
	t, err := time.ParseInLocation(c.TimeLayout, v, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s does not match the time layout %s", clip(v), clip(c.TimeLayout))
	}
	return t, nil
}

// ParseAmount reads an amount written as scale says (see Columns.AmountScale) and returns it in
// minor units. A sign may lead; no thousands separators, no exponent, no rounding.
func ParseAmount(v string, scale int) (int64, error) {
	s := strings.TrimSpace(v)
	bad := func() (int64, error) {
		if scale == 0 {
			return 0, fmt.Errorf("%s is not an amount in minor units (an integer: 1250)", clip(v))
		}
		return 0, fmt.Errorf("%s is not a decimal amount with at most %d fraction digits (12.50)", clip(v), scale)
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
		return 0, fmt.Errorf("%s is out of range", clip(v))
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
// column when one is to blame) and why. Its message quotes at most MaxQuotedBytes of any value
// from the input, escaped: an error prints safely on a terminal, whatever the file holds.
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
	return fmt.Sprintf("%s:%d: column %s: %v", e.File, e.Line, clip(e.Column), e.Err)
}

func (e *InputError) Unwrap() error { return e.Err }

// MaxLineBytes bounds a line of a provider's export (a CSV row, a JSON line): a longer one (a
// binary file, a file of NULs, a line without its end) ends the read at once with an
// *InputError, before the reader holds more of it.
const MaxLineBytes = 256 << 10

// MaxQuotedBytes bounds what an error message quotes of a value from the input.
const MaxQuotedBytes = 64

// clip quotes v for an error message: escaped (control characters, terminal escapes and
// invalid UTF-8 as Go escapes) and cut after MaxQuotedBytes.
func clip(v string) string {
	if len(v) <= MaxQuotedBytes {
		return strconv.Quote(v)
	}
	cut := MaxQuotedBytes
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return strconv.Quote(v[:cut]) + fmt.Sprintf("… (%d bytes)", len(v))
}

// source is a Source read once from an input, as Reconcile asks for the records.
type source func(ctx context.Context, yield func(Record, error) bool)

func (s source) Records(ctx context.Context, _, _ time.Time) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) { s(ctx, yield) }
}

// collect reads all of src's records; the first error ends it with no records.
func collect(src Source) (Records, error) {
	var out Records
	for r, err := range src.Records(context.Background(), time.Time{}, time.Time{}) {
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// ReadCSV reads a whole CSV export into memory (see CSVSource); the first bad row ends the read
// with an *InputError and no records: a reconciliation on part of a file would report charges
// as missing that are only unread.
func ReadCSV(r io.Reader, name string, c Columns) (Records, error) {
	return collect(CSVSource(r, name, c))
}

// ReadJSONL reads a whole JSON lines export into memory (see JSONLSource), as ReadCSV does.
func ReadJSONL(r io.Reader, name string, c Columns) (Records, error) {
	return collect(JSONLSource(r, name, c))
}

// CSVSource is a Source that reads a CSV export from r one row at a time as Reconcile consumes
// it, so memory does not grow with the file: a header row naming the columns, then one record
// per row. name names the input in errors (the file's path). The first bad row, or a line longer
// than MaxLineBytes, yields an *InputError and ends the records (and so the reconciliation). r
// is read once.
func CSVSource(r io.Reader, name string, c Columns) Source {
	return source(func(ctx context.Context, yield func(Record, error) bool) {
		fail := func(err error) { yield(Record{}, err) }
		fields, err := c.fields()
		if err != nil {
			fail(fmt.Errorf("%s: %w", name, err))
			return
		}
		lim := &lineLimit{r: r}
		cr := csv.NewReader(lim)
		cr.ReuseRecord = true
		cols, err := csvHeader(cr, lim, name, fields)
		if err != nil {
			fail(err)
			return
		}
		for {
			row, err := cr.Read()
			if err == io.EOF {
				return
			}
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				fail(csvError(name, lim, err))
				return
			}
			line, _ := cr.FieldPos(0)
			rec, ierr := csvRecord(row, cols, fields, &c)
			if ierr != nil {
				ierr.File, ierr.Line = name, line
				fail(ierr)
				return
			}
			if !yield(rec, nil) {
				return
			}
		}
	})
}

// csvHeader reads the header row and returns, for each field, its column's index (-1 when an
// optional column is absent).
func csvHeader(cr *csv.Reader, lim *lineLimit, name string, fields []field) ([]int, error) {
	header, err := cr.Read()
	if err == io.EOF {
		return nil, &InputError{File: name, Line: 1, Err: errors.New("the file is empty: want a header row naming the columns")}
	}
	if err != nil {
		return nil, csvError(name, lim, err)
	}
	index := map[string]int{}
	var names []string
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, dup := index[h]; dup {
			return nil, &InputError{File: name, Line: 1, Column: h, Err: errors.New("the header names this column twice")}
		}
		index[h] = i
		if len(names) < 20 {
			names = append(names, clip(h))
		}
	}
	if len(header) > len(names) {
		names = append(names, fmt.Sprintf("and %d more", len(header)-len(names)))
	}
	cols := make([]int, len(fields))
	for i, f := range fields {
		j, ok := index[f.name]
		if !ok && f.required {
			return nil, &InputError{File: name, Line: 1, Column: f.name,
				Err: fmt.Errorf("the header has no such column (it has %s): map the column with Columns or --column-* flags", strings.Join(names, ", "))}
		}
		if !ok {
			j = -1
		}
		cols[i] = j
	}
	return cols, nil
}

func csvRecord(row []string, cols []int, fields []field, c *Columns) (Record, *InputError) {
	var rec Record
	for i, f := range fields {
		if cols[i] < 0 {
			continue
		}
		if err := f.set(&rec, row[cols[i]], c); err != nil {
			return Record{}, &InputError{Column: f.name, Err: err}
		}
	}
	return rec, nil
}

func csvError(name string, lim *lineLimit, err error) error {
	var pe *csv.ParseError
	switch {
	case errors.Is(err, errLineTooLong):
		return &InputError{File: name, Line: lim.line, Err: err}
	case errors.As(err, &pe):
		return &InputError{File: name, Line: pe.Line, Err: pe.Err}
	}
	return fmt.Errorf("%s: %w", name, err)
}

var errLineTooLong = fmt.Errorf("the line is longer than %d bytes: not a provider's export (a binary file, or a line without its end)", MaxLineBytes)

// lineLimit passes r through and fails once a line grows past MaxLineBytes; line is the line
// being read, counted from 1.
type lineLimit struct {
	r    io.Reader
	n    int // bytes of the current line so far
	line int
}

func (l *lineLimit) Read(p []byte) (int, error) {
	if l.line == 0 {
		l.line = 1
	}
	n, err := l.r.Read(p)
	for i, b := range p[:n] {
		if b == '\n' {
			l.line++
			l.n = 0
			continue
		}
		if l.n++; l.n > MaxLineBytes {
			return i, errLineTooLong
		}
	}
	return n, err
}

// JSONLSource is a Source that reads JSON lines (one object per line, blank lines skipped) from
// r one line at a time, with the members Columns names. An amount may be a JSON number or a
// string; other members are strings. Errors and memory are as for CSVSource.
func JSONLSource(r io.Reader, name string, c Columns) Source {
	return source(func(ctx context.Context, yield func(Record, error) bool) {
		fields, err := c.fields()
		if err != nil {
			yield(Record{}, fmt.Errorf("%s: %w", name, err))
			return
		}
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
		line := 0
		for sc.Scan() {
			line++
			if err := ctx.Err(); err != nil {
				yield(Record{}, err)
				return
			}
			t := bytes.TrimSpace(sc.Bytes())
			if len(t) == 0 {
				continue
			}
			rec, ierr := jsonRecord(t, fields, &c)
			if ierr != nil {
				ierr.File, ierr.Line = name, line
				yield(Record{}, ierr)
				return
			}
			if !yield(rec, nil) {
				return
			}
		}
		if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
			yield(Record{}, &InputError{File: name, Line: line + 1, Err: errLineTooLong})
		} else if err != nil {
			yield(Record{}, fmt.Errorf("%s:%d: %w", name, line+1, err))
		}
	})
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
