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
	sent   http.Header // header as it was when the status was written
	status int
	body   bytes.Buffer
	out    idem.Outcome // what take returns, allocated with the recorder
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{header: make(http.Header)} }

// Header returns the header map that WriteHeader will capture.
func (r *Recorder) Header() http.Header { return r.header }

// WriteHeader records status and the header; later calls are ignored, as net/http does.
func (r *Recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
		r.sent = r.header.Clone()
	}
}

// Write appends to the recorded body (status 200 if none was written).
func (r *Recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// Flush does nothing: the response is stored whole. It lets handlers that flush run unchanged.
func (r *Recorder) Flush() {}

// Outcome returns what was written (status 200 if WriteHeader was never called).
func (r *Recorder) Outcome() *idem.Outcome {
	if r.status == 0 {
		return &idem.Outcome{Status: http.StatusOK, Header: r.header.Clone(), Body: nil}
	}
	return &idem.Outcome{Status: r.status, Header: r.sent.Clone(), Body: bytes.Clone(r.body.Bytes())}
}

// take is Outcome for a recorder nobody uses afterwards (Record's): the outcome gets the
// recorder's own copy of the header and its body's bytes, without copying them again.
// The outcome is the recorder's own (out), so it costs no allocation.
func (r *Recorder) take() *idem.Outcome {
	if r.status == 0 {
		r.out = idem.Outcome{Status: http.StatusOK, Header: r.header}
	} else {
		r.out = idem.Outcome{Status: r.status, Header: r.sent, Body: r.body.Bytes()}
	}
	return &r.out
}
