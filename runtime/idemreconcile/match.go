package idemreconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// matchRecord decides the first record of a derived key against our call with that key (nil
// when we have none).
func (r *run) matchRecord(rec Record, cl *call) {
	if cl == nil {
		r.add(Discrepancy{Kind: UnmatchedCharge, Tenant: rec.Tenant, Day: day(rec.At, r.o.Location), ProviderKey: rec.Key, Theirs: []Record{rec}})
		return
	}
	side := cl.side
	d := Discrepancy{Tenant: side.Tenant, Day: day(cl.first, r.o.Location), ProviderKey: cl.pkey, Ours: &side, Theirs: []Record{rec}}
	switch side.Outcome {
	case "uncertain":
		r.candidates = append(r.candidates, candidate{d: with(d, UncertainCharged)})
	case "completed":
		r.rep.Matched++
		switch {
		case side.Amount == 0 && side.Currency == "":
			// the call did not say what it moved
		case rec.Currency != side.Currency:
			r.add(with(d, CurrencyMismatch))
		case rec.Amount != side.Amount:
			r.add(with(d, AmountMismatch))
		}
	default:
		r.add(with(d, UnmatchedCharge))
	}
}

// duplicate decides a second (third, …) record of a derived key: one duplicate_charge per key,
// listing the records after the first.
func (r *run) duplicate(rec Record, cl *call) {
	if i, ok := r.dups[rec.Key]; ok && i >= 0 {
		if d := &r.rep.Discrepancies[i]; len(d.Theirs) < keptRecords {
			d.Theirs = append(d.Theirs, rec)
		}
		return
	}
	d := Discrepancy{Kind: DuplicateCharge, Tenant: rec.Tenant, Day: day(rec.At, r.o.Location), ProviderKey: rec.Key, Theirs: []Record{rec}}
	if cl != nil {
		side := cl.side
		d.Tenant, d.Day, d.Ours = side.Tenant, day(cl.first, r.o.Location), &side
	}
	r.dups[rec.Key] = r.add(d)
}

// matchMissing decides calls of the window that no record names: only records that cover a
// call say the provider has no charge; otherwise nothing can be concluded, and the run says so.
func (r *run) matchMissing(ctx context.Context, batch []*call) error {
	if len(batch) == 0 {
		return nil
	}
	events := make([]idem.ProviderCallEvent, len(batch))
	for i, cl := range batch {
		events[i] = cl.ev
	}
	if err := r.store.ReadFates(ctx, events); err != nil {
		return err
	}
	for i, cl := range batch {
		cl.side.Outcome, cl.side.Status = outcomeOf(events[i].Fate)
		r.decideMissing(cl)
	}
	return nil
}

func (r *run) decideMissing(cl *call) {
	if cl.side.Outcome != "completed" && cl.side.Outcome != "uncertain" {
		return
	}
	side := cl.side
	d := Discrepancy{Tenant: side.Tenant, Day: day(cl.first, r.o.Location), ProviderKey: cl.pkey, Ours: &side}
	why := r.cover.covers(side.Provider, cl.first, cl.last, r.o.Grace)
	switch {
	case why == "" && side.Outcome == "completed":
		r.add(with(d, MissingCharge))
	case why == "":
		r.candidates = append(r.candidates, candidate{d: with(d, UncertainNotCharged)})
	case side.Outcome == "completed" && !cl.first.Before(r.o.To.Add(-r.o.Grace)):
		r.rep.Pending++
	default:
		d = with(d, NotCovered)
		d.Reason = why
		r.add(d)
	}
}

func with(d Discrepancy, k Kind) Discrepancy {
	d.Kind = k
	return d
}

// evidence is what a resolution of c records as the reason.
func (r *run) evidence(c candidate) string {
	side := c.d.Ours
	if c.d.Kind == UncertainCharged {
		rec := c.d.Theirs[0]
		return fmt.Sprintf("charged at %s: %s %d %s", side.Provider, rec.Reference, rec.Amount, rec.Currency)
	}
	sp := r.cover.spans[side.Provider]
	return fmt.Sprintf("no record at %s for %s; its records, in time order, run from %s to %s", side.Provider, c.d.ProviderKey,
		sp.first.UTC().Format(time.RFC3339Nano), sp.last.UTC().Format(time.RFC3339Nano))
}
