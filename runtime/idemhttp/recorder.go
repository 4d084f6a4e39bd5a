package idemhttp

import (
	"bytes"
	"net/http"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Recorder is an http.ResponseWriter that captures a handler's response for storing.
// It behaves like net/http's writer: the first status wins, a Write without one means 200, and
// header changes after the status is written are not part of the response.
type Recorder struct {
	header http.Header
	status int
	// sent is the header as it was when the status was written: each name with a copy of its
	// values (the strings themselves are shared), most in sentRoom and valueRoom. sentHeader
	// compares it with the header map, and copies the map only when the handler changed it
	// afterwards: most handlers never touch the header after the status, and a copy of the map
	// per answer cost about 2,000 instructions.
	sent      []sentValues
	sentRoom  [4]sentValues
	valueRoom [4]string
	body      bytes.Buffer
	out       idem.Outcome // what take returns, allocated with the recorder
}

type sentValues struct {
	name   string
	values []string
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{header: make(http.Header)} }

// Header returns the header map that WriteHeader will capture.
func (r *Recorder) Header() http.Header { return r.header }

// WriteHeader records status and the header; later calls are ignored, as net/http does.
func (r *Recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
		r.sent = r.sentRoom[:0]
		values := r.valueRoom[:0]
		for name, vs := range r.header {
			i := len(values)
			values = append(values, vs...)
			r.sent = append(r.sent, sentValues{name, values[i:len(values):len(values)]})
		}
	}
}

// sentHeader is the header as it was when the status was written: the header map itself when it
// still holds exactly that (r.header is then no longer the recorder's alone), else a map of the
// values kept then.
func (r *Recorder) sentHeader() http.Header {
	if r.unchanged() {
		return r.header
	}
	h := make(http.Header, len(r.sent))
	for _, s := range r.sent {
		h[s.name] = s.values
	}
	return h
}

// unchanged says whether the header map holds the names and values it held when the status was
// written.
func (r *Recorder) unchanged() bool {
	if len(r.header) != len(r.sent) {
		return false
	}
	for _, s := range r.sent {
		values, ok := r.header[s.name]
		if !ok || len(values) != len(s.values) {
			return false
		}
		for i, v := range values {
			if v != s.values[i] {
				return false
			}
		}
	}
	return true
}

// Write appends to the recorded body (status 200 if none was written).
func (r *Recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// Flush does nothing: the response is stored whole. It lets handlers that flush run unchanged.
func (r *Recorder) Flush() {}

// Outcome returns what was written (status 200 if WriteHeader was never called): a copy, which
// later writes to the recorder do not change.
func (r *Recorder) Outcome() *idem.Outcome {
	if r.status == 0 {
		return &idem.Outcome{Status: http.StatusOK, Header: r.header.Clone(), Body: nil}
	}
	return &idem.Outcome{Status: r.status, Header: r.sentHeader().Clone(), Body: bytes.Clone(r.body.Bytes())}
}

// take is Outcome for a recorder nobody uses afterwards (Record's): the outcome gets the
// recorder's own header and its body's bytes, without copying them again.
// The outcome is the recorder's own (out), so it costs no allocation.
func (r *Recorder) take() *idem.Outcome {
	if r.status == 0 {
		r.out = idem.Outcome{Status: http.StatusOK, Header: r.header}
	} else {
		r.out = idem.Outcome{Status: r.status, Header: r.sentHeader(), Body: r.body.Bytes()}
	}
	return &r.out
}
