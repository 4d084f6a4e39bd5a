package bench

// The hand-written lease peer: create made idempotent by hand with what claim: lease gives and
// the hand-written peer (peer_test.go) does not, written as a careful engineer would for
// this one operation. The claim is committed before the work, so the work could call a payment
// provider outside any transaction; a claim abandoned by a crashed instance is taken over once
// its lease runs out; and a completion is fenced, so an owner whose claim was taken over cannot
// commit its work. It is the figure lease mode's rows are compared with besides the peer: the
// peer holds a transaction (and a lock) for the whole request, which lease mode exists to avoid,
// so the peer's speed is not a limit a lease can reach, and this peer's is.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// peerLeaseTableSQL is the lease peer's key table: one row per key, inserted in flight by the
// claim and updated with the outcome by the business transaction. Only the columns this
// operation needs: no operation name, no attempt count, no headers but the Location, no expiry
// (keys are kept until a purge by created_at, off the request path). A tenth of each page is
// left free so that the completion's update can be a HOT update (no new index entry).
const peerLeaseTableSQL = `CREATE TABLE IF NOT EXISTS peer_lease_keys (
	tenant      text        NOT NULL,
	key         text        NOT NULL,
	fingerprint bytea       NOT NULL,
	owner       bigint      NOT NULL,
	lease_until timestamptz NOT NULL,
	status      integer,
	location    text,
	body        bytea,
	created_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant, key)
) WITH (fillfactor = 90)`

// peerLease is the lease peer's lease: the example's (openapi.yaml, lease: 60s). A request's
// work takes milliseconds, so it is not renewed.
const peerLease = "60 seconds"

// The lease peer's statements, each prepared like the rest (see peer_test.go).
const (
	peerLeaseBeginSQL  = `begin /* peer-lease */`
	peerLeaseCommitSQL = `commit /* peer-lease */`
	// The claim wins a key nobody has. Its commit need not wait for its flush: the business
	// transaction's commit, which does, flushes the WAL up to it (the claim is earlier in the
	// same WAL), and a crash before that loses the claim together with all its work (the same
	// reasoning as lease mode's claim). The insert's condition turns synchronous_commit off for
	// the claim's transaction: cheaper for PostgreSQL than a SET LOCAL statement of its own.
	peerLeaseClaimSQL = `INSERT INTO peer_lease_keys (tenant, key, fingerprint, owner, lease_until)
SELECT $1, $2, $3, $4, now() + interval '` + peerLease + `'
WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL
ON CONFLICT (tenant, key) DO NOTHING`
	// The key's row after the claim: this request's own when the claim won it.
	peerLeaseLookupSQL = `SELECT fingerprint, owner, status, location, body, lease_until < now() FROM peer_lease_keys WHERE tenant = $1 AND key = $2`
	// A takeover's transaction commits asynchronously too.
	peerLeaseSyncOffSQL = `SET LOCAL synchronous_commit = off`
	// A takeover: only a row still in flight whose lease ran out, for the same request.
	peerLeaseTakeoverSQL = `UPDATE peer_lease_keys SET owner = $3, lease_until = now() + interval '` + peerLease + `'
WHERE tenant = $1 AND key = $2 AND status IS NULL AND lease_until < now() AND fingerprint = $4`
	// The fenced completion: it fails (division by zero) unless this request still owns the
	// claim, so the COMMIT queued behind it in the same round trip cannot commit the work.
	peerLeaseCompleteSQL = `WITH done AS (
	UPDATE peer_lease_keys SET status = $4, location = $5, body = $6
	WHERE tenant = $1 AND key = $2 AND owner = $3 AND status IS NULL RETURNING 1
) SELECT 1 / count(*)::int FROM done`
	// The claim given back when the work did not produce an answer to store.
	peerLeaseReleaseSQL = `DELETE FROM peer_lease_keys WHERE tenant = $1 AND key = $2 AND owner = $3 AND status IS NULL`
)

// The lease peer's statements on the runtime's key row (peerLeaseServer with row set): the same
// statements, on a table of the runtime's key row (createKeyRowTable) under a name of its own. The claim also writes the operation, state, attempt and expiry (a day after the lease
// at most: the latest the work can complete, plus the example's TTL); the completion sets the
// state and the completion time and stores the Content-Type and Location as jsonb headers.
const (
	peerLeaseRowClaimSQL = `INSERT INTO peer_lease_row_keys (tenant, scope, key, operation, fingerprint, state, owner_token,
	lease_expires_at, attempt, created_at, expires_at)
SELECT $1, '', $2, 'createPayment', $3, 'in_flight', $4, now() + interval '` + peerLease + `', 1, now(),
	now() + interval '1 day' + interval '` + peerLease + `'
WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL
ON CONFLICT (tenant, scope, key) DO NOTHING`
	peerLeaseRowLookupSQL = `SELECT fingerprint, owner_token, status, headers, body, lease_expires_at < now()
FROM peer_lease_row_keys WHERE tenant = $1 AND scope = '' AND key = $2`
	peerLeaseRowTakeoverSQL = `UPDATE peer_lease_row_keys SET owner_token = $3, attempt = attempt + 1,
	lease_expires_at = now() + interval '` + peerLease + `'
WHERE tenant = $1 AND scope = '' AND key = $2 AND state = 'in_flight' AND lease_expires_at < now() AND fingerprint = $4`
	peerLeaseRowCompleteSQL = `WITH done AS (
	UPDATE peer_lease_row_keys SET state = 'complete', status = $4, headers = $5, body = $6, completed_at = now()
	WHERE tenant = $1 AND scope = '' AND key = $2 AND owner_token = $3 AND state = 'in_flight' RETURNING 1
) SELECT 1 / count(*)::int FROM done`
	peerLeaseRowReleaseSQL = `DELETE FROM peer_lease_row_keys WHERE tenant = $1 AND scope = '' AND key = $2 AND owner_token = $3
	AND state = 'in_flight'`
)

// peerLeaseServer is the example's strict server with create made idempotent by hand, with a
// lease:
//
//  1. one round trip: the claim's own transaction (BEGIN, an insert that wins a key nobody has
//     and commits asynchronously, the key's row as it now is, COMMIT), then the business BEGIN;
//  2. the row is this request's: the business work runs, and one more round trip stores the
//     outcome, fenced, and commits: three round trips (the work is one), the ceiling's;
//  3. a completed row answers (a replay, or key-reused for another body); a row in flight for
//     another body is key-reused, for the same body in-progress (409), unless its lease ran
//     out: then a second round trip takes it over. The business transaction begun for nothing
//     is rolled back.
//
// With row set it is the lease row peer (server "peer-lease-row"): the same handler on the
// runtime's key row (peerLeaseRow*SQL): a hex fingerprint, a uuid owner token, jsonb headers.
type peerLeaseServer struct {
	api.StrictServerInterface
	db  *pgxpool.Pool
	row bool
}

type peerLeaseRow struct {
	fp       []byte
	owner    int64
	status   *int32
	location *string
	body     []byte
	expired  bool
	// The row peer's: its fingerprint, owner and headers.
	fpText    string
	ownerUUID pgtype.UUID
	headers   []byte
}

func (s peerLeaseServer) CreatePayment(ctx context.Context, req api.CreatePaymentRequestObject) (api.CreatePaymentResponseObject, error) {
	tenant, key, fp, answer, err := peerRequest(ctx, "lease peer", req, true)
	if answer != nil || err != nil {
		return answer, err
	}
	// The owner and the fingerprint as this peer's table stores them.
	var (
		owner          any
		ownerID        int64
		ownerUUID      pgtype.UUID
		fpArg          any = fp[:]
		hexFP          string
		claimSQL       = peerLeaseClaimSQL
		lookupSQL      = peerLeaseLookupSQL
		takeoverSQL    = peerLeaseTakeoverSQL
		completeSQL    = peerLeaseCompleteSQL
		ob             [16]byte
		row            peerLeaseRow
		found, isOwner bool
	)
	if _, err := rand.Read(ob[:]); err != nil {
		return nil, err
	}
	if s.row {
		ownerUUID = pgtype.UUID{Bytes: ob, Valid: true}
		hexFP = hex.EncodeToString(fp[:])
		owner, fpArg = ownerUUID, hexFP
		claimSQL, lookupSQL, takeoverSQL, completeSQL = peerLeaseRowClaimSQL, peerLeaseRowLookupSQL, peerLeaseRowTakeoverSQL, peerLeaseRowCompleteSQL
	} else {
		ownerID = int64(binary.LittleEndian.Uint64(ob[:8]))
		owner = ownerID
	}

	conn, err := s.db.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release() // a connection left in a transaction is closed by the pool, not reused

	committed := false
	tx, err := peerLeaseBatch(ctx, conn, func(b *pgx.Batch) {
		b.Queue(peerLeaseBeginSQL)
		b.Queue(claimSQL, tenant, key, fpArg, owner)
		b.Queue(lookupSQL, tenant, key).QueryRow(func(r pgx.Row) error {
			var err error
			if s.row {
				err = r.Scan(&row.fpText, &row.ownerUUID, &row.status, &row.headers, &row.body, &row.expired)
			} else {
				err = r.Scan(&row.fp, &row.owner, &row.status, &row.location, &row.body, &row.expired)
			}
			found = err == nil
			return err
		})
		b.Queue(peerLeaseCommitSQL).Exec(func(tag pgconn.CommandTag) error {
			committed = tag.String() == "COMMIT"
			return nil
		})
	})
	if err != nil || !committed || !found {
		s.release(tenant, key, owner)
		return nil, fmt.Errorf("payments lease peer: claim key: %v (committed %v, row found %v)", err, committed, found)
	}
	sameFP := bytes.Equal(row.fp, fp[:])
	if s.row {
		isOwner, sameFP = row.ownerUUID == ownerUUID, row.fpText == hexFP
	} else {
		isOwner = row.owner == ownerID
	}
	if !isOwner {
		if err := tx.Rollback(ctx); err != nil {
			return nil, err
		}
		switch {
		case !sameFP:
			return problemResponse{idemhttp.NewProblem(http.StatusUnprocessableEntity, idemhttp.CodeKeyReused,
				"this Idempotency-Key was used for a different request")}, nil
		case row.status != nil:
			stored := peerAnswer{status: int(*row.status), body: row.body, replayed: true}
			if s.row {
				var h map[string][]string
				if err := json.Unmarshal(row.headers, &h); err != nil {
					return nil, err
				}
				if loc := h["Location"]; len(loc) == 1 {
					stored.location = loc[0]
				}
			} else {
				stored.location = *row.location
			}
			return stored, nil
		case !row.expired:
			return problemResponse{idemhttp.NewProblem(http.StatusConflict, idemhttp.CodeInProgress,
				"a request with this Idempotency-Key is in progress; retry later")}, nil
		}
		// Abandoned: take it over, in a round trip of its own (rare: its owner crashed).
		won := false
		committed = false
		if tx, err = peerLeaseBatch(ctx, conn, func(b *pgx.Batch) {
			b.Queue(peerLeaseBeginSQL)
			b.Queue(peerLeaseSyncOffSQL)
			b.Queue(takeoverSQL, tenant, key, owner, fpArg).Exec(func(tag pgconn.CommandTag) error {
				won = tag.RowsAffected() == 1
				return nil
			})
			b.Queue(peerLeaseCommitSQL).Exec(func(tag pgconn.CommandTag) error {
				committed = tag.String() == "COMMIT"
				return nil
			})
		}); err != nil || !committed {
			s.release(tenant, key, owner)
			return nil, fmt.Errorf("payments lease peer: take the key over: %v (committed %v)", err, committed)
		}
		if !won { // somebody else took it over, or completed it, meanwhile
			if err := tx.Rollback(ctx); err != nil {
				return nil, err
			}
			return problemResponse{idemhttp.NewProblem(http.StatusConflict, idemhttp.CodeInProgress,
				"a request with this Idempotency-Key is in progress; retry later")}, nil
		}
	}

	// The claim is this request's and committed: the business work, then the fenced outcome.
	work := &heldTx{Tx: tx} // its writes travel with the outcome and the COMMIT
	resp, err := payments.CreatePaymentTx(ctx, work, tenant, key, req.Body)
	if err != nil {
		_ = tx.Rollback(ctx)
		s.release(tenant, key, owner)
		return nil, err
	}
	created, ok := resp.(api.CreatePayment201JSONResponse)
	if !ok {
		_ = tx.Rollback(ctx)
		s.release(tenant, key, owner)
		return resp, nil
	}
	out := peerAnswer{status: http.StatusCreated, location: *created.Headers.Location}
	if out.body, err = json.Marshal(created.Body); err != nil {
		_ = tx.Rollback(ctx)
		s.release(tenant, key, owner)
		return nil, err
	}
	var stored any = out.location
	if s.row {
		loc, err := json.Marshal(out.location)
		if err != nil {
			_ = tx.Rollback(ctx)
			s.release(tenant, key, owner)
			return nil, err
		}
		stored = append(append([]byte(`{"Content-Type":["application/json"],"Location":[`), loc...), "]}"...)
	}
	b := &pgx.Batch{}
	work.queueHeld(b)
	b.Queue(completeSQL, tenant, key, owner, out.status, stored, out.body)
	committed = false
	b.Queue(peerLeaseCommitSQL).Exec(func(tag pgconn.CommandTag) error {
		committed = tag.String() == "COMMIT"
		return nil
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		_ = tx.Rollback(ctx)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "22012" { // the fence: the claim was taken over
			return problemResponse{idemhttp.NewProblem(http.StatusConflict, idemhttp.CodeInProgress,
				"this request's claim was taken over by another; retry later")}, nil
		}
		s.release(tenant, key, owner)
		if prob := heldRefusal(err); prob != nil {
			return problemResponse{prob}, nil
		}
		return nil, fmt.Errorf("payments lease peer: store the outcome and commit: %w", err)
	}
	if !committed {
		return nil, errors.New("payments lease peer: the commit did not commit")
	}
	return out, nil
}

// peerLeaseBatch sends the claim's statements that queue puts in a batch, then the business
// BEGIN, in one round trip, and returns the business transaction.
func peerLeaseBatch(ctx context.Context, conn *pgxpool.Conn, queue func(b *pgx.Batch)) (pgx.Tx, error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{BeginQuery: peerLeaseBeginSQL})
	// Batch.BeginTx wants its BEGIN queued first; the claim goes in front of it afterwards.
	a := &pgx.Batch{}
	queue(a)
	b.QueuedQueries = append(a.QueuedQueries, b.QueuedQueries...)
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	err := br.Close()
	if err != nil && tx != nil {
		_ = tx.Rollback(ctx)
	}
	return tx, err
}

// release gives back a claim whose work stored no answer, so that a retry runs again at once
// instead of waiting for the lease. It runs on a connection of its own, after the request's.
func (s peerLeaseServer) release(tenant, key string, owner any) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	release := peerLeaseReleaseSQL
	if s.row {
		release = peerLeaseRowReleaseSQL
	}
	_, _ = s.db.Exec(ctx, release, tenant, key, owner)
}

// peerLeaseHandler is ceilingHandler with create served by peerLeaseServer (the lease row peer
// with row set), whose key table it creates.
func peerLeaseHandler(pool *pgxpool.Pool, schema string, log *slog.Logger, row bool) (http.Handler, error) {
	return peerStack(pool, schema, log, "peer_lease", peerLeaseTableSQL, row, func(inner api.StrictServerInterface) api.StrictServerInterface {
		return peerLeaseServer{StrictServerInterface: inner, db: pool, row: row}
	})
}
