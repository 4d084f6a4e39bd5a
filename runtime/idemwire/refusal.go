package idemwire

import (
	"net/http"
	"strings"
)

// HeaderRefusal names, on every problem the server answers, its problem code ("in-progress",
// "key-reused", "store-unavailable", …), whatever the body looks like: an RFC 9457 problem, or
// the API's own error format written by a renderer. A client reads what a retry can do about the
// answer from it, without knowing the API's error schema. Only the codes of this package's table
// are ever sent in it.
const HeaderRefusal = "Idempotency-Refusal"

// RefusalCode returns the problem code h names in [HeaderRefusal], or "" when it names none or
// one that is not of this package's table (a client then judges the answer otherwise).
func RefusalCode(h http.Header) string {
	code := strings.TrimSpace(h.Get(HeaderRefusal))
	if _, ok := lookup(code); !ok {
		return ""
	}
	return code
}
