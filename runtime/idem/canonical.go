package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A body is fingerprinted as the client sent it, in a canonical form that ignores only what
// carries no meaning: JSON key order and white space, the order of form fields of different
// names, and multipart's random boundary. Every member, field, part and byte the client sent
// counts, declared by the schema or not. Bodies of other media types count byte for byte.

// BodyError is a body that cannot be read as its media type (invalid JSON, trailing data after
// the JSON value, a duplicate object member, a malformed form or multipart body). It is
// answered 400 before any key is claimed.
type BodyError struct{ Reason string }

func (e *BodyError) Error() string { return "idem: request body: " + e.Reason }

// CanonicalBody renders a body of the given media type for a fingerprint; exclude are JSON
// pointers left out of a JSON body (for a form, a pointer of one token names a field). Its error
// is a *BodyError when the body is not what its media type says.
func CanonicalBody(contentType string, raw []byte, exclude ...string) ([]byte, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = ""
	}
	switch {
	case len(raw) == 0:
		return nil, nil
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return canonicalJSONBody(raw, exclude)
	case mt == "application/x-www-form-urlencoded":
		return canonicalForm(raw, exclude)
	case strings.HasPrefix(mt, "multipart/"):
		return canonicalMultipart(raw, params["boundary"])
	}
	return raw, nil // text, binary: the bytes themselves
}

// RawBody adds a request body as the client sent it (see CanonicalBody). Two bodies that
// differ in anything but JSON key order and white space, the order of differently named form
// fields, or a multipart boundary fingerprint differently.
func (f *Fingerprinter) RawBody(contentType string, raw []byte, exclude ...string) error {
	b, err := CanonicalBody(contentType, raw, exclude...)
	if err != nil {
		f.fail(err)
		return err
	}
	mt, _, _ := mime.ParseMediaType(contentType) // lower-cased; "" when there is none
	f.frame('b', mt, b)
	return nil
}

// canonicalJSONBody parses raw strictly (one value, no trailing data, no duplicate members),
// removes the excluded pointers, and encodes it with sorted keys, no white space and numbers in
// one spelling.
func canonicalJSONBody(raw []byte, exclude []string) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, &BodyError{"the JSON body is not valid UTF-8 (RFC 8259 requires it)"}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeStrict(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &BodyError{"there is data after the JSON value (send exactly one JSON value)"}
	}
	for _, p := range exclude {
		if v, err = removePointer(v, p); err != nil {
			return nil, err
		}
	}
	return json.Marshal(v)
}

// maxDepth bounds JSON nesting, so no body can exhaust the stack.
const maxDepth = 512

func decodeStrict(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, &BodyError{fmt.Sprintf("JSON nested deeper than %d levels", maxDepth)}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, &BodyError{"not valid JSON" + offset(dec)}
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, &BodyError{"not valid JSON" + offset(dec)}
				}
				k := kt.(string)
				if _, dup := obj[k]; dup {
					return nil, &BodyError{fmt.Sprintf("the JSON object member %q appears twice (send each member once)", shorten(k, 64))}
				}
				if obj[k], err = decodeStrict(dec, depth+1); err != nil {
					return nil, err
				}
			}
			if _, err := dec.Token(); err != nil {
				return nil, &BodyError{"not valid JSON" + offset(dec)}
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeStrict(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, &BodyError{"not valid JSON" + offset(dec)}
			}
			return arr, nil
		}
		return nil, &BodyError{"not valid JSON" + offset(dec)}
	case json.Number:
		return canonicalNumber(t), nil
	}
	return tok, nil // string, bool, nil
}

func offset(dec *json.Decoder) string { return fmt.Sprintf(" (at byte %d)", dec.InputOffset()) }

// canonicalNumber spells equal numbers alike: 1, 1.0 and 1e0 are one number. Integers keep
// every digit; other numbers are written as the shortest float64 that reads back the same.
func canonicalNumber(n json.Number) json.Number {
	s := n.String()
	if !strings.ContainsAny(s, ".eE") {
		return n
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil { // out of float64's range: keep the spelling
		return n
	}
	if f == float64(int64(f)) && f > -1e15 && f < 1e15 {
		return json.Number(strconv.FormatInt(int64(f), 10))
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
}

// canonicalForm sorts form fields by name, keeping the order of a name's values.
func canonicalForm(raw []byte, exclude []string) ([]byte, error) {
	vals, err := url.ParseQuery(string(raw))
	if err != nil {
		return nil, &BodyError{"not a valid form-encoded body"}
	}
	for _, p := range exclude {
		delete(vals, strings.TrimPrefix(p, "/"))
	}
	return []byte(vals.Encode()), nil // Encode sorts by key
}

// canonicalMultipart frames each part in order: its form name, file name, content type and
// content. The boundary, which a client picks at random, does not count.
func canonicalMultipart(raw []byte, boundary string) ([]byte, error) {
	if boundary == "" {
		return nil, &BodyError{"a multipart body without a boundary parameter in its Content-Type"}
	}
	r := multipart.NewReader(bytes.NewReader(raw), boundary)
	fp := NewFingerprinter("multipart")
	for i := 0; ; i++ {
		part, err := r.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, &BodyError{fmt.Sprintf("multipart part %d is malformed", i+1)}
		}
		content, err := io.ReadAll(part)
		if err != nil {
			return nil, &BodyError{fmt.Sprintf("multipart part %d is malformed", i+1)}
		}
		head := []string{part.FormName(), part.FileName(), part.Header.Get("Content-Type")}
		for j, h := range head {
			if err := fp.Add(strconv.Itoa(i)+"."+strconv.Itoa(j), h); err != nil {
				return nil, err
			}
		}
		if err := fp.Add(strconv.Itoa(i)+".content", content); err != nil {
			return nil, err
		}
	}
	return []byte(fp.Sum()), nil
}

// shorten cuts s to at most n bytes on a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
