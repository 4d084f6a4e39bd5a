package idem

import (
	"bytes"
	"net/http"
)

// Recorder is an http.ResponseWriter that captures a handler's response for storing.
type Recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{header: make(http.Header)} }

// Header returns the header map that WriteHeader will capture.
func (r *Recorder) Header() http.Header { return r.header }

// WriteHeader records status; later calls are ignored, as net/http does.
func (r *Recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

// Write appends to the recorded body (status 200 if none was written).
func (r *Recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// Outcome returns what was written (status 200 if WriteHeader was never called).
func (r *Recorder) Outcome() *Outcome {
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	return &Outcome{Status: status, Header: r.header.Clone(), Body: bytes.Clone(r.body.Bytes())}
}
