package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// Fingerprinter builds the canonical fingerprint of a request: the route, then named parts in
// the order the generated code adds them, then the body as canonical JSON (sorted keys, no
// insignificant whitespace) minus excluded JSON pointers.
//
// Every element is framed with its kind and length before it is hashed, so no two different
// sequences of parts can produce the same byte stream. Values are encoded from their Go types,
// so JSON key order and whitespace in the original request never change a fingerprint.
//
// The frames of a request are mostly a few hundred bytes: they are kept in a buffer (the first
// fingerprintInline bytes in the Fingerprinter itself) and hashed in one pass by Sum, which
// costs fewer instructions than hashing them in small writes and allocates no hash state. Past
// fingerprintBuffered bytes (a large body) they go through a streaming hash instead. The digest
// is the same either way: SHA-256 of the frames, in order.
type Fingerprinter struct {
	h   hash.Hash // nil while the frames are buffered
	err error
	buf []byte // the frames so far, while h is nil
	// head is buf's first bytes, and then, once h streams, the head of each frame.
	head [fingerprintInline]byte
}

const (
	fingerprintInline   = 256
	fingerprintBuffered = 4 << 10
)

// NewFingerprinter starts a fingerprint for route ("POST /v1/payments").
func NewFingerprinter(route string) *Fingerprinter {
	f := &Fingerprinter{}
	f.buf = f.head[:0]
	f.frame('v', "idemgen-fingerprint-1", nil)
	f.frame('r', route, nil)
	return f
}

func (f *Fingerprinter) frame(kind byte, name string, value []byte) {
	size := 1 + binary.MaxVarintLen64 + len(name) + binary.MaxVarintLen64 + len(value)
	if f.h == nil && len(f.buf)+size > fingerprintBuffered {
		f.h = sha256.New() // streams from here on
		f.h.Write(f.buf)
		f.buf = nil
	}
	if f.h == nil {
		b := append(f.buf, kind)
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(value)))
		f.buf = append(b, value...)
		return
	}
	b := append(f.head[:0], kind)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	f.h.Write(b)
	f.h.Write(value)
}

// Add adds a named part (path:id, query:x, header:X-Foo); v is JSON-encoded canonically.
func (f *Fingerprinter) Add(name string, v any) error {
	if s, ok := plainString(v); ok {
		f.frameQuoted('p', name, s)
		return nil
	}
	b, err := canonicalScalar(v)
	if err != nil {
		err = fmt.Errorf("idem: fingerprint part %q: %w", name, err)
		f.fail(err)
		return err
	}
	f.frame('p', name, b)
	return nil
}

// plainString is v's text when v is a string (or a pointer to one) that JSON writes as it is,
// between double quotes (plainJSON): most parameters are, and are framed without encoding/json.
func plainString(v any) (string, bool) {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case *string:
		if x == nil {
			return "", false
		}
		s = *x
	default:
		return "", false
	}
	return s, plainJSON(s)
}

// frameQuoted is frame with the value s between double quotes, the JSON of a plainJSON string,
// written to the buffer directly.
func (f *Fingerprinter) frameQuoted(kind byte, name, s string) {
	if f.h != nil || len(f.buf)+1+2*binary.MaxVarintLen64+len(name)+len(s)+2 > fingerprintBuffered {
		f.frame(kind, name, []byte(`"`+s+`"`))
		return
	}
	b := append(f.buf, kind)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(s)+2))
	b = append(b, '"')
	b = append(b, s...)
	f.buf = append(b, '"')
}

// Body adds the typed request body (JSON or form) with the excluded JSON pointers removed.
// A pointer to an object member removes the member; one to an array element replaces it with
// null (so the other elements keep their positions); "" excludes the whole body. A pointer that
// names nothing in this body is ignored.
func (f *Fingerprinter) Body(v any, exclude ...string) error {
	b, err := canonicalJSON(v, exclude...)
	if err != nil {
		err = fmt.Errorf("idem: fingerprint body: %w", err)
		f.fail(err)
		return err
	}
	f.frame('b', "", b)
	return nil
}

func (f *Fingerprinter) fail(err error) {
	if f.err == nil {
		f.err = err
	}
}

// Err returns the first error from Add or Body. A Fingerprinter that failed still sums, but
// its fingerprint leaves out the failed parts, so callers should check Err before Sum.
func (f *Fingerprinter) Err() error { return f.err }

// Framed returns the frames added so far while the Fingerprinter keeps them in memory, and nil
// once they stream (past a few KiB). Two fingerprints whose Framed bytes are equal and which go on
// with the same parts have the same Sum: a caller that summed one can reuse its sum for the other
// without hashing again. The bytes are the Fingerprinter's own: read them, do not change them.
func (f *Fingerprinter) Framed() []byte {
	if f.h != nil || f.err != nil {
		return nil
	}
	return f.buf
}

// Sum returns the hex SHA-256.
func (f *Fingerprinter) Sum() string {
	var sum [sha256.Size]byte
	if f.h == nil {
		sum = sha256.Sum256(f.buf)
	} else {
		copy(sum[:], f.h.Sum(nil)) // sum itself would escape through the interface
	}
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], sum[:])
	return string(text[:])
}

// canonicalJSON encodes v with encoding/json, drops the members named by the RFC 6901 pointers
// in exclude, and re-encodes the result with object keys sorted and no insignificant
// whitespace. Numbers keep the literal encoding/json gave them.
func canonicalJSON(v any, exclude ...string) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	for _, p := range exclude {
		if doc, err = removePointer(doc, p); err != nil {
			return nil, err
		}
	}
	// encoding/json writes map keys sorted and json.Number literally: that is the canonical form.
	return json.Marshal(doc)
}

func removePointer(doc any, ptr string) (any, error) {
	if ptr == "" {
		return nil, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("exclude %q is not a JSON pointer (RFC 6901: it must start with /, e.g. /metadata/requestId)", ptr)
	}
	tokens := strings.Split(ptr[1:], "/")
	for i, t := range tokens {
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	parent := doc
	for _, t := range tokens[:len(tokens)-1] {
		switch node := parent.(type) {
		case map[string]any:
			parent = node[t]
		case []any:
			i, ok := arrayIndex(t, len(node))
			if !ok {
				return doc, nil
			}
			parent = node[i]
		default:
			return doc, nil
		}
	}
	last := tokens[len(tokens)-1]
	switch node := parent.(type) {
	case map[string]any:
		delete(node, last)
	case []any:
		if i, ok := arrayIndex(last, len(node)); ok {
			node[i] = nil
		}
	}
	return doc, nil
}

func arrayIndex(tok string, n int) (int, bool) {
	if tok == "" || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(tok)
	if err != nil || i < 0 || i >= n {
		return 0, false
	}
	return i, true
}

// canonicalScalar is canonicalJSON for the values parameters mostly are (strings, numbers,
// booleans, pointers to them), whose JSON encoding is already canonical, without the decode
// and re-encode a composite value needs: a parameter is fingerprinted on every request.
func canonicalScalar(v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return json.Marshal(x)
	case *string:
		if x == nil {
			return []byte("null"), nil
		}
		return json.Marshal(*x)
	case int, int32, int64, uint, uint32, uint64, bool:
		return json.Marshal(x)
	}
	return canonicalJSON(v)
}
