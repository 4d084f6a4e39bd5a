// Package histapi is the payments example's HTTP layer generated with `history: true` on every
// idempotent operation (see idemgen.yaml: the example's spec with an override). The benchmark
// serves its createPayment as the server lease-history. Edit the example's spec, never the
// generated files.
package histapi

//go:generate go tool idemgen generate -c idemgen.yaml
