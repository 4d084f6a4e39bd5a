package idemwebhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// KeySource says where a delivery's id is: exactly one of Header and Pointer is set.
type KeySource struct {
	Header  string // a delivery header: webhook-id, X-GitHub-Delivery
	Pointer string // an RFC 6901 JSON pointer into the body: Stripe's /id
}

// String is the source as x-idempotency writes it: header:<Name> or body:<pointer>.
func (k KeySource) String() string {
	if k.Header != "" {
		return "header:" + k.Header
	}
	return "body:" + k.Pointer
}

// Key returns the delivery id of the delivery whose headers are h and body is body. A missing
// id, a body that is not JSON, or a member that is not a string or a number is an *Error with
// ReasonNoKey. Call it after [Verifier.Verify]: an unverified body names nothing.
func (k KeySource) Key(h http.Header, body []byte) (string, error) {
	if k.Header != "" {
		vs := h.Values(k.Header)
		switch {
		case len(vs) == 0 || strings.TrimSpace(vs[0]) == "":
			return "", refuse(ReasonNoKey, "the delivery has no %s header, which names the delivery", k.Header)
		case len(vs) > 1:
			return "", refuse(ReasonNoKey, "the %s header was sent %d times", k.Header, len(vs))
		}
		return strings.TrimSpace(vs[0]), nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return "", refuse(ReasonNoKey, "the delivery's body is not JSON, so it has no %s member naming the delivery", k.Pointer)
	}
	v, ok := lookup(doc, k.Pointer)
	if !ok {
		return "", refuse(ReasonNoKey, "the delivery's body has no %s member, which names the delivery", k.Pointer)
	}
	switch x := v.(type) {
	case string:
		if x != "" {
			return x, nil
		}
	case json.Number:
		return x.String(), nil
	}
	return "", refuse(ReasonNoKey, "the delivery's %s member is not a non-empty string or a number", k.Pointer)
}

// lookup resolves an RFC 6901 pointer in a decoded JSON document.
func lookup(doc any, pointer string) (any, bool) {
	if pointer == "" {
		return doc, true
	}
	if pointer[0] != '/' {
		return nil, false
	}
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch node := doc.(type) {
		case map[string]any:
			v, ok := node[tok]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(node) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false
			}
			doc = node[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// Receiver is one webhook receiver: how its deliveries are signed and where their id is.
type Receiver struct {
	Verifier
	Key KeySource
}

// Receive verifies the delivery and returns its id: the signature first, so that an unverified
// delivery's id is never read, let alone claimed. The error is an *Error.
func (r *Receiver) Receive(ctx context.Context, h http.Header, body []byte) (string, error) {
	if err := r.Verify(ctx, h, body); err != nil {
		return "", err
	}
	return r.Key.Key(h, body)
}
