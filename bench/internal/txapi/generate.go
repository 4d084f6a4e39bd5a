// Package txapi is the payments example's HTTP layer generated with `claim: transaction` (see
// idemgen.yaml: the example's spec with an override): the benchmark serves it, with a thin
// handler that calls the example's own handlers, to measure the transaction claim mode beside
// the lease mode of the example's package api. Edit the example's spec, never the generated files.
package txapi

//go:generate go tool idemgen generate -c idemgen.yaml
