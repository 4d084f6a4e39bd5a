// Package idemhttp is the HTTP side of idemgen's runtime, what generated code calls: each
// operation's resolved x-idempotency (Policy), key parsing (ParseKey), RFC 9457 problems,
// recording a response (Recorder, Record) and replaying it (Result.WriteTo, ReplayWriter), and
// Handle, the whole idempotent request of one typed operation.
//
// Applications rarely import it: they build an idem.Store and wire the generated
// NewIdempotentServer. Serve is for a route wired by hand (see ExampleServe).
//
// Every problem has a stable code (CodeKeyMissing, CodeKeyInvalid, CodeKeyReused,
// CodeInProgress, CodeStoreUnavailable, …: the table of runtime/idemwire, which clients share),
// the type ProblemTypePrefix+code, Cache-Control: no-store and Idempotency-Refusal: code
// (HeaderRefusal), which it keeps when a Renderer writes it in the API's own error format, so
// clients tell the runtime's refusals apart whatever the body. A replay carries
// Idempotent-Replayed: true and only allow-listed headers of the stored answer.
package idemhttp
