package idemreconcile

import (
	"fmt"
	"time"
)

// match decides each call, then each record that names no call of ours.
func (r *run) match() {
	for _, k := range r.order {
		r.matchCall(k, r.calls[k])
	}
	for _, k := range r.strayOrder {
		s := r.strays[k]
		r.add(Discrepancy{Kind: UnmatchedCharge, Tenant: s.theirs[0].Tenant, Day: day(s.theirs[0].At, r.o.Location), ProviderKey: k, Theirs: s.theirs})
		if s.records > 1 {
			r.add(Discrepancy{Kind: DuplicateCharge, Tenant: s.theirs[0].Tenant, Day: day(s.theirs[0].At, r.o.Location), ProviderKey: k, Theirs: s.theirs})
		}
	}
}

func (r *run) add(d Discrepancy) { r.rep.Discrepancies = append(r.rep.Discrepancies, d) }

// matchCall decides one provider key of ours against the records that name it.
func (r *run) matchCall(pkey string, cl *call) {
	if cl.inWindow {
		r.rep.Calls++
	}
	side := cl.side
	d := Discrepancy{Tenant: side.Tenant, Day: day(cl.first, r.o.Location), ProviderKey: pkey, Ours: &side, Theirs: cl.theirs}
	if cl.records == 0 {
		r.matchMissing(d, cl)
		return
	}
	if cl.records > 1 {
		r.add(with(d, DuplicateCharge))
	}
	rec := cl.theirs[0]
	switch side.Outcome {
	case "uncertain":
		r.candidates = append(r.candidates, candidate{d: with(d, UncertainCharged), call: cl})
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

// matchMissing decides a call of the window that no record names: only records that cover it
// say the provider has no charge; otherwise nothing can be concluded, and the run says so.
func (r *run) matchMissing(d Discrepancy, cl *call) {
	if !cl.inWindow || (cl.side.Outcome != "completed" && cl.side.Outcome != "uncertain") {
		return
	}
	why := r.cover.covers(cl.side.Provider, cl.first, cl.last, r.o.Grace)
	switch {
	case why == "" && cl.side.Outcome == "completed":
		r.add(with(d, MissingCharge))
	case why == "":
		r.candidates = append(r.candidates, candidate{d: with(d, UncertainNotCharged), call: cl})
	case cl.side.Outcome == "completed" && !cl.first.Before(r.o.To.Add(-r.o.Grace)):
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
