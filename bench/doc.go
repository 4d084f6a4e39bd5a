// Package bench measures what idemgen's idempotency costs a request, end to end: the payments
// example (examples/payments) served over HTTP by eleven servers side by side, which differ only
// in what stands between the HTTP stack and the business work (no idempotency, hand-written
// peers, claim: lease, claim: transaction, the replay cache, and each claim mode with the key's
// durable history kept: x-idempotency history: true). Everything is in its test files:
// `make bench-http` runs BenchmarkHTTP, `make bench-instructions`, `make bench-compare` and
// `make bench-statements` run BenchmarkFirstHandler and BenchmarkReplayHandler under callgrind,
// and TestBenchServers checks that each server is what the table calls it.
// docs/performance.md says what each measures and how to read it.
//
// The transaction-mode server is the example's own (examples/payments/txapi: its spec generated
// with claim: transaction by a config override rather than a copy of the spec). The two history
// servers' packages are generated the same way, in bench/internal.
package bench
