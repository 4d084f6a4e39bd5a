package idem

import (
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// textEscape starts every stored string that is not stored as itself. It is U+0001: PostgreSQL
// text can hold it, and no real tenant, scope or key begins with it.
const textEscape = "\x01"

// storedText is s as the key table's text columns (tenant, scope, key, operation, fingerprint) hold it: s itself when
// it is PostgreSQL text (valid UTF-8 without NUL) and does not begin with U+0001; otherwise
// U+0001 followed by s's bytes in lowercase hex. The encoding is injective: two different
// strings never store alike, so distinct tenants never share a row, whatever bytes a caller
// passes. Text that begins with U+0001 is escaped too, because the escaped forms begin with it.
//
// Every statement about a key passes its tenant, scope, key, operation and fingerprint through it ([Claim.args], the
// replay check), and so does the notification payload ([notifyID]): callers that build a scope
// from parts (runtime/idemhttp) need no escaping of their own.
func storedText(s string) string {
	if !strings.HasPrefix(s, textEscape) && strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return s
	}
	return textEscape + hex.EncodeToString([]byte(s))
}

// fromStoredText is the inverse of [storedText], for readers of the table ([Store.LookupKey]):
// a column value that is not an escape is the string itself.
func fromStoredText(v string) string {
	if rest, ok := strings.CutPrefix(v, textEscape); ok {
		if b, err := hex.DecodeString(rest); err == nil {
			return string(b)
		}
	}
	return v
}
