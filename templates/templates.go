// Package templates embeds the text/template sources of idemgen's generated code.
//
// idempotency.go.tmpl is shared by every router; each router's folder defines the pieces that
// differ between routers (today: how parameter-binding errors about a key header are answered).
package templates

import "embed"

// FS holds idempotency.go.tmpl and one folder per router.
//
//go:embed *.tmpl */*.tmpl
var FS embed.FS
