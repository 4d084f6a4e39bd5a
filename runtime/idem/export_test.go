package idem

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DisableRenewal stops s from renewing leases, so a test can let a lease run out under a live
// handler (the fencing test).
func DisableRenewal(s *Store) { s.noRenew = true }

// SameLockForEveryKey gives every key of s one advisory lock id, as if all their ids collided.
func SameLockForEveryKey(s *Store) { s.oneLock = true }

// HoldTheLockOfEveryKey takes, in tx, the one advisory lock id every key of s has after
// SameLockForEveryKey.
func HoldTheLockOfEveryKey(ctx context.Context, s *Store, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.lockOf(rowID{}))
	return err
}

// SetNotifyAfter sets how long a transaction-mode claim under the key's lock must have been held
// for its completion to notify waiters.
func SetNotifyAfter(s *Store, d time.Duration) { s.notifyAfter = d }

// KeepOwedRollbacks keeps the connections whose rollback s owes until its next batch or Close,
// so that a test counting round trips never sees the sweeper's own ROLLBACK.
func KeepOwedRollbacks(s *Store) { s.owedAge = time.Hour }

// SettleOwedRollbacks rolls back now every connection whose rollback s owes.
func SettleOwedRollbacks(s *Store) { s.settleOwed(true) }

// The claim's building blocks, exposed to the tests of the state machine.

type ClaimParams = DoParams

type ClaimStatus = claimStatus

const (
	ClaimAcquired   = claimAcquired
	ClaimTakenOver  = claimTakenOver
	ClaimReplayed   = claimReplayed
	ClaimInProgress = claimInProgress
	ClaimKeyReused  = claimKeyReused
)

type ClaimResult struct {
	Status     ClaimStatus
	Claim      *Claim
	Outcome    *Outcome
	RetryAfter time.Duration
}

func (s *Store) Claim(ctx context.Context, p *DoParams) (*ClaimResult, error) {
	a := s.claim(ctx, p)
	if err := s.settleAttempt(ctx, p, &a); err != nil {
		return nil, err
	}
	r := a.res
	return &ClaimResult{Status: r.status, Claim: r.claim, Outcome: r.outcome, RetryAfter: r.retryAfter}, nil
}

func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, c *Claim, o *Outcome, ttl time.Duration) error {
	args, err := s.completeArgs(c, o, orDefault(ttl, DefaultTTL))
	if err != nil {
		return err
	}
	return s.complete(ctx, tx, c, args)
}

func (s *Store) Renew(ctx context.Context, c *Claim, lease time.Duration) error {
	cc := *c
	cc.Lease = orDefault(lease, DefaultLease)
	return s.renew(ctx, &cc)
}

func (s *Store) Release(ctx context.Context, c *Claim) error {
	_, err := s.apply(ctx, s.givenBack(c, EventReleased, whyAbandoned, 0))
	return err
}

// ReleaseSQL is the statement that releases a key, for tests that make it fail.
func ReleaseSQL(s *Store) string { return s.sql.release }

// NoReleaseRetry turns the background retry of failed releases off, so a test sees what a
// later claim does on its own.
func NoReleaseRetry(s *Store) { s.bg.noRetry = true }

// CanonicalJSON exposes the fingerprint's JSON canonicalisation to its tests.
var CanonicalJSON = canonicalJSON

// CanonicalScalar exposes the fingerprint's fast path for scalar parts to its tests.
var CanonicalScalar = canonicalScalar

// SetFallbackPoll sets how often a waiting duplicate claims again while notifications arrive, so
// a test can tell waking by notification from waking by poll.
func SetFallbackPoll(s *Store, d time.Duration) { s.fallbackPoll = d }

// Listening reports whether s's listener receives notifications now.
func Listening(s *Store) bool {
	if s.ln == nil {
		return false
	}
	s.ln.mu.Lock()
	defer s.ln.mu.Unlock()
	return s.ln.up
}

// ObserveHandlerTime feeds s's estimate of op's handler time, as a run of d would.
func ObserveHandlerTime(s *Store, op string, d time.Duration) { s.est.observe(op, d) }

// ClaimSQL is the statement every try of a claim sends first on the path it takes (the lock, or
// the fast path's insert), for tests that count claims.
func ClaimSQL(s *Store, m ClaimMode) string {
	if _, advisory := s.topo.Load().tx.(txAdvisoryLock); m == ClaimTransaction && advisory {
		return s.sql.claimLock
	}
	if _, plain := s.set().(plainSet); m == ClaimLease && plain {
		return s.sql.claimFastLease
	}
	return s.sql.claimFast
}

// Asleep is how many of s's waiters sleep until a notification, having found nothing new since
// their last claim.
func Asleep(s *Store) int64 {
	if s.ln == nil {
		return 0
	}
	return s.ln.asleep.Load()
}

// BlindReplayCheck makes s's transaction-mode replay check find nothing while its guard still
// sees the completed row: what happens when the key completes between the two.
func BlindReplayCheck(s *Store) { s.sql.replay += " AND false" }

// SetOwnerGuard replaces s's lease-mode owner guard (sql/owner_guard.sql), so a test can make it
// disagree with the claim or fail.
func SetOwnerGuard(s *Store, sql string) { s.sql.ownerGuard = sql }

// RecordClaimSetting makes s's lease-mode fast claim (sql/claim_fast.sql, and on plain
// PostgreSQL sql/claim_fast_lease.sql) store the value the claim's transaction has for setting
// after the key's operation, so a test can see the claim's own settings in the key's row.
func RecordClaimSetting(s *Store, setting string) {
	record := "$5::text || ' ' || current_setting('" + setting + "'),"
	s.sql.claimFast = strings.Replace(s.sql.claimFast, "VALUES ($1, $2, $3, $5,", "VALUES ($1, $2, $3, "+record, 1)
	s.sql.claimFastLease = strings.Replace(s.sql.claimFastLease, "SELECT $1, $2, $3, $5,", "SELECT $1, $2, $3, "+record, 1)
}

// ClaimUnderTenant is c presented under another tenant, for tests that check every statement
// names the tenant.
func ClaimUnderTenant(c *Claim, tenant string) *Claim {
	cc := *c
	cc.Tenant = tenant
	cc.row.tenant = storedText(tenant)
	cc.argv = append([]any(nil), c.argv...)
	cc.argv[0] = cc.row.tenant
	if c.read != nil {
		cc.read = append([]any(nil), c.read...)
		cc.read[0] = cc.row.tenant
	}
	cc.spare = nil // c's own: cc's completion makes its own
	return &cc
}

// StoredText exposes how the key table stores a tenant, scope or key.
var StoredText = storedText

// UnmadeClaim is a claim of p's key that was never made: what a duplicate whose claim batch
// failed before reaching the server holds.
func UnmadeClaim(p *DoParams) *Claim { return newClaimWith(nil, p, newToken(), true) }

// Abandon remembers c as a claim s gave up but could not give back (a failed release).
func Abandon(s *Store, c *Claim) { s.abandon(s.givenBack(c, EventReleased, whyAbandoned, 0)) }

// Channel is the channel s's completions and releases notify waiting duplicates on, and
// NotifyPayload the payload that names p's key there.
func Channel(s *Store) string          { return s.channel }
func NotifyPayload(p *DoParams) string { return notifyID(rowOf(p)) }

// TxLockWait is the shortest wait on a transaction-mode claim's advisory lock that can run out
// while its waiter still waits.
const TxLockWait = txLockWait

// ClaimLockSQL is transaction mode's lock statement with its bounded wait (sql/claim_lock_wait.sql) and LockID the lock id
// it takes for p's key, for tests that send it themselves.
func ClaimLockSQL(s *Store) string { return s.sql.claimLockWait }

func LockID(s *Store, p *DoParams) int64 {
	return s.lockOf(rowOf(p))
}

// Owe hands conn to s as a connection whose rollback s owes, as a replay's claim does; false
// when s may keep no more (the caller then still holds conn).
func Owe(s *Store, conn *pgxpool.Conn) bool { return s.owed.push(s, conn) }

// ClaimPath names the claim path s takes in claim mode m (claimpath.go), or "" before its
// topology is known.
func ClaimPath(s *Store, m ClaimMode) string {
	t := s.topo.Load()
	switch {
	case t == nil:
		return ""
	case m == ClaimTransaction:
		return t.tx.String()
	}
	return t.lease.String()
}

// SetReplayFlush sets how often s flushes the replays it counts for keys' histories, and how
// many keys' replays it counts between two flushes; before s counts its first replay.
func SetReplayFlush(s *Store, every time.Duration, maxKeys int) {
	s.replays.every, s.replays.max = every, maxKeys
}

// HistoryReplaysSQL is the statement that flushes the counted replays.
func HistoryReplaysSQL(s *Store) string { return s.sql.historyCounted }

// FlushReplays writes the replays s counted for keys' histories now, as its periodic flush does.
func FlushReplays(s *Store) { s.flushReplays(context.Background()) }
