package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// A transaction-mode completion under the key's lock whose hold reached the shortest wait of a
// duplicate notifies the key's channel (a duplicate whose wait ran out sleeps until it): the
// handler here runs four times that wait, so the hold is at least that long whatever the
// machine's speed. The hold is measured from the claim's transaction start, which
// sql/notify_locked.sql reads from the key row the completion wrote: a new key's row, the row of
// a key whose remembered outcome expired (a fresh history), and the row of an abandoned claim
// taken over (which keeps its history's first claim time) each notify.
// TestLockClaimShortHoldNotifiesNobody is the other side.
func TestLockClaimLongHoldNotifies(t *testing.T) {
	t.Parallel()
	const wait = 10 * time.Millisecond
	slow := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		time.Sleep(4 * wait)
		return &idem.Outcome{Status: 201}, nil
	}
	for _, tc := range []struct {
		name    string
		attempt int
		before  func(t *testing.T, ctx context.Context, e *env, p *idem.DoParams) // leaves the key's row as the case needs
	}{
		{"new key", 1, func(*testing.T, context.Context, *env, *idem.DoParams) {}},
		{"expired outcome", 1, func(t *testing.T, ctx context.Context, e *env, p *idem.DoParams) {
			if _, err := e.Store.Do(ctx, p, pay(1, "first")); err != nil {
				t.Fatal(err)
			}
			tag, err := e.Sch.Pool.Exec(ctx, "UPDATE "+pgx.Identifier{e.Sch.Name, e.Sch.Table}.Sanitize()+
				" SET expires_at = statement_timestamp() - interval '1 second' WHERE key = $1", p.Key)
			if err != nil || tag.RowsAffected() != 1 {
				t.Fatalf("expire the outcome: %v, %d rows; want 1", err, tag.RowsAffected())
			}
		}},
		{"abandoned claim", 2, func(t *testing.T, ctx context.Context, e *env, p *idem.DoParams) {
			holdClaim(t, e)
			expireLease(t, e, p.Key)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil, nil)
			idem.SetNotifyAfter(e.Store, wait)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction}
			tc.before(t, ctx, e, p)
			listen, channel := listenTo(t, ctx, e) // after the set-up: only the slow completion may notify
			var attempt int
			r, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				c, _ := idem.ClaimFromContext(ctx)
				attempt = c.Attempt
				return slow(ctx, tx)
			})
			if err != nil || r.Replayed || attempt != tc.attempt {
				t.Fatalf("Do = %+v, %v, attempt %d; want executed as attempt %d", r, err, attempt, tc.attempt)
			}
			if _, err := e.Sch.Pool.Exec(ctx, "NOTIFY "+channel+", 'sentinel'"); err != nil {
				t.Fatal(err)
			}
			n, err := listen.WaitForNotification(ctx)
			if err != nil || n.Payload != idem.NotifyPayload(p) {
				t.Fatalf("first notification after a hold of %s: %+v, %v; want the key's (%s), ahead of the test's sentinel", 4*wait, n, err, idem.NotifyPayload(p))
			}
		})
	}
}

// The lock statement leaves the caller's lock_timeout as it found it for the transaction its
// BEGIN opens, whether it took a free lock at once or waited for a held one under its bound: the
// handler's own statements must not inherit the claim's short bound. Both paths are driven at
// the SQL level, in one pipeline as the Store sends it (lock statement, BEGIN, then a read of
// the setting); the held lock is released only once the claim is seen waiting for it, and the
// wait's bound is long, so the wait path is the one taken.
func TestLockStatementRestoresTheCallersLockTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := &idem.DoParams{Scope: "s", Key: "restore", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction}
	id := idem.LockID(e.Store, p)
	claim := func(conn *pgx.Conn) (string, error) {
		var setting string
		b := &pgx.Batch{}
		b.Queue(idem.ClaimLockSQL(e.Store), id, "15s")
		b.Queue("begin")
		b.Queue("SELECT current_setting('lock_timeout')").QueryRow(func(row pgx.Row) error { return row.Scan(&setting) })
		b.Queue("rollback")
		return setting, conn.SendBatch(ctx, b).Close()
	}
	connect := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, e.Sch.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		if _, err := c.Exec(ctx, "SET lock_timeout = '7s'"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	waiter, holder := connect(), connect()

	if got, err := claim(waiter); err != nil || got != "7s" {
		t.Fatalf("a free lock: lock_timeout in the transaction = %q, %v; want the caller's 7s", got, err)
	}

	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		setting string
		err     error
	}
	got := make(chan answer, 1)
	go func() {
		s, err := claim(waiter)
		got <- answer{s, err}
	}()
	waitFor(t, 10*time.Second, "the claim never waited for the held lock", func() bool {
		var waiting bool
		err := holder.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND objid = ($1::bigint & 4294967295)::oid)`, id).Scan(&waiting)
		return err == nil && waiting
	})
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", id); err != nil {
		t.Fatal(err)
	}
	a := recv(t, got, 10*time.Second, "the claim did not answer after the lock was released")
	if a.err != nil || a.setting != "7s" {
		t.Fatalf("a held lock, waited for: lock_timeout in the transaction = %q, %v; want the caller's 7s", a.setting, a.err)
	}
}

// listenTo opens a connection of its own that listens on e's Store's channel, closed when the
// test ends, and returns it with the channel's name as SQL writes it.
func listenTo(t *testing.T, ctx context.Context, e *env) (*pgx.Conn, string) {
	t.Helper()
	listen, err := pgx.Connect(ctx, e.Sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listen.Close(context.Background()) })
	channel := pgx.Identifier{idem.Channel(e.Store)}.Sanitize()
	if _, err := listen.Exec(ctx, "LISTEN "+channel); err != nil {
		t.Fatal(err)
	}
	return listen, channel
}
