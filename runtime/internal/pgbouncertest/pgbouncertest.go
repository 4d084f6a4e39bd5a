// Package pgbouncertest starts a real pgbouncer in front of the test server, for the tests that
// check the runtime through a pooler in transaction mode.
//
// Each Start runs a pgbouncer of its own: its configuration, log, PID file and Unix socket live in
// a fresh directory, it connects to the server named by TEST_DATABASE_URL (host, port or socket
// directory, user and password are taken from the URL), and it is stopped, by the PID it wrote,
// when the test ends. Clients are trusted; as root, pgbouncer (which refuses to run as root) runs
// as the postgres user. The program comes from Debian's pgbouncer package: `scripts/deps.sh
// pgbouncer` installs it, and Start runs that script when pgbouncer is missing.
package pgbouncertest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idemtest"
)

// DefaultPoolSize is how many server connections a pgbouncer opens at most: small, so that the
// test suite stays well under a stock max_connections of 100 with tests running in parallel.
const DefaultPoolSize = 4

// Opts tune Start; nil means defaults.
type Opts struct {
	// SearchPath is set on each server connection pgbouncer opens (its connect_query): the test's
	// schema. A session setting such as search_path cannot be sent by the client, since a pooler in
	// transaction mode hands each transaction to any server connection.
	SearchPath string
	// PoolSize is the server connections pgbouncer keeps; default DefaultPoolSize.
	PoolSize int
	// Mode is pgbouncer's pool_mode; default "transaction".
	Mode string
	// Database is the server's database pgbouncer connects to; default the one in the URL.
	Database string
}

// Bouncer is a running pgbouncer.
type Bouncer struct {
	// URL connects through pgbouncer, to the test server's database (without an exec mode:
	// see URLWith).
	URL string
	Dir string
	PID int
}

// URLWith is URL with pgx's default_query_exec_mode set to mode.
func (b *Bouncer) URLWith(mode pgx.QueryExecMode) string {
	// pgx's names of the modes are the URL's with spaces for underscores.
	return b.URL + "&default_query_exec_mode=" + strings.ReplaceAll(mode.String(), " ", "_")
}

// Log is what pgbouncer has logged so far.
func (b *Bouncer) Log() string {
	out, _ := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.log"))
	return string(out)
}

const port = 6432 // on a socket in the bouncer's own directory: never a clash

// Start starts a pgbouncer in front of the test server and stops it when tb ends.
func Start(tb testing.TB, opts *Opts) *Bouncer {
	tb.Helper()
	var o Opts
	if opts != nil {
		o = *opts
	}
	if o.PoolSize <= 0 {
		o.PoolSize = DefaultPoolSize
	}
	if o.Mode == "" {
		o.Mode = "transaction"
	}
	bin := program(tb)
	server, err := pgconn.ParseConfig(idemtest.URL(tb))
	if err != nil {
		tb.Fatalf("pgbouncertest: parse %s: %v", idemtest.EnvURL, err)
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })

	if o.Database == "" {
		o.Database = server.Database
	}
	target := []string{"host=" + quote(server.Host), "port=" + strconv.Itoa(int(server.Port)),
		"dbname=" + quote(o.Database), "user=" + quote(server.User)}
	if server.Password != "" {
		target = append(target, "password="+quote(server.Password))
	}
	if o.SearchPath != "" {
		target = append(target, "connect_query="+quote("SET search_path TO "+pgx.Identifier{o.SearchPath}.Sanitize()))
	}
	ini := fmt.Sprintf(`[databases]
idem = %s

[pgbouncer]
listen_addr =
listen_port = %d
unix_socket_dir = %s
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_db_connections = %d
max_client_conn = 500
server_login_retry = 1
query_wait_timeout = 10
logfile = %s
pidfile = %s
`, strings.Join(target, " "), port, dir, filepath.Join(dir, "users.txt"), o.Mode, o.PoolSize, o.PoolSize,
		filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	users := fmt.Sprintf("%q \"\"\n", server.User)
	for name, text := range map[string]string{"pgbouncer.ini": ini, "users.txt": users} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-d", filepath.Join(dir, "pgbouncer.ini"))
	if os.Getuid() == 0 {
		// pgbouncer refuses to run as root: it runs as postgres, which must own its directory.
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("pgbouncertest: as root pgbouncer runs as the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "users.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				tb.Fatal(err)
			}
		}
		cmd = exec.Command("runuser", "-u", "postgres", "--", bin, "-d", filepath.Join(dir, "pgbouncer.ini"))
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		tb.Fatalf("pgbouncertest: %s: %v\n%s%s", strings.Join(cmd.Args, " "), err, out, log)
	}
	b := &Bouncer{Dir: dir}
	q := url.Values{"host": {dir}, "port": {strconv.Itoa(port)}, "sslmode": {"disable"}}
	b.URL = (&url.URL{Scheme: "postgres", User: url.User(server.User), Path: "/idem", RawQuery: q.Encode()}).String()

	// -d returns once pgbouncer has forked; it writes its PID and opens its socket after that.
	deadline := time.Now().Add(10 * time.Second)
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "pgbouncer.pid"))
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && perr == nil && pid > 0 {
			b.PID = pid
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf(".s.PGSQL.%d", port))); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pgbouncertest: pgbouncer did not write its PID file and open its socket within 10s; its log:\n%s", b.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Cleanup(func() { b.stop(tb) })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.URLWith(pgx.QueryExecModeExec))
	if err == nil {
		err = conn.Ping(ctx)
		conn.Close(ctx)
	}
	if err != nil {
		tb.Fatalf("pgbouncertest: cannot reach the server through pgbouncer: %v; its log:\n%s", err, b.Log())
	}
	return b
}

// stop ends pgbouncer at once (SIGTERM), by the PID it wrote, and waits until it is gone.
func (b *Bouncer) stop(tb testing.TB) {
	if err := syscall.Kill(b.PID, syscall.SIGTERM); err != nil {
		if !errors.Is(err, syscall.ESRCH) {
			tb.Errorf("pgbouncertest: stop pgbouncer (PID %d): %v", b.PID, err)
		}
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(b.PID, 0) == nil {
		if time.Now().After(deadline) {
			tb.Errorf("pgbouncertest: pgbouncer (PID %d) still runs 10s after SIGTERM", b.PID)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// program finds pgbouncer, installing it with the project's scripts/deps.sh when it is missing.
func program(tb testing.TB) string {
	tb.Helper()
	find := func() string {
		if p, err := exec.LookPath("pgbouncer"); err == nil {
			return p
		}
		if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
			return "/usr/sbin/pgbouncer"
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	deps := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "deps.sh")
	if out, err := exec.Command("bash", deps, "pgbouncer").CombinedOutput(); err != nil {
		tb.Fatalf("pgbouncertest: pgbouncer is not installed and %s pgbouncer failed: %v\n%s", deps, err, out)
	}
	if p := find(); p != "" {
		return p
	}
	tb.Fatalf("pgbouncertest: %s installed pgbouncer, but it is not on the PATH nor in /usr/sbin", deps)
	return ""
}

// quote writes a value of pgbouncer's connection string.
func quote(v string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), "'", `\'`) + "'"
}
