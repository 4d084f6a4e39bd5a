package idemreconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// A run is one reconciliation: read and match the records (a batch at a time: the calls a batch
// names are read by their derived keys, and each record is decided as it comes), then the
// window's calls that no record named (streamed by derived key, a batch at a time), then settle
// the uncertain keys the records decided, when asked. Memory holds the derived keys of the
// records read (to find duplicates and the calls no record names), the listed discrepancies
// (MaxListed per kind) and one batch: it does not grow with our calls or with the records.

// lookupBatch is how many records, or calls without a record, are decided together: their calls,
// or their keys' fates, are read in one round of statements.
const lookupBatch = 1000

// keptRecords caps the records a discrepancy lists.
const keptRecords = 16

// MaxListed caps the discrepancies a Report lists per kind; the others are counted
// (Report.Counts, Report.Unlisted). A report of a million charges we have no call for (the
// wrong file) is a count and the first of them, not a million lines.
const MaxListed = 10_000

// call is our side of one derived key: its calls (of the window, or all of them when a record
// names it) and what became of its key.
type call struct {
	side        Side
	pkey        string
	first, last time.Time
	ev          idem.ProviderCallEvent // the latest call, whose Fate ReadFates fills
}

// candidate is an uncertain key the records decide, settled when Opts.Resolve asks.
type candidate struct{ d Discrepancy }

type run struct {
	o     Opts
	db    idem.DB
	store *idem.Store
	rep   *Report
	// seen counts the records read per derived key.
	seen map[string]int32
	// dups is where a derived key's duplicate_charge is in rep.Discrepancies.
	dups       map[string]int
	listed     map[Kind]int
	pending    []Record
	cover      coverage
	candidates []candidate
}

func newRun(db idem.DB, store *idem.Store, o Opts) *run {
	return &run{o: o, db: db, store: store, seen: map[string]int32{}, dups: map[string]int{}, listed: map[Kind]int{},
		rep: &Report{From: o.From, To: o.To, Grace: o.Grace, GraceSeconds: o.Grace.Seconds(), RunAt: time.Now().UTC(), Totals: map[Kind]int{}}}
}

func (r *run) inWindow(t time.Time) bool { return !t.Before(r.o.From) && t.Before(r.o.To) }

// readRecords reads src's records and decides each against the calls it names.
func (r *run) readRecords(ctx context.Context, src Source) error {
	for rec, err := range src.Records(ctx, r.o.From, r.o.To) {
		if err != nil {
			return fmt.Errorf("idemreconcile: read the provider's records: %w", err)
		}
		r.rep.Records++
		if r.inWindow(rec.At) {
			r.rep.InWindow++
		}
		r.cover.add(rec, r.o.Providers)
		if r.pending = append(r.pending, rec); len(r.pending) >= lookupBatch {
			if err := r.matchRecords(ctx); err != nil {
				return err
			}
		}
	}
	return r.matchRecords(ctx)
}

// matchRecords reads the calls the pending records name, whenever they were made, and decides
// each record: the first of its derived key against the call, the next ones as duplicates.
func (r *run) matchRecords(ctx context.Context) error {
	if len(r.pending) == 0 {
		return nil
	}
	var keys []string
	batch := map[string]bool{}
	for _, rec := range r.pending {
		if !batch[rec.Key] {
			batch[rec.Key] = true
			keys = append(keys, rec.Key)
		}
	}
	events, err := r.store.ProviderCalls(ctx, &idem.ProviderCallsParams{ProviderKeys: keys})
	if err != nil {
		return fmt.Errorf("idemreconcile: read the calls the records name: %w", err)
	}
	calls := map[string]*call{}
	for _, c := range group(events) {
		calls[c.pkey] = c
	}
	for _, rec := range r.pending {
		n := r.seen[rec.Key]
		r.seen[rec.Key] = n + 1
		if n > 0 {
			r.duplicate(rec, calls[rec.Key])
		} else {
			r.matchRecord(rec, calls[rec.Key])
		}
	}
	r.pending = r.pending[:0]
	return nil
}

// readCalls reads the window's calls and decides those no record named.
func (r *run) readCalls(ctx context.Context) error {
	var cur *call
	var batch []*call
	done := func() error {
		if cur == nil {
			return nil
		}
		r.rep.Calls++
		if r.seen[cur.pkey] > 0 {
			return nil
		}
		if batch = append(batch, cur); len(batch) < lookupBatch {
			return nil
		}
		err := r.matchMissing(ctx, batch)
		batch = batch[:0]
		return err
	}
	err := r.store.EachProviderCall(ctx, &idem.ProviderCallsParams{From: r.o.From, To: r.o.To, Providers: r.o.Providers},
		func(c idem.ProviderCallEvent) error {
			if cur != nil && cur.pkey == c.ProviderKey {
				cur.add(c)
				return nil
			}
			if err := done(); err != nil {
				return err
			}
			cur = newCall(c)
			return nil
		})
	if err == nil {
		err = done()
	}
	if err == nil {
		err = r.matchMissing(ctx, batch)
	}
	if err != nil {
		return fmt.Errorf("idemreconcile: read our calls: %w", err)
	}
	return nil
}

// group gathers calls (by derived key and time, fates read) into one call per derived key.
func group(events []idem.ProviderCallEvent) []*call {
	var out []*call
	for _, c := range events {
		if n := len(out); n > 0 && out[n-1].pkey == c.ProviderKey {
			out[n-1].add(c)
			continue
		}
		out = append(out, newCall(c))
	}
	for _, c := range out {
		c.side.Outcome, c.side.Status = outcomeOf(c.ev.Fate)
	}
	return out
}

func newCall(c idem.ProviderCallEvent) *call {
	cl := &call{pkey: c.ProviderKey, first: c.At, side: Side{Tenant: c.Tenant, Scope: c.Scope, Key: c.Key, KeyHash: c.KeyHash,
		Operation: c.Operation, Provider: c.Provider}}
	cl.add(c)
	return cl
}

// add adds a later call under the same derived key.
func (cl *call) add(c idem.ProviderCallEvent) {
	cl.last, cl.side.At, cl.ev = c.At, c.At, c
	// The latest call that said what it moved is the one compared.
	if c.Amount != 0 || c.Currency != "" {
		cl.side.Amount, cl.side.Currency = c.Amount, c.Currency
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

// add lists d, unless MaxListed of its kind are listed already, and counts it; it returns where
// d is listed, or -1.
func (r *run) add(d Discrepancy) int {
	r.rep.Totals[d.Kind]++
	if r.listed[d.Kind] >= MaxListed {
		r.rep.Unlisted++
		return -1
	}
	r.listed[d.Kind]++
	r.rep.Discrepancies = append(r.rep.Discrepancies, d)
	return len(r.rep.Discrepancies) - 1
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
