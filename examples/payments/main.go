// Package payments is idemgen's example: a small payments API whose writes are safe to retry.
// The command in cmd/payments serves it:
//
//	go run ./examples/payments/cmd/payments -addr 127.0.0.1:8080 -database-url postgres://…
//
// The API is written in openapi.yaml; package api is generated from it by idemgen
// (go generate ./examples/payments/...). On start the server migrates idemgen's key table and its
// own tables. `make demo` runs it and fires duplicate requests at it.
//
// The package's exported names are the server's building blocks ([NewHandler], [NewAPI],
// [Validate], [OuterHandler], [CreatePaymentTx], [Migrate]): the benchmark in the repository's
// bench directory builds its servers from them, so that each differs from the example only in
// what stands between the HTTP stack and the business work.
package payments

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

// Main runs the payments server with the command-line args until ctx ends, then shuts down
// gracefully. It returns the exit code: 0, 1 when the server failed, 2 for bad usage (the
// error is written to stderr).
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	run := run
	if len(args) > 0 && args[0] == "reconcile" {
		args = args[1:]
		run = func(ctx context.Context, args []string, stderr io.Writer) error {
			return runReconcile(ctx, args, os.Stdout, stderr)
		}
	}
	if err := run(ctx, args, stderr); err != nil {
		fmt.Fprintln(stderr, "payments:", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

// run serves until ctx ends (SIGINT or SIGTERM), then shuts down gracefully.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address; port 0 picks a free port (the log says which)")
	dbURL := fs.String("database-url", "", "PostgreSQL URL (default: $DATABASE_URL)")
	adminToken := fs.String("admin-token", "", "serve the support page at "+supportPath+" to the user admin with this password (default: $ADMIN_TOKEN; none: no page)")
	bankURL := fs.String("bank-url", "", "the bank payouts and transfers are paid through (default: a fake bank this process serves on a loopback port)")
	replayCache := fs.Int64("replay-cache-bytes", 0, "keep up to this many bytes of completed outcomes in memory, so replays of them skip the database (0: off)")
	webhookSecrets := fs.String("bank-webhook-secrets", "", "the secrets (whsec_…, comma-separated while one is rotated) the bank signs its settlement webhooks with (default: $"+webhookSecretsEnv+"; none: every delivery is answered 500)")
	claim := fs.String("claim", "", "claim mode: lease (the claim commits before the handler runs) or transaction (the claim is part of the handler's transaction) (default: $"+claimModeEnv+", else lease)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q; flags only, see -h", fs.Args())}
	}
	if *dbURL == "" {
		*dbURL = os.Getenv("DATABASE_URL")
	}
	if *adminToken == "" {
		*adminToken = os.Getenv("ADMIN_TOKEN")
	}
	if *claim == "" {
		*claim = os.Getenv(claimModeEnv)
	}
	if *webhookSecrets == "" {
		*webhookSecrets = os.Getenv(webhookSecretsEnv)
	}
	mode, err := parseClaimMode(*claim)
	if err != nil {
		return usageError{fmt.Errorf("-claim: %w", err)}
	}
	if *replayCache < 0 {
		return usageError{fmt.Errorf("-replay-cache-bytes %d: want a size in bytes, or 0 to turn the cache off", *replayCache)}
	}
	if *dbURL == "" {
		return usageError{errors.New("no database: pass -database-url postgres://… or set DATABASE_URL " +
			"(`make demo` starts a throwaway PostgreSQL for you)")}
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(startCtx, *dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(startCtx); err != nil {
		return fmt.Errorf("database: cannot reach it (is PostgreSQL running and -database-url right?): %w", err)
	}
	if err := refusePoolerMode(pool); err != nil {
		return err
	}
	// Every table lives in the connection's current schema (public, or the first schema of a
	// search_path given in the URL), idemgen's key table included.
	var schema *string
	if err := pool.QueryRow(startCtx, "SELECT current_schema()").Scan(&schema); err != nil {
		return fmt.Errorf("database: read the current schema: %w", err)
	}
	if schema == nil {
		return errors.New("database: no current schema: the search_path in the database URL names no existing schema")
	}
	cfg := &idem.Config{Schema: *schema, ReplayCacheBytes: *replayCache}
	migrator, err := idem.NewMigrator(pool, cfg)
	if err != nil {
		return fmt.Errorf("migrate idempotency table: %w", err)
	}
	// Instances that start together migrate one at a time (withMigrationLock).
	var res *idem.MigrateResult
	if err := withMigrationLock(startCtx, pool, *schema, func() error {
		if res, err = migrator.Migrate(startCtx, idem.DirectionUp, nil); err != nil {
			return fmt.Errorf("migrate idempotency table: %w", err)
		}
		if err := Migrate(startCtx, pool); err != nil {
			return err
		}
		return migratePayouts(startCtx, pool, *schema, log)
	}); err != nil {
		return err
	}
	log.Info("migrated", "schema", *schema, "idempotency_versions_applied", len(res.Versions))
	warnLocalOnCitus(startCtx, pool, *schema, idem.DefaultTable, log)

	recent := idemadmin.NewRecent(0) // the support page's recent mismatches
	cfg.Observer = recent.Observer()
	if *bankURL == "" {
		stopBank, url, err := serveFakeBank(pool, log)
		if err != nil {
			return err
		}
		defer stopBank()
		*bankURL = url
	}
	worker, err := newPayoutWorker(pool, *schema, log, workerOptions{BankURL: *bankURL})
	if err != nil {
		return err
	}
	// Start's context is the worker's lifetime; it stops below, after the HTTP server.
	if err := worker.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start the payout worker: %w", err)
	}
	defer func() {
		// Jobs running finish (their writes and completions commit) or, past the timeout, are
		// cancelled and run again later, with the same bank key.
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := worker.Stop(stopCtx); err != nil {
			log.Warn("payout worker stopped with jobs still running; River runs them again", "err", err)
		}
	}()

	handler, store, err := newServiceWith(pool, cfg, log, serviceOptions{Mode: mode, BankURL: *bankURL, WebhookSecrets: splitSecrets(*webhookSecrets)})
	if err != nil {
		return err
	}
	if *adminToken != "" {
		handler = withSupportPage(handler, store, recent, *adminToken)
	}
	// After Shutdown (deferred calls run last first) and before the pool closes: the store's
	// listener stops and its background release retries finish.
	defer store.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	srv := newServer(handler)
	// A signal must not cancel requests in flight (that would roll back work a client may
	// already be waiting for); Shutdown below lets them finish instead.
	srv.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	// scripts/demo.sh reads the address from this line when it starts the server on port 0.
	log.Info("listening", "addr", ln.Addr().String(), "support_page", *adminToken != "", "claim", mode.String())

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	// In-flight requests finish (and commit or release their keys) before the pool closes.
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancelShut()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// refusePoolerMode is the store's check of pgx's exec mode, run before any other statement of
// the start-up: behind a pooler in transaction mode (pgbouncer), pgx's statement cache and
// describe_exec cannot work, and the store refuses them (idem.ErrPoolerMode, with what to set
// instead). Run after the schema query, the migrations or the payout worker's start, the
// refusal came too late: their statements, run crossed with another instance's, failed first
// with SQLSTATE 26000 or 08P01, which says nothing of the fix. The store asks the database in
// one transaction of the simple protocol, which no pooler can cross; the one made here only asks
// (the server's own store, made once the schema is known, asks again), and its log is dropped,
// so its findings are logged once.
func refusePoolerMode(pool *pgxpool.Pool) error {
	probe, err := idem.NewStore(pool, &idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("idempotency store: %w", err)
	}
	probe.Close()
	return nil
}
