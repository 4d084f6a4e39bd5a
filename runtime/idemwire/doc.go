// Package idemwire is the wire vocabulary an idemgen server and its clients share: the problem
// codes of RFC 9457 answers and their type URNs, titles, statuses and what a retry can do about
// each; the header that names a problem's code beside any body (HeaderRefusal) and the one that
// marks a replayed answer; the persist set (which statuses a key's
// outcome is stored for) and its default; and how a request body's media type is classified
// (JSON, form, multipart, or bytes).
//
// It imports the standard library only, so the client side (runtime/idemclient, and clients
// that do not want pgx in their build) and the server side (runtime/idem, runtime/idemhttp, the
// generator) read one definition of each. A new problem code is one constant and one row of
// its table here.
package idemwire

// HeaderReplayed is set to "true" on an answer the server replayed from its store.
const HeaderReplayed = "Idempotent-Replayed"
