// Package idemclient is the client's half of idempotency: it makes one call to an idempotent
// operation of an idemgen API one logical operation, however many attempts it takes.
//
// A call makes its key once, before the first attempt (a UUIDv4 from crypto/rand, what
// [Options.KeyFunc] returns, or the caller's own through [WithKey]), and sends that key and the
// same body bytes on every attempt. It retries only what a retry can fix (see [Classify]): a lost
// connection or a timeout, where the request may have run and the key makes running it again
// harmless; 409 in-progress after its Retry-After; 503 store-unavailable and handler-timeout;
// 408, 425 and 429; and a 5xx that the operation's persist set says the server did not store. It
// never retries a client error (400, 401, 403, 404, 413, 415, 422 key-reused) nor an answer the
// server stored, which a retry would only replay. It reads the server's refusals from the
// Idempotency-Refusal header an idemgen server sets beside any body, so it retries alike
// whether the API answers RFC 9457 problems or its own error format.
//
// Waits are capped exponential backoff with full jitter, never shorter than a Retry-After, and
// bounded by the context's deadline and [Options.MaxElapsed]: a wait that would end past them is
// not started, and the call returns a [*GiveUpError] naming the key, so the caller can resume
// the same logical operation later with [WithKey].
//
// The generated client (idemgen generate with client: true) wraps oapi-codegen's client with
// this package; [Retrier.Do] is what its methods call, and can be used by hand the same way.
// The package imports only the standard library and runtime/idemwire, the vocabulary it shares
// with the server (problem codes, the replay header, persist sets), which imports only the
// standard library too.
package idemclient
