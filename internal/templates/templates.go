// Package templates embeds the text/template sources of idemgen's generated code.
//
// idempotency.go.tmpl is shared by every router; each router's folder defines its wiring and
// redefines the shared blocks it does differently. A router built on another (fiber-v3 on fiber,
// echo5 on echo) has a folder of overrides only, parsed after its base's (see generator's router
// table).
package templates

import "embed"

// FS holds idempotency.go.tmpl and one folder per router.
//
//go:embed *.tmpl */*.tmpl
var FS embed.FS
