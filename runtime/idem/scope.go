package idem

import (
	"context"
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

// ScopeString renders tenant and parts into the canonical scope stored in the table.
//
// Every string is written with its length in front ("4:acme|9:operation=13:createPayment"), so
// no tenant or value, whatever characters it holds, can make two different scopes render alike.
// Values PostgreSQL text cannot hold (NUL, invalid UTF-8) are written in hex behind an "x".
// The tenant is part of the scope so that keys of different tenants never meet, whatever the
// other parts are. It cannot serve as a distribution key (a hash of the whole scope scatters a
// tenant's keys): the table's tenant column, set from ClaimParams.Tenant, is that key.
func ScopeString(tenant string, parts []ScopePart) string {
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

// tenantColumn is tenant as the key table's tenant column holds it. PostgreSQL text holds
// neither NUL nor invalid UTF-8, so such a tenant goes in as "x" and hex. That form may equal
// another tenant's plain name; the two then share a shard, never a key: the scope keeps them
// apart.
func tenantColumn(tenant string) string {
	if utf8.ValidString(tenant) && strings.IndexByte(tenant, 0) < 0 {
		return tenant
	}
	return "x" + hex.EncodeToString([]byte(tenant))
}

type claimKey struct{}

func withClaim(ctx context.Context, c *Claim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}

// ClaimFromContext returns the claim that Serve or Do holds for the handler running with ctx:
// handlers use Claim.Key (the normalised key, quotes removed) to derive stable resource ids.
func ClaimFromContext(ctx context.Context) (*Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(*Claim)
	return c, ok
}
