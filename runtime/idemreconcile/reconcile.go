package idemreconcile

import (
	"context"
	"errors"
	"fmt"
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
	// UncertainNotCharged: an uncertain key the provider has no record of, while its records
	// cover the call (see Covered): it settles as failed.
	UncertainNotCharged Kind = "uncertain_not_charged"
	// NotCovered: a call of ours (completed or uncertain) that has no record, while the
	// provider's records do not cover it (see Covered): an empty or partial report, or one of
	// another period. Nothing can be concluded and nothing is settled; Reason says why.
	NotCovered Kind = "not_covered"
)

// Kinds lists every Kind, in the order reports print them.
var Kinds = []Kind{UnmatchedCharge, MissingCharge, AmountMismatch, CurrencyMismatch, DuplicateCharge,
	UncertainCharged, UncertainNotCharged, NotCovered}

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
	// From and To bound the window [From, To): our provider calls made in it must be found in
	// the provider's records (or be covered as pending). Every record read is matched, whatever
	// its date: to the call it names, made in the window or not, or reported as a charge we
	// have no call for. Usually midnights; default yesterday, in Location.
	From, To time.Time
	// Location is the time zone of days (of the default window and of the report's days);
	// default UTC.
	Location *time.Location
	// Grace is how late the provider may record a charge after our call. Records cover a call
	// only when one is dated at least Grace after it (see Covered); a completed call in the last
	// Grace before To that the records do not cover is counted as pending, not reported.
	Grace time.Duration
	// Providers, when set, limit our calls to these providers (the records are theirs); nil
	// takes every provider's calls. With exactly one, records that name no provider are that
	// provider's (see Covered).
	Providers []string
	// Resolve settles the uncertain keys the records decide: uncertain_not_charged ones as
	// failed (idem.ResolveFailed: the next retry runs anew), which needs records that cover the
	// call, and, when Settle is set, uncertain_charged ones as completed with Settle's outcome.
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
	// Theirs are the provider's records with that key: the first, or for duplicate_charge the
	// ones after it (at most 16); none for missing_charge, uncertain_not_charged and not_covered.
	Theirs []Record `json:"theirs,omitempty"`
	// Reason says why the records do not cover the call (not_covered).
	Reason string `json:"reason,omitempty"`
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
	// Pending counts completed calls in the grace before To that have no record yet and that
	// the records do not cover.
	Pending int `json:"pending"`
	// Coverage is what the records of each provider cover, sorted by provider; Unattributed
	// counts records that name no provider and cover none (see Covered).
	Coverage     []Coverage `json:"coverage"`
	Unattributed int        `json:"unattributed_records,omitempty"`
	// Discrepancies lists at most MaxListed of each kind; Unlisted counts the others, which
	// Counts includes.
	Discrepancies []Discrepancy `json:"discrepancies"`
	Unlisted      int           `json:"unlisted,omitempty"`
	// Totals counts the discrepancies by kind, listed or not (see Counts).
	Totals   map[Kind]int `json:"counts"`
	Resolved []Resolved   `json:"resolved"`
}

// Clean reports a run that found no discrepancy (resolved keys are not discrepancies). A call
// the records do not cover is one (NotCovered): a run is never clean while a call of ours is
// unaccounted for.
func (r *Report) Clean() bool { return len(r.Discrepancies) == 0 && r.Unlisted == 0 }

// Counts counts the discrepancies by kind, listed or not; every kind is present.
func (r *Report) Counts() map[Kind]int {
	m := map[Kind]int{}
	for _, k := range Kinds {
		m[k] = 0
	}
	if r.Totals != nil {
		for k, n := range r.Totals {
			m[k] = n
		}
		return m
	}
	for _, d := range r.Discrepancies { // a Report built by hand
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

// Reconcile compares our provider calls in the window with src's records and reports the
// discrepancies. It reads the key history through an idem.Store on cfg's key table, and src
// once, as a stream: memory grows with the number of distinct derived keys in the records and
// the discrepancies listed (at most MaxListed per kind), not with our calls or the records' size.
// A Source error ends it with no report. With opts.Resolve it then settles uncertain keys (see
// Opts); a resolution that fails is reported on its discrepancy and does not end the run.
func Reconcile(ctx context.Context, db idem.DB, cfg *idem.Config, src Source, opts *Opts) (*Report, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var c idem.Config
	if cfg != nil {
		c = idem.Config{Schema: cfg.Schema, Table: cfg.Table, Topology: cfg.Topology}
	}
	store, err := idem.NewStore(db, &c)
	if err != nil {
		return nil, fmt.Errorf("idemreconcile: %w", err)
	}
	defer store.Close()
	r := newRun(db, store, o)
	if err := r.readRecords(ctx, src); err != nil {
		return nil, err
	}
	if err := r.readCalls(ctx); err != nil {
		return nil, err
	}
	r.settle(ctx)
	return r.report(), nil
}

func (opts *Opts) withDefaults() (Opts, error) {
	var o Opts
	if opts != nil {
		o = *opts
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
		return o, fmt.Errorf("idemreconcile: the window [%s, %s) is empty", o.From, o.To)
	}
	if o.Grace < 0 {
		return o, errors.New("idemreconcile: Grace is negative")
	}
	if o.Actor == "" {
		o.Actor = DefaultActor
	}
	return o, nil
}

func day(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, loc)
}
