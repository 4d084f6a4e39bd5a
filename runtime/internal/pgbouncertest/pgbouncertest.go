// Package pgbouncertest starts a real pgbouncer in front of the test server, for the tests that
// check the runtime through a pooler in transaction mode.
//
// Each Start runs a pgbouncer of its own: its configuration, log, PID file and Unix socket live in
// a fresh directory, it connects to the server named by TEST_DATABASE_URL (host, port or socket
// directory, user and password are taken from the URL), and it is stopped, by the PID it wrote,
// when the test ends. Clients are trusted; as root, pgbouncer (which refuses to run as root) runs
// as the postgres user. The program comes from Debian's pgbouncer package: `scripts/deps.sh
// pgbouncer` installs it, and Start runs that script when pgbouncer is missing.
//
// Any server the tests may create schemas in will do, Debian's stock cluster included: there, as
// root, the tests connect over its socket by peer authentication as the role root (create it once:
// `runuser -u postgres -- createuser --superuser root`; TEST_DATABASE_URL is then
// `postgres:///postgres?host=/var/run/postgresql`), and pgbouncer, refused as root, logs in as
// postgres (see [Start]).
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
//
// pgbouncer logs into the server as the URL's user, with the URL's password. As root it runs
// as the postgres user, so a server that admits its socket's clients by peer authentication
// (Debian's stock cluster) refuses that login for any other user: Start then logs pgbouncer in
// as postgres, the operating-system user it runs as, which peer authentication admits. When the
// server refuses that too, Start fails at once, naming both refusals and what would let
// pgbouncer in.
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
	runAs := ""
	if os.Getuid() == 0 {
		runAs = "postgres" // pgbouncer refuses to run as root
	}

	b := &Bouncer{Dir: dir}
	q := url.Values{"host": {dir}, "port": {strconv.Itoa(port)}, "sslmode": {"disable"}}
	b.URL = (&url.URL{Scheme: "postgres", User: url.User(server.User), Path: "/idem", RawQuery: q.Encode()}).String()

	who := serverLogin{user: server.User, password: server.Password}
	err = b.run(tb, bin, runAs, server, who, o)
	if err != nil && runAs != "" && who.user != runAs && strings.HasPrefix(server.Host, "/") && b.loginRefused() {
		refused := err
		b.stop(tb)
		who = serverLogin{user: runAs}
		if err = b.run(tb, bin, runAs, server, who, o); err == nil {
			tb.Logf("pgbouncertest: the server at %s refused pgbouncer's login as %q (pgbouncer runs as the "+
				"operating-system user %s): it logs in as %s instead (peer authentication); %v",
				server.Host, server.User, runAs, runAs, refused)
		} else {
			err = fmt.Errorf("the server at %s refused pgbouncer's login as %q (%v) and as %q, the "+
				"operating-system user pgbouncer runs as (%w); let one of them in over that socket (a "+
				"pg_hba.conf line such as `local all postgres peer`, Debian's default), or name a server "+
				"that takes a password in %s, or unset %s so that make test starts a throwaway PostgreSQL",
				server.Host, server.User, refused, runAs, err, idemtest.EnvURL, idemtest.EnvURL)
		}
	}
	if err != nil {
		tb.Fatalf("pgbouncertest: cannot reach the server through pgbouncer: %v; its log:\n%s", err, b.Log())
	}
	return b
}

// serverLogin is who pgbouncer logs into the server as.
type serverLogin struct{ user, password string }

// run writes pgbouncer's configuration for login, starts it and waits until its socket is open
// (failing tb when it does not start), then connects through it: the error is that
// connection's. Once pgbouncer has written its PID, it is stopped when tb ends.
func (b *Bouncer) run(tb testing.TB, bin, runAs string, server *pgconn.Config, who serverLogin, o Opts) error {
	tb.Helper()
	dir := b.Dir
	target := []string{"host=" + quote(server.Host), "port=" + strconv.Itoa(int(server.Port)),
		"dbname=" + quote(o.Database), "user=" + quote(who.user)}
	if who.password != "" {
		target = append(target, "password="+quote(who.password))
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
	// Clients log in as the URL's user, whoever pgbouncer logs into the server as.
	users := fmt.Sprintf("%q \"\"\n", server.User)
	for name, text := range map[string]string{"pgbouncer.ini": ini, "users.txt": users} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	// A previous run's PID file, log and socket would be taken for this one's.
	for _, name := range []string{"pgbouncer.pid", "pgbouncer.log", fmt.Sprintf(".s.PGSQL.%d", port)} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			tb.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-d", filepath.Join(dir, "pgbouncer.ini"))
	if runAs != "" {
		// The user pgbouncer runs as must own its directory.
		u, err := user.Lookup(runAs)
		if err != nil {
			tb.Fatalf("pgbouncertest: as root pgbouncer runs as the %s user: %v", runAs, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "users.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				tb.Fatal(err)
			}
		}
		cmd = exec.Command("runuser", "-u", runAs, "--", bin, "-d", filepath.Join(dir, "pgbouncer.ini"))
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("pgbouncertest: %s: %v\n%s%s", strings.Join(cmd.Args, " "), err, out, b.Log())
	}

	// -d returns once pgbouncer has forked; it writes its PID and opens its socket after that.
	b.PID = 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "pgbouncer.pid"))
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && perr == nil && pid > 0 {
			if b.PID == 0 {
				b.PID = pid
				tb.Cleanup(func() { stopPID(tb, pid) })
			}
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf(".s.PGSQL.%d", port))); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pgbouncertest: pgbouncer did not write its PID file and open its socket within 10s; its log:\n%s", b.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.URLWith(pgx.QueryExecModeExec))
	if err == nil {
		err = conn.Ping(ctx)
		conn.Close(ctx)
	}
	return err
}

// loginRefused reports whether pgbouncer's log says the server refused its login (rather than
// being unreachable, or refusing the client).
func (b *Bouncer) loginRefused() bool {
	return strings.Contains(b.Log(), "server login failed")
}

// stop ends pgbouncer at once, by the PID it wrote (see stopPID).
func (b *Bouncer) stop(tb testing.TB) { stopPID(tb, b.PID) }

// stopPID ends the pgbouncer whose PID is pid with SIGTERM (it exits at once) and waits until it
// is gone. A pgbouncer already gone is fine.
func stopPID(tb testing.TB, pid int) {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		if !errors.Is(err, syscall.ESRCH) {
			tb.Errorf("pgbouncertest: stop pgbouncer (PID %d): %v", pid, err)
		}
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			tb.Errorf("pgbouncertest: pgbouncer (PID %d) still runs 10s after SIGTERM", pid)
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
