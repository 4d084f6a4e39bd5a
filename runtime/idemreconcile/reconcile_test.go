package idemreconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemreconcile"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

var (
	day0 = time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	day1 = day0.AddDate(0, 0, 1)
)

type env struct {
	t      *testing.T
	s      *idemtest.Schema
	events string
	table  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := idemtest.TestSchema(t, nil)
	return &env{t: t, s: s, events: pgx.Identifier{s.Name, idem.HistoryTableName(s.Table)}.Sanitize(),
		table: pgx.Identifier{s.Name, s.Table}.Sanitize()}
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.s.Pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// call records a provider call of key (tenant acme, scope createPayment) at at, as
// idem.ProviderKey writes it.
func (e *env) call(key, pkey string, at time.Time, amount int64, currency string) {
	e.exec(`INSERT INTO `+e.events+` (tenant, scope, key, at, kind, operation, attempt, provider, provider_key, amount, currency)
		VALUES ('acme', 'createPayment', $1, $2, 'provider_call', 'createPayment', 1, 'acquirer', $3, $4, $5)`, key, at, pkey, amount, currency)
}

// fate appends a later event of key's history.
func (e *env) fate(key, kind string, at time.Time, status int, detail string) {
	e.exec(`INSERT INTO `+e.events+` (tenant, scope, key, at, kind, operation, status, detail)
		VALUES ('acme', 'createPayment', $1, $2, $3, 'createPayment', NULLIF($4, 0), NULLIF($5, ''))`, key, at, kind, status, detail)
}

// uncertain leaves key as an uncertain-on-loss claim lost after its provider call leaves it.
func (e *env) uncertain(key string, at time.Time) {
	e.fate(key, "uncertain", at.Add(time.Minute), 0, "")
	e.exec(`INSERT INTO `+e.table+` (tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, created_at, provider_at)
		VALUES ('acme', 'createPayment', $1, 'createPayment', 'fp', 'uncertain', gen_random_uuid(), $2, 'infinity', $2, $2)`, key, at)
}

func (e *env) run(recs idemreconcile.Records, o *idemreconcile.Opts) *idemreconcile.Report {
	e.t.Helper()
	if o == nil {
		o = &idemreconcile.Opts{}
	}
	if o.From.IsZero() {
		o.From, o.To = day0, day1
	}
	rep, err := idemreconcile.Reconcile(context.Background(), e.s.Pool, e.s.Config(), recs, o)
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// brackets adds two completed calls, at the window's first and last instants, and returns the
// provider's records of them: records that cover every call of the window (see Covered).
func (e *env) brackets() idemreconcile.Records {
	last := day1.Add(-time.Nanosecond)
	e.call("k-first", "p-first", day0, 1, "EUR")
	e.fate("k-first", "completed", day0.Add(time.Second), 201, "")
	e.call("k-last", "p-last", last, 1, "EUR")
	e.fate("k-last", "completed", day1, 201, "")
	return idemreconcile.Records{rec("p-first", day0, 1, "EUR"), rec("p-last", last, 1, "EUR")}
}

func kinds(rep *idemreconcile.Report) string {
	var ks []string
	for _, d := range rep.Discrepancies {
		ks = append(ks, string(d.Kind)+":"+d.ProviderKey)
	}
	return strings.Join(ks, " ")
}

func rec(pkey string, at time.Time, amount int64, currency string) idemreconcile.Record {
	return idemreconcile.Record{Provider: "acquirer", Key: pkey, Reference: "ch_" + pkey, Amount: amount, Currency: currency, At: at}
}

func TestReconcileFindsEachKind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := day0.Add(10 * time.Hour)
	// clean: completed and charged as recorded.
	e.call("k-ok", "p-ok", at, 1250, "EUR")
	e.fate("k-ok", "completed", at.Add(time.Second), 201, "")
	// missing_charge: completed, no record.
	e.call("k-missing", "p-missing", at, 500, "EUR")
	e.fate("k-missing", "completed", at.Add(time.Second), 201, "")
	// unmatched_charge: released, yet charged; and a charge with no call at all.
	e.call("k-released", "p-released", at, 700, "EUR")
	e.fate("k-released", "released", at.Add(time.Second), 0, "handler failed")
	// amount and currency mismatches.
	e.call("k-amount", "p-amount", at, 1000, "EUR")
	e.fate("k-amount", "completed", at.Add(time.Second), 201, "")
	e.call("k-currency", "p-currency", at, 1000, "EUR")
	e.fate("k-currency", "completed", at.Add(time.Second), 201, "")
	// duplicate_charge: two records with one key.
	e.call("k-dup", "p-dup", at, 300, "EUR")
	e.fate("k-dup", "completed", at.Add(time.Second), 201, "")
	// uncertain, charged and not.
	e.call("k-unc-yes", "p-unc-yes", at, 900, "EUR")
	e.uncertain("k-unc-yes", at)
	e.call("k-unc-no", "p-unc-no", at, 900, "EUR")
	e.uncertain("k-unc-no", at)
	// declined (a stored 402): no charge expected, none made.
	e.call("k-declined", "p-declined", at, 100, "EUR")
	e.fate("k-declined", "completed", at.Add(time.Second), 402, "")
	// in the grace: a completed call with no record yet is pending.
	e.call("k-late", "p-late", day1.Add(-10*time.Minute), 100, "EUR")
	e.fate("k-late", "completed", day1.Add(-9*time.Minute), 201, "")

	// In time order, from the window's start to half an hour past its end: they cover the
	// calls at 10:00 (and an hour's grace), not the one at 23:50.
	e.call("k-early", "p-early", day0, 5, "EUR")
	e.fate("k-early", "completed", day0.Add(time.Second), 201, "")
	recs := idemreconcile.Records{
		rec("p-early", day0.Add(time.Minute), 5, "EUR"),
		rec("p-ok", at.Add(time.Minute), 1250, "EUR"),
		rec("p-released", at.Add(time.Minute), 700, "EUR"),
		rec("p-nobody", at.Add(time.Minute), 42, "EUR"),
		rec("p-amount", at.Add(time.Minute), 1001, "EUR"),
		rec("p-currency", at.Add(time.Minute), 1000, "USD"),
		rec("p-dup", at.Add(time.Minute), 300, "EUR"),
		rec("p-unc-yes", at.Add(time.Minute), 900, "EUR"),
		rec("p-dup", at.Add(2*time.Minute), 300, "EUR"),
		rec("p-elsewhere", day1.Add(30*time.Minute), 1, "EUR"), // outside the window, and no call of ours: reported
	}
	rep := e.run(recs, &idemreconcile.Opts{Grace: time.Hour})
	// Sorted by tenant ("" for the charges with no call first), day, kind order, provider key.
	want := "unmatched_charge:p-nobody unmatched_charge:p-elsewhere unmatched_charge:p-released missing_charge:p-missing amount_mismatch:p-amount " +
		"currency_mismatch:p-currency duplicate_charge:p-dup uncertain_charged:p-unc-yes uncertain_not_charged:p-unc-no"
	if got := kinds(rep); got != want {
		t.Errorf("discrepancies:\n got %s\nwant %s", got, want)
	}
	if rep.Pending != 1 || rep.Records != 10 || rep.InWindow != 9 || rep.Clean() || len(rep.Resolved) != 0 {
		t.Errorf("report %+v; want 1 pending, 10 records read, 9 in the window, none resolved", rep)
	}
	for _, d := range rep.Discrepancies {
		if d.Ours != nil && (d.Ours.KeyHash != idem.KeyHash("createPayment", d.Ours.Key) || d.Ours.Tenant != "acme" || !d.Day.Equal(day0)) {
			t.Errorf("%s: ours %+v, day %s", d.Kind, d.Ours, d.Day)
		}
	}
	if gs := rep.Groups(); len(gs) != 3 || gs[0].Tenant != "" || gs[1].Tenant != "" || gs[2].Tenant != "acme" || len(gs[2].Discrepancies) != 7 {
		t.Errorf("groups %+v; want the charges with no call (two days), then acme's 7", gs)
	}
}

func TestReconcileCleanRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := day0.Add(23 * time.Hour)
	e.call("k", "p", at, 1250, "EUR")
	e.fate("k", "released", at.Add(time.Second), 0, "timeout")
	e.fate("k", "completed", at.Add(time.Minute), 201, "") // the retry completed
	// A call from the day before whose charge the provider recorded today: matched, not reported.
	e.call("k-old", "p-old", day0.Add(-time.Minute), 5, "EUR")
	e.fate("k-old", "completed", day0, 201, "")
	rep := e.run(idemreconcile.Records{rec("p", at.Add(time.Minute), 1250, "EUR"), rec("p-old", day0.Add(time.Minute), 5, "EUR")}, nil)
	if !rep.Clean() || rep.Matched != 2 {
		t.Errorf("report %+v: %s; want clean, 2 matched", rep, kinds(rep))
	}
}

func TestReconcileResolvesUncertainKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := day0.Add(8 * time.Hour)
	e.call("k-no", "p-no", at, 900, "EUR")
	e.uncertain("k-no", at)
	e.call("k-yes", "p-yes", at, 900, "EUR")
	e.uncertain("k-yes", at)
	e.exec(`CREATE TABLE ` + e.s.Name + `.payments (key text PRIMARY KEY, reference text)`)
	var settled []idemreconcile.UncertainKey
	settle := func(ctx context.Context, tx pgx.Tx, k idemreconcile.UncertainKey, r idemreconcile.Record) (*idem.Outcome, error) {
		settled = append(settled, k)
		if _, err := tx.Exec(ctx, `INSERT INTO `+e.s.Name+`.payments VALUES ($1, $2)`, k.Key, r.Reference); err != nil {
			return nil, err
		}
		return &idem.Outcome{Status: 201, Body: []byte(`{"id":"` + r.Reference + `"}`)}, nil
	}
	recs := e.brackets()
	recs = idemreconcile.Records{recs[0], rec("p-yes", at.Add(time.Minute), 900, "EUR"), recs[1]}

	// Resolve without Settle: the charged one stays a discrepancy, the other is settled failed.
	rep := e.run(recs, &idemreconcile.Opts{Resolve: true})
	if kinds(rep) != "uncertain_charged:p-yes" || len(rep.Resolved) != 1 || rep.Resolved[0].As != "failed" ||
		rep.Resolved[0].Evidence != "no record at acquirer for p-no; its records, in time order, run from 2026-12-04T00:00:00Z to 2026-12-04T23:59:59.999999999Z" {
		t.Fatalf("report %s, resolved %+v", kinds(rep), rep.Resolved)
	}
	store, err := idem.NewStore(e.s.Pool, e.s.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ctx := context.Background()
	if _, err := store.LookupKey(ctx, &idem.LookupKeyParams{Key: "k-no"}); !errors.Is(err, idem.ErrNoSuchKey) {
		t.Errorf("k-no after resolving as failed: %v; want its row deleted", err)
	}
	last := func(key string) idem.HistoryEvent {
		h, err := store.History(ctx, "acme", "createPayment", key)
		if err != nil || len(h) == 0 {
			t.Fatalf("history of %s: %v, %v", key, h, err)
		}
		return h[len(h)-1]
	}
	if ev := last("k-no"); ev.Kind != idem.EventResolved || ev.Resolution != idem.ResolveFailed || ev.Actor != idemreconcile.DefaultActor ||
		!strings.HasPrefix(ev.Detail, "no record at acquirer") {
		t.Errorf("k-no's last event %+v; want resolved as failed by %s", ev, idemreconcile.DefaultActor)
	}

	// With Settle, the charged one is completed with Settle's outcome and business row.
	rep = e.run(recs, &idemreconcile.Opts{Resolve: true, Settle: settle, Actor: "ops@example"})
	if !rep.Clean() || len(rep.Resolved) != 1 || rep.Resolved[0].As != "completed" || len(settled) != 1 || settled[0].Key != "k-yes" {
		t.Fatalf("report %s, resolved %+v, settled %+v", kinds(rep), rep.Resolved, settled)
	}
	keys, err := store.LookupKey(ctx, &idem.LookupKeyParams{Key: "k-yes", IncludeBody: true})
	if err != nil || keys[0].State != idem.KeyComplete || keys[0].Status != 201 || string(keys[0].Body) != `{"id":"ch_p-yes"}` {
		t.Fatalf("k-yes after resolving as completed: %+v, %v", keys, err)
	}
	if ev := last("k-yes"); ev.Kind != idem.EventResolved || ev.Resolution != idem.ResolveCompleted || ev.Actor != "ops@example" || ev.Status != 201 ||
		ev.Detail != "charged at acquirer: ch_p-yes 900 EUR" {
		t.Errorf("k-yes's last event %+v", ev)
	}
	var n int
	if err := e.s.Pool.QueryRow(ctx, `SELECT count(*) FROM `+e.s.Name+`.payments WHERE key = 'k-yes'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("payments rows for k-yes: %d, %v; want the one Settle wrote", n, err)
	}
	// A third run: both keys are settled, the charge matches a completed key.
	if rep = e.run(recs, nil); !rep.Clean() {
		t.Errorf("after resolving: %s; want clean", kinds(rep))
	}
}

func TestReconcileSettleFailureKeepsTheKeyUncertain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := day0.Add(8 * time.Hour)
	e.call("k", "p", at, 900, "EUR")
	e.uncertain("k", at)
	rep := e.run(idemreconcile.Records{rec("p", at, 900, "EUR")}, &idemreconcile.Opts{Resolve: true,
		Settle: func(context.Context, pgx.Tx, idemreconcile.UncertainKey, idemreconcile.Record) (*idem.Outcome, error) {
			return nil, errors.New("no such order")
		}})
	if kinds(rep) != "uncertain_charged:p" || !strings.Contains(rep.Discrepancies[0].Error, "no such order") {
		t.Fatalf("report %s %+v", kinds(rep), rep.Discrepancies)
	}
	var state string
	if err := e.s.Pool.QueryRow(context.Background(), `SELECT state FROM `+e.table+` WHERE key = 'k'`).Scan(&state); err != nil || state != "uncertain" {
		t.Errorf("state %q, %v; want still uncertain", state, err)
	}
}

// A tenant that is not PostgreSQL text is stored escaped; the report and the resolution use it
// as the runtime's callers gave it.
func TestReconcileEscapedTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := "t\x00nul"
	stored := "\x01" + "74006e756c"
	at := day0.Add(time.Hour)
	e.exec(`INSERT INTO `+e.events+` (tenant, scope, key, at, kind, operation, provider, provider_key, amount, currency)
		VALUES ($1, 'createPayment', 'k', $2, 'provider_call', 'createPayment', 'acquirer', 'p', 5, 'EUR'),
		       ($1, 'createPayment', 'k', $2, 'uncertain', 'createPayment', NULL, NULL, NULL, NULL)`, stored, at)
	e.exec(`INSERT INTO `+e.table+` (tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, provider_at)
		VALUES ($1, 'createPayment', 'k', 'createPayment', 'fp', 'uncertain', gen_random_uuid(), now(), 'infinity', $2)`, stored, at)
	rep := e.run(e.brackets(), &idemreconcile.Opts{Resolve: true})
	if !rep.Clean() || len(rep.Resolved) != 1 || rep.Resolved[0].Ours.Tenant != tenant {
		t.Fatalf("report %s, resolved %+v; want the key of tenant %q resolved", kinds(rep), rep.Resolved, tenant)
	}
	var n int
	if err := e.s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.table+` WHERE key = 'k'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d key rows, %v; want the uncertain key deleted", n, err)
	}
}

// Only calls of the providers named are compared, and a provider's records cover only its own
// calls.
func TestReconcileComparesTheProvidersNamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := day0.Add(15 * time.Hour)
	e.call("k-unc", "p-unc", at, 900, "EUR")
	e.uncertain("k-unc", at)
	e.exec(`INSERT INTO `+e.events+` (tenant, scope, key, at, kind, operation, provider, provider_key)
		VALUES ('acme', 'refund', 'k-bank', $1, 'provider_call', 'refund', 'bank', 'p-bank')`, at)
	e.exec(`INSERT INTO `+e.events+` (tenant, scope, key, at, kind, operation, status)
		VALUES ('acme', 'refund', 'k-bank', $1, 'completed', 'refund', 200)`, at.Add(time.Second))
	recs := e.brackets()
	// The acquirer's calls: the uncertain key is decided; the bank's call is not the acquirer's.
	if rep := e.run(recs, &idemreconcile.Opts{Providers: []string{"acquirer"}}); kinds(rep) != "uncertain_not_charged:p-unc" {
		t.Errorf("the acquirer's: %s; want only the acquirer's uncertain key", kinds(rep))
	}
	// Every provider: the acquirer's records say nothing of the bank's call.
	if rep := e.run(recs, nil); kinds(rep) != "uncertain_not_charged:p-unc not_covered:p-bank" {
		t.Errorf("every provider: %s", kinds(rep))
	}
	// The bank's records too: its call has no record.
	bank := idemreconcile.Records{{Provider: "bank", Key: "b-1", Amount: 1, Currency: "EUR", At: day0},
		{Provider: "bank", Key: "b-2", Amount: 1, Currency: "EUR", At: day1.Add(-time.Second)}}
	if rep := e.run(append(recs, bank...), nil); kinds(rep) != "unmatched_charge:b-1 unmatched_charge:b-2 missing_charge:p-bank uncertain_not_charged:p-unc" {
		t.Errorf("with the bank's records: %s", kinds(rep))
	}
}
