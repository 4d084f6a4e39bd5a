package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idemgen/idemgen/runtime/idemwire"
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
	mt, params, err := mediaType(contentType)
	if err != nil {
		mt = ""
	}
	return canonicalBody(mt, params, raw, exclude)
}

// mediaType is mime.ParseMediaType. A Content-Type that is a bare lower-case type/subtype, as
// clients almost always send (application/json), is its own media type and is returned without
// the parser's allocations (TestMediaTypeMatchesTheParser).
func mediaType(contentType string) (mt string, params map[string]string, err error) {
	if bareMediaType(contentType) {
		return contentType, nil, nil
	}
	return mime.ParseMediaType(contentType)
}

// bareMediaType says whether s is type "/" subtype, both non-empty, of lower-case token
// characters only (no parameters, no white space).
func bareMediaType(s string) bool {
	slash := -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '/' && slash < 0 && i > 0 && i < len(s)-1:
			slash = i
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return slash > 0
}

func canonicalBody(mt string, params map[string]string, raw []byte, exclude []string) ([]byte, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	switch idemwire.MediaClassOf(mt) {
	case idemwire.MediaJSON:
		return canonicalJSONBody(raw, exclude)
	case idemwire.MediaForm:
		return canonicalForm(raw, exclude)
	case idemwire.MediaMultipart:
		return canonicalMultipart(raw, params["boundary"])
	}
	return raw, nil // text, binary: the bytes themselves
}

// RawBody adds a request body as the client sent it (see CanonicalBody). Two bodies that
// differ in anything but JSON key order and white space, the order of differently named form
// fields, or a multipart boundary fingerprint differently.
func (f *Fingerprinter) RawBody(contentType string, raw []byte, exclude ...string) error {
	// The frame names the media type as the parser returns it (lower-cased; "" when there is
	// none, and the type even when a parameter is malformed), the body's form as CanonicalBody
	// reads it.
	mt, params, err := mediaType(contentType)
	bodyType := mt
	if err != nil {
		bodyType = ""
	}
	b, err := canonicalBody(bodyType, params, raw, exclude)
	if err != nil {
		f.fail(err)
		return err
	}
	f.frame('b', mt, b)
	return nil
}

// canonicalJSONBody parses raw strictly (one value, no trailing data, no duplicate members),
// removes the excluded pointers, and encodes it with sorted keys, no white space and numbers in
// one spelling.
//
// Every fingerprinted request pays for this, so the bytes are canonicalised in one pass
// ([canonicalJSONScan]); the tree ([canonicalJSONTree]) is the definition of the canonical form
// and answers whatever the scan does not accept, errors included, so that both give the same
// bytes and the same errors for every body (canonical_internal_test.go compares them).
func canonicalJSONBody(raw []byte, exclude []string) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, &BodyError{"the JSON body is not valid UTF-8 (RFC 8259 requires it)"}
	}
	if out, ok := canonicalJSONScan(raw, exclude); ok {
		return out, nil
	}
	return canonicalJSONTree(raw, exclude)
}

// canonicalJSONTree is canonicalJSONBody by way of a generic tree: encoding/json decodes raw
// token by token, the excluded pointers are removed from the tree, and encoding/json encodes it
// (map keys sorted, json.Number literally).
func canonicalJSONTree(raw []byte, exclude []string) ([]byte, error) {
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

// maxPlainDigits is the longest integer written in plain digits; longer ones are written in
// scientific notation, so that a short body such as 1e999999 cannot expand into a huge one.
const maxPlainDigits = 100

// canonicalNumber spells a JSON number by its exact decimal value, so that two numbers get the
// same text exactly when they are equal: 1, 1.0, 1e0 and 10e-1 are one number, and so are 0 and
// -0, while 12345678.123456789 and 12345678.1234567891 are two (nothing is rounded to float64).
// The spelling, for value ±D×10^E with D's digits free of leading and trailing zeros:
//
//   - zero is 0;
//   - an integer of at most maxPlainDigits digits is plain digits: 100, -42;
//   - any other number whose leading digit is worth 10^-4 up to 10^5 is plain decimals: 12.5,
//     -0.0001, 123456.7;
//   - everything else is scientific, the mantissa D with its point after the first digit and a
//     signed exponent of at least two digits: 1.2345675e+06, 1e-05, 1e+101.
//
// This is the text strconv's shortest 'g' format gives for a float64 that holds the number
// exactly in at most 15 significant digits, and integers of up to maxPlainDigits digits keep
// their spelling.
func canonicalNumber(n json.Number) json.Number {
	s := n.String()
	if !strings.ContainsAny(s, ".eE") && len(strings.TrimPrefix(s, "-")) <= maxPlainDigits && s != "-0" {
		return n // an integer in JSON's one spelling of it (no leading zeros)
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expText, _ := strings.Cut(strings.ToLower(s), "e")
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return "0"
	}
	trimmed := strings.TrimRight(digits, "0")
	// The value is trimmed × 10^exp.
	exp := new(big.Int)
	if expText != "" {
		exp.SetString(strings.TrimPrefix(expText, "+"), 10) // the decoder checked the grammar
	}
	exp.Add(exp, big.NewInt(int64(len(digits)-len(trimmed)-len(frac))))
	// lead is the power of ten of the leading digit.
	lead := new(big.Int).Add(exp, big.NewInt(int64(len(trimmed)-1)))

	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	switch {
	case exp.Sign() >= 0 && lead.Cmp(big.NewInt(maxPlainDigits)) < 0:
		b.WriteString(trimmed)
		b.WriteString(strings.Repeat("0", int(exp.Int64())))
	case exp.Sign() < 0 && lead.Cmp(big.NewInt(-4)) >= 0 && lead.Cmp(big.NewInt(6)) < 0:
		point := int(lead.Int64()) + 1 // digits before the point; below one, zeros follow it
		if point <= 0 {
			b.WriteString("0.")
			b.WriteString(strings.Repeat("0", -point))
			b.WriteString(trimmed)
		} else {
			b.WriteString(trimmed[:point])
			b.WriteByte('.')
			b.WriteString(trimmed[point:])
		}
	default:
		b.WriteString(trimmed[:1])
		if len(trimmed) > 1 {
			b.WriteByte('.')
			b.WriteString(trimmed[1:])
		}
		b.WriteByte('e')
		if lead.Sign() < 0 {
			b.WriteByte('-')
		} else {
			b.WriteByte('+')
		}
		e := new(big.Int).Abs(lead).String()
		if len(e) < 2 {
			b.WriteByte('0')
		}
		b.WriteString(e)
	}
	return json.Number(b.String())
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
