// Package txhistapi is the payments example's HTTP layer generated with `claim: transaction` and
// `history: true` on every idempotent operation (see idemgen.yaml: the example's spec with an
// override). The benchmark serves its createPayment as the server transaction-history. Edit the
// example's spec, never the generated files.
package txhistapi

//go:generate go tool idemgen generate -c idemgen.yaml
