package bench

// The hand-written peer BenchmarkHTTP compares the generated servers with: create made
// idempotent by hand, the way a careful engineer would write it for this one operation, on the
// ceiling's HTTP stack. It is what a user would write instead of generating, so it is the figure
// to beat.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// peerTableSQL is the peer's key table: one row per key, written once, with the outcome, by the
// business transaction. No lease, no state, no expiry index: keys are kept until a purge by
// created_at (a sequential scan, or whole partitions dropped by day), which is off the request
// path and so not part of the benchmark.
const peerTableSQL = `CREATE TABLE IF NOT EXISTS peer_keys (
	tenant      text        NOT NULL,
	key         text        NOT NULL,
	fingerprint bytea       NOT NULL,
	status      integer     NOT NULL,
	location    text        NOT NULL,
	body        bytea       NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant, key)
)`

// createKeyRowTable creates table in schema as the runtime's key table, by the runtime's own
// migrations (idem.Migrator with the table's name): the row peers store exactly the runtime's
// row (the design's columns, fillfactor 90, no expiry index, no check constraints), so that the
// difference between a peer and its row twin is the row's cost, and the difference between the
// twin and a claim mode is what the runtime does beyond writing and reading that row.
func createKeyRowTable(ctx context.Context, pool *pgxpool.Pool, schema, table string) error {
	m, err := idem.NewMigrator(pool, &idem.Config{Schema: schema, Table: table})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, idem.DirectionUp, nil)
	return err
}

// The peer's statements. Its begin and commit are its own texts, so that they are prepared
// statements like the rest (pgx prepares every query it sends in a batch under the default exec
// mode).
const (
	peerLockSQL   = `SELECT pg_advisory_xact_lock($1)`
	peerLookupSQL = `SELECT fingerprint, status, location, body FROM peer_keys WHERE tenant = $1 AND key = $2`
	peerStoreSQL  = `INSERT INTO peer_keys (tenant, key, fingerprint, status, location, body) VALUES ($1, $2, $3, $4, $5, $6)`
	peerCommitSQL = `commit /* peer */`
	// The row peer's: a remembered key's row (it has not expired), and the row written with the
	// outcome, its expiry a day on, as the example's operations keep their keys.
	peerRowLookupSQL = `SELECT fingerprint, status, headers, body FROM peer_row_keys
		WHERE tenant = $1 AND scope = '' AND key = $2 AND expires_at > statement_timestamp()`
	peerRowStoreSQL = `INSERT INTO peer_row_keys (tenant, scope, key, operation, fingerprint, state, owner_token,
		lease_expires_at, attempt, created_at, expires_at, status, headers, body, completed_at)
		VALUES ($1, '', $2, 'createPayment', $3, 'complete', $4, statement_timestamp(), 1, transaction_timestamp(),
		statement_timestamp() + interval '1 day', $5, $6, $7, statement_timestamp())`
)

// peerServer is the example's strict server with create made idempotent by hand:
//
//  1. one round trip: BEGIN, a transaction-scoped advisory lock on (tenant, key), and a read of
//     the key's row. The lock makes concurrent duplicates wait for the holder's transaction, so
//     the read after it sees the holder's committed outcome, or no row when it rolled back;
//  2. a stored row answers at once (a replay, or key-reused for another body) and the
//     transaction is rolled back: two round trips in all;
//  3. otherwise the business work runs in the same transaction (the ceiling's two statements,
//     pipelined in one round trip), and one more round trip inserts the key row with the
//     outcome and commits: three round trips, the ceiling's, and a key row written once.
//
// The outcome commits with the business rows or not at all; a duplicate storm executes once
// (the storm row checks it). What it leaves out, because this one handler does not need it: a
// lease (nothing is committed before the work, so there is nothing to take over or fence), an
// in-progress answer (duplicates wait on the lock, holding a connection each), expiry, waiting
// without a connection, and observability.
//
// With row set it is the row peer (server "peer-row"): the same handler storing the runtime's
// key row (createKeyRowTable) instead of its own narrow one: the fingerprint as hex text, the
// Content-Type and Location as jsonb headers, a random owner token, the operation, state,
// times and expiry.
//
// With guarded set as well it is the guarded row peer (server "peer-row-guarded"): the row peer
// with the guarantees the runtime gives every request beyond reading and writing that row,
// written the way a careful engineer would write them by hand, so that what the runtime adds on
// top of the row twin can be split into what those guarantees cost anyone and what the runtime's
// own code costs:
//   - the design's fingerprint: the route, the declared X-Tenant-Id header and the body as the
//     client sent it, in canonical JSON (key order and white space do not count) without the
//     excluded /simulate_failure, hashed with the frames that keep parts apart. It uses the
//     runtime's exported Fingerprinter (the bytes the generated server stores for the same
//     request, TestGuardedPeerFingerprintsAsTheRuntime), as a hand-written handler under the
//     same contract would rather than write a canonical JSON encoder of its own;
//   - the claim (the pool's connection and the claim's round trip) bounded by context.WithTimeout
//     (idem.DefaultStoreTimeout), so that a database that does not answer fails the request with
//     503 store-unavailable rather than holding it, as the runtime answers;
//   - the business work under the operation's timeout (a minute): a context.WithTimeoutCause
//     the work runs under, and work that returns after it is rolled back and answered 503
//     handler-timeout, as the runtime answers.
type peerServer struct {
	api.StrictServerInterface
	db      *pgxpool.Pool
	row     bool
	guarded bool
}

// errPeerHandlerTimeout is the guarded row peer's handler timeout (the cause of its context). It
// wraps idem.ErrHandlerTimeout, which the example's error handler answers as the runtime's.
var errPeerHandlerTimeout = fmt.Errorf("payments peer: the business work ran past its timeout: %w", idem.ErrHandlerTimeout)

// peerCreateTimeout is the guarded row peer's handler timeout: createPayment's, as the example's
// spec gives it (x-idempotency's default).
const peerCreateTimeout = time.Minute

// peerAnswer is the peer's response: the stored outcome on a replay, and on a first execution
// the same bytes it stores.
type peerAnswer struct {
	status   int
	location string
	body     []byte
	replayed bool
}

func (a peerAnswer) VisitCreatePaymentResponse(w http.ResponseWriter) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", a.location)
	if a.replayed {
		h.Set(idemhttp.HeaderReplayed, "true")
	}
	w.WriteHeader(a.status)
	_, err := w.Write(a.body)
	return err
}

// peerRequest is what both hand-written peers read from a create first: the tenant, the key and,
// with hash set, the body's fingerprint; or the answer when the request has no key (answer not
// nil).
func peerRequest(ctx context.Context, who string, req api.CreatePaymentRequestObject, hash bool) (tenant, key string, fp [sha256.Size]byte, answer api.CreatePaymentResponseObject, err error) {
	tenant, ok := payments.TenantFrom(ctx)
	if !ok {
		return "", "", fp, nil, fmt.Errorf("payments %s: no tenant in the request context (is requireTenant installed?)", who)
	}
	if req.Params.IdempotencyKey == nil || *req.Params.IdempotencyKey == "" {
		return "", "", fp, problemResponse{idemhttp.NewProblem(http.StatusBadRequest, idemhttp.CodeRequestInvalid,
			"send an Idempotency-Key header")}, nil
	}
	if hash {
		fp, err = peerFingerprint(req.Body)
	}
	return tenant, *req.Params.IdempotencyKey, fp, nil, err
}

// guardedFingerprint is the guarded row peer's fingerprint, in hex: the design's, of the route,
// the declared X-Tenant-Id header and the body as the client sent it (the example's stack
// captures it), as the generated server computes it for createPayment. A body the fingerprint
// cannot read (data after the JSON value, a member twice) is the client's fault, and its error
// an *idem.BodyError; a body that was not captured is the server's.
func guardedFingerprint(ctx context.Context, req api.CreatePaymentRequestObject) (string, error) {
	f := idem.NewFingerprinter("POST /v1/payments")
	if err := f.Add("header:X-Tenant-Id", req.Params.XTenantID); err != nil {
		return "", err
	}
	body, ok := idemhttp.BodyFromContext(ctx)
	if !ok {
		return "", errors.New("payments peer: the request body was not captured (is idemhttp.Capture installed?)")
	}
	if len(body.Bytes) > 0 {
		if err := f.RawBody(body.ContentType, body.Bytes, "/simulate_failure"); err != nil {
			return "", err
		}
	}
	return f.Sum(), nil
}

// claimError is err from the peer's claim under ctx: wrapped with idem.ErrStoreUnavailable when
// the claim's own bound ran out (the example's error handler answers it as the runtime's 503).
func claimError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("payments peer: claim key: %w: %w", idem.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("payments peer: claim key: %w", err)
}

// peerFingerprint is the peers' fingerprint of a create's body: the SHA-256 of its fields in
// their declared order, so the same request gives the same bytes.
func peerFingerprint(body *api.CreatePaymentJSONRequestBody) ([sha256.Size]byte, error) {
	canon, err := json.Marshal(body)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(canon), nil
}

func (s peerServer) CreatePayment(ctx context.Context, req api.CreatePaymentRequestObject) (api.CreatePaymentResponseObject, error) {
	tenant, key, fp, answer, err := peerRequest(ctx, "peer", req, !s.guarded)
	if answer != nil || err != nil {
		return answer, err
	}
	var hexFP string
	if s.guarded {
		if hexFP, err = guardedFingerprint(ctx, req); err != nil {
			var bad *idem.BodyError
			if errors.As(err, &bad) {
				return problemResponse{idemhttp.NewProblem(http.StatusBadRequest, idemhttp.CodeBodyInvalid,
					"the request body is malformed: "+bad.Reason)}, nil
			}
			return nil, err
		}
	} else if s.row {
		hexFP = hex.EncodeToString(fp[:])
	}

	// The guarded peer bounds its claim, the connection's wait included, as the runtime does.
	claimCtx, endClaim := ctx, context.CancelFunc(nil)
	if s.guarded {
		claimCtx, endClaim = context.WithTimeout(ctx, idem.DefaultStoreTimeout)
	}
	conn, err := s.db.Acquire(claimCtx)
	if err != nil {
		if endClaim != nil {
			endClaim()
		}
		return nil, claimError(claimCtx, err)
	}
	defer conn.Release() // a connection left in a transaction is closed by the pool, not reused
	var (
		found  bool
		stored peerAnswer
		sumFP  []byte
	)
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{BeginQuery: "begin /* peer */"})
	// The lock is named by a 64-bit hash of the tenant and the key: two keys that share it only
	// wait for each other.
	lock := fnv.New64a()
	lock.Write([]byte(tenant))
	lock.Write([]byte{0})
	lock.Write([]byte(key))
	b.Queue(peerLockSQL, int64(lock.Sum64()))
	if s.row {
		b.Queue(peerRowLookupSQL, tenant, key).QueryRow(func(row pgx.Row) error {
			var (
				st      int32
				fpText  string
				headers []byte
			)
			err := row.Scan(&fpText, &st, &headers, &stored.body)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			var h map[string][]string
			if err := json.Unmarshal(headers, &h); err != nil {
				return err
			}
			if loc := h["Location"]; len(loc) == 1 {
				stored.location = loc[0]
			}
			found, stored.status, sumFP = true, int(st), []byte(fpText)
			return nil
		})
	} else {
		b.Queue(peerLookupSQL, tenant, key).QueryRow(func(row pgx.Row) error {
			var st int32
			err := row.Scan(&sumFP, &st, &stored.location, &stored.body)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			found, stored.status = err == nil, int(st)
			return err
		})
	}
	br := conn.SendBatch(claimCtx, b)
	tx := br.Tx()
	err = br.Close()
	if err != nil {
		err = claimError(claimCtx, err)
	}
	if endClaim != nil {
		endClaim()
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	if found {
		if err := tx.Rollback(ctx); err != nil {
			return nil, err
		}
		same := bytes.Equal(sumFP, fp[:])
		if s.row {
			same = string(sumFP) == hexFP
		}
		if !same {
			return problemResponse{idemhttp.NewProblem(http.StatusUnprocessableEntity, idemhttp.CodeKeyReused,
				"this Idempotency-Key was used for a different request")}, nil
		}
		stored.replayed = true
		return stored, nil
	}

	hctx, endWork := ctx, context.CancelFunc(nil)
	if s.guarded {
		hctx, endWork = context.WithTimeoutCause(ctx, peerCreateTimeout, errPeerHandlerTimeout)
	}
	work := &heldTx{Tx: tx} // its writes travel with the key row and the COMMIT
	resp, err := payments.CreatePaymentTx(hctx, work, tenant, key, req.Body)
	if endWork != nil {
		endWork() // the cause cannot change after this: the work returned in time, or did not
		if errors.Is(context.Cause(hctx), errPeerHandlerTimeout) {
			_ = tx.Rollback(ctx)
			return nil, errPeerHandlerTimeout
		}
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	created, ok := resp.(api.CreatePayment201JSONResponse)
	if !ok { // an answer that is not stored (the key made a payment whose record is gone)
		_ = tx.Rollback(ctx)
		return resp, nil
	}
	out := peerAnswer{status: http.StatusCreated, location: *created.Headers.Location}
	if out.body, err = json.Marshal(created.Body); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	b = &pgx.Batch{}
	work.queueHeld(b)
	if s.row {
		var owner pgtype.UUID
		if _, err := rand.Read(owner.Bytes[:]); err != nil {
			_ = tx.Rollback(ctx)
			return nil, err
		}
		owner.Valid = true
		loc, err := json.Marshal(out.location)
		if err != nil {
			_ = tx.Rollback(ctx)
			return nil, err
		}
		headers := append(append([]byte(`{"Content-Type":["application/json"],"Location":[`), loc...), "]}"...)
		b.Queue(peerRowStoreSQL, tenant, key, hexFP, owner, int32(out.status), headers, out.body)
	} else {
		b.Queue(peerStoreSQL, tenant, key, fp[:], out.status, out.location, out.body)
	}
	committed := false
	b.Queue(peerCommitSQL).Exec(func(tag pgconn.CommandTag) error {
		committed = tag.String() == "COMMIT"
		return nil
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		_ = tx.Rollback(ctx)
		if prob := heldRefusal(err); prob != nil {
			return problemResponse{prob}, nil
		}
		return nil, fmt.Errorf("payments peer: the work, the outcome and the commit: %w", err)
	}
	if !committed {
		return nil, errors.New("payments peer: the commit did not commit")
	}
	return out, nil
}

// peerHandler is ceilingHandler with create served by peerServer (the row peer with row set, the
// guarded row peer with guarded set), whose key table it creates.
func peerHandler(pool *pgxpool.Pool, schema string, log *slog.Logger, row, guarded bool) (http.Handler, error) {
	row = row || guarded // each server has a schema of its own: the guarded peer's table is peer_row_keys too
	return peerStack(pool, schema, log, "peer", peerTableSQL, row, func(inner api.StrictServerInterface) api.StrictServerInterface {
		return peerServer{StrictServerInterface: inner, db: pool, row: row, guarded: guarded}
	})
}

// peerStack creates a hand-written peer's key table: <name>_keys with ddl, or for a row twin (row)
// <name>_row_keys as the runtime's key table (createKeyRowTable); and returns ceilingHandler's
// stack with create served by the strict server wrap returns.
func peerStack(pool *pgxpool.Pool, schema string, log *slog.Logger, name, ddl string, row bool,
	wrap func(inner api.StrictServerInterface) api.StrictServerInterface) (http.Handler, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	table := name + "_keys"
	var err error
	if row {
		table = name + "_row_keys"
		err = createKeyRowTable(ctx, pool, schema, table)
	} else {
		_, err = pool.Exec(ctx, ddl)
	}
	if err != nil {
		return nil, fmt.Errorf("payments: create the hand-written peer's key table %s: %w", table, err)
	}
	return stackFor(pool, schema, log, wrap)
}
