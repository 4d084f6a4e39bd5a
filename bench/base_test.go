package bench

// The base revision's servers: BenchmarkHTTP can serve claim: lease and claim: transaction from
// an older git revision too, in the same rounds as today's servers, so that one run's table
// shows both (make bench-http; BENCH_HTTP_BASE names the revision, see scripts/bench-http.sh).
// The script builds the revision in a directory of its own and names it here; without it
// BenchmarkHTTP runs today's servers alone.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemtest"
)

const (
	// envBaseDir is the directory scripts/bench-http.sh builds the base revision into: its bench
	// test binary (bench.test), its idemgen command (idemgen) and its example's tables
	// (payments-schema.sql).
	envBaseDir = "BENCH_HTTP_BASE_DIR"
	// envBaseRev is the base revision's short name, which the rows' labels carry.
	envBaseRev = "BENCH_HTTP_BASE_REV"
)

// baseModes are the servers BenchmarkHTTP also starts from the base revision.
var baseModes = []string{serverLease, serverTransaction}

// baseServer is the key of the base revision's server of mode in BenchmarkHTTP's maps and
// rows.
func baseServer(mode string) string { return "base-" + mode }

// baseBuild is the base revision as scripts/bench-http.sh built it.
type baseBuild struct{ dir, rev string }

// baseFromEnv returns the base revision named by the environment, or nil when there is none.
func baseFromEnv(tb testing.TB) *baseBuild {
	tb.Helper()
	dir, rev := os.Getenv(envBaseDir), os.Getenv(envBaseRev)
	if dir == "" {
		return nil
	}
	if rev == "" {
		tb.Fatalf("%s is set but %s is not: name the revision %s was built from", envBaseDir, envBaseRev, dir)
	}
	for _, f := range []string{"bench.test", "idemgen", "payments-schema.sql"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			tb.Fatalf("%s=%s: %v (scripts/bench-http.sh builds it)", envBaseDir, dir, err)
		}
	}
	return &baseBuild{dir: dir, rev: rev}
}

// withBaseRows returns rows with, after each row of a server in baseModes, the same row on the
// base revision's server: labelled with the revision, and without targets, which are today's.
func withBaseRows(rows []rowSpec, rev string) []rowSpec {
	var out []rowSpec
	for _, rs := range rows {
		out = append(out, rs)
		for _, mode := range baseModes {
			if rs.server == mode {
				out = append(out, rowSpec{id: rs.id + "-base", label: rs.label + " (" + rev + ")", server: baseServer(mode), kind: rs.kind})
			}
		}
	}
	return out
}

// start starts the base revision's server of mode on a schema of its own, which it migrates the
// base revision's way: the key table with its idemgen migrate, the example's tables with its
// schema.sql. (Today's migrations would give the base a newer schema than its own; its runtime
// reads no migration version, so it would run, but on tables it was not written for.)
func (bb *baseBuild) start(ctx context.Context, tb testing.TB, mode string, conns int) (*idemtest.Schema, *benchServer) {
	tb.Helper()
	sch := idemtest.TestSchema(tb, &idemtest.SchemaOpts{MaxConns: 4, NoMigrate: true})
	out, err := exec.CommandContext(ctx, filepath.Join(bb.dir, "idemgen"), "migrate",
		"--database-url", sch.URL, "--schema", sch.Name).CombinedOutput()
	if err != nil {
		tb.Fatalf("migrate the base (%s) %s server's key table with its idemgen migrate: %v\n%s", bb.rev, mode, err, out)
	}
	schemaSQL, err := os.ReadFile(filepath.Join(bb.dir, "payments-schema.sql"))
	if err != nil {
		tb.Fatal(err)
	}
	// Without arguments pgx sends the file's statements in one simple query, as the base's
	// payments.Migrate does.
	if _, err := sch.Pool.Exec(ctx, string(schemaSQL)); err != nil {
		tb.Fatalf("create the base (%s) %s server's payments tables: %v", bb.rev, mode, err)
	}
	return sch, startServer(tb, filepath.Join(bb.dir, "bench.test"), mode, sch.URL, sch.Name, conns)
}
