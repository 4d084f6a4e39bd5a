package idemadmin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The resolve form: an opt-in (Options.Resolve) POST that settles an uncertain key through
// idem.Store.Resolve. It changes what every retry of a payment gets, so it is accepted only
// from the page itself, by a user the application lets resolve, with a token the page minted
// for that key and that user.

// MaxResolveForm caps the resolve form's body, in bytes: the body retries replay is part of it.
const MaxResolveForm = 1 << 20

// ResolveTokenTTL is how long a resolve form stays valid after the page rendered it.
const ResolveTokenTTL = time.Hour

// Caps of the form's text fields, in bytes.
const (
	maxEvidence  = 4000
	maxReference = 1000
)

// resolveForm is what the resolve form sends.
type resolveForm struct {
	As, Evidence, Status, ContentType, Body, Reference string
	NoBody                                             bool
}

// sameOrigin reports whether the browser says r comes from a page of the same origin. A
// browser's word is required: Sec-Fetch-Site same-origin or, from a browser that does not send
// it, an Origin naming r's host. The page's Referrer-Policy (no-referrer) makes browsers send
// "Origin: null" on its form, so an Origin alone proves nothing there, and Sec-Fetch-Site
// (sent by every current browser) is what lets the form through.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && u.Host == r.Host
}

// token is the resolve form's token for key k and actor, valid until exp: exp in Unix seconds,
// a dot, and an HMAC of exp, the actor and the key's tenant, scope and key.
func (h *Handler) token(exp time.Time, actor string, k *idem.KeyInfo) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return e + "." + base64.RawURLEncoding.EncodeToString(h.mac(e, actor, k))
}

func (h *Handler) mac(exp, actor string, k *idem.KeyInfo) []byte {
	m := hmac.New(sha256.New, h.secret)
	var b []byte
	for _, part := range []string{"idemadmin resolve", exp, actor, k.Tenant, k.Scope, k.Key} {
		b = binary.AppendUvarint(b, uint64(len(part)))
		b = append(b, part...)
	}
	m.Write(b)
	return m.Sum(nil)
}

// tokenFor reports whether tok is a valid, unexpired token for k and actor.
func (h *Handler) tokenFor(tok, actor string, k *idem.KeyInfo) bool {
	e, sig, ok := strings.Cut(tok, ".")
	if !ok {
		return false
	}
	exp, err := strconv.ParseInt(e, 10, 64)
	if err != nil || h.now().Unix() > exp {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	return err == nil && hmac.Equal(got, h.mac(e, actor, k))
}

// resolve handles the resolve form's POST.
func (h *Handler) resolve(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		plain(w, http.StatusForbidden, "403 forbidden: the resolve form is accepted only from this page (a same-origin POST from a browser)")
		return
	}
	actor := h.opts.Resolve(r)
	if actor == "" {
		plain(w, http.StatusForbidden, "403 forbidden: you may look keys up here, not resolve them")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
		plain(w, http.StatusUnsupportedMediaType, "415 unsupported media type: send the resolve form as application/x-www-form-urlencoded")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxResolveForm)
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			plain(w, http.StatusRequestEntityTooLarge, "413 content too large: the resolve form is capped at "+strconv.Itoa(MaxResolveForm>>20)+" MiB")
			return
		}
		plain(w, http.StatusBadRequest, "400 bad request: the resolve form could not be read")
		return
	}
	f := r.PostForm
	form := resolveForm{As: f.Get("as"), Evidence: strings.TrimSpace(f.Get("evidence")), Status: strings.TrimSpace(f.Get("status")),
		ContentType: strings.TrimSpace(f.Get("content_type")), Body: f.Get("body"), Reference: strings.TrimSpace(f.Get("reference")),
		NoBody: f.Get("no_body") != ""}
	hash, err := idem.ParseKeyHash(f.Get("hash"))
	if err != nil {
		plain(w, http.StatusBadRequest, "400 bad request: the resolve form names no key")
		return
	}
	// The page that posted: this key, again, with what happened.
	p := &page{Title: h.opts.Title, Hash: hash, Form: form}
	ctx := r.Context()
	keys, err := h.store.LookupKey(ctx, &idem.LookupKeyParams{KeyHash: hash})
	if err != nil && !errors.Is(err, idem.ErrNoSuchKey) {
		h.opts.Logger.WarnContext(ctx, "idemadmin: resolve: read the key table", "err", err)
		p.Refused = "The key table could not be read, so nothing was resolved; the server's log says why."
		h.show(w, r, p, http.StatusServiceUnavailable)
		return
	}
	var key *idem.KeyInfo
	for i := range keys {
		if h.tokenFor(f.Get("token"), actor, &keys[i]) {
			key = &keys[i]
			break
		}
	}
	if key == nil && len(keys) == 0 {
		p.Refused = "Nothing was resolved: the key is gone (someone resolved it as failed meanwhile, or it was purged)."
		h.show(w, r, p, http.StatusConflict)
		return
	}
	if key == nil {
		p.Refused = "Nothing was resolved: this form has expired, was made for another user, or its key is gone. Look the key up again and resolve it from its fresh page."
		h.show(w, r, p, http.StatusForbidden)
		return
	}
	// Show the key resolved (or not), of its tenant and operation alone.
	p.Tenant, p.Operation = key.Tenant, key.Operation
	params, msg := form.params(key, actor)
	if msg != "" {
		p.Refused = "Nothing was resolved: " + msg
		h.show(w, r, p, http.StatusBadRequest)
		return
	}
	switch err := h.store.Resolve(ctx, params); {
	case errors.Is(err, idem.ErrNotUncertain) || errors.Is(err, idem.ErrNoSuchKey):
		p.Refused = "Nothing was resolved: the key is no longer uncertain (someone or a reconciliation settled it meanwhile). Its history says how."
		h.show(w, r, p, http.StatusConflict)
		return
	case err != nil:
		h.opts.Logger.WarnContext(ctx, "idemadmin: resolve", "key_hash", hash, "err", err)
		p.Refused = "Nothing was resolved: the key table could not be written; the server's log says why."
		h.show(w, r, p, http.StatusServiceUnavailable)
		return
	}
	h.opts.Logger.InfoContext(ctx, "idemadmin: resolved an uncertain key", "key_hash", hash, "operation", key.Operation,
		"as", params.As.String(), "actor", actor)
	p.Form = resolveForm{}
	switch params.As {
	case idem.ResolveCompleted:
		p.Done = "Resolved as completed, by " + actor + ": every retry of this key now replays the outcome given. The key's history records who and why."
	case idem.ResolveFailed:
		p.Done = "Resolved as failed, by " + actor + ": the key was given back, and the next retry with it runs the operation anew. The key's history records who and why."
	}
	h.show(w, r, p, http.StatusOK)
}

// params checks the form and returns what Resolve is given, or why it cannot be.
func (f *resolveForm) params(k *idem.KeyInfo, actor string) (*idem.ResolveParams, string) {
	p := &idem.ResolveParams{Tenant: k.Tenant, Scope: k.Scope, Key: k.Key, Actor: actor, Evidence: f.Evidence}
	switch {
	case f.Evidence == "":
		return nil, "the evidence is required (the provider's record, a ticket): the key's history records why it was settled."
	case len(f.Evidence) > maxEvidence || !utf8.ValidString(f.Evidence):
		return nil, "the evidence is over " + strconv.Itoa(maxEvidence) + " bytes, or not text."
	}
	switch f.As {
	case "failed":
		p.As = idem.ResolveFailed
		return p, ""
	case "completed":
		p.As = idem.ResolveCompleted
	default:
		return nil, "choose completed (the provider acted) or failed (it has no record of the call)."
	}
	status, err := strconv.Atoi(f.Status)
	if err != nil || status < idem.MinResolvedStatus || status > idem.MaxResolvedStatus {
		return nil, "resolving as completed needs the HTTP status every retry will get as final (" +
			strconv.Itoa(idem.MinResolvedStatus) + " to " + strconv.Itoa(idem.MaxResolvedStatus) + ": never a 5xx)."
	}
	o := &idem.Outcome{Status: status}
	given := 0
	for _, set := range []bool{f.Body != "", f.Reference != "", f.NoBody} {
		if set {
			given++
		}
	}
	switch {
	case given != 1:
		return nil, "resolving as completed needs one of: the body retries replay, the reference (operations that store one), or “no body”."
	case f.ContentType != "" && f.Body == "":
		return nil, "a content type goes with a body."
	case f.NoBody && status != http.StatusNoContent && status != http.StatusNotModified:
		return nil, "a " + strconv.Itoa(status) + " answers with a body, which every retry would get empty: give the body the operation answers (or its reference); “no body” is for 204 and 304."
	case len(f.Reference) > maxReference:
		return nil, "the reference is over " + strconv.Itoa(maxReference) + " bytes."
	case f.ContentType != "":
		o.Header = http.Header{"Content-Type": {f.ContentType}}
		if mt, _, err := mime.ParseMediaType(f.ContentType); err != nil || !validMediaType(mt) || idem.CheckHeader(o.Header) != nil {
			return nil, "the content type is not a media type (application/json, say)."
		}
	}
	if f.Body != "" {
		o.Body = []byte(f.Body)
	}
	o.Reference = f.Reference
	p.Outcome = o
	return p, ""
}

// validMediaType reports a type/subtype (ParseMediaType takes a bare token too).
func validMediaType(mt string) bool {
	typ, sub, ok := strings.Cut(mt, "/")
	return ok && typ != "" && sub != ""
}
