package payments

// The generated client with its default options (nil) against an example server process that is
// killed (SIGKILL) inside a payment's handler, and started again on the same address after a
// while: the call must outlast the outage and the dead request's lease, and end with exactly one
// payment.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// The restart test's child server: this test binary, told by these variables where to serve and
// whether its handler stops inside its transaction.
const (
	restartChildURL    = "IDEMGEN_RESTART_CHILD_URL"
	restartChildSchema = "IDEMGEN_RESTART_CHILD_SCHEMA"
	restartChildAddr   = "IDEMGEN_RESTART_CHILD_ADDR"
	restartChildBlock  = "IDEMGEN_RESTART_CHILD_BLOCK" // "1": the handler blocks at its ledger insert
	restartChildBank   = "IDEMGEN_RESTART_CHILD_BANK"  // the bank transfers go through
)

// restartChild serves the example on the address it is given, printing "listening" once it
// does; with restartChildBlock set, the first handler blocks at its ledger insert (printing
// "blocked") until the process is killed. It ends itself after three minutes, should the parent
// die first.
func restartChild() int {
	time.AfterFunc(3*time.Minute, func() { os.Exit(3) })
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "restart child:", err)
		return 2
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv(restartChildURL))
	if err != nil {
		return fail(err)
	}
	schema := os.Getenv(restartChildSchema)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if os.Getenv(restartChildBlock) == "1" {
		tr := &hookTracer{}
		tr.arm(atLedgerInsert, func(context.Context, *pgx.Conn) {
			fmt.Println("blocked")
			select {}
		})
		cfg.ConnConfig.Tracer = tr
	}
	if d, err := time.ParseDuration(os.Getenv(restartChildSlowSettlement)); err == nil {
		cfg.ConnConfig.Tracer = slowSettlements(d)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return fail(err)
	}
	h, _, err := newServiceWith(pool, &idem.Config{Schema: schema}, slog.New(slog.NewTextHandler(io.Discard, nil)),
		serviceOptions{BankURL: os.Getenv(restartChildBank), WebhookSecrets: splitSecrets(os.Getenv(webhookSecretsEnv))})
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", os.Getenv(restartChildAddr))
	if err != nil {
		return fail(err)
	}
	fmt.Println("listening")
	return fail(http.Serve(ln, h))
}

// childProcess is one run of restartChild.
type childProcess struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	lines chan string
	once  sync.Once
}

func startChild(t *testing.T, name string, schema *idemtest.Schema, addr string, block bool, env ...string) *childProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), restartChildURL+"="+schema.URL, restartChildSchema+"="+schema.Name, restartChildAddr+"="+addr)
	cmd.Env = append(cmd.Env, env...)
	if block {
		cmd.Env = append(cmd.Env, restartChildBlock+"=1")
	}
	cmd.Stderr = tWriter{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &childProcess{t: t, name: name, cmd: cmd, lines: make(chan string, 4)}
	t.Cleanup(c.kill)
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	c.expect("listening")
	return c
}

// expect waits for the child's next line to be want.
func (c *childProcess) expect(want string) {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("the %s exited before saying %q", c.name, want)
		}
		if l != want {
			c.t.Fatalf("the %s said %q, want %q", c.name, l, want)
		}
	case <-time.After(30 * time.Second):
		c.t.Fatalf("the %s did not say %q within 30s", c.name, want)
	}
}

// kill sends SIGKILL to the child (no cleanup of any kind) and reaps it; only the first call
// does anything.
func (c *childProcess) kill() {
	c.once.Do(func() {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	})
}

// TestClientOutlastsARestart: with nil options, a payment whose server is killed inside the
// handler and is back after 30s (within the dead request's 60s lease: the call waits out the
// lease, then takes the key over) or after 60s (the lease is over: the first answered attempt
// takes over) succeeds, and the database holds exactly one payment and one authorisation.
func TestClientOutlastsARestart(t *testing.T) {
	t.Parallel()
	for _, down := range []time.Duration{30 * time.Second, 60 * time.Second} {
		t.Run(fmt.Sprintf("down %s", down), func(t *testing.T) {
			t.Parallel()
			schema := idemtest.TestSchema(t, nil)
			if err := Migrate(context.Background(), schema.Pool); err != nil {
				t.Fatal(err)
			}
			// A free loopback port that both runs of the server listen on.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			_ = ln.Close()

			first := startChild(t, "first server", schema, addr, true)
			// The defaults nil options give, and OnRetry (which changes nothing) to print what
			// happened.
			defaults, err := idemclient.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var retries []string
			start := time.Now()
			o := defaults.Options()
			o.OnRetry = func(attempt int, reason string, wait time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				retries = append(retries, fmt.Sprintf("%5.1fs attempt %d: %s; next in %s", time.Since(start).Seconds(), attempt, shortReason(reason), wait.Round(100*time.Millisecond)))
			}
			client, err := api.NewIdempotentClient("http://"+addr, &o)
			if err != nil {
				t.Fatal(err)
			}

			type result struct {
				resp *api.CreatePaymentResponse
				res  idemclient.Result
				err  error
			}
			done := make(chan result, 1)
			go func() {
				var r result
				// No deadline of the caller's: the client's defaults alone bound the call.
				r.resp, r.err = client.CreatePaymentWithResponse(context.Background(), &api.CreatePaymentParams{XTenantID: "acme"},
					api.CreatePaymentJSONRequestBody{AmountMinor: 4200, Currency: "EUR"}, idemclient.WithResult(&r.res))
				done <- r
			}()
			first.expect("blocked")
			killed := time.Since(start)
			first.kill()
			time.Sleep(down)
			startChild(t, "restarted server", schema, addr, false)
			back := time.Since(start)

			var r result
			select {
			case r = <-done:
			case <-time.After(idemclient.DefaultMaxElapsed + 30*time.Second):
				t.Fatalf("the call did not end within the client's MaxElapsed (%s) plus 30s", idemclient.DefaultMaxElapsed)
			}
			mu.Lock()
			t.Logf("killed at %.1fs, back at %.1fs, call ended at %.1fs after %d attempts:\n  %s",
				killed.Seconds(), back.Seconds(), time.Since(start).Seconds(), r.res.Attempts, strings.Join(retries, "\n  "))
			mu.Unlock()
			if r.err != nil || r.resp == nil || r.resp.JSON201 == nil {
				t.Fatalf("the call across a %s restart: %v; want the 201", down, r.err)
			}
			id := r.resp.JSON201.PaymentId
			var payments, authorized, attempt int
			if err := schema.Pool.QueryRow(context.Background(), `SELECT
				(SELECT count(*) FROM payments),
				(SELECT count(*) FROM payment_events WHERE kind = 'authorized'),
				(SELECT attempt FROM `+pgx.Identifier{schema.Name, schema.Table}.Sanitize()+` WHERE key = $1)`, r.res.Key).
				Scan(&payments, &authorized, &attempt); err != nil {
				t.Fatal(err)
			}
			if payments != 1 || authorized != 1 {
				t.Errorf("%d payments and %d authorisations after the call across the restart, want exactly 1 of each (payment %s)", payments, authorized, id)
			}
			if attempt != 2 {
				t.Errorf("the key's attempt is %d, want 2 (the killed server's claim, then one takeover)", attempt)
			}
		})
	}
}

// shortReason keeps a retry reason to one short line: a transport error's text names the
// address and the syscall.
func shortReason(reason string) string {
	if strings.Contains(reason, "connection refused") {
		return "connection refused"
	}
	if strings.HasPrefix(reason, "transport error:") && (strings.Contains(reason, "EOF") || strings.Contains(reason, "reset")) {
		return "transport error: connection closed without an answer"
	}
	return reason
}
