// Package benchtx is the payments example's HTTP layer generated with `claim: transaction`
// (see idemgen.yaml): the HTTP benchmark in examples/payments serves it, with a thin handler
// that calls the example's own business code, to measure the transaction claim mode beside the
// lease mode of package api. Edit ../../openapi.yaml and copy it here, never the generated files.
package benchtx

//go:generate go tool idemgen generate -c idemgen.yaml
