// Package txapi is the payments example's HTTP layer generated with `claim: transaction` (see
// idemgen.yaml: the example's spec with an override). The example serves it when started with
// `-claim transaction` (claimmode.go), calling the same handlers as package api, and the
// benchmark (bench/) measures it beside package api's lease mode. Edit the example's spec, never
// the generated files.
package txapi

//go:generate go tool idemgen generate -c idemgen.yaml
