package idem

import (
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

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
