package idemriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/idemgen/idemgen/runtime/idemconsume"
)

// Keyed is implemented by job args that carry the id of the work they stand for: an order id,
// an event id, the key of the request that asked for it. Two jobs with the same key do the work
// once, however they came to exist (a producer that retried its insert, a job inserted twice by
// two services); a job whose args are not Keyed is keyed by its job id, which covers River
// running the same job again (a rescued or retried job).
type Keyed interface {
	IdempotencyKey() string
}

// Source is the scope of a job kind's keys in the key table: "river:" and the kind.
func Source(kind string) string { return "river:" + kind }

// JobKey is the key [Process] claims for job: its args' [Keyed] key, else its job id.
func JobKey[TArgs river.JobArgs](job *river.Job[TArgs]) string {
	if k, ok := any(job.Args).(Keyed); ok {
		return k.IdempotencyKey()
	}
	return strconv.FormatInt(job.ID, 10)
}

// Work runs fn at most once per job key ([JobKey]) and completes the job in fn's transaction:
// [Process], then [Settle]. Return its error from the worker's Work:
//
//	func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
//		return idemriver.Work(ctx, w.consumer, job, func(ctx context.Context, tx pgx.Tx) error { … })
//	}
func Work[TArgs river.JobArgs](ctx context.Context, c *idemconsume.Consumer, job *river.Job[TArgs], fn idemconsume.Handler) error {
	return Settle(Process(ctx, c, job, fn))
}

// Process runs fn at most once for job's key, in a transaction that also stores the key's
// completion and the job's (river.JobCompleteTx): fn's writes, the key and the job's completed
// state commit together or not at all, so no window is left between the effect and River's
// acknowledgement. A worker killed mid-handler leaves its transaction to be rolled back, and the
// job to River's rescuer (Config.RescueStuckJobsAfter), whose run takes the claim over once its
// lease ran out. It must run inside a River worker (the client is taken from ctx).
//
// A job whose key was done by another job (the same work inserted twice) is acknowledged
// without running fn (Result.Duplicate); a job whose key came before with other args is
// dead-lettered (key_reused).
func Process[TArgs river.JobArgs](ctx context.Context, c *idemconsume.Consumer, job *river.Job[TArgs], fn idemconsume.Handler) idemconsume.Result {
	m := &idemconsume.Message{Source: Source(job.Kind), ID: JobKey(job), Fingerprint: idemconsume.Fingerprint(job.EncodedArgs)}
	return c.Process(ctx, m, func(ctx context.Context, tx pgx.Tx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("idemriver: complete job %d: %w", job.ID, err)
		}
		return nil
	})
}

// minSnooze is the shortest snooze: a holder whose remaining time is unknown is asked again soon.
const minSnooze = 100 * time.Millisecond

// Settle is what the worker's Work returns for r:
//   - Ack: nil. The job was completed in the handler's transaction, or, for a duplicate, River
//     completes it now.
//   - Redeliver while another run holds the key or the store cannot be reached: river.JobSnooze
//     (Result.RetryAfter), which costs the job no attempt. Other Redelivers (a failed handler, a
//     timeout, a lost lease): r.Err, so that River's retry policy counts the attempt.
//   - DeadLetter: river.JobCancel, with the reason first in the error River records on the job
//     (e.g. "key_reused: …"); the job is not run again.
func Settle(r idemconsume.Result) error {
	switch r.Action {
	case idemconsume.Ack:
		return nil
	case idemconsume.DeadLetter:
		return river.JobCancel(fmt.Errorf("%s: %w", r.Reason, r.Err))
	}
	switch r.Reason {
	case idemconsume.ReasonInProgress, idemconsume.ReasonStoreUnavailable:
		return river.JobSnooze(max(r.RetryAfter, minSnooze))
	}
	if r.Err == nil {
		return errors.New("idemriver: the job's work was not done (" + r.Reason + ")")
	}
	return r.Err
}
