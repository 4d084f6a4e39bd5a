package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// DefaultMaxRequestBody is the largest request body Capture reads when given no limit: 1 MiB.
const DefaultMaxRequestBody = 1 << 20

// Body is a request body as the client sent it, kept for the fingerprint.
type Body struct {
	ContentType string // the request's Content-Type header
	Bytes       []byte

	// Set by CaptureFor: where refusals are logged and how they are written, and the request
	// (its method, path and headers) as the capture saw it.
	log          *refusalLog
	method, path string
	req          *http.Request
	// print is the fingerprint the edge computed for this body (edge.params), which the
	// handler's own (Op.request) reuses when it frames the same parts before it.
	print bodyPrint
}

// bodyPrint is a request's fingerprint as the edge computed it: the policy it was computed
// under, the frames before the body, the body it then framed (its bytes and media type) and
// the sum.
type bodyPrint struct {
	p           *Policy
	framed      []byte
	bytes       []byte
	contentType string
	sum         string
}

// reuse is the fingerprint of b under p whose frames before the body are framed, when b's
// edge computed it (ok), so that it need not be hashed again: the same policy (so the same
// route and exclusions), the same frames, and the very bytes and media type it framed.
func (b *Body) reuse(p *Policy, framed []byte) (sum string, ok bool) {
	e := &b.print
	if e.p != p || e.p == nil || framed == nil || !bytes.Equal(framed, e.framed) || e.contentType != b.ContentType ||
		len(e.bytes) != len(b.Bytes) || len(b.Bytes) > 0 && &e.bytes[0] != &b.Bytes[0] {
		return "", false
	}
	return e.sum, true
}

type bodyKey struct{}

// WithBody returns ctx carrying b, the request's body as sent. Capture does this for handlers
// on net/http; an adapter for a framework that buffers the body itself (fiber, iris) calls it
// with the framework's copy.
func WithBody(ctx context.Context, b *Body) context.Context {
	return context.WithValue(ctx, bodyKey{}, b)
}

// BodyFromContext returns the body WithBody (or Capture) put in ctx.
func BodyFromContext(ctx context.Context) (*Body, bool) {
	b, ok := ctx.Value(bodyKey{}).(*Body)
	return b, ok
}

// Capture returns middleware that reads each request's body whole before the router and
// oapi-codegen's binding see it, keeps the bytes in the request's context (BodyFromContext)
// so that the fingerprint covers exactly what the client sent, and hands the rest of the chain a
// fresh reader over the same bytes. A body over max bytes (DefaultMaxRequestBody when max <= 0)
// is answered 413 with a body-too-large problem, before any key is claimed; so is a body that
// declares a Content-Length over max. Memory per request is bounded by max.
func Capture(max int64) func(http.Handler) http.Handler {
	return capture(max, nil)
}

// capture is Capture; log, when set, is CaptureFor's.
func capture(max int64, log *refusalLog) func(http.Handler) http.Handler {
	if max <= 0 {
		max = DefaultMaxRequestBody
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			refuse := func(p *Problem) {
				if log != nil {
					log.refused(r.Context(), nil, r.Method, r.URL.Path, p)
					_ = log.render(w, r, nil, p)
					return
				}
				_ = p.WriteTo(w)
			}
			if r.ContentLength > max {
				refuse(problemBodyTooLarge(max))
				return
			}
			raw, err := readBody(r.Body, r.ContentLength, max)
			if err == nil && int64(len(raw)) > max {
				refuse(problemBodyTooLarge(max))
				return
			}
			if err != nil {
				// The client stopped sending (a reset, a read deadline): nothing to answer it
				// with that it would read, but say so for whoever is still there.
				refuse(newProblem(http.StatusBadRequest, CodeBodyInvalid,
					"the request body could not be read to its end: send it again, whole"))
				return
			}
			_ = r.Body.Close()
			ct := r.Header.Get("Content-Type")
			c := &captured{body: Body{ContentType: ct, Bytes: raw, log: log, method: r.Method, path: r.URL.Path, req: r}}
			c.reader.r.Reset(raw)
			r.Body = &c.reader
			if log != nil && log.bindsTwice(r.Method, r.URL.Path, ct) {
				if v, ok := decodeJSON(raw); ok {
					r.Body = valuedBody{ReadCloser: r.Body, value: v}
				}
			}
			ctx := WithBody(r.Context(), &c.body)
			if log != nil && log.edge != nil && log.edge.serve(ctx, w, r, &c.body, next) {
				return // claimed before the router: a replay answered, or next served with the claim
			}
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// readBody is io.ReadAll(io.LimitReader(body, max+1)): the body whole, or its first max+1 bytes
// when it is longer (one byte more than max says it is too large). Its buffer starts at the
// declared length (plus the byte that finds the end) when there is one below 512 bytes, and grows
// as io.ReadAll's does, so a small body costs one small allocation (io.ReadAll makes 512 bytes,
// and LimitReader one more).
func readBody(body io.Reader, length, max int64) ([]byte, error) {
	size := int64(512)
	if length >= 0 && length < size {
		size = length + 1
	}
	limit := max + 1 // the byte past max, which says the body is too large
	if limit < max {
		limit = max // max is math.MaxInt64: max+1 would overflow, and no body is longer
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // room to read into, as io.ReadAll makes it
		}
		room := b[len(b):cap(b)]
		if left := limit - int64(len(b)); int64(len(room)) > left {
			room = room[:left]
		}
		n, err := body.Read(room)
		b = b[:len(b)+n]
		switch {
		case err == io.EOF, int64(len(b)) > max:
			return b, nil
		case err != nil:
			return b, err
		}
	}
}

// capturedBody is the request body handed on after Capture read it: io.NopCloser(bytes.NewReader)
// (the same methods: Read, WriteTo, Close) in one allocation.
type capturedBody struct{ r bytes.Reader }

// captured is what Capture keeps of a request: the Body in its context and the reader handed
// on, in one allocation.
type captured struct {
	body   Body
	reader capturedBody
}

func (b *capturedBody) Read(p []byte) (int, error)         { return b.r.Read(p) }
func (b *capturedBody) WriteTo(w io.Writer) (int64, error) { return b.r.WriteTo(w) }
func (b *capturedBody) Close() error                       { return nil }

// errNoBody is Handle's error for an operation with a body whose request was not captured.
var errNoBody = errors.New("idem: the request body was not captured for the fingerprint: serve the API through the generated NewIdempotentHandler, or wrap it in idemhttp.Capture")

// problemNotCaptured answers a request whose body was not captured: the server's wiring is at
// fault, not the client, and nothing was claimed, so a retry after the fix runs normally.
func problemNotCaptured() *Problem {
	return newProblem(http.StatusInternalServerError, CodeInternal,
		"this server is wired without the request body capture its idempotent operations need, so it changed nothing: "+
			"its operator must serve the API through the generated NewIdempotentHandler or RegisterIdempotentHandlers (or wrap it in idemhttp.Capture)")
}

func problemBodyTooLarge(max int64) *Problem {
	return newProblem(http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
		fmt.Sprintf("the request body is larger than this API accepts (%d bytes): send a smaller one", max))
}
