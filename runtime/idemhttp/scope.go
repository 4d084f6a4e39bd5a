package idemhttp

import (
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ScopePart is one element of a key's scope besides the tenant (operation, header:X, path:p).
type ScopePart struct {
	Name  string // "operation", "header:X-Account", "path:cart_id"
	Value string
}

// scopeString renders tenant and parts into the canonical scope stored in the table.
//
// Every string is written with its length in front ("4:acme|9:operation=13:createPayment"), so
// no tenant or value, whatever characters it holds, can make two different scopes render alike.
// Values PostgreSQL text cannot hold (NUL, invalid UTF-8) are written in hex behind an "x".
// The tenant is part of the scope so that keys of different tenants never meet, whatever the
// other parts are. It cannot serve as a distribution key (a hash of the whole scope scatters a
// tenant's keys): the table's tenant column, set from the tenant alone, is that key.
func scopeString(tenant string, parts []ScopePart) string {
	var b strings.Builder
	lp := func(s string) {
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			// PostgreSQL text holds neither NUL nor invalid UTF-8: such a value goes in as hex,
			// marked with "x" so it can never read like a plain one.
			s = hex.EncodeToString([]byte(s))
			b.WriteByte('x')
		}
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	lp(tenant)
	for _, p := range parts {
		b.WriteByte('|')
		lp(p.Name)
		b.WriteByte('=')
		lp(p.Value)
	}
	return b.String()
}
