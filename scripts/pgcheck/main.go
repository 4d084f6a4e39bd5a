// Command pgcheck checks, before a run, that the PostgreSQL a user named is one the test suite
// can use, and stops at once saying what it needs otherwise: scripts/with-pg.sh runs it when the
// database URL's variable is already set.
//
//	pgcheck VAR
//
// The suite needs a server it can reach within 10 seconds, a superuser role (it creates
// throwaway databases and roles, and ends sessions it started), and room for its connections.
// Exit status 0: usable; 2: not, with the reason on stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// minFreeConnections is what the suite keeps open at its busiest (packages run two at a time
// here, each with pools of a few connections and throwaway servers of its own for the rest),
// with a margin; a stock server (max_connections = 100) has room.
const minFreeConnections = 40

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pgcheck VAR (the environment variable naming the database URL)")
		os.Exit(2)
	}
	name := os.Args[1]
	if err := check(os.Getenv(name)); err != nil {
		fmt.Fprintf(os.Stderr, "pgcheck: %s cannot be used for the tests: %v\n", name, err)
		os.Exit(2)
	}
}

func check(url string) error {
	if url == "" {
		return fmt.Errorf("it is empty (unset it to let the run start a throwaway server)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("it is not a PostgreSQL URL: %v", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "28000":
		return fmt.Errorf("connecting as %q failed: %v\n"+
			"  (on Debian's own cluster, whose socket uses peer authentication, the suite needs a role named as your login "+
			"user: sudo -u postgres createuser -s %s; or name another user in the URL)", cfg.User, err, cfg.User)
	case err != nil:
		return fmt.Errorf("connecting as %q failed (is the server running, and is this its address?): %v", cfg.User, err)
	}
	defer conn.Close(ctx)
	var super bool
	var max, used int
	if err := conn.QueryRow(ctx, `SELECT rolsuper, current_setting('max_connections')::int,
		(SELECT count(*) FROM pg_stat_activity) FROM pg_roles WHERE rolname = current_user`).Scan(&super, &max, &used); err != nil {
		return fmt.Errorf("reading the server's settings: %v", err)
	}
	if !super {
		return fmt.Errorf("role %q is not a superuser, and the suite creates throwaway databases and roles and ends its own sessions: "+
			"name a superuser in the URL, or run ALTER ROLE %s SUPERUSER on a server kept for tests", cfg.User, cfg.User)
	}
	if free := max - used; free < minFreeConnections {
		return fmt.Errorf("the server has %d free connections (max_connections %d, %d in use); the suite needs %d: raise max_connections or end other sessions",
			free, max, used, minFreeConnections)
	}
	return nil
}
