package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// opEnv is a migrated schema with rows written as the runtime writes them, for the operator's
// reads and resolve.
type opEnv struct {
	t             *testing.T
	s             *idemtest.Schema
	store         *idem.Store
	table, events string
}

func newOpEnv(t *testing.T, opts *idemtest.SchemaOpts) *opEnv {
	t.Helper()
	s := idemtest.TestSchema(t, opts)
	e := &opEnv{t: t, s: s, table: pgx.Identifier{s.Name, s.Table}.Sanitize(),
		events: pgx.Identifier{s.Name, idem.HistoryTableName(s.Table)}.Sanitize()}
	if opts == nil || !opts.NoMigrate {
		e.open()
	}
	return e
}

func (e *opEnv) open() {
	store, err := idem.NewStore(e.s.Pool, e.s.Config())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(store.Close)
	e.store = store
}

func (e *opEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.s.Pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// key writes a key row of tenant acme in state.
func (e *opEnv) key(key string, state idem.KeyState) {
	e.exec(`INSERT INTO `+e.table+` (tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, provider_at)
		VALUES ('acme', 'op', $1, 'op', 'fp', $2, gen_random_uuid(), now() + interval '1 hour', 'infinity', now())`, key, string(state))
}

func (e *opEnv) state(key string) idem.KeyState {
	e.t.Helper()
	keys, err := e.store.LookupKey(context.Background(), &idem.LookupKeyParams{Key: key})
	if errors.Is(err, idem.ErrNoSuchKey) {
		return idem.KeyGone
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return keys[0].State
}

// Resolve settles uncertain keys only: a key in flight or complete is refused with
// ErrNotUncertain and left as it was, whichever way it is asked to settle it.
func TestResolveRefusesKeysThatAreNotUncertain(t *testing.T) {
	t.Parallel()
	e := newOpEnv(t, nil)
	ctx := context.Background()
	e.key("running", idem.KeyInFlight)
	e.key("done", idem.KeyComplete)
	for _, key := range []string{"running", "done"} {
		for _, as := range []idem.Resolution{idem.ResolveFailed, idem.ResolveCompleted} {
			before := e.state(key)
			err := e.store.Resolve(ctx, &idem.ResolveParams{Tenant: "acme", Scope: "op", Key: key, As: as,
				Outcome: &idem.Outcome{Status: 201}, Actor: "ops", Evidence: "ticket 1"})
			if !errors.Is(err, idem.ErrNotUncertain) || e.state(key) != before {
				t.Errorf("Resolve(%s, %s) = %v, state now %s; want ErrNotUncertain and the key still %s", key, as, err, e.state(key), before)
			}
		}
	}
	if err := e.store.Resolve(ctx, &idem.ResolveParams{Tenant: "acme", Scope: "op", Key: "none", As: idem.ResolveFailed,
		Actor: "ops", Evidence: "ticket 1"}); !errors.Is(err, idem.ErrNoSuchKey) {
		t.Errorf("Resolve of a key that does not exist = %v; want ErrNoSuchKey", err)
	}
	if h, err := e.store.History(ctx, "acme", "op", "done"); err != nil || len(h) != 0 {
		t.Errorf("history after refused resolutions: %+v, %v; want none written", h, err)
	}
}

// A resolution is recorded with its own field: History reads it typed, and the evidence alone is
// the detail.
func TestResolveRecordsTheResolution(t *testing.T) {
	t.Parallel()
	e := newOpEnv(t, nil)
	ctx := context.Background()
	e.key("yes", idem.KeyUncertain)
	e.key("no", idem.KeyUncertain)
	if err := e.store.Resolve(ctx, &idem.ResolveParams{Tenant: "acme", Scope: "op", Key: "yes", As: idem.ResolveCompleted,
		Outcome: &idem.Outcome{Status: 201, Body: []byte(`{}`)}, Actor: "ops", Evidence: "failed: a reference that reads like a prefix"}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Resolve(ctx, &idem.ResolveParams{Tenant: "acme", Scope: "op", Key: "no", As: idem.ResolveFailed,
		Actor: "ops", Evidence: "no record"}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]idem.HistoryEvent{
		"yes": {Kind: idem.EventResolved, Resolution: idem.ResolveCompleted, Status: 201, Actor: "ops", Detail: "failed: a reference that reads like a prefix"},
		"no":  {Kind: idem.EventResolved, Resolution: idem.ResolveFailed, Actor: "ops", Detail: "no record"},
	} {
		h, err := e.store.History(ctx, "acme", "op", key)
		if err != nil || len(h) != 1 {
			t.Fatalf("history of %s: %+v, %v", key, h, err)
		}
		got := h[0]
		if got.Kind != want.Kind || got.Resolution != want.Resolution || got.Status != want.Status || got.Actor != want.Actor || got.Detail != want.Detail {
			t.Errorf("history of %s: %+v; want %+v", key, got, want)
		}
	}
	if e.state("yes") != idem.KeyComplete || e.state("no") != idem.KeyGone {
		t.Errorf("states %s and %s; want complete and gone", e.state("yes"), e.state("no"))
	}
}

// Migration 7 moves the resolution that older rows wrote at the start of detail into its
// column, and reverting it puts it back.
func TestMigration7MovesTheResolutionIntoItsColumn(t *testing.T) {
	t.Parallel()
	e := newOpEnv(t, &idemtest.SchemaOpts{NoMigrate: true})
	ctx := context.Background()
	m, err := idem.NewMigrator(e.s.Pool, e.s.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, idem.DirectionUp, &idem.MigrateOpts{MaxSteps: 6}); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO ` + e.events + ` (tenant, scope, key, kind, operation, status, detail, actor) VALUES
		('acme', 'op', 'k', 'resolved', 'op', 201, 'completed: charged at bank: ch_1', 'ops'),
		('acme', 'op', 'k2', 'resolved', 'op', NULL, 'failed: no record: at all', 'ops'),
		('acme', 'op', 'k3', 'released', 'op', NULL, 'failed: handler', NULL)`)
	if r, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil || fmt.Sprint(versions(r)) != "[7]" {
		t.Fatalf("migrate to 7: %+v, %v", r, err)
	}
	e.open()
	for key, want := range map[string]struct {
		res    idem.Resolution
		detail string
	}{"k": {idem.ResolveCompleted, "charged at bank: ch_1"}, "k2": {idem.ResolveFailed, "no record: at all"}, "k3": {0, "failed: handler"}} {
		h, err := e.store.History(ctx, "acme", "op", key)
		if err != nil || len(h) != 1 || h[0].Resolution != want.res || h[0].Detail != want.detail {
			t.Errorf("%s after version 7: %+v, %v; want resolution %v, detail %q", key, h, err, want.res, want.detail)
		}
	}
	if r, err := m.Migrate(ctx, idem.DirectionDown, &idem.MigrateOpts{MaxSteps: 1}); err != nil || fmt.Sprint(versions(r)) != "[7]" {
		t.Fatalf("revert 7: %+v, %v", r, err)
	}
	var details []string
	rows, _ := e.s.Pool.Query(ctx, `SELECT detail FROM `+e.events+` ORDER BY key`)
	details, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || fmt.Sprint(details) != "[completed: charged at bank: ch_1 failed: no record: at all failed: handler]" {
		t.Errorf("details after reverting 7: %q, %v", details, err)
	}
}

// ProviderCalls reads the calls of the window [From, To) (its end excluded) of the providers
// asked for, or those the provider keys name whenever they were made, each with its key's fate,
// by derived key.
func TestProviderCallsWindowAndFates(t *testing.T) {
	t.Parallel()
	e := newOpEnv(t, nil)
	ctx := context.Background()
	from := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 0, 1)
	call := func(key, provider, pkey string, at time.Time) {
		e.exec(`INSERT INTO `+e.events+` (tenant, scope, key, at, kind, operation, attempt, provider, provider_key, amount, currency)
			VALUES ('acme', 'op', $1, $2, 'provider_call', 'op', 1, $3, $4, 5, 'EUR')`, key, at, provider, pkey)
	}
	fate := func(key, kind string, at time.Time, status int, resolution string) {
		e.exec(`INSERT INTO `+e.events+` (tenant, scope, key, at, kind, operation, status, resolution)
			VALUES ('acme', 'op', $1, $2, $3, 'op', NULLIF($4, 0), NULLIF($5, ''))`, key, at, kind, status, resolution)
	}
	call("first", "bank", "p-first", from)
	fate("first", "completed", from.Add(time.Second), 201, "")
	call("last", "bank", "p-last", to.Add(-time.Microsecond))
	fate("last", "uncertain", to, 0, "")
	fate("last", "resolved", to.Add(time.Hour), 0, "failed")
	call("at-end", "bank", "p-end", to)
	call("before", "bank", "p-before", from.Add(-time.Microsecond))
	call("acquirer", "acquirer", "p-acq", from.Add(time.Hour))
	e.key("acquirer", idem.KeyUncertain)

	got := func(p *idem.ProviderCallsParams) string {
		calls, err := e.store.ProviderCalls(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		s := ""
		for _, c := range calls {
			s += fmt.Sprintf("%s:%s/%d/%s/%s ", c.ProviderKey, c.Fate.Last, c.Fate.Status, c.Fate.Resolution, c.Fate.State)
		}
		return s
	}
	if s, want := got(&idem.ProviderCallsParams{From: from, To: to}),
		"p-acq:/0/Resolution(0)/uncertain p-first:completed/201/Resolution(0)/gone p-last:resolved/0/failed/gone "; s != want {
		t.Errorf("the window's calls:\n got %s\nwant %s", s, want)
	}
	if s, want := got(&idem.ProviderCallsParams{From: from, To: to, Providers: []string{"acquirer"}}),
		"p-acq:/0/Resolution(0)/uncertain "; s != want {
		t.Errorf("the acquirer's calls:\n got %s\nwant %s", s, want)
	}
	if s, want := got(&idem.ProviderCallsParams{ProviderKeys: []string{"p-end", "p-before", "p-none"}}),
		"p-before:/0/Resolution(0)/gone p-end:/0/Resolution(0)/gone "; s != want {
		t.Errorf("the calls of p-end and p-before:\n got %s\nwant %s", s, want)
	}
}

// A key resolved as completed replays its outcome to every retry as final: a 5xx (or a 1xx)
// and a header that cannot be sent (CR LF in a value, a name that is no token) are refused, and
// the key stays uncertain.
func TestResolveRefusesOutcomesNoRetryCanBeAnswered(t *testing.T) {
	t.Parallel()
	e := newOpEnv(t, nil)
	ctx := context.Background()
	e.key("k", idem.KeyUncertain)
	for name, o := range map[string]*idem.Outcome{
		"500":           {Status: 500, Body: []byte(`{}`)},
		"503":           {Status: 503},
		"103":           {Status: 103},
		"CR LF":         {Status: 201, Body: []byte(`{}`), Header: http.Header{"Content-Type": {"application/json\r\nSet-Cookie: a=b"}}},
		"a bad name":    {Status: 201, Body: []byte(`{}`), Header: http.Header{"Content Type": {"application/json"}}},
		"a NUL":         {Status: 201, Body: []byte(`{}`), Header: http.Header{"Content-Type": {"application/json\x00"}}},
		"an empty name": {Status: 201, Header: http.Header{"": {"x"}}},
	} {
		err := e.store.Resolve(ctx, &idem.ResolveParams{Tenant: "acme", Scope: "op", Key: "k", As: idem.ResolveCompleted, Outcome: o,
			Actor: "ops", Evidence: "ticket"})
		if err == nil || e.state("k") != idem.KeyUncertain {
			t.Errorf("%s: Resolve = %v, key %s; want refused and still uncertain", name, err, e.state("k"))
		}
	}
	if err := e.store.Resolve(ctx, &idem.ResolveParams{Tenant: "acme", Scope: "op", Key: "k", As: idem.ResolveCompleted,
		Outcome: &idem.Outcome{Status: 402, Body: []byte(`{}`), Header: http.Header{"Content-Type": {"application/problem+json; charset=utf-8"}}},
		Actor:   "ops", Evidence: "declined"}); err != nil || e.state("k") != idem.KeyComplete {
		t.Errorf("a 402 with a valid header: %v, key %s; want it complete", err, e.state("k"))
	}
}
