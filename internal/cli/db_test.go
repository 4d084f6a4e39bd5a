package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

func TestSchemaPrintsTheMigrations(t *testing.T) {
	code, out, stderr := runMain("", "schema", "--schema", "billing", "--table", "idem_keys")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	m, err := idem.NewMigrator(&pgxpool.Pool{}, &idem.Config{Schema: "billing", Table: "idem_keys"})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := m.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&want, "-- %03d_%s (up)\n%s\n", m.Version, m.Name, strings.TrimSpace(m.Up))
	}
	if out != want.String() {
		t.Errorf("schema output differs from the migrations:\n got: %s\nwant: %s", out, want.String())
	}
	if !strings.Contains(out, `"billing"."idem_keys"`) {
		t.Errorf("schema output does not name the table \"billing\".\"idem_keys\":\n%s", out)
	}

	code, down, _ := runMain("", "schema", "--down")
	if code != ExitOK || !strings.Contains(down, "(down)") {
		t.Errorf("schema --down: exit %d, output %q", code, down)
	}
}

func TestMigrateTwiceIsHarmless(t *testing.T) {
	s := idemtest.TestSchema(t, &idemtest.SchemaOpts{NoMigrate: true})
	args := []string{"migrate", "--database-url", s.URL, "--schema", s.Name, "--table", "keys"}

	code, out, stderr := runMain("", args...)
	if code != ExitOK || !strings.Contains(out, "applied migrations 1") {
		t.Fatalf("first migrate: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = runMain("", args...)
	if code != ExitOK || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	var n int
	err := s.Pool.QueryRow(context.Background(),
		"SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'keys'", s.Name).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("table keys in %s: count %d, err %v", s.Name, n, err)
	}
}

func TestPurgeRemovesExactlyTheExpiredRows(t *testing.T) {
	s := idemtest.TestSchema(t, nil)
	ctx := context.Background()
	store, err := idem.NewStore(s.Pool, s.Config())
	if err != nil {
		t.Fatal(err)
	}
	complete := func(key string, ttl time.Duration) {
		t.Helper()
		res, err := store.Do(ctx, &idem.DoParams{Scope: "t", Key: key, Operation: "op", Fingerprint: "f",
			Lease: time.Minute, TTL: ttl, Timeout: 50 * time.Millisecond}, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
			return &idem.Outcome{Status: 201}, nil
		})
		if err != nil || !res.Persisted {
			t.Fatalf("complete %s: %+v, %v", key, res, err)
		}
	}
	for i := range 5 {
		complete(fmt.Sprintf("old-%d", i), time.Millisecond)
	}
	for i := range 3 {
		complete(fmt.Sprintf("new-%d", i), time.Hour)
	}
	time.Sleep(200 * time.Millisecond) // let the database clock pass the short TTL and the timeout (the longest a key is kept beyond it)

	base := []string{"--database-url", s.URL, "--schema", s.Name, "--table", s.Table}
	code, out, stderr := runMain("", append([]string{"purge", "--dry-run"}, base...)...)
	if code != ExitOK || !strings.Contains(out, "5 expired keys would be deleted") {
		t.Fatalf("purge --dry-run: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = runMain("", append([]string{"purge", "--batch-size", "2"}, base...)...)
	if code != ExitOK || !strings.Contains(out, "deleted 5 expired keys") {
		t.Fatalf("purge: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	var left []string
	rows, err := s.Pool.Query(ctx, "SELECT key FROM "+pgx.Identifier{s.Name, s.Table}.Sanitize()+" ORDER BY key")
	if err != nil {
		t.Fatal(err)
	}
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(left, ","), "new-0,new-1,new-2"; got != want {
		t.Errorf("rows left after purge: %s, want %s", got, want)
	}
}

func TestDatabaseCommandsRejectBadURLs(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing", []string{"migrate"}, "pass --database-url or set DATABASE_URL"},
		{"unparsable", []string{"migrate", "--database-url", "postgres://a:b@host:notaport/db"}, "database URL is not valid"},
		{"unreachable", []string{"purge", "--database-url", "postgres://nobody@/db?host=/nonexistent-idemgen-socket-dir&connect_timeout=2"}, "cannot reach PostgreSQL"},
		// sslmode=prefer (the default) makes pgx try twice and join both errors with a newline.
		{"unreachable tcp", []string{"migrate", "--database-url", "postgres://nobody@127.0.0.1:1/db?connect_timeout=2"}, "cannot reach PostgreSQL"},
		{"bad batch", []string{"purge", "--batch-size", "0"}, "--batch-size must be at least 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, stderr := runMain("", c.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d", code, ExitUsage)
			}
			if out != "" {
				t.Errorf("stdout should be empty, got %q", out)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 || !strings.Contains(stderr, c.want) {
				t.Errorf("stderr should be one line containing %q, got %q", c.want, stderr)
			}
			if strings.Contains(stderr, ":b@") {
				t.Errorf("stderr leaks the password: %q", stderr)
			}
		})
	}
}

// TestDatabaseCommandsNameARefusedLogin: a server that answers but refuses the user is not
// reported as unreachable, and the message is one line.
func TestDatabaseCommandsNameARefusedLogin(t *testing.T) {
	cfg, err := pgx.ParseConfig(idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://idemgen_no_such_role@/postgres?host=%s&port=%d&sslmode=disable", cfg.Host, cfg.Port)
	if !strings.HasPrefix(cfg.Host, "/") {
		url = fmt.Sprintf("postgres://idemgen_no_such_role@%s:%d/postgres?sslmode=disable", cfg.Host, cfg.Port)
	}
	code, out, stderr := runMain("", "migrate", "--database-url", url)
	if code != ExitUsage || out != "" {
		t.Errorf("exit %d, stdout %q; want exit 2 and no output", code, out)
	}
	if lines := strings.Count(strings.TrimSpace(stderr), "\n") + 1; lines != 1 ||
		!strings.Contains(stderr, "refused the connection") || !strings.Contains(stderr, "idemgen_no_such_role") {
		t.Errorf("stderr should be one line saying the login was refused, got %q", stderr)
	}
}

// TestDatabaseCommandsNameAServerThatTurnsConnectionsAway: a server that answers "too many
// connections" is neither a wrong login nor unreachable. The role it creates logs in on the
// server's socket when that trusts it, else with its password over TCP on localhost (Debian's
// own cluster: peer authentication on the socket, passwords on localhost).
func TestDatabaseCommandsNameAServerThatTurnsConnectionsAway(t *testing.T) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	role := fmt.Sprintf("idemgen_limited_%d", time.Now().UnixNano())
	password := fmt.Sprintf("pw%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD '"+password+"' CONNECTION LIMIT 0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A connection of its own: admin is closed when the test function returns, before this runs.
		c, err := pgx.Connect(context.Background(), idemtest.URL(t))
		if err != nil {
			t.Errorf("drop role %s: %v", role, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP ROLE "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})

	cfg := admin.Config()
	urls := []string{fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", role, password, cfg.Host, cfg.Port, cfg.Database)}
	if strings.HasPrefix(cfg.Host, "/") {
		urls = []string{
			fmt.Sprintf("postgres://%s:%s@/%s?host=%s&port=%d&sslmode=disable", role, password, cfg.Database, cfg.Host, cfg.Port),
			fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=5", role, password, cfg.Port, cfg.Database),
		}
	}
	var tried []string
	for _, url := range urls {
		code, _, stderr := runMain("", "migrate", "--database-url", url)
		if strings.Contains(stderr, "authentication failed") || strings.Contains(stderr, "cannot reach PostgreSQL") {
			tried = append(tried, stderr) // this way in is not open to the role: the next one
			continue
		}
		if code != ExitUsage || !strings.Contains(stderr, "is not accepting connections") || !strings.Contains(stderr, "53300") ||
			strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("exit %d, stderr %q; want exit 2 and one line saying the server is not accepting connections (53300)", code, stderr)
		}
		return
	}
	t.Fatalf("the test needs a new role to log in to the server, on its socket or with a password over TCP on localhost; both were refused:\n%s", strings.Join(tried, ""))
}
