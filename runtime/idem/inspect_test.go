package idem_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// inspectEnv is a store whose events are kept, so a test can read key hashes as logs print them.
type inspectEnv struct {
	*env
	mu     sync.Mutex
	events []idem.Event
}

func newInspectEnv(t *testing.T) *inspectEnv {
	ie := &inspectEnv{}
	ie.env = newEnv(t, &idem.Config{Observer: func(_ context.Context, e idem.Event) {
		ie.mu.Lock()
		ie.events = append(ie.events, e)
		ie.mu.Unlock()
	}}, nil)
	return ie
}

func (ie *inspectEnv) hashOf(kind idem.EventKind) string {
	ie.mu.Lock()
	defer ie.mu.Unlock()
	for _, e := range ie.events {
		if e.Kind == kind {
			return e.KeyHash
		}
	}
	ie.T.Fatalf("no %s event", kind)
	return ""
}

func (ie *inspectEnv) complete(tenant, scope, key, op string, o *idem.Outcome) {
	ie.T.Helper()
	res, err := ie.Store.Do(context.Background(), &idem.DoParams{Tenant: tenant, Scope: scope, Key: key, Operation: op, Fingerprint: "fp"},
		func(context.Context, pgx.Tx) (*idem.Outcome, error) { return o, nil })
	if err != nil || !res.Persisted {
		ie.T.Fatalf("complete %q: %+v, %v", key, res, err)
	}
}

// hold claims key and keeps its handler running until the test ends: a live in-flight key.
func (ie *inspectEnv) hold(tenant, key, op string) {
	ie.T.Helper()
	claimed, done := make(chan struct{}), make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		_, _ = ie.Store.Do(context.Background(), &idem.DoParams{Tenant: tenant, Scope: "s", Key: key, Operation: op, Fingerprint: "fp", Lease: time.Minute},
			func(context.Context, pgx.Tx) (*idem.Outcome, error) {
				close(claimed)
				<-done
				return nil, errors.New("released at the end of the test")
			})
	}()
	ie.T.Cleanup(func() { close(done); <-finished })
	select {
	case <-claimed:
	case <-time.After(10 * time.Second):
		ie.T.Fatalf("the handler of %q did not start within 10s", key)
	}
}

// abandon inserts what a process that died holding a key leaves behind: in flight, lease gone.
func (ie *inspectEnv) abandon(key, op string) {
	ie.T.Helper()
	_, err := ie.Sch.Pool.Exec(context.Background(), `INSERT INTO `+ie.Store.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, created_at)
		VALUES ('', 's', $1, $2, 'fp', 'in_flight', gen_random_uuid(), now() - interval '5 minutes', now() + interval '1 day', now() - interval '10 minutes')`,
		key, op)
	if err != nil {
		ie.T.Fatal(err)
	}
}

func ptr(s string) *string { return &s }

func TestLookupKeyShowsTheStoredFacts(t *testing.T) {
	t.Parallel()
	e := newInspectEnv(t)
	ctx := context.Background()
	e.complete("acme", "s", "k-1", "createPayment", &idem.Outcome{Status: 201, Header: http.Header{"Location": {"/v1/payments/7"}}, Body: []byte(`{"id":7}`)})
	// The same key for another operation: the HTTP runtime puts the operation in the scope.
	e.complete("acme", "s-capture", "k-1", "capturePayment", &idem.Outcome{Status: 200, Reference: "pay_7"})

	keys, err := e.Store.LookupKey(ctx, &idem.LookupKeyParams{Tenant: ptr("acme"), Key: "k-1", Operation: "createPayment"})
	if err != nil || len(keys) != 1 {
		t.Fatalf("LookupKey = %d keys, %v; want 1", len(keys), err)
	}
	k := keys[0]
	if k.Tenant != "acme" || k.Key != "k-1" || k.Operation != "createPayment" || k.State != idem.KeyComplete ||
		k.Status != 201 || k.Attempt != 1 || k.Header.Get("Location") != "/v1/payments/7" || k.BodySize != 8 {
		t.Errorf("key = %+v", k)
	}
	if k.Body != nil {
		t.Errorf("body read without IncludeBody: %q", k.Body)
	}
	if k.KeyHash != idem.KeyHash("s", "k-1") || k.KeyHash != e.hashOf(idem.EventCompleted) {
		t.Errorf("KeyHash = %s, want the events' %s", k.KeyHash, e.hashOf(idem.EventCompleted))
	}
	if k.CreatedAt.IsZero() || k.CompletedAt.Before(k.CreatedAt) || !k.ExpiresAt.After(k.Now) || k.Stale() || k.Expired() {
		t.Errorf("times: created %v completed %v expires %v now %v", k.CreatedAt, k.CompletedAt, k.ExpiresAt, k.Now)
	}

	withBody, err := e.Store.LookupKey(ctx, &idem.LookupKeyParams{Tenant: ptr("acme"), Key: "k-1", Operation: "createPayment", IncludeBody: true})
	if err != nil || string(withBody[0].Body) != `{"id":7}` {
		t.Errorf("with IncludeBody: %v, %v", withBody, err)
	}

	both, err := e.Store.LookupKey(ctx, &idem.LookupKeyParams{Key: "k-1"})
	if err != nil || len(both) != 2 || both[0].Operation != "capturePayment" || both[0].Reference != "pay_7" {
		t.Errorf("LookupKey without tenant or operation = %+v, %v; want both operations, capturePayment first", both, err)
	}
}

func TestLookupKeyByHashFindsWhatTheLogsPrint(t *testing.T) {
	t.Parallel()
	e := newInspectEnv(t)
	ctx := context.Background()
	// Characters whose bytes differ between encodings and escapes: the hash PostgreSQL computes
	// must be the runtime's.
	tenant, scope, key := "Ünï <b>", "4:Ünï|9:operation=2:op", "ключ-🔑 \"x\""
	e.complete(tenant, scope, key, "op", &idem.Outcome{Status: 204})
	e.complete(tenant, scope, "other", "op", &idem.Outcome{Status: 204})
	hash := idem.KeyHash(scope, key)

	for _, h := range []string{hash, strings.ToUpper(hash), " " + hash + "\n"} {
		keys, err := e.Store.LookupKey(ctx, &idem.LookupKeyParams{KeyHash: h})
		if err != nil || len(keys) != 1 || keys[0].Key != key || keys[0].Tenant != tenant {
			t.Errorf("LookupKey(KeyHash %q) = %+v, %v; want the key %q", h, keys, err, key)
		}
	}
	if _, err := e.Store.LookupKey(ctx, &idem.LookupKeyParams{KeyHash: hash, Tenant: ptr("someone else")}); !errors.Is(err, idem.ErrNoSuchKey) {
		t.Errorf("hash with another tenant: %v, want ErrNoSuchKey", err)
	}
	for _, bad := range []string{"abc", hash + "00", "zzzzzzzzzzzzzzzz"} {
		if _, err := e.Store.LookupKey(ctx, &idem.LookupKeyParams{KeyHash: bad}); err == nil || errors.Is(err, idem.ErrNoSuchKey) ||
			!strings.Contains(err.Error(), "16 hex digits") {
			t.Errorf("KeyHash %q: %v; want an error naming the form of a key hash", bad, err)
		}
	}
}

func TestLookupKeyThatDoesNotExist(t *testing.T) {
	t.Parallel()
	e := newInspectEnv(t)
	ctx := context.Background()
	e.complete("acme", "s", "k", "op", &idem.Outcome{Status: 201})
	for name, p := range map[string]*idem.LookupKeyParams{
		"unknown key":     {Tenant: ptr("acme"), Key: "nope"},
		"other tenant":    {Tenant: ptr("globex"), Key: "k"},
		"no tenant":       {Tenant: ptr(""), Key: "k"},
		"other operation": {Key: "k", Operation: "refund"},
		"unknown hash":    {KeyHash: "0000000000000000"},
	} {
		if keys, err := e.Store.LookupKey(ctx, p); !errors.Is(err, idem.ErrNoSuchKey) {
			t.Errorf("%s: %v, %v; want ErrNoSuchKey", name, keys, err)
		}
	}
	if _, err := e.Store.LookupKey(ctx, &idem.LookupKeyParams{}); err == nil || errors.Is(err, idem.ErrNoSuchKey) {
		t.Errorf("no key and no hash: %v; want a usage error", err)
	}
}

func TestListKeysAndStatsSeeInFlightAndStaleKeys(t *testing.T) {
	t.Parallel()
	e := newInspectEnv(t)
	ctx := context.Background()
	e.complete("acme", "s", "done-1", "createPayment", &idem.Outcome{Status: 201})
	e.complete("acme", "s", "done-2", "refundPayment", &idem.Outcome{Status: 201})
	e.hold("acme", "running", "createPayment")
	e.abandon("crashed-1", "createPayment")
	e.abandon("crashed-2", "capturePayment")

	keys := func(p *idem.ListKeysParams) string {
		t.Helper()
		ks, err := e.Store.ListKeys(ctx, p)
		if err != nil {
			t.Fatalf("ListKeys(%+v): %v", p, err)
		}
		var names []string
		for _, k := range ks {
			names = append(names, k.Key)
		}
		return strings.Join(names, ",")
	}
	// Newest first: the abandoned rows were created ten minutes ago, crashed-2 just after crashed-1.
	for _, c := range []struct {
		p    *idem.ListKeysParams
		want string
	}{
		{&idem.ListKeysParams{State: idem.KeyInFlight}, "running,crashed-2,crashed-1"},
		{&idem.ListKeysParams{Stale: true}, "crashed-2,crashed-1"},
		{&idem.ListKeysParams{Stale: true, Operation: "capturePayment"}, "crashed-2"},
		{&idem.ListKeysParams{State: idem.KeyComplete, Tenant: ptr("acme")}, "done-2,done-1"},
		{&idem.ListKeysParams{Tenant: ptr("")}, "crashed-2,crashed-1"},
		{&idem.ListKeysParams{Since: time.Now().Add(-time.Minute)}, "running,done-2,done-1"},
		{&idem.ListKeysParams{Limit: 1, State: idem.KeyComplete}, "done-2"},
	} {
		if got := keys(c.p); got != c.want {
			t.Errorf("ListKeys(%+v) = %s, want %s", c.p, got, c.want)
		}
	}
	if _, err := e.Store.ListKeys(ctx, &idem.ListKeysParams{State: "gone"}); err == nil || !strings.Contains(err.Error(), "unknown state") {
		t.Errorf("unknown state: %v", err)
	}

	st, err := e.Store.KeyStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Total.InFlight != 3 || st.Total.Stale != 2 || st.Total.Complete != 2 || st.Total.Expired != 0 {
		t.Errorf("total = %+v; want 3 in flight, 2 stale, 2 complete", st.Total)
	}
	var ops []string
	for _, o := range st.Operations {
		ops = append(ops, o.Operation)
	}
	if strings.Join(ops, ",") != "capturePayment,createPayment,refundPayment" {
		t.Errorf("operations %v", ops)
	}
	if c := st.Operations[1]; c.InFlight != 2 || c.Stale != 1 || c.Complete != 1 {
		t.Errorf("createPayment = %+v", c)
	}
	if age := st.Now.Sub(st.Total.OldestInFlight); age < 9*time.Minute || age > 11*time.Minute {
		t.Errorf("oldest in flight is %v old, want the abandoned rows' 10 minutes", age)
	}
}

func TestKeyStatsOfAnEmptyTableAndAMissingOne(t *testing.T) {
	t.Parallel()
	e := newInspectEnv(t)
	ctx := context.Background()
	st, err := e.Store.KeyStats(ctx)
	if err != nil || len(st.Operations) != 0 || st.Total.InFlight != 0 || st.Now.IsZero() {
		t.Errorf("empty table: %+v, %v", st, err)
	}
	missing, err := idem.NewStore(e.Sch.Pool, &idem.Config{Schema: e.Sch.Name, Table: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing.KeyStats(ctx); err == nil || !strings.Contains(err.Error(), "42P01") {
		t.Errorf("missing table: %v; want the database's undefined-table error", err)
	}
	if _, err := missing.LookupKey(ctx, &idem.LookupKeyParams{Key: "k"}); err == nil || errors.Is(err, idem.ErrNoSuchKey) {
		t.Errorf("missing table: %v; want an error, not ErrNoSuchKey", err)
	}
}

// TestLookupKeyOfBytesThatAreNotText: tenants, scopes and keys that PostgreSQL text cannot hold
// are stored escaped; a lookup by the raw values or by the hash a log printed finds the row, and
// shows the raw values, never the escape.
func TestLookupKeyOfBytesThatAreNotText(t *testing.T) {
	t.Parallel()
	e := newInspectEnv(t)
	ctx := context.Background()
	tenant, scope, key := "\xff\x00t", "s\xfe", "\x01k\xc3"
	e.complete(tenant, scope, key, "op", &idem.Outcome{Status: 204})
	e.complete("xff00t", scope, key, "op", &idem.Outcome{Status: 204}) // a tenant whose text is the other's hex

	keys, err := e.Store.LookupKey(ctx, &idem.LookupKeyParams{Tenant: ptr(tenant), Key: key})
	if err != nil || len(keys) != 1 || keys[0].Tenant != tenant || keys[0].Scope != scope || keys[0].Key != key {
		t.Fatalf("LookupKey(raw) = %+v, %v; want the one row with the raw tenant, scope and key", keys, err)
	}
	keys, err = e.Store.LookupKey(ctx, &idem.LookupKeyParams{KeyHash: idem.KeyHash(scope, key)})
	if err != nil || len(keys) != 2 {
		t.Fatalf("LookupKey(hash) = %+v, %v; want both tenants' rows", keys, err)
	}
}
