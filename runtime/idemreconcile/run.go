package idemreconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// A run is one reconciliation: read (our calls, then the records as a stream, each matched to
// its call as it comes), match (each call and each record without a call decided once), settle
// (the uncertain keys the records decide, when asked).

// lookupBatch is how many records whose call is not known yet are held before the calls they
// name are read, in one statement.
const lookupBatch = 1000

// keptRecords caps the records kept per key: a key with more is a duplicate charge all the same,
// and its report lists the first ones.
const keptRecords = 16

// call is our side of one provider key: its calls, what became of the key, and the records that
// name it.
type call struct {
	side        Side
	first, last time.Time
	inWindow    bool // the first call was made in the window, to a provider compared
	theirs      []Record
	records     int
}

// stray is the records of a key we have no call for.
type stray struct {
	theirs  []Record
	records int
}

// candidate is an uncertain key the records decide, settled when Opts.Resolve asks.
type candidate struct {
	d    Discrepancy
	call *call
}

type run struct {
	o          Opts
	db         idem.DB
	store      *idem.Store
	rep        *Report
	calls      map[string]*call // by provider key
	order      []string         // provider keys, in the order of their first call read
	strays     map[string]*stray
	strayOrder []string
	pending    []Record // records whose call is not read yet
	cover      coverage
	candidates []candidate
}

func newRun(db idem.DB, store *idem.Store, o Opts) *run {
	return &run{o: o, db: db, store: store, calls: map[string]*call{}, strays: map[string]*stray{}, cover: coverage{},
		rep: &Report{From: o.From, To: o.To, Grace: o.Grace, GraceSeconds: o.Grace.Seconds(), RunAt: time.Now().UTC()}}
}

func (r *run) inWindow(t time.Time) bool { return !t.Before(r.o.From) && t.Before(r.o.To) }

// read reads our calls of the window, then src's records, matching each to its call.
func (r *run) read(ctx context.Context, src Source) error {
	calls, err := r.store.ProviderCalls(ctx, &idem.ProviderCallsParams{From: r.o.From, To: r.o.To, Providers: r.o.Providers})
	if err != nil {
		return fmt.Errorf("idemreconcile: read our calls: %w", err)
	}
	r.addCalls(calls)
	for rec, err := range src.Records(ctx, r.o.From, r.o.To) {
		if err != nil {
			return fmt.Errorf("idemreconcile: read the provider's records: %w", err)
		}
		r.rep.Records++
		if r.inWindow(rec.At) {
			r.rep.InWindow++
		}
		r.cover.add(rec, r.o.Providers)
		if !r.place(rec) {
			if r.pending = append(r.pending, rec); len(r.pending) >= lookupBatch {
				if err := r.lookup(ctx); err != nil {
					return err
				}
			}
		}
	}
	return r.lookup(ctx)
}

// place adds rec to its key's call or stray records, and reports false when neither is known.
func (r *run) place(rec Record) bool {
	if cl := r.calls[rec.Key]; cl != nil {
		cl.records++
		if len(cl.theirs) < keptRecords {
			cl.theirs = append(cl.theirs, rec)
		}
		return true
	}
	if s := r.strays[rec.Key]; s != nil {
		s.records++
		if len(s.theirs) < keptRecords {
			s.theirs = append(s.theirs, rec)
		}
		return true
	}
	return false
}

// lookup reads the calls the pending records name, whenever they were made, and places the
// records; a record that names no call of ours starts a stray.
func (r *run) lookup(ctx context.Context) error {
	if len(r.pending) == 0 {
		return nil
	}
	var keys []string
	seen := map[string]bool{}
	for _, rec := range r.pending {
		if !seen[rec.Key] {
			seen[rec.Key] = true
			keys = append(keys, rec.Key)
		}
	}
	calls, err := r.store.ProviderCalls(ctx, &idem.ProviderCallsParams{ProviderKeys: keys})
	if err != nil {
		return fmt.Errorf("idemreconcile: read the calls the records name: %w", err)
	}
	r.addCalls(calls)
	for _, rec := range r.pending {
		if !r.place(rec) {
			r.strays[rec.Key] = &stray{}
			r.strayOrder = append(r.strayOrder, rec.Key)
			r.place(rec)
		}
	}
	r.pending = r.pending[:0]
	return nil
}

// addCalls adds calls (oldest first) to their provider keys' calls.
func (r *run) addCalls(calls []idem.ProviderCallEvent) {
	for _, c := range calls {
		cl := r.calls[c.ProviderKey]
		if cl == nil {
			cl = &call{first: c.At, side: Side{Tenant: c.Tenant, Scope: c.Scope, Key: c.Key, KeyHash: c.KeyHash,
				Operation: c.Operation, Provider: c.Provider}}
			cl.side.Outcome, cl.side.Status = outcomeOf(c.Fate)
			cl.inWindow = r.inWindow(c.At) && (len(r.o.Providers) == 0 || slices.Contains(r.o.Providers, c.Provider))
			r.calls[c.ProviderKey] = cl
			r.order = append(r.order, c.ProviderKey)
		}
		cl.last, cl.side.At = c.At, c.At
		// The latest call that said what it moved is the one compared.
		if c.Amount != 0 || c.Currency != "" {
			cl.side.Amount, cl.side.Currency = c.Amount, c.Currency
		}
	}
}

// outcomeOf is what became of a key, as Side.Outcome says it: the key row's state has the last
// word while the row exists (an uncertain row is uncertain whatever the history says; a row in
// flight is still running), then the history's last completion, release, turn to uncertain or
// resolution.
func outcomeOf(f idem.KeyFate) (string, int) {
	outcome, status := "none", 0
	switch {
	case f.Last == idem.EventCompleted, f.Last == idem.EventResolved && f.Resolution == idem.ResolveCompleted:
		outcome, status = completedOutcome(f.Status), f.Status
	case f.Last == idem.EventReleased, f.Last == idem.EventResolved && f.Resolution == idem.ResolveFailed:
		outcome, status = "failed", f.Status
	case f.Last == idem.EventUncertain:
		outcome = "uncertain"
	}
	switch {
	case f.State == idem.KeyUncertain:
		outcome = "uncertain"
	case f.State == idem.KeyInFlight && outcome == "none":
		outcome = "in_flight"
	case f.State == idem.KeyComplete && outcome == "none":
		outcome, status = completedOutcome(f.RowStatus), f.RowStatus
	}
	return outcome, status
}

// completedOutcome: a stored error answer (a declined card answered 402) completed the key
// without a charge; only a success, or an unknown status, expects one.
func completedOutcome(status int) string {
	if status >= 400 {
		return "failed"
	}
	return "completed"
}

// report returns the run's report, its discrepancies sorted by tenant, day, kind and key.
func (r *run) report() *Report {
	r.rep.Coverage, r.rep.Unattributed = r.cover.list(), r.cover.unattributed
	slices.SortStableFunc(r.rep.Discrepancies, func(a, b Discrepancy) int {
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
	return r.rep
}
