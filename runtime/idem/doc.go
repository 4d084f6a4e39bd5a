// Package idem is idemgen's runtime: it makes a retried request harmless.
//
// Three guarantees, all kept by PostgreSQL through pgx:
//
//  1. Atomic claim: exactly one request executes a key. In lease mode (ClaimLease) an
//     INSERT … ON CONFLICT decides it; in transaction mode (ClaimTransaction) a
//     transaction-scoped advisory lock on the key does on plain PostgreSQL through a pool (the
//     row is written with the outcome), and a row locked by the business transaction on Citus
//     or on a DB that is not a pool (see claimpath.go).
//  2. Transactional completion: the stored outcome is written inside the caller's business
//     transaction, fenced by the claim's owner token, so the business change and the outcome
//     commit together or not at all.
//  3. Replay: a retry with the same key gets the first outcome back and causes no second effect.
//
// # Getting started
//
// Build a Store on your pool, and a Migrator from the same Config so that the table migrated is
// the table served; migrate at startup:
//
//	cfg := &idem.Config{Tenant: tenantFromContext} // nil for a single-tenant API
//	store, err := idem.NewStore(pool, cfg)
//	migrator, err := idem.NewMigrator(pool, cfg)
//	_, err = migrator.Migrate(ctx, idem.DirectionUp, nil)
//
// HTTP operations are served by the code idemgen generates from your OpenAPI document:
//
//	strict := api.NewStrictHandler(api.NewIdempotentServer(impl, store), nil)
//
// Other work — a queue consumer keyed on the message id, say — calls Store.Do, which runs a
// function at most once per key, in a transaction that also stores its outcome:
//
//	res, err := store.Do(ctx, &idem.DoParams{Scope: "charges", Key: msg.ID, Fingerprint: fp},
//		func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) { … })
//
// The HTTP side that generated code calls (key parsing, problems, recording and replaying
// responses) is package idemhttp; the vocabulary it shares with clients (problem codes, the
// replay header, persist sets, media-type classes) is package idemwire. Store.Purge (or PurgeEvery in a goroutine) deletes expired
// keys; Config.Observer and Config.Logger see every event.
//
// # The key table
//
// One row per (tenant, scope, key): in_flight with an owner token and a lease while a request
// runs, complete with the stored outcome afterwards, and treated as new once expires_at has
// passed. Migrator.Migrations renders the SQL of the embedded, numbered migrations for review or
// for a migration tool of your own. All times come from the database clock.
//
// # Round trips per request
//
// With a *pgxpool.Pool, the completion and the commit travel in one batch. Lease mode (the
// default): claim (1, committed at once), begin, the handler's own statements, complete+commit
// — 3 plus the handler's, one more than without idempotency. A replay, an in-progress answer
// and a key reused with another request are 1 round trip, and they are reads. The lease is
// renewed every third of its length from a second connection while the handler runs.
//
// Transaction mode: begin+claim (1 pipelined batch that bounds the wait for a concurrent holder
// with a transaction-local lock_timeout), the handler's statements, complete+commit — 2 plus the
// handler's, as many as without idempotency, and one commit. A replay is begin+claim, rollback.
//
// # Failure
//
// Without a claim no handler runs: a store that cannot be reached gives ErrStoreUnavailable
// (HTTP: a 503 store-unavailable problem). A handler's error, a panic, a cancelled context or a
// status outside the persisted set rolls the business transaction back and releases the key, so
// a retry executes anew. A holder whose lease was taken over cannot commit: its completion fails
// with ErrLeaseLost and its transaction is rolled back.
//
// An operation declared uncertain-on-loss (DoParams.UncertainOnLoss, lease mode only) whose
// handler asked for a provider key (ProviderKey) is never run again after a lost claim: the key
// turns uncertain (ErrUncertain to every retry) until Store.Resolve settles it. Operations that
// keep a history (DoParams.History) append what happens to each key to it (Store.History).
//
// The package imports only the standard library, pgx and runtime/idemwire (itself standard
// library only).
package idem
