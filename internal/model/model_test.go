package model

import "testing"

func TestClassifyMediaType(t *testing.T) {
	t.Parallel()
	for mt, want := range map[string]BodyKind{
		"application/json": BodyJSON, "application/json; charset=utf-8": BodyJSON,
		"application/merge-patch+json": BodyJSON, "application/*+json": BodyJSON,
		"application/x-www-form-urlencoded": BodyForm, "multipart/form-data": BodyMultipart,
		"multipart/mixed": BodyMultipart, "text/plain": BodyBytes, "application/octet-stream": BodyBytes,
		"not a media type;": BodyBytes,
	} {
		if got := ClassifyMediaType(mt); got != want {
			t.Errorf("ClassifyMediaType(%q) = %v; want %v", mt, got, want)
		}
	}
}
