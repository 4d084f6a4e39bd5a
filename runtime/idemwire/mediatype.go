package idemwire

import (
	"mime"
	"strings"
)

// MediaClass is how a request body of a media type is read, by the server's fingerprint and
// decoders alike: JSON canonically, a form field by field, multipart part by part, anything
// else as the bytes sent.
type MediaClass int

const (
	// MediaNone: no media type, or one that does not parse.
	MediaNone MediaClass = iota
	// MediaBytes: any other media type (text, binary, images…): the bytes themselves.
	MediaBytes
	// MediaJSON: application/json and any +json type (application/merge-patch+json, …).
	MediaJSON
	// MediaForm: application/x-www-form-urlencoded.
	MediaForm
	// MediaMultipart: multipart/*.
	MediaMultipart
)

// Decodable reports whether a typed body can be decoded from c: JSON, a form or multipart.
func (c MediaClass) Decodable() bool { return c == MediaJSON || c == MediaForm || c == MediaMultipart }

// ClassifyMediaType classifies a Content-Type (or a declared media type) as written, parameters
// and case included.
func ClassifyMediaType(contentType string) MediaClass {
	base, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return MediaNone
	}
	return MediaClassOf(base)
}

// MediaClassOf classifies a media type already parsed: lower-case, without parameters, as
// mime.ParseMediaType returns it.
func MediaClassOf(mt string) MediaClass {
	switch {
	case mt == "":
		return MediaNone
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return MediaJSON
	case mt == "application/x-www-form-urlencoded":
		return MediaForm
	case strings.HasPrefix(mt, "multipart/"):
		return MediaMultipart
	}
	return MediaBytes
}
