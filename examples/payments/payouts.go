package payments

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idemriver"
)

// Payouts are the example's long operation. POST /v1/payouts answers 202 at once: in the
// transaction idemgen hands it, the handler records the payout as pending and enqueues a River
// job (idemriver.InsertTx), so the job, the payout and the stored 202 commit together. A River
// worker then pays the payout out through the bank, with a key derived from the request
// (idemriver.DerivedKey), and finishes the payout and the job in one transaction
// (idemriver.CompleteTx). What each step guarantees when a process dies: docs/side-effects.md.

//go:embed payouts.sql
var payoutsSQL string

// payoutArgs is the job: which payout to pay. The bank key comes from the job's metadata,
// where idemriver.InsertTx put the request's derivation.
type payoutArgs struct {
	Tenant   string `json:"tenant"`
	PayoutID string `json:"payout_id"`
}

func (payoutArgs) Kind() string { return "payout" }

// migratePayouts creates River's tables (rivermigrate, in schema) and the payouts' and the
// bank's tables. Run it under withMigrationLock: River's migrator takes no lock of its own.
func migratePayouts(ctx context.Context, pool *pgxpool.Pool, schema string, log *slog.Logger) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: log})
	if err != nil {
		return fmt.Errorf("migrate River's tables: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River's tables: %w", err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLockID)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, payoutsSQL)
		return err
	}); err != nil {
		return fmt.Errorf("create the payouts table: %w", err)
	}
	return migrateBank(ctx, pool)
}

// withMigrationLock runs migrate while this process holds the schema's migration lock, so that
// instances starting at once on an empty database migrate one after another: the first creates
// the tables, the others find them. River's migrator (migratePayouts) applies each migration in
// a transaction of its own and takes no lock, so two instances would both apply River's first
// migration and the second would fail on the tables the first created.
//
// The lock is transaction-level, held by an open transaction on a connection of its own (not
// one of the pool's, which migrate needs): behind a pooler in transaction mode a session-level
// lock would stay with whichever client the pooler hands that server connection to next. A
// process that dies while migrating ends its transaction and so frees the lock.
func withMigrationLock(ctx context.Context, pool *pgxpool.Pool, schema string, migrate func() error) error {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("migrate: connect for the migration lock: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: begin the migration lock's transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // ends the transaction, which frees the lock
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "idemgen-example.migrate:"+schema); err != nil {
		return fmt.Errorf("migrate: take the migration lock: %w", err)
	}
	return migrate()
}

// newJobInserter is the River client the API inserts jobs with: no queues, no workers, so it is
// never started; the worker process (newPayoutWorker) works the jobs.
func newJobInserter(pool *pgxpool.Pool, schema string, log *slog.Logger) (*river.Client[pgx.Tx], error) {
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	return c, nil
}

// workerOptions tune newPayoutWorker; the zero value is the example server's.
type workerOptions struct {
	BankURL     string
	BankTimeout time.Duration // default 10s
	// Retry replaces River's backoff (tests retry at once); FetchPollInterval River's 1s poll
	// (tests poll every few milliseconds); TestOnly skips River's start-up jitter.
	Retry             river.ClientRetryPolicy
	FetchPollInterval time.Duration
	MaxWorkers        int
	TestOnly          bool
	// RescueAfter and JobTimeout replace rescueAfter and jobTimeout (tests rescue the job of a
	// killed worker within seconds); NoLeader keeps this client out of River's leader election,
	// so a test can kill it without leaving a leadership the next worker waits out.
	RescueAfter, JobTimeout time.Duration
	NoLeader                bool
}

// jobTimeout bounds one run of a payout job; rescueAfter is when River takes a job that is
// still running (its worker died) for stuck and runs it again. Above the bank's timeout and the
// completion, so a live run is never rescued.
const (
	jobTimeout  = 30 * time.Second
	rescueAfter = 2 * time.Minute
)

// newPayoutWorker is the River client that works payout jobs. Start it; Stop it before the
// pool closes.
func newPayoutWorker(pool *pgxpool.Pool, schema string, log *slog.Logger, o workerOptions) (*river.Client[pgx.Tx], error) {
	timeout := o.BankTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &payoutWorker{db: pool, bank: newBankClient(o.BankURL, timeout), log: log})
	maxWorkers := o.MaxWorkers
	if maxWorkers <= 0 {
		maxWorkers = 10
	}
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:                 schema,
		Logger:                 log,
		Queues:                 map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:                workers,
		JobTimeout:             cmp.Or(o.JobTimeout, jobTimeout),
		RescueStuckJobsAfter:   cmp.Or(o.RescueAfter, rescueAfter),
		LeaderElectionDisabled: o.NoLeader,
		RetryPolicy:            o.Retry,
		FetchPollInterval:      o.FetchPollInterval,
		FetchCooldown:          min(o.FetchPollInterval, 100*time.Millisecond),
		TestOnly:               o.TestOnly,
	})
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	return c, nil
}

// payoutWorker pays a payout out through the bank.
type payoutWorker struct {
	river.WorkerDefaults[payoutArgs]
	db   *pgxpool.Pool
	bank *bankClient
	log  *slog.Logger
}

// Work may run more than once for one job: after its worker died past the bank's charge
// (River rescues the job), after the bank timed out having charged, or twice at once. Each run
// sends the bank the same derived key, so the bank charges once and answers the others with
// that charge; the payout's update is fenced on pending, so it is finished once.
func (w *payoutWorker) Work(ctx context.Context, job *river.Job[payoutArgs]) error {
	key, err := idemriver.DerivedKey(job.JobRow, bankProvider)
	if err != nil {
		return river.JobCancel(err) // not inserted by the handler: no run can fix that
	}
	var (
		status, account, currency string
		amount                    int64
	)
	err = w.db.QueryRow(ctx, `SELECT status, account, amount_minor, currency FROM payouts WHERE tenant_id = $1 AND payout_id = $2`,
		job.Args.Tenant, job.Args.PayoutID).Scan(&status, &account, &amount, &currency)
	if err != nil {
		return fmt.Errorf("payout %s: load: %w", job.Args.PayoutID, err)
	}
	if status != "pending" {
		// An earlier run finished the payout and its job together; this run is a duplicate.
		return nil
	}
	chargeID, err := w.bank.charge(ctx, key, chargeRequest{Account: account, AmountMinor: amount, Currency: currency})
	var failure *string
	switch {
	case errors.Is(err, errDeclined):
		f := err.Error()
		failure = &f
	case err != nil:
		// Unknown whether the bank charged: River runs the job again, with the same key.
		return fmt.Errorf("payout %s: %w", job.Args.PayoutID, err)
	}
	final, charge := "failed", (*string)(nil)
	if failure == nil {
		final, charge = "succeeded", &chargeID
	}
	return idemriver.CompleteTx(ctx, w.db, job, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE payouts SET status = $3, bank_charge_id = $4, failure = $5, finished_at = now()
			WHERE tenant_id = $1 AND payout_id = $2 AND status = 'pending'`,
			job.Args.Tenant, job.Args.PayoutID, final, charge, failure)
		if err != nil {
			return fmt.Errorf("payout %s: finish: %w", job.Args.PayoutID, err)
		}
		if tag.RowsAffected() == 0 {
			w.log.InfoContext(ctx, "payout finished by a concurrent run of its job", "payout", job.Args.PayoutID, "job", job.ID)
		}
		return nil
	})
}

const payoutColumns = `payout_id, status, amount_minor, currency, account, bank_charge_id, failure, created_at, finished_at`

func scanPayout(row pgx.Row) (api.Payout, error) {
	var (
		p        api.Payout
		status   string
		finished *time.Time
	)
	if err := row.Scan(&p.PayoutId, &status, &p.AmountMinor, &p.Currency, &p.Account, &p.BankChargeId, &p.Failure, &p.CreatedAt, &finished); err != nil {
		return api.Payout{}, err
	}
	p.Status = api.PayoutStatus(status)
	p.CreatedAt = p.CreatedAt.UTC()
	if finished != nil {
		t := finished.UTC()
		p.FinishedAt = &t
	}
	return p, nil
}

// CreatePayout records the payout and enqueues its job, in the transaction that also stores
// this 202: either all three exist or none does. A replay answers this same 202 (Location is on
// the replay allow-list), whatever the payout's status is by then; GET the Location for that.
func (s *payments) CreatePayout(ctx context.Context, tx pgx.Tx, req api.CreatePayoutRequestObject) (api.CreatePayoutResponseObject, error) {
	tenant, key, err := claimed(ctx)
	if err != nil {
		return nil, err
	}
	id := derivedID("po_", tenant, key)
	loc := "/v1/payouts/" + id
	p, err := scanPayout(tx.QueryRow(ctx, `
		INSERT INTO payouts (tenant_id, payout_id, status, amount_minor, currency, account)
		VALUES ($1, $2, 'pending', $3, $4, $5)
		ON CONFLICT (tenant_id, payout_id) DO NOTHING
		RETURNING `+payoutColumns,
		tenant, id, req.Body.AmountMinor, req.Body.Currency, req.Body.Account))
	if errors.Is(err, pgx.ErrNoRows) {
		return keyUsed("payout", loc), nil // as in createPayment: the key's record has expired
	}
	if err != nil {
		return nil, fmt.Errorf("payments: create payout %s: %w", id, err)
	}
	if _, err := idemriver.InsertTx(ctx, s.jobs, tx, payoutArgs{Tenant: tenant, PayoutID: id}, nil); err != nil {
		return nil, fmt.Errorf("payments: enqueue payout %s: %w", id, err)
	}
	return api.CreatePayout202JSONResponse{Body: p, Headers: api.CreatePayout202ResponseHeaders{Location: loc}}, nil
}

// GetPayout is the status resource a payout's 202 points at.
func (s *payments) GetPayout(ctx context.Context, req api.GetPayoutRequestObject) (api.GetPayoutResponseObject, error) {
	tenant, _ := TenantFrom(ctx)
	p, err := scanPayout(s.db.QueryRow(ctx, `SELECT `+payoutColumns+` FROM payouts WHERE tenant_id = $1 AND payout_id = $2`, tenant, req.PayoutId))
	if errors.Is(err, pgx.ErrNoRows) {
		return problem(http.StatusNotFound, "not-found", "Payout not found", "no payout "+req.PayoutId+" for this tenant"), nil
	}
	if err != nil {
		return nil, fmt.Errorf("payments: read payout %s: %w", req.PayoutId, err)
	}
	return api.GetPayout200JSONResponse(p), nil
}

var (
	_ api.CreatePayoutResponseObject = problemResponse{}
	_ api.GetPayoutResponseObject    = problemResponse{}
	_ rivertype.JobArgs              = payoutArgs{}
)

func (p problemResponse) VisitCreatePayoutResponse(w http.ResponseWriter) error {
	return p.WriteTo(w)
}

func (p problemResponse) VisitGetPayoutResponse(w http.ResponseWriter) error {
	return p.WriteTo(w)
}
