package idemreconcile

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Kind names a discrepancy.
type Kind string

const (
	// UnmatchedCharge: the provider charged, and we have no completed outcome for that key (it
	// was released, answered an error, is still in flight) or no call with that key at all.
	UnmatchedCharge Kind = "unmatched_charge"
	// MissingCharge: we completed a key after a provider call in the window, and the provider
	// has no record of the charge.
	MissingCharge Kind = "missing_charge"
	// AmountMismatch and CurrencyMismatch: the provider charged another amount or currency than
	// the call recorded.
	AmountMismatch   Kind = "amount_mismatch"
	CurrencyMismatch Kind = "currency_mismatch"
	// DuplicateCharge: the provider has several records with one key.
	DuplicateCharge Kind = "duplicate_charge"
	// UncertainCharged: an uncertain key the provider charged: it settles as completed.
	UncertainCharged Kind = "uncertain_charged"
	// UncertainNotCharged: an uncertain key the provider has no record of, its call's day
	// fully covered by the window and older than the grace: it settles as failed.
	UncertainNotCharged Kind = "uncertain_not_charged"
)

// Kinds lists every Kind, in the order reports print them.
var Kinds = []Kind{UnmatchedCharge, MissingCharge, AmountMismatch, CurrencyMismatch, DuplicateCharge,
	UncertainCharged, UncertainNotCharged}

// DefaultActor is the actor a resolution is recorded with by default.
const DefaultActor = "idemgen reconcile"

// UncertainKey is an uncertain key a provider's record proves charged, as Opts.Settle sees it.
type UncertainKey struct {
	// Tenant, Scope and Key are the key as the runtime's callers gave them (not stored forms).
	Tenant, Scope, Key string
	Operation          string
	KeyHash            string
	// The provider call the history recorded.
	Provider, ProviderKey string
	Amount                int64
	Currency              string
	At                    time.Time
}

// SettleFunc writes, in tx, what the lost attempt of key should have written (the business row
// the provider's record rec proves) and returns the outcome every retry of key will replay. tx
// commits with the key's resolution; an error rolls both back and leaves the key uncertain.
type SettleFunc func(ctx context.Context, tx pgx.Tx, key UncertainKey, rec Record) (*idem.Outcome, error)

// Opts say what to reconcile and what to do about it.
type Opts struct {
	// From and To bound the window [From, To): our provider calls and the provider's records
	// whose time falls in it are compared. Usually midnights; default yesterday, in Location.
	From, To time.Time
	// Location is the time zone of days (of the default window and of the report's days);
	// default UTC.
	Location *time.Location
	// Grace: calls in the last Grace before To are not expected in the provider's records yet
	// (the provider records them late); without a record they are counted as pending, not
	// reported.
	Grace time.Duration
	// Providers, when set, limit our calls to these providers (the records are theirs); nil
	// takes every provider's calls.
	Providers []string
	// Resolve settles the uncertain keys the records decide: uncertain_not_charged ones as
	// failed (idem.ResolveFailed: the next retry runs anew), and, when Settle is set,
	// uncertain_charged ones as completed with Settle's outcome.
	Resolve bool
	Settle  SettleFunc
	// Actor is the resolutions' actor in the history; default DefaultActor.
	Actor string
	// TTL is how long a key resolved as completed is remembered; default idem.DefaultTTL.
	TTL time.Duration
}

// Side is our side of a discrepancy: the key and the provider call it made.
type Side struct {
	Tenant    string `json:"tenant"`
	Scope     string `json:"-"`
	Key       string `json:"-"` // the raw key: never logged, not printed (KeyHash is)
	KeyHash   string `json:"key_hash"`
	Operation string `json:"operation"`
	// Outcome is what became of the key: completed, failed (released, or resolved as failed),
	// uncertain, in_flight, or none (no outcome recorded).
	Outcome  string    `json:"outcome"`
	Status   int       `json:"status,omitempty"`
	Provider string    `json:"provider"`
	Amount   int64     `json:"amount"`
	Currency string    `json:"currency"`
	At       time.Time `json:"at"`
}

// Discrepancy is one difference between our calls and the provider's records.
type Discrepancy struct {
	Kind        Kind      `json:"kind"`
	Tenant      string    `json:"tenant"`
	Day         time.Time `json:"day"`
	ProviderKey string    `json:"provider_key"`
	// Ours is nil when we have no call with that key.
	Ours *Side `json:"ours,omitempty"`
	// Theirs are the provider's records with that key (several for duplicate_charge); none for
	// missing_charge and uncertain_not_charged.
	Theirs []Record `json:"theirs,omitempty"`
	// Error is why a resolution that was asked for failed (the key stays uncertain).
	Error string `json:"error,omitempty"`
}

// Resolved is an uncertain key Reconcile settled.
type Resolved struct {
	Discrepancy
	As       string `json:"as"` // completed or failed
	Evidence string `json:"evidence"`
}

// Report is what Reconcile found.
type Report struct {
	From  time.Time     `json:"from"`
	To    time.Time     `json:"to"`
	Grace time.Duration `json:"-"`
	// GraceSeconds is Grace, for JSON.
	GraceSeconds float64   `json:"grace_seconds"`
	RunAt        time.Time `json:"run_at"`
	Records      int       `json:"records_read"`
	InWindow     int       `json:"records_in_window"`
	Calls        int       `json:"calls"`
	Matched      int       `json:"matched"`
	// Pending counts calls in the grace before To that have no record yet.
	Pending       int           `json:"pending"`
	Discrepancies []Discrepancy `json:"discrepancies"`
	Resolved      []Resolved    `json:"resolved"`
}

// Clean reports a run that found no discrepancy (resolved keys are not discrepancies).
func (r *Report) Clean() bool { return len(r.Discrepancies) == 0 }

// Counts counts the discrepancies by kind; every kind is present.
func (r *Report) Counts() map[Kind]int {
	m := map[Kind]int{}
	for _, k := range Kinds {
		m[k] = 0
	}
	for _, d := range r.Discrepancies {
		m[d.Kind]++
	}
	return m
}

// Group is the discrepancies of one tenant and day.
type Group struct {
	Tenant        string
	Day           time.Time
	Discrepancies []Discrepancy
}

// Groups returns the discrepancies grouped per tenant and day, in that order.
func (r *Report) Groups() []Group {
	var gs []Group
	for _, d := range r.Discrepancies { // sorted by tenant, day
		if n := len(gs); n > 0 && gs[n-1].Tenant == d.Tenant && gs[n-1].Day.Equal(d.Day) {
			gs[n-1].Discrepancies = append(gs[n-1].Discrepancies, d)
			continue
		}
		gs = append(gs, Group{Tenant: d.Tenant, Day: d.Day, Discrepancies: []Discrepancy{d}})
	}
	return gs
}

// call is one key's provider calls with one provider key.
type call struct {
	tenant, scope, key string // stored forms
	side               Side
	first              time.Time
}

type rowKey struct{ tenant, scope, key string }

// Reconcile compares our provider calls in the window with src's records and reports the
// discrepancies. It reads the history table beside cfg's key table (idem.HistoryTableName) and
// the key rows that still exist. A Source error ends it with no report. With opts.Resolve it
// settles uncertain keys (see Opts); a resolution that fails is reported on its discrepancy
// and does not end the run.
func Reconcile(ctx context.Context, db idem.DB, cfg *idem.Config, src Source, opts *Opts) (*Report, error) {
	var o Opts
	if opts != nil {
		o = *opts
	}
	var c idem.Config
	if cfg != nil {
		c = *cfg
	}
	if c.Schema == "" {
		c.Schema = idem.DefaultSchema
	}
	if c.Table == "" {
		c.Table = idem.DefaultTable
	}
	if o.Location == nil {
		o.Location = time.UTC
	}
	if o.From.IsZero() && o.To.IsZero() {
		today := day(time.Now(), o.Location)
		o.From, o.To = today.AddDate(0, 0, -1), today
	} else if o.To.IsZero() {
		o.To = day(o.From, o.Location).AddDate(0, 0, 1)
	}
	if !o.From.Before(o.To) {
		return nil, fmt.Errorf("idemreconcile: the window [%s, %s) is empty", o.From, o.To)
	}
	if o.Grace < 0 {
		return nil, errors.New("idemreconcile: Grace is negative")
	}
	if o.Actor == "" {
		o.Actor = DefaultActor
	}
	events := pgx.Identifier{c.Schema, idem.HistoryTableName(c.Table)}.Sanitize()
	table := pgx.Identifier{c.Schema, c.Table}.Sanitize()
	rep := &Report{From: o.From, To: o.To, Grace: o.Grace, GraceSeconds: o.Grace.Seconds(), RunAt: time.Now().UTC()}

	// The provider's records, by key. All are read before anything is reported.
	byKey := map[string][]Record{}
	var keys []string
	for r, err := range src.Records(ctx, o.From, o.To) {
		if err != nil {
			return nil, fmt.Errorf("idemreconcile: read the provider's records: %w", err)
		}
		rep.Records++
		if _, ok := byKey[r.Key]; !ok {
			keys = append(keys, r.Key)
		}
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	inWindow := func(t time.Time) bool { return !t.Before(o.From) && t.Before(o.To) }

	// Our calls: those in the window, and those the records name, whenever they were.
	providers := o.Providers
	if providers == nil {
		providers = []string{}
	}
	rows, err := db.Query(ctx, `SELECT tenant, scope, key, at, operation, provider, provider_key,
	coalesce(amount, 0), coalesce(currency, '')
FROM `+events+` WHERE kind = 'provider_call' AND provider_key IS NOT NULL
	AND ((at >= $1 AND at < $2 AND (cardinality($3::text[]) = 0 OR provider = ANY($3::text[])))
		OR provider_key = ANY($4::text[]))
ORDER BY at`, o.From, o.To, providers, keys)
	if err != nil {
		return nil, fmt.Errorf("idemreconcile: read %s: %w", events, err)
	}
	calls := map[string]*call{}
	var order []string
	for rows.Next() {
		var cl call
		var at time.Time
		var op, provider, pkey, currency string
		var amount int64
		if err := rows.Scan(&cl.tenant, &cl.scope, &cl.key, &at, &op, &provider, &pkey, &amount, &currency); err != nil {
			rows.Close()
			return nil, fmt.Errorf("idemreconcile: read %s: %w", events, err)
		}
		prev, ok := calls[pkey]
		if !ok {
			cl.first = at
			cl.side = Side{Tenant: fromStoredText(cl.tenant), Scope: fromStoredText(cl.scope), Key: fromStoredText(cl.key),
				Operation: fromStoredText(op), Provider: provider, Outcome: "none"}
			cl.side.KeyHash = idem.KeyHash(cl.side.Scope, cl.side.Key)
			prev = &cl
			calls[pkey] = prev
			order = append(order, pkey)
		}
		// The latest call that said what it moved is the one compared.
		prev.side.At = at
		if amount != 0 || currency != "" {
			prev.side.Amount, prev.side.Currency = amount, currency
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idemreconcile: read %s: %w", events, err)
	}

	if err := readOutcomes(ctx, db, events, table, calls); err != nil {
		return nil, err
	}

	var store *idem.Store
	resolveStore := func() (*idem.Store, error) {
		if store == nil {
			s, err := idem.NewStore(db, &idem.Config{Schema: c.Schema, Table: c.Table, Topology: c.Topology})
			if err != nil {
				return nil, err
			}
			store = s
		}
		return store, nil
	}
	defer func() {
		if store != nil {
			store.Close()
		}
	}()
	window := windowText(o.From, o.To, o.Location)

	add := func(d Discrepancy) { rep.Discrepancies = append(rep.Discrepancies, d) }
	// The records' side.
	for _, k := range keys {
		recs := byKey[k]
		var inside []Record
		for _, r := range recs {
			if inWindow(r.At) {
				inside = append(inside, r)
			}
		}
		rep.InWindow += len(inside)
		if len(inside) == 0 {
			continue // used only to find a call's charge
		}
		cl := calls[k]
		if cl == nil {
			add(Discrepancy{Kind: UnmatchedCharge, Tenant: inside[0].Tenant, Day: day(inside[0].At, o.Location), ProviderKey: k, Theirs: inside})
			continue
		}
		side := cl.side
		base := Discrepancy{Tenant: side.Tenant, Day: day(cl.first, o.Location), ProviderKey: k, Ours: &side, Theirs: inside}
		if len(recs) > 1 {
			d := base
			d.Kind, d.Theirs = DuplicateCharge, recs
			add(d)
		}
		rec := inside[0]
		switch side.Outcome {
		case "uncertain":
			d := base
			d.Kind = UncertainCharged
			if o.Resolve && o.Settle != nil {
				ev := fmt.Sprintf("charged at %s: %s %d %s", side.Provider, rec.Reference, rec.Amount, rec.Currency)
				err := settleCharged(ctx, db, resolveStore, &o, cl, k, rec, ev)
				if err == nil {
					rep.Resolved = append(rep.Resolved, Resolved{Discrepancy: d, As: "completed", Evidence: ev})
					rep.Matched++
					continue
				}
				d.Error = err.Error()
			}
			add(d)
		case "completed":
			rep.Matched++
			if side.Amount == 0 && side.Currency == "" {
				continue // the call did not say what it moved
			}
			if rec.Currency != side.Currency {
				d := base
				d.Kind = CurrencyMismatch
				add(d)
			} else if rec.Amount != side.Amount {
				d := base
				d.Kind = AmountMismatch
				add(d)
			}
		default:
			d := base
			d.Kind = UnmatchedCharge
			add(d)
		}
	}
	// Our side: calls in the window the records do not have.
	for _, k := range order {
		cl := calls[k]
		if !inWindow(cl.first) || len(byKey[k]) > 0 {
			continue
		}
		if len(o.Providers) > 0 && !slices.Contains(o.Providers, cl.side.Provider) {
			continue
		}
		rep.Calls++
		if !cl.first.Before(o.To.Add(-o.Grace)) {
			if cl.side.Outcome == "completed" || cl.side.Outcome == "uncertain" {
				rep.Pending++
			}
			continue
		}
		side := cl.side
		d := Discrepancy{Tenant: side.Tenant, Day: day(cl.first, o.Location), ProviderKey: k, Ours: &side}
		switch side.Outcome {
		case "completed":
			d.Kind = MissingCharge
			add(d)
		case "uncertain":
			// Decided only when the provider's records of the call's whole day were read.
			if d.Day.Before(o.From) || d.Day.AddDate(0, 0, 1).After(o.To) {
				rep.Pending++
				continue
			}
			d.Kind = UncertainNotCharged
			if o.Resolve {
				ev := fmt.Sprintf("no record at %s for %s in %s", side.Provider, k, window)
				s, err := resolveStore()
				if err == nil {
					err = s.Resolve(ctx, &idem.ResolveParams{Tenant: side.Tenant, Scope: side.Scope, Key: side.Key,
						As: idem.ResolveFailed, Actor: o.Actor, Evidence: ev})
				}
				if err == nil {
					rep.Resolved = append(rep.Resolved, Resolved{Discrepancy: d, As: "failed", Evidence: ev})
					continue
				}
				d.Error = err.Error()
			}
			add(d)
		}
	}
	for _, k := range order {
		if inWindow(calls[k].first) && len(byKey[k]) > 0 {
			rep.Calls++
		}
	}
	slices.SortStableFunc(rep.Discrepancies, func(a, b Discrepancy) int {
		if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		if c := a.Day.Compare(b.Day); c != 0 {
			return c
		}
		if c := slices.Index(Kinds, a.Kind) - slices.Index(Kinds, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.ProviderKey, b.ProviderKey)
	})
	return rep, nil
}

func settleCharged(ctx context.Context, db idem.DB, storeOf func() (*idem.Store, error), o *Opts, cl *call, pkey string, rec Record, evidence string) error {
	s, err := storeOf()
	if err != nil {
		return err
	}
	side := cl.side
	key := UncertainKey{Tenant: side.Tenant, Scope: side.Scope, Key: side.Key, Operation: side.Operation, KeyHash: side.KeyHash,
		Provider: side.Provider, ProviderKey: pkey, Amount: side.Amount, Currency: side.Currency, At: side.At}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		out, err := o.Settle(ctx, tx, key, rec)
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		if out == nil {
			return errors.New("settle returned no outcome for retries to replay")
		}
		return s.ResolveTx(ctx, tx, &idem.ResolveParams{Tenant: side.Tenant, Scope: side.Scope, Key: side.Key,
			As: idem.ResolveCompleted, Outcome: out, TTL: o.TTL, Actor: o.Actor, Evidence: evidence})
	})
}

// readOutcomes sets each call's Outcome from its key's later history and its key row.
func readOutcomes(ctx context.Context, db idem.DB, events, table string, calls map[string]*call) error {
	if len(calls) == 0 {
		return nil
	}
	byRow := map[rowKey][]*call{}
	var ts, ss, ks []string
	for _, cl := range calls {
		r := rowKey{cl.tenant, cl.scope, cl.key}
		if _, ok := byRow[r]; !ok {
			ts, ss, ks = append(ts, r.tenant), append(ss, r.scope), append(ks, r.key)
		}
		byRow[r] = append(byRow[r], cl)
	}
	rows, err := db.Query(ctx, `SELECT e.tenant, e.scope, e.key, e.kind, coalesce(e.status, 0), coalesce(e.detail, '')
FROM `+events+` e JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(tenant, scope, key)
	ON e.tenant = k.tenant AND e.scope = k.scope AND e.key = k.key
WHERE e.kind IN ('completed', 'released', 'uncertain', 'resolved')
ORDER BY e.at`, ts, ss, ks)
	if err != nil {
		return fmt.Errorf("idemreconcile: read %s: %w", events, err)
	}
	for rows.Next() {
		var r rowKey
		var kind, detail string
		var status int32
		if err := rows.Scan(&r.tenant, &r.scope, &r.key, &kind, &status, &detail); err != nil {
			rows.Close()
			return fmt.Errorf("idemreconcile: read %s: %w", events, err)
		}
		outcome := ""
		switch kind {
		case "completed":
			outcome = completedOutcome(int(status))
		case "released":
			outcome = "failed"
		case "uncertain":
			outcome = "uncertain"
		case "resolved":
			switch {
			case strings.HasPrefix(detail, "completed:"):
				outcome = completedOutcome(int(status))
			case strings.HasPrefix(detail, "failed:"):
				outcome = "failed"
			}
		}
		if outcome == "" {
			continue
		}
		for _, cl := range byRow[r] {
			cl.side.Outcome, cl.side.Status = outcome, int(status)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("idemreconcile: read %s: %w", events, err)
	}
	// The key row, while it exists, has the last word: an uncertain row is uncertain whatever
	// the history says; a row in flight is still running.
	rows, err = db.Query(ctx, `SELECT t.tenant, t.scope, t.key, t.state, coalesce(t.status, 0)
FROM `+table+` t JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(tenant, scope, key)
	ON t.tenant = k.tenant AND t.scope = k.scope AND t.key = k.key`, ts, ss, ks)
	if err != nil {
		return fmt.Errorf("idemreconcile: read %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r rowKey
		var state idem.KeyState
		var status int32
		if err := rows.Scan(&r.tenant, &r.scope, &r.key, &state, &status); err != nil {
			return fmt.Errorf("idemreconcile: read %s: %w", table, err)
		}
		for _, cl := range byRow[r] {
			switch {
			case state == idem.KeyUncertain:
				cl.side.Outcome = "uncertain"
			case state == idem.KeyInFlight && cl.side.Outcome == "none":
				cl.side.Outcome = "in_flight"
			case state == idem.KeyComplete && cl.side.Outcome == "none":
				cl.side.Outcome, cl.side.Status = completedOutcome(int(status)), int(status)
			}
		}
	}
	return rows.Err()
}

// completedOutcome: a stored error answer (a declined card answered 402) completed the key
// without a charge; only a success, or an unknown status, expects one.
func completedOutcome(status int) string {
	if status >= 400 {
		return "failed"
	}
	return "completed"
}

func day(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, loc)
}

func windowText(from, to time.Time, loc *time.Location) string {
	f := func(t time.Time) string {
		if t.Equal(day(t, loc)) {
			return t.In(loc).Format(time.DateOnly)
		}
		return t.In(loc).Format(time.RFC3339)
	}
	return "[" + f(from) + ", " + f(to) + ")"
}

// fromStoredText is the inverse of the key table's stored form (runtime/idem's storedText):
// U+0001 and the value's bytes in hex for a value that is not plain text, the value otherwise.
func fromStoredText(v string) string {
	if rest, ok := strings.CutPrefix(v, "\x01"); ok {
		if b, err := hex.DecodeString(rest); err == nil {
			return string(b)
		}
	}
	return v
}
