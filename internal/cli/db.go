package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/runtime/idem"
)

// dbFlags are the flags every database command shares.
type dbFlags struct {
	url    string
	schema string
	table  string
}

// config is the runtime's Config for the key table the flags name.
func (f *dbFlags) config() *idem.Config { return &idem.Config{Schema: f.schema, Table: f.table} }

func (f *dbFlags) addTable(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.schema, "schema", "public", "schema that holds the key table")
	cmd.Flags().StringVar(&f.table, "table", "idempotency_keys", "name of the key table")
}

func (f *dbFlags) addURL(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "database-url", "", "PostgreSQL URL (default: $DATABASE_URL)")
}

// connect opens a pool and proves the server answers, so a wrong URL or a server that is down
// is reported once, clearly, before any work starts.
func (f *dbFlags) connect(ctx context.Context) (*pgxpool.Pool, error) {
	url := f.url
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	if url == "" {
		return nil, fail(ExitUsage, errors.New("no database: pass --database-url or set DATABASE_URL (e.g. postgres://user@localhost:5432/app)"))
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgconn's parse errors already hide the password.
		return nil, fail(ExitUsage, fmt.Errorf("database URL is not valid: %v", rootCause(err)))
	}
	cfg.MaxConns = 2
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pctx, cfg)
	if err == nil {
		err = pool.Ping(pctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "28") || pgErr.Code == "3D000") {
			// The server answered that the login is wrong (class 28: authorization; 3D000: no such
			// database): not an outage. Others (too many clients, starting up) fall through.
			return nil, fail(ExitUsage, fmt.Errorf("PostgreSQL at %s refused the connection: %s (check the user, password and database in the URL)",
				describeTarget(cfg.ConnConfig.Config), pgErr.Message))
		}
		if errors.As(err, &pgErr) {
			return nil, fail(ExitUsage, fmt.Errorf("PostgreSQL at %s is not accepting connections: %s (SQLSTATE %s); try again later",
				describeTarget(cfg.ConnConfig.Config), pgErr.Message, pgErr.Code))
		}
		return nil, fail(ExitUsage, fmt.Errorf("cannot reach PostgreSQL at %s: %s (is the server running, and is the URL right?)",
			describeTarget(cfg.ConnConfig.Config), rootCause(err)))
	}
	return pool, nil
}

// describeTarget names the server without credentials.
func describeTarget(c pgconn.Config) string {
	return fmt.Sprintf("host=%s port=%d database=%s user=%s", c.Host, c.Port, c.Database, c.User)
}

// rootCause returns the innermost error's text on one line: pgx wraps the useful cause
// (connection refused, no such socket, …) in layers that repeat the target, and joins the errors
// of its connection attempts (sslmode=prefer tries twice) with newlines.
func rootCause(err error) string {
	for {
		if joined, ok := err.(interface{ Unwrap() []error }); ok && len(joined.Unwrap()) > 0 {
			err = joined.Unwrap()[0]
			continue
		}
		next := errors.Unwrap(err)
		if next == nil {
			return strings.Join(strings.Fields(err.Error()), " ")
		}
		err = next
	}
}

func newSchemaCmd(s *streams) *cobra.Command {
	var f dbFlags
	var down bool
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Print the SQL that creates the key table (the runtime's migrations)",
		Long: "Print the SQL of the runtime's embedded migrations, rendered for --schema and --table,\n" +
			"for teams that apply schema changes with their own migration tool.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := idem.NewMigrator(&pgxpool.Pool{}, f.config()) // Migrations reads no database
			if err != nil {
				return fail(ExitUsage, err)
			}
			ms, err := m.Migrations()
			if err != nil {
				return fail(ExitUsage, err)
			}
			if down {
				for i := len(ms) - 1; i >= 0; i-- {
					fmt.Fprintf(s.out, "-- %03d_%s (down)\n%s\n", ms[i].Version, ms[i].Name, strings.TrimSpace(ms[i].Down))
				}
				return nil
			}
			for _, m := range ms {
				fmt.Fprintf(s.out, "-- %03d_%s (up)\n%s\n", m.Version, m.Name, strings.TrimSpace(m.Up))
			}
			return nil
		},
	}
	f.addTable(cmd)
	cmd.Flags().BoolVar(&down, "down", false, "print the down migrations instead, newest first")
	return cmd
}

func newMigrateCmd(s *streams) *cobra.Command {
	var f dbFlags
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the key table; running it again changes nothing",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			pool, err := f.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			m, err := idem.NewMigrator(pool, f.config())
			if err != nil {
				return fail(ExitUsage, err)
			}
			res, err := m.Migrate(ctx, idem.DirectionUp, nil)
			if err != nil {
				return fail(ExitUsage, fmt.Errorf("migrate %s.%s: %v", f.schema, f.table, err))
			}
			if len(res.Versions) == 0 {
				fmt.Fprintf(s.out, "%s.%s is up to date\n", f.schema, f.table)
				return nil
			}
			fmt.Fprintf(s.out, "%s.%s: applied migrations %s\n", f.schema, f.table, joinInts(res.Versions))
			return nil
		},
	}
	f.addURL(cmd)
	f.addTable(cmd)
	return cmd
}

func newPurgeCmd(s *streams) *cobra.Command {
	var f dbFlags
	var batch int
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete expired idempotency keys in batches",
		Long: "Delete keys whose TTL has passed, a batch at a time so that no statement holds locks for long.\n" +
			"Progress is shown on a terminal; --dry-run only counts.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if batch < 1 {
				return fail(ExitUsage, fmt.Errorf("--batch-size must be at least 1, got %d", batch))
			}
			ctx := cmd.Context()
			pool, err := f.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			store, err := idem.NewStore(pool, f.config())
			if err != nil {
				return fail(ExitUsage, err)
			}
			opts := &idem.PurgeOpts{BatchSize: batch, DryRun: dryRun}
			tty := isTerminal(s.err)
			if tty {
				opts.Progress = func(n int64) { fmt.Fprintf(s.err, "\rpurged %d expired keys…", n) }
			}
			res, err := store.Purge(ctx, opts)
			if tty {
				fmt.Fprint(s.err, "\r\033[K")
			}
			if err != nil {
				return fail(ExitUsage, fmt.Errorf("purge %s.%s: %v", f.schema, f.table, err))
			}
			if dryRun {
				fmt.Fprintf(s.out, "%d expired keys would be deleted from %s.%s (dry run)\n", res.Deleted, f.schema, f.table)
				return nil
			}
			fmt.Fprintf(s.out, "deleted %d expired keys from %s.%s in %d batches\n", res.Deleted, f.schema, f.table, res.Batches)
			return nil
		},
	}
	f.addURL(cmd)
	f.addTable(cmd)
	cmd.Flags().IntVar(&batch, "batch-size", 1000, "rows deleted per statement")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count the expired keys, delete nothing")
	return cmd
}

func joinInts(ms []idem.Migration) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprint(m.Version)
	}
	return strings.Join(parts, ", ")
}

// isTerminal reports whether w is a character device (a terminal), without a dependency.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
