// Command orders-sqlc is idemgen's sqlc example: an orders API whose idempotent handler writes
// through sqlc-generated queries on the transaction idemgen hands it (see orders.go and
// README.md). It serves on ADDR (default 127.0.0.1:8080) against DATABASE_URL.
package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Error("connect", "error", err)
		os.Exit(1)
	}
	defer pool.Close()
	h, store, err := setup(ctx, pool, nil, log)
	if err != nil {
		log.Error("setup", "error", err)
		os.Exit(1)
	}
	defer store.Close()
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 75 * time.Second}
	log.Info("serving", "addr", addr)
	if err := srv.ListenAndServe(); err != nil {
		log.Error("serve", "error", err)
		os.Exit(1)
	}
}
