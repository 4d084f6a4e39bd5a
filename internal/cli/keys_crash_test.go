package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// The crash child: a test binary started with envCrashChild set claims one key of an operation
// that keeps a history, prints "claimed" from inside the handler, and blocks there until it is
// killed (it ends itself after a minute, should the parent die first).
const (
	envCrashChild  = "IDEMGEN_CLI_CRASH_CHILD"  // the database URL
	envCrashSchema = "IDEMGEN_CLI_CRASH_SCHEMA" // the schema of the key table
)

func TestMain(m *testing.M) {
	if os.Getenv(envCrashChild) != "" {
		os.Exit(crashChild())
	}
	os.Exit(m.Run())
}

// crashParams is the key the child and the parent claim: a one-second lease, so that the
// parent takes the dead child's claim over soon.
func crashParams(fingerprint string) *idem.DoParams {
	return &idem.DoParams{Tenant: "acme", Scope: "createPayment", Key: "crash-1", Operation: "createPayment",
		Fingerprint: fingerprint, History: true, Lease: time.Second, Timeout: 30 * time.Second}
}

func crashChild() int {
	time.AfterFunc(time.Minute, func() { os.Exit(3) })
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(os.Getenv(envCrashChild))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	store, err := idem.NewStore(pool, &idem.Config{Schema: os.Getenv(envCrashSchema)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	_, err = store.Do(ctx, crashParams("fp"), func(context.Context, pgx.Tx) (*idem.Outcome, error) {
		fmt.Println("claimed")
		select {}
	})
	fmt.Fprintln(os.Stderr, "crash child: Do returned:", err)
	return 2
}

// TestKeysShowTheHistoryOfACrash: a key claimed by a process that is then killed (SIGKILL),
// taken over by the next request once the dead claim's lease ran out, refused to another request
// while the takeover runs, and completed: keys show prints that history, in that order, from
// what the runtime wrote.
func TestKeysShowTheHistoryOfACrash(t *testing.T) {
	t.Parallel()
	s := idemtest.TestSchema(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.CommandContext(ctx, exe, "-test.run=^$")
	child.Env = append(os.Environ(), envCrashChild+"="+s.URL, envCrashSchema+"="+s.Name)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	claimed := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "claimed" {
				claimed <- true
				return
			}
		}
		claimed <- false
	}()
	select {
	case ok := <-claimed:
		if !ok {
			t.Fatal("the child ended without claiming the key")
		}
	case <-ctx.Done():
		t.Fatal("the child never claimed the key within 60s")
	}
	if err := child.Process.Kill(); err != nil { // SIGKILL: no release, no cleanup
		t.Fatal(err)
	}
	_ = child.Wait()

	store, err := idem.NewStore(s.Pool, s.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	// The dead claim holds the key until its lease runs out: the retry waits for it.
	entered, finish := make(chan struct{}), make(chan struct{})
	taken := make(chan error, 1)
	go func() {
		p := crashParams("fp")
		p.Wait = 10 * time.Second
		attempt := 0
		r, err := store.Do(ctx, p, func(ctx context.Context, _ pgx.Tx) (*idem.Outcome, error) {
			c, _ := idem.ClaimFromContext(ctx)
			attempt = c.Attempt
			close(entered)
			<-finish
			return &idem.Outcome{Status: 201, Body: []byte(`{"id":"pay_crash"}`)}, nil
		})
		if err == nil && (r.Replayed || attempt != 2) {
			err = fmt.Errorf("the retry: replayed %v, attempt %d; want a takeover, attempt 2", r.Replayed, attempt)
		}
		taken <- err
	}()
	select {
	case <-entered:
	case err := <-taken:
		t.Fatalf("the retry after the crash ended before its handler ran: %v", err)
	case <-ctx.Done():
		t.Fatal("the retry never took the dead claim over")
	}
	if _, err := store.Do(ctx, crashParams("another request"), nil); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("another request under the key while the takeover runs: %v; want ErrKeyReused", err)
	}
	close(finish)
	if err := <-taken; err != nil {
		t.Fatal(err)
	}
	store.Close() // writes the refused retry, counted in memory like replays

	code, text, stderr := runMain("", "keys", "show", "--tenant", "acme", "--key", "crash-1",
		"--database-url", s.URL, "--schema", s.Name, "--table", s.Table)
	if code != ExitOK {
		t.Fatalf("keys show: exit %d, stderr %q", code, stderr)
	}
	t.Logf("idemgen keys show --tenant acme --key crash-1:\n%s", text)
	_, timeline, ok := strings.Cut(text, "\nhistory (4 events, oldest first)\n")
	if !ok {
		t.Fatalf("keys show has no history of 4 events:\n%s", text)
	}
	lines := strings.Split(strings.TrimSpace(timeline), "\n")
	want := []string{
		`^TIME +EVENT +ATTEMPT +STATUS +DETAILS$`,
		`^\S+Z +acquired +1 +- +-$`,
		`^\S+Z +taken_over +2 +- +-$`,
		`^\S+Z +completed +2 +201 +-$`,
		`^\S+Z +key_reused +- +- +"another fingerprint: .*"; 1 retry refused$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("the history has %d lines, want %d:\n%s", len(lines), len(want), timeline)
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("history line %d: %q, want %s", i, lines[i], re)
		}
	}
}
