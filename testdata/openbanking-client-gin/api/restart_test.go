package api_test

// The generated client of an API whose every error is its own OBErrorResponse1 (no RFC 9457
// problem anywhere), against the generated gin server in a process of its own that is killed
// (SIGKILL) inside a payment's handler and started again on the same address while the client
// retries. The client must recognise the restarted server's 409 in-progress in the API's format
// (from the Idempotency-Refusal header the server sets beside it), wait the dead request's lease
// out, and end with the 201 and exactly one payment, within its deadline. Each attempt carries a
// fresh access token, signature and interaction id, as a real Open Banking client's retries do:
// the default fingerprint leaves them out, so the takeover is the same request, not key-reused.
// internal/cli's TestGenerateGolden runs these tests.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"

	"idemgen.test/golden/openbanking-client-gin/api"
)

// The child server: this test binary, told by these variables where to serve and whether its
// handler stops inside its transaction.
const (
	childURL    = "OB_CLIENT_CHILD_URL"
	childSchema = "OB_CLIENT_CHILD_SCHEMA"
	childAddr   = "OB_CLIENT_CHILD_ADDR"
	childBlock  = "OB_CLIENT_CHILD_BLOCK" // "1": the first payment blocks after its insert
)

func TestMain(m *testing.M) {
	if os.Getenv(childURL) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// obMediaType is the media type the spec declares for OBErrorResponse1.
const obMediaType = "application/json; charset=utf-8"

// obErrorCodes maps the runtime's refusal codes to the API's own error codes.
var obErrorCodes = map[string]string{
	idemhttp.CodeKeyMissing:       "UK.OBIE.Header.Missing",
	idemhttp.CodeKeyInvalid:       "UK.OBIE.Header.Invalid",
	idemhttp.CodeKeyReused:        "UK.OBIE.Resource.ConsentMismatch",
	idemhttp.CodeInProgress:       "UK.OBIE.Resource.InvalidConsentStatus",
	idemhttp.CodeStoreUnavailable: "UK.OBIE.UnexpectedError",
}

// obRenderer writes the runtime's refusals as OBErrorResponse1, as a bank's server would.
var obRenderer = idemhttp.RendererFunc(func(w http.ResponseWriter, r *http.Request, p *idemhttp.Problem) error {
	code, ok := obErrorCodes[p.Code]
	if !ok {
		code = "UK.OBIE.UnexpectedError"
	}
	var id *string
	if v := r.Header.Get("x-fapi-interaction-id"); v != "" {
		id = &v
	}
	body, err := json.Marshal(api.OBErrorResponse1{Code: strconv.Itoa(p.Status), Id: id, Message: p.Title,
		Errors: []api.OBError1{{ErrorCode: code, Message: p.Detail}}})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", obMediaType)
	w.WriteHeader(p.Status)
	_, err = w.Write(body)
	return err
})

// bank implements the payment: one row per payment, written in the key's transaction. With
// block set, the first payment stops after its insert and says so, until the process is killed.
type bank struct {
	api.UnimplementedIdempotentServer
	block bool
}

func (b bank) CreateDomesticPayments(ctx context.Context, tx pgx.Tx, req api.CreateDomesticPaymentsRequestObject) (api.CreateDomesticPaymentsResponseObject, error) {
	in := req.Body.Data
	var id string
	var created time.Time
	if err := tx.QueryRow(ctx, `INSERT INTO ob_payments (end_to_end_id, amount) VALUES ($1, $2) RETURNING id::text, created`,
		in.Initiation.EndToEndIdentification, in.Initiation.InstructedAmount.Amount).Scan(&id, &created); err != nil {
		return nil, err
	}
	if b.block {
		fmt.Println("blocked")
		select {}
	}
	var resp api.OBWriteDomesticResponse5
	resp.Data.DomesticPaymentId, resp.Data.ConsentId, resp.Data.Status = id, in.ConsentId, "AcceptedSettlementInProcess"
	resp.Data.CreationDateTime = created
	resp.Links.Self = "https://bank.example/domestic-payments/" + id
	interaction := ""
	if req.Params.XFapiInteractionId != nil {
		interaction = *req.Params.XFapiInteractionId
	}
	return api.CreateDomesticPayments201ApplicationJSONCharsetUTF8Response{Body: resp,
		Headers: api.CreateDomesticPayments201ResponseHeaders{XFapiInteractionId: interaction}}, nil
}

// child serves the API on the address it is given, printing "listening" once it does. It ends
// itself after two minutes, should the parent die first.
func child() int {
	time.AfterFunc(2*time.Minute, func() { os.Exit(3) })
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child server:", err)
		return 2
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv(childURL))
	if err != nil {
		return fail(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = os.Getenv(childSchema)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return fail(err)
	}
	store, err := idem.NewStore(pool, &idem.Config{Schema: os.Getenv(childSchema)})
	if err != nil {
		return fail(err)
	}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	api.RegisterIdempotentHandlers(e, bank{block: os.Getenv(childBlock) == "1"}, store, &api.IdempotentHandlerOptions{Renderer: obRenderer})
	ln, err := net.Listen("tcp", os.Getenv(childAddr))
	if err != nil {
		return fail(err)
	}
	fmt.Println("listening")
	return fail(http.Serve(ln, e))
}

// childProcess is one run of child.
type childProcess struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	lines chan string
	once  sync.Once
}

func startChild(t *testing.T, name string, schema *idemtest.Schema, addr string, block bool) *childProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childURL+"="+schema.URL, childSchema+"="+schema.Name, childAddr+"="+addr)
	if block {
		cmd.Env = append(cmd.Env, childBlock+"=1")
	}
	cmd.Stderr = os.Stderr
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

// answer is what the client's transport saw of one attempt's answer.
type answer struct {
	status               int
	contentType, refusal string
}

// seen records every answer the client got, under its own transport.
type seen struct {
	mu      sync.Mutex
	answers []answer
}

func (s *seen) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		s.mu.Lock()
		s.answers = append(s.answers, answer{resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get(idemhttp.HeaderRefusal)})
		s.mu.Unlock()
	}
	return resp, err
}

func payment(e2e string) api.OBWriteDomestic2 {
	var p api.OBWriteDomestic2
	p.Data.ConsentId = "sdp-1-b5bbdb18"
	p.Data.Initiation.InstructionIdentification = "ACME412"
	p.Data.Initiation.EndToEndIdentification = e2e
	p.Data.Initiation.InstructedAmount.Amount = "165.88"
	p.Data.Initiation.InstructedAmount.Currency = "GBP"
	p.Data.Initiation.CreditorAccount.SchemeName = "UK.OBIE.SortCodeAccountNumber"
	p.Data.Initiation.CreditorAccount.Identification = "08080021325698"
	p.Data.Initiation.CreditorAccount.Name = "ACME Inc"
	return p
}

// freshCredentials is a request editor that gives every attempt its own access token, JWS
// signature and interaction id, as an Open Banking client does when it retries.
func freshCredentials(attempts *atomic.Int64) idemclient.CallOption {
	return idemclient.WithRequestEditor(func(_ context.Context, r *http.Request) error {
		n := attempts.Add(1)
		r.Header.Set("Authorization", fmt.Sprintf("Bearer token-%d", n))
		r.Header.Set("x-jws-signature", fmt.Sprintf("eyJhbGciOiJQUzI1NiJ9..sig-%d", n))
		r.Header.Set("x-fapi-interaction-id", fmt.Sprintf("93bac548-d2de-4546-b106-%012d", n))
		r.Header.Set("x-fapi-auth-date", time.Now().UTC().Format(http.TimeFormat))
		return nil
	})
}

func TestClientOutlastsARestartInTheAPIsErrorFormat(t *testing.T) {
	schema := idemtest.TestSchema(t, nil)
	if _, err := schema.Pool.Exec(context.Background(), `CREATE TABLE ob_payments (
		id bigint GENERATED ALWAYS AS IDENTITY, end_to_end_id text NOT NULL UNIQUE,
		amount text NOT NULL, created timestamptz NOT NULL DEFAULT now())`); err != nil {
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
	var mu sync.Mutex
	var retries []string
	start := time.Now()
	tr := &seen{}
	client, err := api.NewIdempotentClient("http://"+addr, &idemclient.Options{
		HTTPClient: &http.Client{Transport: tr},
		OnRetry: func(attempt int, reason string, wait time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			retries = append(retries, fmt.Sprintf("%5.1fs attempt %d: %s; next in %s", time.Since(start).Seconds(), attempt, reason, wait.Round(100*time.Millisecond)))
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	// The caller's deadline: the dead request's lease is 10s, the outage 1s.
	const deadline = time.Minute
	type result struct {
		resp *api.CreateDomesticPaymentsResponse
		res  idemclient.Result
		err  error
	}
	done := make(chan result, 1)
	var attempts atomic.Int64
	go func() {
		var r result
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		r.resp, r.err = client.CreateDomesticPaymentsWithApplicationJSONCharsetUTF8BodyWithResponse(ctx,
			&api.CreateDomesticPaymentsParams{Authorization: "Bearer token-0", XJwsSignature: "sig-0"}, payment("E2E-RESTART-1"),
			freshCredentials(&attempts), idemclient.WithResult(&r.res))
		done <- r
	}()
	first.expect("blocked")
	first.kill()
	time.Sleep(time.Second)
	startChild(t, "restarted server", schema, addr, false)

	var r result
	select {
	case r = <-done:
	case <-time.After(deadline + 30*time.Second):
		t.Fatalf("the call did not end within its deadline (%s) plus 30s", deadline)
	}
	mu.Lock()
	t.Logf("call ended at %.1fs after %d attempts:\n  %s", time.Since(start).Seconds(), r.res.Attempts, strings.Join(retries, "\n  "))
	mu.Unlock()
	if r.err != nil || r.resp == nil || r.resp.StatusCode() != http.StatusCreated {
		var gu *idemclient.GiveUpError
		t.Fatalf("the call across the restart: %v (a give-up: %v); want the 201", r.err, errors.As(r.err, &gu))
	}
	var payments, attempt int
	if err := schema.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM ob_payments),
		(SELECT attempt FROM `+pgx.Identifier{schema.Name, schema.Table}.Sanitize()+` WHERE key = $1)`, r.res.Key).Scan(&payments, &attempt); err != nil {
		t.Fatal(err)
	}
	if payments != 1 || attempt != 2 {
		t.Errorf("%d payments and the key's attempt %d after the call, want 1 payment and attempt 2 (the killed claim, then one takeover)", payments, attempt)
	}
	// The restarted server answered the key's retries 409 in-progress in the API's own format
	// while the dead request's lease ran: the client waited them out instead of taking the 409
	// as the API's final word.
	tr.mu.Lock()
	defer tr.mu.Unlock()
	inProgress := 0
	for _, a := range tr.answers {
		if a.status == http.StatusConflict {
			if a.contentType != obMediaType || a.refusal != idemhttp.CodeInProgress {
				t.Errorf("a 409 of %q with %s %q; want the API's %s with %s", a.contentType, idemhttp.HeaderRefusal, a.refusal, obMediaType, idemhttp.CodeInProgress)
			}
			inProgress++
		}
	}
	if inProgress == 0 {
		t.Errorf("no 409 in-progress was answered (answers %+v): the restart did not test the API's format", tr.answers)
	}
}

// TestClientReadsTheAPIsRefusals: refusals in OBErrorResponse1 reach the caller as the
// runtime's codes: a key over the spec's maxLength (40) is key-invalid, a key reused with
// another payment matches idemclient.ErrKeyReused; neither is retried.
func TestClientReadsTheAPIsRefusals(t *testing.T) {
	schema := idemtest.TestSchema(t, nil)
	if _, err := schema.Pool.Exec(context.Background(), `CREATE TABLE ob_payments (
		id bigint GENERATED ALWAYS AS IDENTITY, end_to_end_id text NOT NULL UNIQUE,
		amount text NOT NULL, created timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	startChild(t, "server", schema, addr, false)
	client, err := api.NewIdempotentClient("http://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := &api.CreateDomesticPaymentsParams{Authorization: "Bearer t", XJwsSignature: "s"}
	var attempts atomic.Int64

	var res idemclient.Result
	rsp, err := client.CreateDomesticPaymentsWithApplicationJSONCharsetUTF8BodyWithResponse(ctx, params, payment("E2E-LONG"),
		freshCredentials(&attempts), idemclient.WithKey(strings.Repeat("k", 41)), idemclient.WithResult(&res))
	var e *idemclient.Error
	if !errors.As(err, &e) || e.Code != idemclient.CodeKeyInvalid || rsp == nil || rsp.StatusCode() != http.StatusBadRequest || res.Attempts != 1 {
		t.Errorf("a 41-character key: %v after %d attempts; want one 400 key-invalid", err, res.Attempts)
	} else if ob := rsp.GetApplicationjsonCharsetUtf8400(); ob == nil || ob.Errors[0].ErrorCode != "UK.OBIE.Header.Invalid" {
		t.Errorf("the 400's body is not the API's OBErrorResponse1: %s", rsp.Body)
	}

	key := strings.Repeat("k", 40)
	if rsp, err := client.CreateDomesticPaymentsWithApplicationJSONCharsetUTF8BodyWithResponse(ctx, params, payment("E2E-1"),
		freshCredentials(&attempts), idemclient.WithKey(key)); err != nil || rsp.StatusCode() != http.StatusCreated {
		t.Fatalf("a 40-character key: %v; want 201", err)
	}
	_, err = client.CreateDomesticPaymentsWithApplicationJSONCharsetUTF8BodyWithResponse(ctx, params, payment("E2E-2"),
		freshCredentials(&attempts), idemclient.WithKey(key), idemclient.WithResult(&res))
	if !errors.Is(err, idemclient.ErrKeyReused) || res.Attempts != 1 {
		t.Errorf("the key reused with another payment: %v after %d attempts; want ErrKeyReused at once", err, res.Attempts)
	}
}

// TestUnknownRoutesInTheAPIsErrorFormat: with the generated IdempotencyNoRouteHandler as gin's
// NoRoute and NoMethod handlers, a path the API does not have is a 404 and a method a path does
// not accept a 405 with gin's Allow header, both OBErrorResponse1 through the API's renderer with
// the refusal's code, instead of gin's plain text.
func TestUnknownRoutesInTheAPIsErrorFormat(t *testing.T) {
	schema := idemtest.TestSchema(t, nil)
	store, err := idem.NewStore(schema.Pool, schema.Config())
	if err != nil {
		t.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	opts := &api.IdempotentHandlerOptions{Renderer: obRenderer}
	api.RegisterIdempotentHandlers(e, bank{}, store, opts)
	e.HandleMethodNotAllowed = true
	noRoute := api.IdempotencyNoRouteHandler(store, opts)
	e.NoRoute(noRoute)
	e.NoMethod(noRoute)
	srv := httptest.NewServer(e)
	defer srv.Close()

	for _, c := range []struct {
		method, path, code, allow string
		status                    int
	}{
		{"GET", "/international-payments", idemhttp.CodeNotFound, "", http.StatusNotFound},
		{"PUT", "/domestic-payments", idemhttp.CodeMethodNotAllowed, "POST", http.StatusMethodNotAllowed},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader("{}"))
		req.Header.Set("x-fapi-interaction-id", "ia-unknown")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ob api.OBErrorResponse1
		derr := json.NewDecoder(resp.Body).Decode(&ob)
		_ = resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != obMediaType || derr != nil || len(ob.Errors) != 1 ||
			ob.Id == nil || *ob.Id != "ia-unknown" {
			t.Errorf("%s %s: %d %q %+v (%v); want %d, an OBErrorResponse1 with the interaction id", c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"), ob, derr, c.status)
		}
		if got := resp.Header.Get(idemhttp.HeaderRefusal); got != c.code {
			t.Errorf("%s %s: %s %q, want %q", c.method, c.path, idemhttp.HeaderRefusal, got, c.code)
		}
		if got := resp.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}
