// Package idemriver joins idempotent handlers to River, the PostgreSQL job queue, for long
// operations: the handler enqueues the work in the transaction idemgen hands it and answers 202,
// and a River worker does the work later, exactly once in effect.
//
// The three steps, and why each holds when a process dies at any point:
//
//  1. The handler calls [InsertTx] in its transaction. The job, the handler's rows and the
//     key's stored 202 commit together: the job exists if and only if the key's outcome does, so
//     a retry replays the 202 and never enqueues a second job.
//  2. The worker calls providers with [DerivedKey]: the same key on every run of the job (River
//     runs a job again when a worker died before it completed, or when an attempt failed), and
//     the key the handler itself would have derived. The provider deduplicates the second call.
//  3. The worker finishes with [CompleteTx]: its own writes and the job's completion
//     (river.JobCompleteTx) commit in one transaction, so a run either left both or neither, and
//     a second run finds the job's effect already there or not at all.
//
// A worker that consumes jobs produced elsewhere (by another service, by a producer that may
// insert the same work twice) runs its handler through [Work] instead: once per job key
// ([Keyed] args, else the job id), in a transaction that stores the key's completion and the
// job's together (runtime/idemconsume, docs/consumers.md).
//
// runtime/idem does not import River; this package is the only glue.
package idemriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemgen/idemgen/runtime/idem"
)

// MetadataKey is the member of a job's metadata that holds the [idem.Derivation] of the request
// that enqueued it (64 hex digits; the raw idempotency key is not stored).
const MetadataKey = "idem_derivation"

// ErrNoDerivation is returned for a job that was not inserted by [InsertTx].
var ErrNoDerivation = errors.New("idemriver: the job's metadata has no " + MetadataKey + " (insert it with idemriver.InsertTx inside an idempotent handler)")

// InsertTx inserts args as a job in tx, the transaction the idempotent handler runs in
// (client.InsertTx), and records the request's [idem.Derivation] in the job's metadata, so that
// the worker derives the same provider keys as the handler would. If tx is rolled back (the
// handler failed, its lease was lost) the job is gone too; if it commits, the job commits with
// the key's stored answer. ctx must carry the handler's claim: a job inserted outside one is not
// tied to any key, and InsertTx refuses it with [idem.ErrNoClaim].
//
// opts may be nil; its Metadata, when set, must be a JSON object, and keeps its members.
func InsertTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	d, ok := idem.DerivationFromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("idemriver: insert %s job: %w", args.Kind(), idem.ErrNoClaim)
	}
	o := river.InsertOpts{}
	if opts != nil {
		o = *opts
	}
	meta := map[string]any{}
	if len(o.Metadata) > 0 {
		if err := json.Unmarshal(o.Metadata, &meta); err != nil {
			return nil, fmt.Errorf("idemriver: insert %s job: InsertOpts.Metadata is not a JSON object: %w", args.Kind(), err)
		}
	}
	meta[MetadataKey] = d
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("idemriver: insert %s job: %w", args.Kind(), err)
	}
	o.Metadata = b
	return client.InsertTx(ctx, tx, args, &o)
}

// Derivation returns the [idem.Derivation] [InsertTx] stored in job's metadata, or
// [ErrNoDerivation].
func Derivation(job *rivertype.JobRow) (idem.Derivation, error) {
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(job.Metadata, &meta); err != nil {
		return idem.Derivation{}, fmt.Errorf("idemriver: job %d: metadata: %w", job.ID, err)
	}
	raw, ok := meta[MetadataKey]
	if !ok {
		return idem.Derivation{}, fmt.Errorf("job %d: %w", job.ID, ErrNoDerivation)
	}
	var d idem.Derivation
	if err := json.Unmarshal(raw, &d); err != nil {
		return idem.Derivation{}, fmt.Errorf("idemriver: job %d: %w", job.ID, err)
	}
	return d, nil
}

// DerivedKey is the key the job sends to provider: the same on every run of the job, and the
// same that [idem.DerivedKey] gave the handler that inserted it.
func DerivedKey(job *rivertype.JobRow, provider string) (string, error) {
	d, err := Derivation(job)
	if err != nil {
		return "", err
	}
	return d.Key(provider), nil
}

// Beginner starts a transaction: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx (a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// CompleteTx runs fn in a transaction on db and marks job completed in that same transaction
// (river.JobCompleteTx): fn's writes and the completion commit together or not at all. An error
// from fn, or a panic, rolls both back, and CompleteTx returns the error, so River retries the
// job. It must run inside a River worker (the client is taken from ctx).
//
// River may run a job twice at once (a job rescued while a slow first run still works), and
// completing a job that is no longer running changes nothing, so fn must fence its own writes,
// e.g. UPDATE … WHERE status = 'pending', and treat zero rows as already done.
func CompleteTx[TArgs river.JobArgs](ctx context.Context, db Beginner, job *river.Job[TArgs], fn func(ctx context.Context, tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("idemriver: complete job %d: %w", job.ID, err)
		}
		return nil
	})
}
