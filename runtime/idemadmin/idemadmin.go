// Package idemadmin is a support page for the idempotency keys of runtime/idem: search a key by
// tenant and key (or by the key hash a log line prints) and see what happened to it (its facts
// and its history, a timeline), list the stale in-flight keys, and see the recent mismatches.
// It is read-only unless the application opts in to its resolve form ([Options.Resolve]), which
// settles an uncertain key. It is an [http.Handler] that an application mounts behind its own
// authentication:
//
//	recent := idemadmin.NewRecent(0)
//	cfg.Observer = recent.Observer()            // or idemprom.Chain(metrics.Observer(), recent.Observer())
//	store, err := idem.NewStore(pool, cfg)
//	page := idemadmin.NewHandler(store, &idemadmin.Options{
//		Recent:        recent,
//		ReferenceURLs: map[string]string{"capturePayment": "/v1/payments/{reference}"},
//	})
//	mux.Handle("/admin/idempotency", requireAdmin(page))
//
// To let staff settle uncertain keys from the page, set [Options.Resolve] to a function that
// returns the signed-in user's name (the actor the key's history records), and
// [Options.TokenSecret] to a secret every process shares.
//
// The page is server-rendered HTML (html/template: every value is escaped), with no JavaScript
// and nothing loaded from elsewhere, under a Content-Security-Policy that allows only its own
// inline style and forms sent to itself. It answers only GET and HEAD (and, with Options.Resolve,
// the resolve form's POST), and never shows a stored body unless [Options.ShowBodies] says so
// (bodies may hold personal data). It links to keys by
// their hash, so a key never appears in a URL the page writes; Referrer-Policy no-referrer keeps a
// key typed into the search from leaving in a Referer header.
//
// It reads the key table through [idem.Store.LookupKey], [idem.Store.ListKeys],
// [idem.Store.KeyStats] and [idem.Store.History], and writes only through [idem.Store.Resolve];
// the statistics and the stale list read the whole table, once per page view.
package idemadmin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Options tune NewHandler; nil means defaults.
type Options struct {
	// Title heads the page; default "Idempotency keys".
	Title string
	// ReferenceURLs give, per operation (its operationId), the URL of the resource a stored
	// reference names; {reference} stands for the reference, path-escaped:
	// {"capturePayment": "/v1/payments/{reference}"}. Operations without one show the reference
	// as text.
	ReferenceURLs map[string]string
	// ShowBodies shows stored response bodies. Off by default: they may hold personal data.
	ShowBodies bool
	// Recent, when set, supplies the recent mismatches (see [Recent]).
	Recent *Recent
	// StaleLimit is how many stale in-flight keys are listed; default 20.
	StaleLimit int
	// Timeout bounds the page's reads of the key table; default 10s.
	Timeout time.Duration
	// Logger receives the errors the page does not show (a failed read); default slog.Default().
	Logger *slog.Logger

	// Resolve, when set, shows a resolve form on the page of an uncertain key, and accepts its
	// POST: settle the key as completed (with the outcome retries replay) or as failed (the next
	// retry runs anew), with the evidence, through [idem.Store.Resolve]. It returns who is
	// resolving (the actor the key's history records) for the request, which the application
	// has authenticated; "" means this user may look but not resolve (no form, and a POST is
	// refused). Nil, the default, keeps the page read-only.
	//
	// The POST is accepted only from the page itself: the browser must say the request is
	// same-origin (Sec-Fetch-Site, or an Origin naming the page's host), and the form must carry
	// the token the page put in it, bound to the key and the actor and valid for an hour
	// (ResolveTokenTTL). Its body is capped at MaxResolveForm bytes.
	Resolve func(r *http.Request) (actor string)
	// TokenSecret signs the resolve form's tokens (at least 32 bytes). By default each Handler
	// makes a random one, so a form rendered by one process is refused by another: behind a load
	// balancer without sticky sessions, give every process the same secret.
	TokenSecret []byte
}

// Handler is the support page. Create it with NewHandler.
type Handler struct {
	store  *idem.Store
	opts   Options
	secret []byte // signs the resolve form's tokens
	now    func() time.Time
}

// NewHandler returns the support page for store's key table. opts may be nil.
func NewHandler(store *idem.Store, opts *Options) *Handler {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Title == "" {
		o.Title = "Idempotency keys"
	}
	if o.StaleLimit <= 0 {
		o.StaleLimit = 20
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &Handler{store: store, opts: o, secret: o.TokenSecret, now: time.Now}
	if len(h.secret) < 32 {
		h.secret = make([]byte, 32)
		_, _ = rand.Read(h.secret) // crypto/rand.Read never fails
	}
	return h
}

// contentSecurityPolicy allows nothing but the page's own inline style (by its hash) and forms
// that submit to the page itself.
var contentSecurityPolicy = "default-src 'none'; style-src 'sha256-" + styleHash() + "'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func styleHash() string {
	sum := sha256.Sum256([]byte(style))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// ServeHTTP renders the page. The query selects what is shown: tenant, key and operation, or
// hash; without them the page shows the search form, the statistics, the stale keys and the
// recent mismatches. With Options.Resolve, a POST is the resolve form (see Options.Resolve).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", contentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cache-Control", "no-store")
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
	case r.Method == http.MethodPost && h.opts.Resolve != nil:
		h.resolve(w, r)
		return
	case h.opts.Resolve != nil:
		hdr.Set("Allow", "GET, HEAD, POST")
		plain(w, http.StatusMethodNotAllowed, "405 method not allowed: this page answers GET and HEAD, and POST for its resolve form")
		return
	default:
		hdr.Set("Allow", "GET, HEAD")
		plain(w, http.StatusMethodNotAllowed, "405 method not allowed: this page is read-only (GET, HEAD)")
		return
	}
	q := r.URL.Query()
	p := page{Title: h.opts.Title, Tenant: q.Get("tenant"), Key: q.Get("key"), Operation: q.Get("operation"), Hash: q.Get("hash")}
	h.show(w, r, &p, http.StatusOK)
}

// plain answers with a one-line text message.
func plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg + "\n"))
}

// show renders the page p asks for, with status unless a search or a read decides otherwise.
func (h *Handler) show(w http.ResponseWriter, r *http.Request, p *page, status int) {
	hdr := w.Header()
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	p.ShowBodies, p.HasRecent = h.opts.ShowBodies, h.opts.Recent != nil
	if h.opts.Resolve != nil {
		p.Actor = h.opts.Resolve(r)
	}
	if p.Key != "" || p.Hash != "" {
		p.Searched = true
		st := h.search(ctx, p)
		switch {
		case p.Done != "" && st == http.StatusNotFound:
			p.Notice = "" // resolved as failed: the key row is gone, as it should be
		case status == http.StatusOK:
			status = st
		}
	}
	if st, err := h.store.KeyStats(ctx); err != nil {
		h.readFailed(ctx, p, "key stats", err)
	} else {
		p.Stats = st
	}
	if stale, err := h.store.ListKeys(ctx, &idem.ListKeysParams{Stale: true, Limit: h.opts.StaleLimit}); err != nil {
		h.readFailed(ctx, p, "stale keys", err)
	} else {
		for _, k := range stale {
			p.Stale = append(p.Stale, h.view(&k))
		}
	}
	if h.opts.Recent != nil {
		p.Mismatches = h.opts.Recent.Mismatches()
	}
	if p.Error != "" && status == http.StatusOK {
		status = http.StatusServiceUnavailable
	}
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := pageTemplate.Execute(w, p); err != nil {
		h.opts.Logger.WarnContext(ctx, "idemadmin: render the page", "err", err)
	}
}

// search fills p's results and returns the page's status.
func (h *Handler) search(ctx context.Context, p *page) int {
	lp := &idem.LookupKeyParams{Key: p.Key, Operation: p.Operation, IncludeBody: h.opts.ShowBodies}
	if p.Hash != "" {
		if p.Key != "" {
			p.Notice = "Search by tenant and key, or by key hash, not both."
			return http.StatusBadRequest
		}
		h, err := idem.ParseKeyHash(p.Hash)
		if err != nil {
			p.Notice = "That is not a key hash: a log line prints it after key_hash=, as 16 hex digits."
			return http.StatusBadRequest
		}
		lp.KeyHash, lp.Key = h, ""
	}
	// An empty tenant field searches every tenant (a form always sends the field).
	if p.Tenant != "" {
		lp.Tenant = &p.Tenant
	}
	keys, err := h.store.LookupKey(ctx, lp)
	if errors.Is(err, idem.ErrNoSuchKey) {
		// No row: a key whose history is kept longer than the key is shown, as gone. (A table
		// without a history, before migration 6, has nothing more to say.)
		if gone, gerr := h.store.GoneKeys(ctx, lp); gerr == nil && len(gone) > 0 {
			keys, err = gone, nil
		}
	}
	switch {
	case errors.Is(err, idem.ErrNoSuchKey):
		p.Notice = "No such key. It was never claimed, or its request failed and the key was released (a retry runs anew), or it expired and was purged."
		return http.StatusNotFound
	case err != nil:
		h.readFailed(ctx, p, "lookup", err)
		return http.StatusServiceUnavailable
	}
	for _, k := range keys {
		v := h.view(&k)
		events, err := h.store.History(ctx, k.Tenant, k.Scope, k.Key)
		if err != nil {
			h.readFailed(ctx, p, "history", err)
			return http.StatusServiceUnavailable
		}
		for _, ev := range events {
			v.History = append(v.History, newEventView(&ev, k.Operation))
		}
		if k.State == idem.KeyUncertain && p.Actor != "" {
			v.ResolveToken = h.token(h.now().Add(ResolveTokenTTL), p.Actor, &k)
		}
		p.Results = append(p.Results, v)
	}
	return http.StatusOK
}

// readFailed logs err and puts a message without the database's text on the page.
func (h *Handler) readFailed(ctx context.Context, p *page, what string, err error) {
	h.opts.Logger.WarnContext(ctx, "idemadmin: read the key table", "what", what, "err", err)
	p.Error = "The key table could not be read; the server's log says why."
}

type page struct {
	Title                           string
	Tenant, Key, Operation, Hash    string
	Searched, ShowBodies, HasRecent bool
	Notice, Error                   string
	// Actor is who may resolve uncertain keys on this page ("": nobody, the page is read-only).
	Actor string
	// Done says what the resolve form just did; Refused why it did not.
	Done, Refused string
	// Form is what a refused resolve form held, to fill it again.
	Form           resolveForm
	Results, Stale []keyView
	Stats          *idem.KeyStats
	Mismatches     []Mismatch
}

// keyView is a key as the template prints it: every value still raw, for html/template to
// escape, except the link URLs, which are built here from escaped parts.
type keyView struct {
	*idem.KeyInfo
	StateNote    string
	Link         string // ?hash=…, this key's own page
	ReferenceURL string // the resource, when Options.ReferenceURLs has the operation
	Headers      []headerView
	BodyText     string // the body, when shown and text
	BodyBinary   bool
	History      []eventView
	// ResolveToken is the resolve form's token, set when the key is uncertain and the page's
	// user may resolve it.
	ResolveToken string
}

// eventView is one history event as the timeline prints it: raw values, for html/template to
// escape.
type eventView struct {
	idem.HistoryEvent
	Meaning string // what the kind means, in words
	Details string // what the event carries besides its time, kind, attempt and status
}

// eventMeanings say what each kind of history event means, for the timeline.
var eventMeanings = map[idem.EventKind]string{
	idem.EventAcquired:       "claimed: the handler runs",
	idem.EventTakenOver:      "taken over: the previous holder's lease ran out (it crashed or lost the database)",
	idem.EventReplayed:       "the stored outcome was replayed",
	idem.EventInProgress:     "a duplicate was answered in-progress",
	idem.EventKeyReused:      "refused: the key came with a different request",
	idem.EventCompleted:      "completed: the outcome committed with the work",
	idem.EventLeaseLost:      "the holder lost its lease: its work rolled back",
	idem.EventReleased:       "released: the work rolled back, a retry runs anew",
	idem.EventHandlerTimeout: "the handler ran out of time: its work rolled back",
	idem.EventHandlerFailed:  "the handler failed: its work rolled back",
	idem.EventProviderCall:   "the provider was called",
	idem.EventUncertain:      "uncertain: lost after a provider call",
	idem.EventResolved:       "resolved by an operator",
}

func newEventView(ev *idem.HistoryEvent, op string) eventView {
	v := eventView{HistoryEvent: *ev, Meaning: eventMeanings[ev.Kind]}
	var parts []string
	if ev.Operation != "" && ev.Operation != op {
		parts = append(parts, "operation "+ev.Operation)
	}
	if ev.Resolution != 0 {
		parts = append(parts, "as "+ev.Resolution.String())
	}
	if ev.Detail != "" {
		parts = append(parts, ev.Detail)
	}
	if ev.Actor != "" {
		parts = append(parts, "by "+ev.Actor)
	}
	if ev.Provider != "" || ev.ProviderKey != "" {
		p := "provider " + ev.Provider
		if ev.ProviderKey != "" {
			p += ", key " + ev.ProviderKey
		}
		parts = append(parts, p)
	}
	if ev.Amount != 0 || ev.Currency != "" {
		parts = append(parts, strconv.FormatInt(ev.Amount, 10)+" "+ev.Currency+" (minor units)")
	}
	switch {
	case ev.Replays == 1 && ev.Kind == idem.EventKeyReused:
		parts = append(parts, "1 retry refused")
	case ev.Replays > 0 && ev.Kind == idem.EventKeyReused:
		parts = append(parts, strconv.Itoa(ev.Replays)+" retries refused")
	case ev.Replays > 0:
		parts = append(parts, strconv.Itoa(ev.Replays)+" replays")
	}
	v.Details = strings.Join(parts, "; ")
	return v
}

type headerView struct{ Name, Value string }

func (h *Handler) view(k *idem.KeyInfo) keyView {
	v := keyView{KeyInfo: k, Link: hashLink(k.KeyHash)}
	switch {
	case k.Stale():
		v.StateNote = "stale: the lease ran out and its holder is gone; the next retry with the same request takes it over"
	case k.State == idem.KeyInFlight:
		v.StateNote = "its handler is running"
	case k.State == idem.KeyUncertain:
		v.StateNote = "an attempt was lost after it called its provider, which may have acted: retries are refused until the key is settled, as completed or as failed, after checking the provider's records"
	case k.State == idem.KeyGone:
		v.StateNote = "no key row any more: released after a failure so a retry runs anew, resolved as failed, or expired and purged; its history is kept"
		return v
	}
	if k.Expired() && k.State != idem.KeyUncertain {
		v.StateNote = strings.TrimPrefix(v.StateNote+"; expired: behaves as a new key until purged", "; ")
	}
	if tmpl, ok := h.opts.ReferenceURLs[k.Operation]; ok && k.Reference != "" {
		v.ReferenceURL = strings.ReplaceAll(tmpl, "{reference}", url.PathEscape(k.Reference))
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range k.Header {
			if !yield(n) {
				return
			}
		}
	}) {
		for _, val := range k.Header[name] {
			v.Headers = append(v.Headers, headerView{name, val})
		}
	}
	if h.opts.ShowBodies && k.Body != nil {
		if utf8.Valid(k.Body) {
			v.BodyText = string(k.Body)
		} else {
			v.BodyBinary = true
		}
	}
	return v
}

// resolveArgs are the resolve form template's: the key and the page.
type resolveArgs struct {
	Key  keyView
	Page *page
}

func hashLink(hash string) string { return "?" + url.Values{"hash": {hash}}.Encode() }

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"when": func(t, now time.Time) string {
		if t.IsZero() {
			return "—"
		}
		d := now.Sub(t).Round(time.Second)
		rel := d.String() + " ago"
		if d < 0 {
			rel = "in " + (-d).String()
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC") + " (" + rel + ")"
	},
	"since":       func(t, now time.Time) string { return now.Sub(t).Round(time.Second).String() },
	"hashLink":    hashLink,
	"resolveArgs": func(k keyView, p *page) resolveArgs { return resolveArgs{Key: k, Page: p} },
	"status": func(code int) string {
		if code == 0 {
			return "—"
		}
		return strconv.Itoa(code) + " " + http.StatusText(code)
	},
}).Parse(pageHTML))

// style is the page's only style, allowed by its hash in the Content-Security-Policy.
const style = `
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem auto;max-width:72rem;padding:0 1rem;color:#1b1f24;background:#fff}
h1{font-size:1.4rem;margin:0 0 1rem}h2{font-size:1.1rem;margin:1.6rem 0 .5rem;border-bottom:1px solid #d0d7de;padding-bottom:.2rem}
form{display:flex;flex-wrap:wrap;gap:.5rem;align-items:end;background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.75rem}
label{display:flex;flex-direction:column;font-size:.8rem;color:#57606a}input{font:inherit;padding:.25rem .4rem;min-width:11rem}
button{font:inherit;padding:.3rem .9rem}table{border-collapse:collapse;width:100%;margin:.3rem 0}
th,td{text-align:left;vertical-align:top;padding:.25rem .6rem;border-bottom:1px solid #eaeef2}
table.facts th{width:11rem;color:#57606a;font-weight:600}code,.mono{font-family:ui-monospace,monospace;font-size:.92em;word-break:break-all}
.state-complete{color:#116329;font-weight:600}.state-in_flight{color:#9a6700;font-weight:600}.stale{color:#cf222e;font-weight:600}
.state-uncertain{color:#fff;background:#cf222e;font-weight:700;padding:0 .4rem;border-radius:3px;text-transform:uppercase}
h3{font-size:1rem;margin:.8rem 0 .3rem}table.history td:first-child{white-space:nowrap}.ev-uncertain td,.ev-key_reused td{color:#cf222e}
.ev-resolved td{color:#116329;font-weight:600}.done{background:#dafbe1;border:1px solid #4ac26b;padding:.5rem .75rem;border-radius:6px}
form.resolve{display:block;border-color:#cf222e;background:#fff5f5}form.resolve fieldset{border:0;padding:0;margin:0 0 .6rem;display:flex;flex-wrap:wrap;gap:.5rem;align-items:end}
form.resolve legend{font-weight:600;margin-bottom:.3rem}textarea{font:inherit;min-width:24rem;min-height:3.5rem}
label.choice{flex-direction:row;gap:.3rem;align-items:center;color:#1b1f24;font-size:.9rem}input[type=radio],input[type=checkbox]{min-width:0}
.note{color:#57606a}.notice{background:#fff8c5;border:1px solid #d4a72c;padding:.5rem .75rem;border-radius:6px}
.error{background:#ffebe9;border:1px solid #ff8182;padding:.5rem .75rem;border-radius:6px}.key{margin-bottom:1rem}
pre{white-space:pre-wrap;word-break:break-all;background:#f6f8fa;padding:.5rem;margin:0}
`

const pageHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{{.Title}}</title>
<style>` + style + `</style>
</head>
<body>
<h1>{{.Title}}</h1>
<form method="get" action="">
<label>Tenant<input name="tenant" value="{{.Tenant}}" placeholder="any tenant"></label>
<label>Idempotency key<input name="key" value="{{.Key}}"></label>
<label>Operation<input name="operation" value="{{.Operation}}" placeholder="any operation"></label>
<label>or key hash (from a log line)<input name="hash" value="{{.Hash}}" placeholder="16 hex digits"></label>
<button type="submit">Look up</button>
</form>
{{if .Error}}<p class="error" id="error">{{.Error}}</p>{{end}}
{{if .Done}}<p class="done" id="done">{{.Done}}</p>{{end}}
{{if .Refused}}<p class="error" id="refused">{{.Refused}}</p>{{end}}
{{if .Searched}}
<h2>Result</h2>
{{if .Notice}}<p class="notice" id="notice">{{.Notice}}</p>{{end}}
{{range .Results}}
<table class="facts key" id="key-{{.KeyHash}}">
<tr><th>Key</th><td class="mono" data-fact="key">{{.Key}}</td></tr>
<tr><th>Tenant</th><td class="mono" data-fact="tenant">{{.Tenant}}</td></tr>
<tr><th>Operation</th><td data-fact="operation">{{.Operation}}</td></tr>
<tr><th>State</th><td><span class="state-{{.State}}" data-fact="state">{{.State}}</span>{{if .StateNote}} <span class="{{if or .Stale (eq .State "uncertain")}}stale{{else}}note{{end}}" data-fact="state-note">({{.StateNote}})</span>{{end}}</td></tr>
{{if eq .State "gone"}}<tr><th>First seen</th><td data-fact="created">{{.CreatedAt.UTC.Format "2006-01-02 15:04:05.000 UTC"}}</td></tr>
{{else}}<tr><th>Attempts</th><td data-fact="attempts">{{.Attempt}}</td></tr>
<tr><th>Stored status</th><td data-fact="status">{{status .Status}}</td></tr>
<tr><th>Reference</th><td data-fact="reference">{{if .ReferenceURL}}<a href="{{.ReferenceURL}}" rel="noreferrer">{{.Reference}}</a>{{else if .Reference}}{{.Reference}}{{else}}—{{end}}</td></tr>
{{range .Headers}}<tr><th>Header</th><td class="mono" data-fact="header">{{.Name}}: {{.Value}}</td></tr>{{end}}
<tr><th>Body</th><td data-fact="body">{{if .BodyText}}<pre>{{.BodyText}}</pre>{{else if .BodyBinary}}{{.BodySize}} bytes, not text{{else if eq .BodySize 0}}none{{else}}{{.BodySize}} bytes (not shown: bodies may hold personal data){{end}}</td></tr>
<tr><th>Created</th><td data-fact="created">{{when .CreatedAt .Now}}</td></tr>
<tr><th>Completed</th><td data-fact="completed">{{when .CompletedAt .Now}}</td></tr>
<tr><th>Expires</th><td data-fact="expires">{{if eq .State "uncertain"}}not until it is settled{{else}}{{when .ExpiresAt .Now}}{{end}}</td></tr>
{{if eq .State "in_flight"}}<tr><th>Lease expires</th><td data-fact="lease">{{when .LeaseExpiresAt .Now}}</td></tr>{{end}}
{{end}}<tr><th>Key hash</th><td class="mono" data-fact="hash"><a href="{{.Link}}">{{.KeyHash}}</a></td></tr>
<tr><th>Scope</th><td class="mono" data-fact="scope">{{.Scope}}</td></tr>
{{if ne .State "gone"}}<tr><th>Fingerprint</th><td class="mono" data-fact="fingerprint">{{.Fingerprint}}</td></tr>{{end}}
</table>
<h3>History</h3>
{{if .History}}<table class="history" id="history-{{.KeyHash}}">
<tr><th>Time</th><th>Event</th><th>Attempt</th><th>Status</th><th>Details</th></tr>
{{range .History}}<tr class="ev-{{.Kind}}"><td>{{.At.UTC.Format "2006-01-02 15:04:05.000 UTC"}}</td><td><span data-event="kind">{{.Kind}}</span>{{with .Meaning}}<br><span class="note">{{.}}</span>{{end}}</td><td>{{if .Attempt}}{{.Attempt}}{{else}}—{{end}}</td><td>{{status .Status}}</td><td data-event="details">{{.Details}}</td></tr>
{{end}}</table>{{else}}<p class="note" data-fact="history">None recorded: the operation keeps no history (the application turns it on per operation, and it is always on for those uncertain on loss), or its events are older than the history retention (120 days by default).</p>{{end}}
{{if .ResolveToken}}{{template "resolve" (resolveArgs . $)}}{{end}}
{{end}}
{{end}}
{{with .Stats}}
<h2>Keys</h2>
<table id="stats">
<tr><th>Operation</th><th>In flight</th><th>Stale</th><th>Complete</th><th>Expired</th><th>Oldest in flight</th><th>Uncertain</th><th>Oldest uncertain</th></tr>
{{$now := .Now}}{{range .Operations}}<tr><td>{{.Operation}}</td><td>{{.InFlight}}</td><td>{{.Stale}}</td><td>{{.Complete}}</td><td>{{.Expired}}</td><td>{{if .OldestInFlight.IsZero}}—{{else}}{{since .OldestInFlight $now}}{{end}}</td><td{{if .Uncertain}} class="stale"{{end}}>{{.Uncertain}}</td><td>{{if .OldestUncertain.IsZero}}—{{else}}{{since .OldestUncertain $now}}{{end}}</td></tr>
{{end}}<tr><th>All</th><th>{{.Total.InFlight}}</th><th>{{.Total.Stale}}</th><th>{{.Total.Complete}}</th><th>{{.Total.Expired}}</th><th>{{if .Total.OldestInFlight.IsZero}}—{{else}}{{since .Total.OldestInFlight $now}}{{end}}</th><th>{{.Total.Uncertain}}</th><th>{{if .Total.OldestUncertain.IsZero}}—{{else}}{{since .Total.OldestUncertain $now}}{{end}}</th></tr>
</table>
{{if .Total.Uncertain}}<p class="note">Uncertain keys wait for an operator: find them with <code>idemgen keys list --state uncertain</code>, check the provider's records, and resolve each from its page here or with <code>idemgen keys resolve</code>.</p>{{end}}
{{end}}
<h2>Stale in-flight keys</h2>
<p class="note">In flight with their lease run out: the process that held them stopped (crashed, or lost the database). A retry with the same request takes such a key over; any other request with it gets in-progress until it expires.</p>
{{if .Stale}}<table id="stale">
<tr><th>Created</th><th>Operation</th><th>Tenant</th><th>Key</th><th>Attempts</th><th>Lease ran out</th></tr>
{{range .Stale}}<tr><td>{{when .CreatedAt .Now}}</td><td>{{.Operation}}</td><td class="mono">{{.Tenant}}</td><td class="mono"><a href="{{.Link}}">{{.Key}}</a></td><td>{{.Attempt}}</td><td>{{since .LeaseExpiresAt .Now}} ago</td></tr>
{{end}}</table>{{else}}<p id="stale">None.</p>{{end}}
<h2>Recent mismatches</h2>
{{if .HasRecent}}<p class="note">Requests that came with a key already used for a different request, as this server process saw them (newest first; kept in memory, per process).</p>
{{if .Mismatches}}<table id="mismatches">
<tr><th>When</th><th>Operation</th><th>Key hash</th></tr>
{{range .Mismatches}}<tr><td>{{.At.UTC.Format "2006-01-02 15:04:05 UTC"}}</td><td>{{.Operation}}</td><td class="mono"><a href="{{hashLink .KeyHash}}">{{.KeyHash}}</a></td></tr>
{{end}}</table>{{else}}<p id="mismatches">None since this process started.</p>{{end}}
{{else}}<p class="note" id="mismatches">Not recorded: the application passes no idemadmin.Recent.</p>{{end}}
</body>
</html>
{{define "resolve"}}{{$k := .Key}}{{$f := .Page.Form}}
<form method="post" action="" class="resolve" id="resolve-{{$k.KeyHash}}">
<input type="hidden" name="hash" value="{{$k.KeyHash}}"><input type="hidden" name="token" value="{{$k.ResolveToken}}">
<fieldset><legend>Resolve this uncertain key, as {{.Page.Actor}}</legend>
<p class="note">Check the provider's records for the call above first. <b>Completed</b>: the provider acted; the key becomes complete and every retry replays the outcome given here. <b>Failed</b>: the provider has no record of the call; the key is given back and the next retry runs anew.</p>
</fieldset>
<fieldset>
<label class="choice"><input type="radio" name="as" value="completed" required{{if eq $f.As "completed"}} checked{{end}}> completed</label>
<label class="choice"><input type="radio" name="as" value="failed"{{if eq $f.As "failed"}} checked{{end}}> failed</label>
<label>Evidence (the provider's record, a ticket)<textarea name="evidence" required maxlength="4000">{{$f.Evidence}}</textarea></label>
</fieldset>
<fieldset><legend>Outcome retries replay (completed only)</legend>
<label>Status<input name="status" inputmode="numeric" value="{{$f.Status}}" placeholder="201"></label>
<label>Content type<input name="content_type" value="{{$f.ContentType}}" placeholder="application/json"></label>
<label>Body<textarea name="body">{{$f.Body}}</textarea></label>
<label>or reference<input name="reference" value="{{$f.Reference}}"></label>
<label class="choice"><input type="checkbox" name="no_body" value="1"{{if $f.NoBody}} checked{{end}}> no body</label>
</fieldset>
<button type="submit">Resolve</button>
</form>{{end}}
`
