package bench

// The hand-written handler: createPayment made idempotent the way an engineer would write it
// for this one operation with nothing but net/http and pgx, the cheapest code that gives the
// guarantees claim: transaction gives. It is the ceiling a generated server in transaction mode
// is measured against: the same work, with nothing of the generated stack around it.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// handwrittenTableSQL is the hand-written handler's key table: one row per key, inserted once
// with the outcome by the business transaction. Keys are kept until a purge by created_at, off
// the request path.
const handwrittenTableSQL = `CREATE TABLE IF NOT EXISTS handwritten_keys (
	tenant      text        NOT NULL,
	scope       text        NOT NULL,
	key         text        NOT NULL,
	fingerprint bytea       NOT NULL,
	status      integer     NOT NULL,
	location    text        NOT NULL,
	body        bytea       NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant, scope, key)
)`

// handwrittenScope scopes the keys of createPayment: a key is the tenant's, for this operation.
const handwrittenScope = "POST /v1/payments"

// handwrittenMaxBody caps a request body, as the generated servers cap it.
const handwrittenMaxBody = 1 << 20

// The handler's statements. The read returns the transaction's clock whether or not the key has
// a row: the payment's created_at defaults to the same now(), so the handler knows its answer
// before it writes and can send the writes, the key row and the COMMIT in one round trip.
const (
	handwrittenLockSQL = `SELECT pg_advisory_xact_lock($1)`
	handwrittenReadSQL = `SELECT now(), k.fingerprint, k.status, k.location, k.body
		FROM (VALUES (1)) AS one
		LEFT JOIN handwritten_keys k ON k.tenant = $1 AND k.scope = $2 AND k.key = $3`
	// The business work: createPayment's two inserts (examples/payments CreatePaymentTx). Without
	// its ON CONFLICT DO NOTHING: the statements after it are already on their way, so a payment
	// that exists must abort the transaction rather than let the ledger event follow.
	handwrittenPaymentSQL = `INSERT INTO payments (tenant_id, payment_id, status, amount_minor, currency)
		VALUES ($1, $2, 'authorized', $3, $4)`
	handwrittenEventSQL = `INSERT INTO payment_events (tenant_id, payment_id, kind, amount_minor, idempotency_key)
		VALUES ($1, $2, 'authorized', $3, $4)`
	handwrittenStoreSQL = `INSERT INTO handwritten_keys (tenant, scope, key, fingerprint, status, location, body)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`
	handwrittenCommitSQL = `commit /* handwritten */`
)

// handwrittenServer serves POST /v1/payments with no router (a switch on method and path), no
// validation beyond decoding the JSON body (the table's CHECK constraints refuse what the
// business would), and two round trips per first execution:
//
//  1. BEGIN, a transaction-scoped advisory lock on a hash of the key table, tenant, scope and
//     key, and a read of the key's row. The lock makes a concurrent duplicate wait for the
//     holder's transaction, so its read sees the holder's committed outcome, or no row when the
//     holder rolled back;
//  2. a row answers: the stored status and body, byte for byte, with Idempotent-Replayed: true,
//     or key-reused when the fingerprint differs; the transaction is rolled back (a second round
//     trip: a connection goes back to the pool only outside a transaction);
//  3. no row: the payment, its ledger event, the key's row with the outcome and COMMIT, in one
//     round trip. The outcome commits with the work or not at all.
//
// The fingerprint is the SHA-256 of the decoded body's fields (handwrittenFingerprint), without
// simulate_failure (which the runtime leaves out of createPayment's fingerprint too): key order
// and white space do not make another request, a different amount or currency does. The tenant
// is the X-Tenant-ID header, as the example's stand-in for authentication.
//
// What claim: transaction does that it leaves out, because this one handler can: a bound on the
// lock wait (a duplicate waits as long as the first request's transaction, holding a
// connection), a bound on the business work, expiry of keys, metrics, and other storage modes.
type handwrittenServer struct {
	db *pgxpool.Pool
	// lockSpace names the key table in the lock's hash: two servers on one database, each with
	// a table of its own, never wait for each other's keys.
	lockSpace string
}

// handwrittenHandler creates the key table in schema and returns the handler.
func handwrittenHandler(pool *pgxpool.Pool, schema string) (http.Handler, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, handwrittenTableSQL); err != nil {
		return nil, fmt.Errorf("payments hand-written: create the key table handwritten_keys: %w", err)
	}
	return &handwrittenServer{db: pool, lockSpace: schema + ".handwritten_keys"}, nil
}

func (s *handwrittenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payments":
		s.createPayment(w, r)
	case r.URL.Path == "/v1/payments":
		w.Header().Set("Allow", http.MethodPost)
		writeHandwrittenProblem(w, idemhttp.NewProblem(http.StatusMethodNotAllowed, idemhttp.CodeMethodNotAllowed,
			"this server answers POST /v1/payments only"))
	default:
		writeHandwrittenProblem(w, idemhttp.NewProblem(http.StatusNotFound, idemhttp.CodeNotFound,
			"this server answers POST /v1/payments only"))
	}
}

// writeHandwrittenProblem writes p; a client that left cannot be told anything more.
func writeHandwrittenProblem(w http.ResponseWriter, p *idemhttp.Problem) { _ = p.WriteTo(w) }

// handwrittenInternal is the answer to a failure that is the server's: it names nothing of Go,
// SQL or the driver.
func handwrittenInternal() *idemhttp.Problem {
	return idemhttp.NewProblem(http.StatusInternalServerError, idemhttp.CodeInternal,
		"the payment could not be created and nothing of it was kept: retry with the same key")
}

// handwrittenLock is the advisory lock's id for a key: a 64-bit hash, so two keys that share it
// only wait for each other.
func (s *handwrittenServer) handwrittenLock(tenant, key string) int64 {
	h := fnv.New64a()
	for _, part := range []string{s.lockSpace, tenant, handwrittenScope, key} {
		_, _ = h.Write([]byte(part))
		_, _ = h.Write([]byte{0})
	}
	return int64(h.Sum64())
}

// handwrittenFingerprint is the fingerprint of a decoded create: the SHA-256 of its fields in
// declared order (the currency framed by its length), without simulate_failure.
func handwrittenFingerprint(body *api.CreatePaymentJSONRequestBody) []byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(body.AmountMinor))
	h.Write(n[:])
	binary.BigEndian.PutUint64(n[:], uint64(len(body.Currency)))
	h.Write(n[:])
	h.Write([]byte(body.Currency))
	return h.Sum(nil)
}

func (s *handwrittenServer) createPayment(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	tenant := r.Header.Get(tenantHeader)
	if tenant == "" || len(tenant) > 64 {
		writeHandwrittenProblem(w, &idemhttp.Problem{Type: "about:blank", Title: "Missing tenant", Status: http.StatusUnauthorized,
			Detail: "send the " + tenantHeader + " header (1 to 64 bytes)"})
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 {
		writeHandwrittenProblem(w, idemhttp.NewProblem(http.StatusBadRequest, idemhttp.CodeKeyMissing,
			"send an Idempotency-Key header of 1 to 255 characters"))
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, handwrittenMaxBody))
	if err != nil {
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			writeHandwrittenProblem(w, idemhttp.NewProblem(http.StatusRequestEntityTooLarge, idemhttp.CodeBodyTooLarge,
				fmt.Sprintf("the request body is larger than %d bytes", handwrittenMaxBody)))
		}
		return // a client that stopped sending its body is gone
	}
	var body api.CreatePaymentJSONRequestBody
	if err := json.Unmarshal(raw, &body); err != nil {
		writeHandwrittenProblem(w, idemhttp.NewProblem(http.StatusBadRequest, idemhttp.CodeBodyInvalid,
			"the request body is not a JSON object with amount_minor (an integer) and currency (a string)"))
		return
	}
	fp := handwrittenFingerprint(&body)

	conn, err := s.db.Acquire(ctx)
	if err != nil {
		writeHandwrittenProblem(w, handwrittenInternal())
		return
	}
	defer conn.Release() // a connection left in a transaction is closed by the pool, not reused

	// Round trip 1: BEGIN, the lock, the key's row.
	var (
		now              time.Time
		storedFP, stored []byte
		storedStatus     *int32
		storedLocation   *string
	)
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{BeginQuery: "begin /* handwritten */"})
	b.Queue(handwrittenLockSQL, s.handwrittenLock(tenant, key))
	b.Queue(handwrittenReadSQL, tenant, handwrittenScope, key).QueryRow(func(row pgx.Row) error {
		return row.Scan(&now, &storedFP, &storedStatus, &storedLocation, &stored)
	})
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		_ = tx.Rollback(ctx)
		writeHandwrittenProblem(w, handwrittenInternal())
		return
	}
	if storedStatus != nil {
		// The key has its outcome: nothing to write.
		if err := tx.Rollback(ctx); err != nil {
			writeHandwrittenProblem(w, handwrittenInternal())
			return
		}
		if string(storedFP) != string(fp) {
			writeHandwrittenProblem(w, idemhttp.NewProblem(http.StatusUnprocessableEntity, idemhttp.CodeKeyReused,
				"this Idempotency-Key was used for a different request: use a new key for a new request, or resend the original request unchanged"))
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Location", *storedLocation)
		h.Set(idemhttp.HeaderReplayed, "true")
		w.WriteHeader(int(*storedStatus))
		_, _ = w.Write(stored)
		return
	}
	if body.SimulateFailure != nil && *body.SimulateFailure {
		// The example's processor fails after the payment's rows are written, and the rollback
		// takes them back: the same outcome as writing nothing. The key stays free.
		_ = tx.Rollback(ctx)
		writeHandwrittenProblem(w, handwrittenInternal())
		return
	}

	// The answer is known before anything is written: the payment the inserts below make.
	id := paymentID(tenant, key)
	payLoc := "/v1/payments/" + id
	answer, err := json.Marshal(api.Payment{PaymentId: id, Status: "authorized", AmountMinor: body.AmountMinor,
		Currency: body.Currency, CreatedAt: now.UTC()})
	if err != nil {
		_ = tx.Rollback(ctx)
		writeHandwrittenProblem(w, handwrittenInternal())
		return
	}
	answer = append(answer, '\n') // as the example's strict server encodes it

	// Round trip 2: the work, the key's row with the outcome, COMMIT.
	committed := false
	b = &pgx.Batch{}
	b.Queue(handwrittenPaymentSQL, tenant, id, body.AmountMinor, body.Currency)
	b.Queue(handwrittenEventSQL, tenant, id, body.AmountMinor, key)
	b.Queue(handwrittenStoreSQL, tenant, handwrittenScope, key, fp, int32(http.StatusCreated), payLoc, answer)
	b.Queue(handwrittenCommitSQL).Exec(func(tag pgconn.CommandTag) error {
		committed = tag.String() == "COMMIT"
		return nil
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		_ = tx.Rollback(ctx)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.TableName == "payments":
			// A payment with this key's id and no key row: made by other means than this handler.
			writeHandwrittenProblem(w, idemhttp.NewProblem(http.StatusUnprocessableEntity, idemhttp.CodeKeyReused,
				"this Idempotency-Key already made payment "+payLoc+": GET it, or send a new key for a new request"))
		case errors.As(err, &pgErr) && pgErr.Code == "23514":
			writeHandwrittenProblem(w, idemhttp.NewProblem(http.StatusBadRequest, idemhttp.CodeRequestInvalid,
				"amount_minor must be above 0 and currency three capital letters"))
		default:
			writeHandwrittenProblem(w, handwrittenInternal())
		}
		return
	}
	if !committed {
		writeHandwrittenProblem(w, handwrittenInternal())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", payLoc)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(answer)
}

// handwrittenAnswer is one answer of the hand-written handler, read whole.
type handwrittenAnswer struct {
	status   int
	replayed bool
	location string
	body     string
	err      error
}

// handwrittenSend posts body with key as tenant to s, and reads the answer whole.
func handwrittenSend(ctx context.Context, l *load, s *benchServer, tenant, key, body string) handwrittenAnswer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/payments", strings.NewReader(body))
	if err != nil {
		return handwrittenAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if tenant != "" {
		req.Header.Set(tenantHeader, tenant)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return handwrittenAnswer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return handwrittenAnswer{status: resp.StatusCode, replayed: resp.Header.Get(idemhttp.HeaderReplayed) == "true",
		location: resp.Header.Get("Location"), body: string(b), err: err}
}

// TestHandwrittenServer checks that the hand-written handler gives the guarantees it is measured
// for, over HTTP on real PostgreSQL: a replay is the first answer byte for byte, marked; another
// body under the key is refused and changes nothing; keys are the tenant's; a failed execution
// keeps nothing and leaves the key free; identical requests released at one instant execute
// once, the others replaying it; and no answer carries Go, SQL or driver text.
func TestHandwrittenServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const clients = 16
	sch, s, l := serveBenchForTest(t, serverHandwritten, clients)
	count := func(query string, args ...any) int {
		t.Helper()
		var n int
		if err := sch.Pool.QueryRow(ctx, query, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	first := handwrittenSend(ctx, l, s, benchTenant, "k1", benchBody)
	if first.err != nil || first.status != http.StatusCreated || first.replayed {
		t.Fatalf("first create: status %d, replayed %v, error %v; want 201, not a replay: %s", first.status, first.replayed, first.err, first.body)
	}
	var p api.Payment
	if err := json.Unmarshal([]byte(first.body), &p); err != nil || p.PaymentId != paymentID(benchTenant, "k1") ||
		p.AmountMinor != 19900 || p.Currency != "RUB" || p.Status != "authorized" || first.location != "/v1/payments/"+p.PaymentId {
		t.Fatalf("first create: Location %q, body %s (%v); want the payment %s of 19900 RUB, authorized, at its location",
			first.location, first.body, err, paymentID(benchTenant, "k1"))
	}
	// The body answered is the payment's row as stored.
	var created time.Time
	if err := sch.Pool.QueryRow(ctx, `SELECT created_at FROM payments WHERE tenant_id = $1 AND payment_id = $2`,
		benchTenant, p.PaymentId).Scan(&created); err != nil || !created.Equal(p.CreatedAt) {
		t.Errorf("the payment's created_at is %v (%v); the answer said %v", created, err, p.CreatedAt)
	}

	for _, body := range []string{benchBody, "{ \"currency\":\"RUB\",\n\"amount_minor\" :19900 }"} {
		again := handwrittenSend(ctx, l, s, benchTenant, "k1", body)
		if again.err != nil || again.status != http.StatusCreated || !again.replayed || again.body != first.body || again.location != first.location {
			t.Errorf("the same key with body %s: status %d, replayed %v, Location %q, error %v, body\n%s\nwant 201, replayed, the first answer byte for byte:\n%s",
				body, again.status, again.replayed, again.location, again.err, again.body, first.body)
		}
	}
	other := handwrittenSend(ctx, l, s, benchTenant, "k1", `{"amount_minor": 1, "currency": "RUB"}`)
	if other.err != nil || other.status != http.StatusUnprocessableEntity || !strings.Contains(other.body, idemhttp.CodeKeyReused) {
		t.Errorf("the same key with another body: status %d, error %v, body %s; want 422 key-reused", other.status, other.err, other.body)
	}
	if a := handwrittenSend(ctx, l, s, "another-tenant", "k1", benchBody); a.err != nil || a.status != http.StatusCreated || a.replayed {
		t.Errorf("the same key from another tenant: status %d, replayed %v, error %v; want 201, its own payment", a.status, a.replayed, a.err)
	}
	if n := count(`SELECT count(*) FROM payment_events WHERE idempotency_key = 'k1'`); n != 2 {
		t.Errorf("%d ledger events for k1; want 2, one per tenant", n)
	}

	// A failed execution keeps nothing, and the key runs anew.
	failed := handwrittenSend(ctx, l, s, benchTenant, "k2", `{"amount_minor": 19900, "currency": "RUB", "simulate_failure": true}`)
	if failed.err != nil || failed.status != http.StatusInternalServerError || failed.replayed {
		t.Errorf("a failing create: status %d, replayed %v, error %v; want 500", failed.status, failed.replayed, failed.err)
	}
	if n := count(`SELECT count(*) FROM handwritten_keys WHERE key = 'k2'`); n != 0 {
		t.Errorf("%d key rows for a create that failed; want none", n)
	}
	if a := handwrittenSend(ctx, l, s, benchTenant, "k2", benchBody); a.err != nil || a.status != http.StatusCreated || a.replayed {
		t.Errorf("the failed key again: status %d, replayed %v, error %v; want 201, a first execution", a.status, a.replayed, a.err)
	}

	// Requests the handler refuses: no key, no tenant, a body that is not the JSON it decodes, a
	// body the business refuses, another route. None names Go, SQL or the driver.
	for _, tc := range []struct {
		name, tenant, key, body, path string
		status                        int
	}{
		{"no key", benchTenant, "", benchBody, "/v1/payments", http.StatusBadRequest},
		{"no tenant", "", "k3", benchBody, "/v1/payments", http.StatusUnauthorized},
		{"not JSON", benchTenant, "k3", `{"amount_minor": "many"`, "/v1/payments", http.StatusBadRequest},
		{"a negative amount", benchTenant, "k4", `{"amount_minor": -5, "currency": "RUB"}`, "/v1/payments", http.StatusBadRequest},
		{"another route", benchTenant, "k5", benchBody, "/v1/refunds", http.StatusNotFound},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.tenant != "" {
			req.Header.Set(tenantHeader, tc.tenant)
		}
		if tc.key != "" {
			req.Header.Set("Idempotency-Key", tc.key)
		}
		resp, err := l.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" ||
			strings.Contains(strings.ToLower(string(b)), "sqlstate") || strings.Contains(string(b), "pgx") || strings.Contains(string(b), "violates") {
			t.Errorf("%s: status %d, Content-Type %q, body %s (%v); want %d, a problem naming no SQL or driver",
				tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), b, err, tc.status)
		}
	}
	if n := count(`SELECT count(*) FROM handwritten_keys WHERE key IN ('k3', 'k4', 'k5')`); n != 0 {
		t.Errorf("%d key rows for refused requests; want none", n)
	}

	// Identical requests, released at one instant: one executes, the others replay it. So that
	// they overlap however the machine schedules them, the storm's payment is held by an
	// uncommitted insert of this test's until every connection of the server's pool waits on a
	// lock (the one executing on that payment, the others on the key), and then rolled back.
	holder, err := pgx.Connect(ctx, sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	hold, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `INSERT INTO `+pgx.Identifier{sch.Name, "payments"}.Sanitize()+
		` (tenant_id, payment_id, status, amount_minor, currency) VALUES ($1, $2, 'authorized', 1, 'RUB')`,
		benchTenant, paymentID(benchTenant, "storm")); err != nil {
		t.Fatal(err)
	}
	start := make(chan struct{})
	answers := make([]handwrittenAnswer, clients)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			<-start
			answers[i] = handwrittenSend(ctx, l, s, benchTenant, "storm", benchBody)
		})
	}
	close(start)
	poolSize := int(sch.Pool.Config().MaxConns)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		// The holder's transaction sees pg_stat_activity as it first read it, unless told to read it anew.
		waiting := 0
		if _, err := hold.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			t.Fatal(err)
		}
		if err := hold.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
			"idemtest-"+sch.Name).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == poolSize {
			break
		}
		if time.Now().After(deadline) {
			_ = hold.Rollback(ctx)
			wg.Wait()
			t.Fatalf("after 30s, %d of the server's %d connections wait on a lock; want all of them, the storm's requests", waiting, poolSize)
		}
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	executed, body := 0, ""
	for _, a := range answers {
		switch {
		case a.err != nil:
			t.Fatal(a.err)
		case a.status != http.StatusCreated:
			t.Errorf("a request of the storm got status %d: %s; want 201", a.status, a.body)
		case !a.replayed:
			executed++
			body = a.body
		}
	}
	if executed != 1 {
		t.Fatalf("%d of the storm's %d identical requests executed; want exactly 1", executed, clients)
	}
	for _, a := range answers {
		if a.body != body {
			t.Errorf("a replay in the storm answered\n%s\nwant the execution's answer byte for byte:\n%s", a.body, body)
		}
	}
	if err := checkOnce(ctx, sch.Pool, []string{"storm", "k2"}); err != nil {
		t.Error(err)
	}
	if n := count(`SELECT count(*) FROM handwritten_keys WHERE key = 'storm'`); n != 1 {
		t.Errorf("%d key rows for the storm's key; want 1", n)
	}
}
