package idem

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"
)

// decodeStoredHeaders decodes an outcome's stored headers, a JSON object of string lists, as
// json.Unmarshal into an http.Header does. Every replay decodes them, so the form PostgreSQL
// returns them in (jsonb's text: a space after each colon and comma, strings mostly without
// escapes) is read in one pass, with all names and values cut from one string and all lists
// from one slice; anything else goes to json.Unmarshal.
func decodeStoredHeaders(raw []byte) (http.Header, error) {
	if h, ok := scanStoredHeaders(raw); ok {
		return h, nil
	}
	var h http.Header
	err := json.Unmarshal(raw, &h)
	return h, err
}

// scanStoredHeaders reads {"Name": ["value", ...], ...} (white space between tokens, as
// PostgreSQL's jsonb prints it, or none) with no escapes in its strings; ok is false for anything
// else.
func scanStoredHeaders(raw []byte) (http.Header, bool) {
	if !utf8.Valid(raw) {
		return nil, false
	}
	sc := headerScanner{s: string(raw)} // names and values are cut from this one string
	quotes, names := 0, 0
	for i := 0; i < len(sc.s); i++ {
		switch sc.s[i] {
		case '\\':
			return nil, false
		case '"':
			quotes++
		case ':':
			names++
		}
	}
	if !sc.next('{') {
		return nil, false
	}
	h := make(http.Header, names)
	backing := make([]string, 0, quotes/2)
	if sc.next('}') {
		return h, sc.end()
	}
	for {
		name, ok := sc.str()
		if !ok || !sc.next(':') || !sc.next('[') {
			return nil, false
		}
		start := len(backing)
		if backing, ok = sc.values(backing); !ok {
			return nil, false
		}
		h[name] = backing[start:len(backing):len(backing)]
		if sc.next('}') {
			return h, sc.end()
		}
		if !sc.next(',') {
			return nil, false
		}
	}
}

// headerScanner reads the stored headers' JSON at s[i:] (scanStoredHeaders).
type headerScanner struct {
	s string
	i int
}

// space skips white space.
func (sc *headerScanner) space() {
	for sc.i < len(sc.s) && (sc.s[sc.i] == ' ' || sc.s[sc.i] == '\t' || sc.s[sc.i] == '\n' || sc.s[sc.i] == '\r') {
		sc.i++
	}
}

// next skips white space and the byte c; false when c is not next.
func (sc *headerScanner) next(c byte) bool {
	sc.space()
	if sc.i < len(sc.s) && sc.s[sc.i] == c {
		sc.i++
		return true
	}
	return false
}

// end says only white space is left.
func (sc *headerScanner) end() bool {
	sc.space()
	return sc.i == len(sc.s)
}

// str reads a string with no escapes (the caller refused any backslash) and no control byte.
func (sc *headerScanner) str() (string, bool) {
	if !sc.next('"') {
		return "", false
	}
	for j := sc.i; j < len(sc.s); j++ {
		switch c := sc.s[j]; {
		case c == '"':
			v := sc.s[sc.i:j]
			sc.i = j + 1
			return v, true
		case c < 0x20:
			return "", false
		}
	}
	return "", false
}

// values reads a list's strings up to and including its ']' (its '[' read already), appended to
// backing.
func (sc *headerScanner) values(backing []string) ([]string, bool) {
	if sc.next(']') {
		return backing, true
	}
	for {
		v, ok := sc.str()
		if !ok {
			return nil, false
		}
		backing = append(backing, v)
		if sc.next(']') {
			return backing, true
		}
		if !sc.next(',') {
			return nil, false
		}
	}
}

// encodeStoredHeaders is json.Marshal(h) for an outcome's headers, as the completion stores them:
// a JSON object of string lists, names in sorted order, the same bytes json.Marshal writes.
// Every first execution encodes them, so they are written in one pass into one buffer, without
// encoding/json's reflection; a name or value that needs escaping (a quote, a backslash, a
// control character, HTML's <, > and &, U+2028/U+2029, or bytes that are not UTF-8) goes to
// json.Marshal. The text is returned as a string, the form the completion binds it in, built in
// its one buffer (strings.Builder) rather than copied out of a []byte.
func encodeStoredHeaders(h http.Header) (string, error) {
	if h == nil {
		return "null", nil
	}
	// One pass over the map takes each header with its values (no lookup by name afterwards),
	// into room for the few an answer has.
	type header struct {
		name   string
		values []string
	}
	var room [8]header
	headers := room[:0]
	size := 2
	for name, values := range h {
		if !plainJSON(name) {
			return marshalHeaders(h)
		}
		size += len(name) + 6
		for _, v := range values {
			if !plainJSON(v) {
				return marshalHeaders(h)
			}
			size += len(v) + 3
		}
		headers = append(headers, header{name, values})
	}
	slices.SortFunc(headers, func(a, b header) int { return strings.Compare(a.name, b.name) })
	var b strings.Builder
	b.Grow(size)
	b.WriteByte('{')
	// quoted writes s as a JSON string (plainJSON said it needs no escape), after a comma unless
	// it is the first of its list.
	quoted := func(first bool, s string) {
		if !first {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
	}
	for i, hd := range headers {
		quoted(i == 0, hd.name)
		b.WriteByte(':')
		if hd.values == nil {
			b.WriteString("null")
			continue
		}
		b.WriteByte('[')
		for j, v := range hd.values {
			quoted(j == 0, v)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return b.String(), nil
}

// marshalHeaders is json.Marshal(h) as a string: encodeStoredHeaders for headers that need
// escaping.
func marshalHeaders(h http.Header) (string, error) {
	b, err := json.Marshal(h)
	return string(b), err
}

// plainJSON says json.Marshal writes s as it is, between quotes: printable ASCII other than the
// characters it escapes. Every header name and value of every stored answer, and most
// fingerprinted parameters, are checked, so each byte costs one lookup.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainJSONByte[s[i]] {
			return false
		}
	}
	return true
}

// plainJSONByte says which bytes plainJSON accepts.
var plainJSONByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()
