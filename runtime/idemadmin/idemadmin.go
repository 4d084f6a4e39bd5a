// Package idemadmin is a read-only support page for the idempotency keys of runtime/idem: search
// a key by tenant and key (or by the key hash a log line prints) and see what happened to it,
// list the stale in-flight keys, and see the recent mismatches. It is an [http.Handler] that an
// application mounts behind its own authentication:
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
// The page is server-rendered HTML (html/template: every value is escaped), with no JavaScript
// and nothing loaded from elsewhere, under a Content-Security-Policy that allows only its own
// inline style and forms sent to itself. It answers only GET and HEAD, and never shows a stored
// body unless [Options.ShowBodies] says so (bodies may hold personal data). It links to keys by
// their hash, so a key never appears in a URL the page writes; Referrer-Policy no-referrer keeps a
// key typed into the search from leaving in a Referer header.
//
// It reads the key table through [idem.Store.LookupKey], [idem.Store.ListKeys] and
// [idem.Store.KeyStats]; the statistics and the stale list read the whole table, once per page
// view.
package idemadmin

import (
	"context"
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
}

// Handler is the support page. Create it with NewHandler.
type Handler struct {
	store *idem.Store
	opts  Options
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
	return &Handler{store: store, opts: o}
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
// recent mismatches.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", contentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusMethodNotAllowed)
		_, _ = w.Write([]byte("405 method not allowed: this page is read-only (GET, HEAD)\n"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()

	q := r.URL.Query()
	p := page{Title: h.opts.Title, Tenant: q.Get("tenant"), Key: q.Get("key"), Operation: q.Get("operation"), Hash: q.Get("hash"),
		ShowBodies: h.opts.ShowBodies, HasRecent: h.opts.Recent != nil}
	status := http.StatusOK
	if p.Key != "" || p.Hash != "" {
		p.Searched = true
		status = h.search(ctx, &p)
	}
	if st, err := h.store.KeyStats(ctx); err != nil {
		h.readFailed(ctx, &p, "key stats", err)
	} else {
		p.Stats = st
	}
	if stale, err := h.store.ListKeys(ctx, &idem.ListKeysParams{Stale: true, Limit: h.opts.StaleLimit}); err != nil {
		h.readFailed(ctx, &p, "stale keys", err)
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
	if err := pageTemplate.Execute(w, &p); err != nil {
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
	switch {
	case errors.Is(err, idem.ErrNoSuchKey):
		p.Notice = "No such key. It was never claimed, or its request failed and the key was released (a retry runs anew), or it expired and was purged."
		return http.StatusNotFound
	case err != nil:
		h.readFailed(ctx, p, "lookup", err)
		return http.StatusServiceUnavailable
	}
	for _, k := range keys {
		p.Results = append(p.Results, h.view(&k))
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
	Results, Stale                  []keyView
	Stats                           *idem.KeyStats
	Mismatches                      []Mismatch
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
}

type headerView struct{ Name, Value string }

func (h *Handler) view(k *idem.KeyInfo) keyView {
	v := keyView{KeyInfo: k, Link: hashLink(k.KeyHash)}
	switch {
	case k.Stale():
		v.StateNote = "stale: the lease ran out and its holder is gone; the next retry with the same request takes it over"
	case k.State == idem.KeyInFlight:
		v.StateNote = "its handler is running"
	}
	if k.Expired() {
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
	"since":    func(t, now time.Time) string { return now.Sub(t).Round(time.Second).String() },
	"hashLink": hashLink,
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
{{if .Searched}}
<h2>Result</h2>
{{if .Notice}}<p class="notice" id="notice">{{.Notice}}</p>{{end}}
{{range .Results}}
<table class="facts key" id="key-{{.KeyHash}}">
<tr><th>Key</th><td class="mono" data-fact="key">{{.Key}}</td></tr>
<tr><th>Tenant</th><td class="mono" data-fact="tenant">{{.Tenant}}</td></tr>
<tr><th>Operation</th><td data-fact="operation">{{.Operation}}</td></tr>
<tr><th>State</th><td><span class="state-{{.State}}" data-fact="state">{{.State}}</span>{{if .StateNote}} <span class="{{if .Stale}}stale{{else}}note{{end}}" data-fact="state-note">({{.StateNote}})</span>{{end}}</td></tr>
<tr><th>Attempts</th><td data-fact="attempts">{{.Attempt}}</td></tr>
<tr><th>Stored status</th><td data-fact="status">{{status .Status}}</td></tr>
<tr><th>Reference</th><td data-fact="reference">{{if .ReferenceURL}}<a href="{{.ReferenceURL}}" rel="noreferrer">{{.Reference}}</a>{{else if .Reference}}{{.Reference}}{{else}}—{{end}}</td></tr>
{{range .Headers}}<tr><th>Header</th><td class="mono" data-fact="header">{{.Name}}: {{.Value}}</td></tr>{{end}}
<tr><th>Body</th><td data-fact="body">{{if .BodyText}}<pre>{{.BodyText}}</pre>{{else if .BodyBinary}}{{.BodySize}} bytes, not text{{else if eq .BodySize 0}}none{{else}}{{.BodySize}} bytes (not shown: bodies may hold personal data){{end}}</td></tr>
<tr><th>Created</th><td data-fact="created">{{when .CreatedAt .Now}}</td></tr>
<tr><th>Completed</th><td data-fact="completed">{{when .CompletedAt .Now}}</td></tr>
<tr><th>Expires</th><td data-fact="expires">{{when .ExpiresAt .Now}}</td></tr>
{{if eq .State "in_flight"}}<tr><th>Lease expires</th><td data-fact="lease">{{when .LeaseExpiresAt .Now}}</td></tr>{{end}}
<tr><th>Key hash</th><td class="mono" data-fact="hash"><a href="{{.Link}}">{{.KeyHash}}</a></td></tr>
<tr><th>Scope</th><td class="mono" data-fact="scope">{{.Scope}}</td></tr>
<tr><th>Fingerprint</th><td class="mono" data-fact="fingerprint">{{.Fingerprint}}</td></tr>
</table>
{{end}}
{{end}}
{{with .Stats}}
<h2>Keys</h2>
<table id="stats">
<tr><th>Operation</th><th>In flight</th><th>Stale</th><th>Complete</th><th>Expired</th><th>Oldest in flight</th></tr>
{{$now := .Now}}{{range .Operations}}<tr><td>{{.Operation}}</td><td>{{.InFlight}}</td><td>{{.Stale}}</td><td>{{.Complete}}</td><td>{{.Expired}}</td><td>{{if .OldestInFlight.IsZero}}—{{else}}{{since .OldestInFlight $now}}{{end}}</td></tr>
{{end}}<tr><th>All</th><th>{{.Total.InFlight}}</th><th>{{.Total.Stale}}</th><th>{{.Total.Complete}}</th><th>{{.Total.Expired}}</th><th>{{if .Total.OldestInFlight.IsZero}}—{{else}}{{since .Total.OldestInFlight $now}}{{end}}</th></tr>
</table>
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
`
