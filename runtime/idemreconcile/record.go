// Package idemreconcile compares what a provider (a card acquirer, a bank) says it did with what
// the idempotency runtime recorded, and settles the keys whose outcome was lost.
//
// The runtime records every provider call of an operation that keeps a history
// (idem.DoParams.History, implied by UncertainOnLoss) as a provider_call row of the key's
// history, with the derived key it sent to the provider (idem.ProviderKey), the amount and the
// currency. What became of the key afterwards follows in the same history: completed (with the
// stored status), released, uncertain, resolved. Reconcile reads that history (which outlives
// the key row: idem.DefaultHistoryRetention) for a window of days, reads the provider's records
// for the same window from a Source, matches them by the derived key, and reports every
// discrepancy (see Kind). With Opts.Resolve it also settles the uncertain keys the provider's
// records decide.
//
// The package reads and settles keys only through an idem.Store (Store.ProviderCalls,
// Store.EachProviderCall, Store.ReadFates, Store.Resolve), and imports only runtime/idem, pgx
// and the standard library, like runtime/idem itself. docs/reconcile.md explains how to run it daily
// (idemgen reconcile) and what to do about each kind of discrepancy.
package idemreconcile

import (
	"context"
	"iter"
	"time"
)

// Record is one charge in the provider's records: a line of its settlement report, an object
// of its API.
type Record struct {
	// Provider is the provider's name as the application passes it to idem.ProviderKey
	// ("acquirer"); empty when the records are one provider's (see Opts.Providers).
	Provider string `json:"provider,omitempty"`
	// Key is the idempotency key the provider received: the derived key idem.ProviderKey
	// returned, which the provider keeps with its record.
	Key string `json:"key"`
	// Reference is the provider's own identifier of the charge (for the operator and the
	// evidence of a resolution).
	Reference string `json:"reference"`
	// Amount in minor units (cents) and Currency (ISO 4217, upper case), as the provider charged.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// At is when the provider recorded the charge. Records are selected by it: a record belongs
	// to the window [From, To) when At does.
	At time.Time `json:"at"`
	// Tenant is the tenant the provider knows the charge by (a merchant account), when the
	// records say; it only places a charge we have no call for in the report.
	Tenant string `json:"tenant,omitempty"`
}

// Source gives the provider's records. A provider client (its API, a downloaded report)
// implements it; Records (a slice) is one for records already in memory, and ReadCSV and
// ReadJSONL read files into one.
type Source interface {
	// Records yields the provider's records at least for every time in [from, to); it may
	// yield records outside it (a whole file, a page that straddles the window's ends): those
	// are used to find a call's charge, never reported on their own. The first error ends the
	// reconciliation with no report: a Source must not yield part of the records and stop
	// silently (an unreadable page is an error, not an end).
	Records(ctx context.Context, from, to time.Time) iter.Seq2[Record, error]
}

// Records is a Source of records already in memory: it yields all of them.
type Records []Record

// Records implements Source.
func (rs Records) Records(ctx context.Context, _, _ time.Time) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for _, r := range rs {
			if err := ctx.Err(); err != nil {
				yield(Record{}, err)
				return
			}
			if !yield(r, nil) {
				return
			}
		}
	}
}

// Sources is a Source that yields the records of each of its Sources in turn (several files,
// several accounts of one provider).
type Sources []Source

// Records implements Source.
func (ss Sources) Records(ctx context.Context, from, to time.Time) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for _, s := range ss {
			for r, err := range s.Records(ctx, from, to) {
				if !yield(r, err) || err != nil {
					return
				}
			}
		}
	}
}
