package idem

import (
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// What a claim reads of the key's row, and the answer the row gives: a replay, a mismatch, in
// progress, uncertain, or nothing (the request may take the key).

// peeked is a remembered completed row, as the replay check read it.
type peeked struct {
	fingerprint string
	outcome     storedOutcome
	expiresLeft time.Duration
}

// scanPeek reads the replay check's row, if any (sql/replay.sql). With the replay cache on, how
// long it stays remembered is worked out on the statement's clock (wholeMillis, as the claim's
// read); without it the statement returns neither time, and nothing needs them.
func (s *Store) scanPeek(rows pgx.Rows) (*peeked, error) {
	var pk *peeked
	for rows.Next() {
		if s.cache == nil {
			pk = &peeked{}
			if err := rows.Scan(&pk.fingerprint, &pk.outcome.status, &pk.outcome.headers, &pk.outcome.body, &pk.outcome.reference); err != nil {
				return nil, err
			}
			continue
		}
		// The times are scanned into the row's own allocation: a variable whose address Scan
		// takes lives on the heap.
		row := &struct {
			peeked
			expires, now pgtype.Timestamptz
		}{}
		pk = &row.peeked
		if err := rows.Scan(&pk.fingerprint, &pk.outcome.status, &pk.outcome.headers, &pk.outcome.body, &pk.outcome.reference, &row.expires, &row.now); err != nil {
			return nil, err
		}
		pk.expiresLeft = wholeMillis(finite(row.expires).Sub(finite(row.now)))
	}
	return pk, rows.Err()
}

// result is the claim's answer for a request with fingerprint fp: the replay, or key reused. The
// row holds the fingerprint as stored text (storedText), as every statement sends it.
func (pk *peeked) result(fp string) (*claimResult, error) {
	if pk.fingerprint != storedText(fp) {
		return &claimResult{status: claimKeyReused}, nil
	}
	o, err := pk.outcome.decode()
	if err != nil {
		return nil, err
	}
	return &claimResult{status: claimReplayed, outcome: o, final: pk.expiresLeft}, nil
}

// storedOutcome is an outcome as its row stores it. The nullable columns scan into pgtype
// values, which need no allocation (a pointer target costs pgx one per scan).
type storedOutcome struct {
	status    pgtype.Int4
	headers   []byte
	body      []byte
	reference pgtype.Text
}

func (so *storedOutcome) decode() (*Outcome, error) {
	o := &Outcome{Body: so.body}
	if so.status.Valid {
		o.Status = int(so.status.Int32)
	}
	if so.reference.Valid {
		o.Reference = so.reference.String
	}
	if len(so.headers) > 0 {
		var err error
		if o.Header, err = decodeStoredHeaders(so.headers); err != nil {
			return nil, fmt.Errorf("stored headers are not a JSON object of string lists: %w", err)
		}
	}
	return o, nil
}

// scanRead reads the claim's read (sql/claim_read.sql): the answer its row gives when
// nobody may take it, and nil without a row or for one that may be taken (the write decides).
// What the row's times say is worked out here, on the read's clock (its now column), as the
// statement once did in SQL: see readRow.
func (s *Store) scanRead(rows pgx.Rows, c *Claim, t *claimTry) (*claimResult, error) {
	var res *claimResult
	for rows.Next() {
		sc := &readScan{}
		r, stored := &sc.r, &sc.stored
		if err := rows.Scan(&r.attempt, &r.sameFP, &sc.state, &stored.status, &stored.headers, &stored.body, &stored.reference,
			&sc.leaseExpires, &sc.created, &sc.expires, &sc.now, &r.providerCalled); err != nil {
			return nil, err
		}
		var err error
		if res, err = s.answer(sc, c, t); err != nil {
			return nil, err
		}
	}
	return res, rows.Err()
}

// scanLockedRead is scanRead for the narrower read of the claim under the key's lock
// (sql/claim_read_locked.sql), which leaves out the columns only a row in flight needs (attempt,
// lease expiry, first claim time). A completed row is answered as scanRead answers it; a row in
// flight sets t.inFlight and answers nothing, and the caller reads it again whole
// (sql/claim_read.sql).
func (s *Store) scanLockedRead(rows pgx.Rows, c *Claim, t *claimTry) (*claimResult, error) {
	var res *claimResult
	for rows.Next() {
		sc := &readScan{}
		r, stored := &sc.r, &sc.stored
		if err := rows.Scan(&r.sameFP, &sc.state, &stored.status, &stored.headers, &stored.body, &stored.reference,
			&sc.expires, &sc.now); err != nil {
			return nil, err
		}
		res = nil
		if sc.state != string(KeyComplete) {
			t.inFlight = true
			continue
		}
		var err error
		if res, err = s.answer(sc, c, t); err != nil {
			return nil, err
		}
	}
	return res, rows.Err()
}

// readScan is a row of the claim's read as scanned: every column in one allocation (a variable
// whose address Scan takes lives on the heap), the times as pgtype values, without a wrapper per
// column.
type readScan struct {
	r                                   readRow
	state                               string
	stored                              storedOutcome
	leaseExpires, created, expires, now pgtype.Timestamptz
}

// answer is the claim's answer from the row sc: nil when the request may take it, and records
// in t what the claim under the key's lock needs of any row found.
func (s *Store) answer(sc *readScan, c *Claim, t *claimTry) (*claimResult, error) {
	r, stored := &sc.r, &sc.stored
	r.leaseExpires, r.created = finite(sc.leaseExpires), finite(sc.created)
	r.expires, r.now = finite(sc.expires), finite(sc.now)
	r.complete, r.uncertain = sc.state == string(KeyComplete), sc.state == string(KeyUncertain)
	fresh := r.fresh()
	t.found, t.fresh, t.rowAttempt = true, fresh, r.attempt
	switch {
	case r.takeable(fresh):
		return nil, nil
	case !r.sameFP:
		return &claimResult{status: claimKeyReused}, nil
	case r.complete:
		o, err := stored.decode()
		if err != nil {
			return nil, err
		}
		return &claimResult{status: claimReplayed, outcome: o, final: wholeMillis(r.expires.Sub(r.now))}, nil
	case r.uncertain:
		return &claimResult{status: claimUncertain}, nil
	case r.providerCalled && !r.leaseExpires.After(r.now):
		// Its holder called a provider and is gone: never taken over, turned uncertain.
		return &claimResult{status: claimUncertain, abandoned: true, rowAttempt: r.attempt}, nil
	}
	left := r.leaseLeft()
	// How long the holder has run: since the key's first claim, or, after a takeover (whose
	// claim time the row does not keep), at least since its last renewal.
	elapsed := wholeMillis(r.now.Sub(r.created))
	if r.attempt > 1 {
		elapsed = max(c.Lease-left, 0)
	}
	return &claimResult{status: claimInProgress, retryAfter: s.retryIn(c.Operation, elapsed, left)}, nil
}

// readRow is the key's row as the claim's read returns it (sql/claim_read.sql), with the read's
// own clock: the times the answer needs are worked out from it, to the millisecond, as
// PostgreSQL would have (the lease's time left rounded up, the others down, none below zero).
type readRow struct {
	attempt                        int32
	sameFP, complete, uncertain    bool
	providerCalled                 bool // provider_at is set: its holder asked for a provider key
	leaseExpires, created, expires time.Time
	now                            time.Time // statement_timestamp() of the read
}

// finite is t as a time.Time that compares with others as PostgreSQL compares t: 'infinity'
// (which pgx returns with a zero Time) later than any time, '-infinity' earlier. The runtime
// never writes either, but an operator may (expires_at = 'infinity' to remember a key for good),
// and Go must then agree with the statements, which compare in SQL.
func finite(t pgtype.Timestamptz) time.Time {
	switch t.InfinityModifier {
	case pgtype.Infinity:
		return farFuture
	case pgtype.NegativeInfinity:
		return farPast
	}
	return t.Time
}

// farFuture and farPast stand for 'infinity' and '-infinity': beyond the years PostgreSQL's
// timestamps can hold (4713 BC to 294276 AD). A duration to either saturates (time.Time.Sub).
var (
	farFuture = time.Date(300000, time.January, 1, 0, 0, 0, 0, time.UTC)
	farPast   = time.Date(-5000, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// fresh says the row behaves as a new key: its TTL has run out and nobody holds it
// (sql/fragments.sql's "expired"). An uncertain row is never fresh.
func (r *readRow) fresh() bool {
	return !r.expires.After(r.now) && (r.complete || (!r.uncertain && !r.leaseExpires.After(r.now)))
}

// takeable says the request may take the row: it is fresh, or its holder's lease ran out on the
// same request and no provider call was recorded on it (sql/fragments.sql's "takeover"). A
// different request can never take over a live key's history.
func (r *readRow) takeable(fresh bool) bool {
	return fresh || (!r.complete && !r.uncertain && !r.leaseExpires.After(r.now) && r.sameFP && !r.providerCalled)
}

// leaseLeft is how long the holder's lease has left, rounded up to the millisecond.
func (r *readRow) leaseLeft() time.Duration {
	d := r.leaseExpires.Sub(r.now)
	if d <= 0 {
		return 0
	}
	if d > math.MaxInt64-time.Millisecond { // 'infinity': Sub saturated, and rounding up would overflow
		return d.Truncate(time.Millisecond)
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// wholeMillis is d rounded down to the millisecond, at least 0: a time the read's row says, as
// the statements once computed it in SQL (greatest(0, floor(… * 1000))).
func wholeMillis(d time.Duration) time.Duration {
	return max(d, 0).Truncate(time.Millisecond)
}

// RoundRetryAfter rounds d up to whole seconds, at least one: what a Retry-After header can
// say. [InProgressError.RetryAfter] is always rounded so.
func RoundRetryAfter(d time.Duration) time.Duration {
	return max((d+time.Second-1)/time.Second, 1) * time.Second
}
