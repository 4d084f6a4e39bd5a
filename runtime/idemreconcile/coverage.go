package idemreconcile

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Covered: when the provider's records prove it has no charge for a call.
//
// A call with no record is evidence of nothing by itself: the export may have failed, the
// download may be empty or cut short, the file may be of another day or another provider. So
// the records of the call's provider cover a call (its first and last call under one provider
// key) only when
//
//   - at least one record of that provider was read (a record's provider is its Provider, or,
//     when it names none and Opts.Providers names exactly one provider, that one; records that
//     name no provider otherwise cover nothing);
//   - they are in time order, as read (their first and last dates then bound what was exported:
//     a file cut short ends early; one that is not in time order proves nothing by its ends);
//   - one of them is dated at or before the first call, and one at or after the last call plus
//     Opts.Grace (how late the provider may record a charge).
//
// Only then is an uncertain key without a record settled as failed (uncertain_not_charged),
// and a completed call without a record reported as missing_charge. Otherwise the call is
// not_covered, with the reason, and nothing is settled.

// Coverage is what the records of one provider cover.
type Coverage struct {
	Provider string `json:"provider"`
	// Records counts them; First and Last are the earliest and latest dates among them.
	Records     int       `json:"records"`
	First       time.Time `json:"first"`
	Last        time.Time `json:"last"`
	InTimeOrder bool      `json:"in_time_order"`
}

type span struct {
	records     int
	first, last time.Time
	prev        time.Time
	ordered     bool
}

type coverage struct {
	spans        map[string]*span
	unattributed int
}

func (c *coverage) add(rec Record, providers []string) {
	p := rec.Provider
	if p == "" && len(providers) == 1 {
		p = providers[0]
	}
	if p == "" {
		c.unattributed++
		return
	}
	if c.spans == nil {
		c.spans = map[string]*span{}
	}
	sp := c.spans[p]
	if sp == nil {
		sp = &span{first: rec.At, last: rec.At, prev: rec.At, ordered: true}
		c.spans[p] = sp
	}
	sp.records++
	if rec.At.Before(sp.prev) {
		sp.ordered = false
	}
	sp.prev = rec.At
	if rec.At.Before(sp.first) {
		sp.first = rec.At
	}
	if rec.At.After(sp.last) {
		sp.last = rec.At
	}
}

// covers returns "" when the records of provider cover calls made from first to last, and why
// not otherwise.
func (c *coverage) covers(provider string, first, last time.Time, grace time.Duration) string {
	sp := c.spans[provider]
	const at = time.RFC3339Nano
	switch {
	case sp == nil:
		return fmt.Sprintf("no record of %s was read: an empty or failed export proves nothing", strconv.Quote(provider))
	case !sp.ordered:
		return fmt.Sprintf("the records of %s are not in time order: their ends do not show what was exported", strconv.Quote(provider))
	case sp.first.After(first):
		return fmt.Sprintf("the records of %s start at %s, after the call at %s", strconv.Quote(provider), sp.first.UTC().Format(at), first.UTC().Format(at))
	case sp.last.Before(last.Add(grace)):
		return fmt.Sprintf("the records of %s end at %s, before the call at %s plus the grace (%s)", strconv.Quote(provider),
			sp.last.UTC().Format(at), last.UTC().Format(at), grace)
	}
	return ""
}

func (c *coverage) list() []Coverage {
	var out []Coverage
	for p, sp := range c.spans {
		out = append(out, Coverage{Provider: p, Records: sp.records, First: sp.first, Last: sp.last, InTimeOrder: sp.ordered})
	}
	slices.SortFunc(out, func(a, b Coverage) int { return strings.Compare(a.Provider, b.Provider) })
	return out
}
