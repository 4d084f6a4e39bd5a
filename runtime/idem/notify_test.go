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
// machine's speed. TestLockClaimShortHoldNotifiesNobody is the other side.
func TestLockClaimLongHoldNotifies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	const wait = 10 * time.Millisecond
	idem.SetNotifyAfter(e.Store, wait)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listen, err := pgx.Connect(ctx, e.Sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(context.Background())
	channel := pgx.Identifier{idem.Channel(e.Store)}.Sanitize()
	if _, err := listen.Exec(ctx, "LISTEN "+channel); err != nil {
		t.Fatal(err)
	}
	p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction}
	slow := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		time.Sleep(4 * wait)
		return &idem.Outcome{Status: 201}, nil
	}
	if _, err := e.Store.Do(ctx, p, slow); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Sch.Pool.Exec(ctx, "NOTIFY "+channel+", 'sentinel'"); err != nil {
		t.Fatal(err)
	}
	n, err := listen.WaitForNotification(ctx)
	if err != nil || n.Payload != idem.NotifyPayload(p) {
		t.Fatalf("first notification after a hold of %s: %+v, %v; want the key's (%s), ahead of the test's sentinel", 4*wait, n, err, idem.NotifyPayload(p))
	}
}
