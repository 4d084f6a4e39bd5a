package idemreconcile_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemreconcile"
)

func (e *env) state(key string) string {
	e.t.Helper()
	var state string
	err := e.s.Pool.QueryRow(context.Background(), `SELECT coalesce((SELECT state FROM `+e.table+` WHERE key = $1), 'gone')`, key).Scan(&state)
	if err != nil {
		e.t.Fatal(err)
	}
	return state
}

// settleAs201 is a Settle hook that answers 201 with the provider's reference.
func settleAs201(_ context.Context, _ pgx.Tx, _ idemreconcile.UncertainKey, r idemreconcile.Record) (*idem.Outcome, error) {
	return &idem.Outcome{Status: 201, Body: []byte(`{"id":"` + r.Reference + `"}`)}, nil
}

// The bank charged an uncertain key and its answer was lost. A report that holds only its
// header (a failed export, an empty download) is no evidence that it did not: nothing is
// settled, the run says why and is not clean, and the key stays uncertain, so a retry cannot
// charge twice. The real report then settles it as completed.
func TestReconcileHeaderOnlyReportSettlesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := day0.Add(10 * time.Hour)
	e.call("k-charged", "p-charged", at, 900, "EUR")
	e.uncertain("k-charged", at)

	rep := e.run(idemreconcile.Records{}, &idemreconcile.Opts{Resolve: true, Settle: settleAs201})
	if kinds(rep) != "not_covered:p-charged" || len(rep.Resolved) != 0 || rep.Clean() {
		t.Fatalf("header-only report: %s, resolved %+v; want the key not_covered, nothing resolved, not clean", kinds(rep), rep.Resolved)
	}
	if r := rep.Discrepancies[0].Reason; !strings.Contains(r, `no record of "acquirer"`) {
		t.Errorf("reason %q; want it to say no record of the provider was read", r)
	}
	if s := e.state("k-charged"); s != "uncertain" {
		t.Fatalf("after a header-only report the key is %s; want still uncertain", s)
	}

	real := idemreconcile.Records{rec("p-other", day0.Add(time.Minute), 5, "EUR"), rec("p-charged", at.Add(time.Minute), 900, "EUR"),
		rec("p-last", day1.Add(-time.Minute), 5, "EUR")}
	rep = e.run(real, &idemreconcile.Opts{Resolve: true, Settle: settleAs201})
	if len(rep.Resolved) != 1 || rep.Resolved[0].As != "completed" || rep.Resolved[0].ProviderKey != "p-charged" {
		t.Fatalf("the real report: %s, resolved %+v; want p-charged resolved as completed", kinds(rep), rep.Resolved)
	}
	if s := e.state("k-charged"); s != "complete" {
		t.Errorf("after the real report the key is %s; want complete", s)
	}
}

// An uncertain key without a record is settled as failed only when the provider's records, in
// time order, are dated on both sides of its call (the later one at least Grace after it).
func TestReconcileSettlesAsFailedOnlyWhatTheRecordsCover(t *testing.T) {
	t.Parallel()
	at := day0.Add(12 * time.Hour)
	before, after := rec("p-before", at.Add(-time.Hour), 1, "EUR"), rec("p-after", at.Add(2*time.Hour), 1, "EUR")
	for _, c := range []struct {
		name    string
		recs    idemreconcile.Records
		grace   time.Duration
		settled bool
		reason  string
	}{
		{"no record", nil, 0, false, `no record of "acquirer"`},
		{"records end before the call", idemreconcile.Records{before}, 0, false, "end at"},
		{"records start after the call", idemreconcile.Records{after}, 0, false, "start at"},
		{"records end within the grace", idemreconcile.Records{before, after}, 3 * time.Hour, false, "end at"},
		{"records out of time order", idemreconcile.Records{after, before}, 0, false, "not in time order"},
		{"another provider's records", idemreconcile.Records{{Provider: "bank", Key: "x", Amount: 1, Currency: "EUR", At: before.At},
			{Provider: "bank", Key: "y", Amount: 1, Currency: "EUR", At: after.At}}, 0, false, `no record of "acquirer"`},
		{"records on both sides", idemreconcile.Records{before, after}, time.Hour, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.call("k", "p", at, 900, "EUR")
			e.uncertain("k", at)
			rep := e.run(c.recs, &idemreconcile.Opts{Resolve: true, Grace: c.grace})
			state := e.state("k")
			if c.settled {
				if len(rep.Resolved) != 1 || rep.Resolved[0].As != "failed" || state != "gone" {
					t.Fatalf("%s, resolved %+v, key %s; want it resolved as failed", kinds(rep), rep.Resolved, state)
				}
				return
			}
			if len(rep.Resolved) != 0 || state != "uncertain" || rep.Clean() || !strings.Contains(kinds(rep), "not_covered:p") ||
				!strings.Contains(rep.Discrepancies[len(rep.Discrepancies)-1].Reason, c.reason) {
				t.Fatalf("%s %+v, resolved %+v, key %s; want it not_covered (reason with %q), still uncertain, not clean",
					kinds(rep), rep.Discrepancies, rep.Resolved, state, c.reason)
			}
		})
	}
}

// Every call and every record is accounted for: an uncertain key whose record is dated the next
// day is charged (not left out), a record outside the window that matches no call is reported,
// and a completed call the records do not cover is not called clean.
func TestReconcileAccountsForEveryCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	late := day1.Add(-5 * time.Minute)
	e.call("k-late", "p-late", late, 900, "EUR")
	e.uncertain("k-late", late)
	recs := idemreconcile.Records{rec("p-late", day1.Add(5*time.Minute), 900, "EUR"), rec("p-stray", day1.Add(10*time.Hour), 7, "EUR")}
	rep := e.run(recs, nil)
	if kinds(rep) != "unmatched_charge:p-stray uncertain_charged:p-late" || rep.Clean() {
		t.Errorf("next day's records: %s; want the stray record and the charged uncertain key reported", kinds(rep))
	}

	e2 := newEnv(t)
	e2.call("k-done", "p-done", day0.Add(time.Hour), 5, "EUR")
	e2.fate("k-done", "completed", day0.Add(time.Hour+time.Second), 201, "")
	rep = e2.run(idemreconcile.Records{}, nil)
	if kinds(rep) != "not_covered:p-done" || rep.Clean() {
		t.Errorf("a completed call and an empty report: %s; want not_covered, not clean", kinds(rep))
	}
}

// The comparisons: an amount lower than ours is a mismatch too; a call at the window's end
// belongs to the next window; a second call under one key that did not say what it moved keeps
// the first's amount.
func TestReconcileComparisons(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := day0.Add(8 * time.Hour)
	e.call("k-low", "p-low", at, 1000, "EUR")
	e.fate("k-low", "completed", at.Add(time.Second), 201, "")
	e.call("k-end", "p-end", day1, 5, "EUR")
	e.fate("k-end", "completed", day1.Add(time.Second), 201, "")
	e.call("k-twice", "p-twice", at, 900, "EUR")
	e.exec(`INSERT INTO `+e.events+` (tenant, scope, key, at, kind, operation, attempt, provider, provider_key)
		VALUES ('acme', 'createPayment', 'k-twice', $1, 'provider_call', 'createPayment', 2, 'acquirer', 'p-twice')`, at.Add(time.Minute))
	e.fate("k-twice", "completed", at.Add(2*time.Minute), 201, "")
	recs := idemreconcile.Records{rec("p-first", day0, 1, "EUR"), rec("p-low", at.Add(time.Minute), 999, "EUR"),
		rec("p-twice", at.Add(time.Minute), 500, "EUR"), rec("p-last", day1.Add(-time.Nanosecond), 1, "EUR"),
		rec("p-end", day1, 5, "EUR")}
	e.call("k-first", "p-first", day0, 1, "EUR")
	e.fate("k-first", "completed", day0.Add(time.Second), 201, "")
	e.call("k-last", "p-last", day1.Add(-time.Nanosecond), 1, "EUR")
	e.fate("k-last", "completed", day1, 201, "")
	rep := e.run(recs, nil)
	if kinds(rep) != "amount_mismatch:p-low amount_mismatch:p-twice" {
		t.Errorf("discrepancies %s; want the lower amount and the first call's amount compared", kinds(rep))
	}
	if rep.Calls != 4 || rep.InWindow != 4 || rep.Matched != 5 {
		t.Errorf("%d calls, %d records in the window, %d matched; want 4, 4, 5 (the call and the record at the window's end are the next window's)",
			rep.Calls, rep.InWindow, rep.Matched)
	}
}

// A report lists at most MaxListed discrepancies of a kind and counts the rest: the wrong file
// is a count and the first charges, not a million lines.
func TestReconcileListsAtMostMaxListed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var recs idemreconcile.Records
	for i := range idemreconcile.MaxListed + 5 {
		recs = append(recs, rec(fmt.Sprintf("stray-%d", i), day0.Add(time.Duration(i)*time.Second), 1, "EUR"))
	}
	rep := e.run(recs, nil)
	if n := len(rep.Discrepancies); n != idemreconcile.MaxListed || rep.Unlisted != 5 ||
		rep.Counts()[idemreconcile.UnmatchedCharge] != idemreconcile.MaxListed+5 || rep.Clean() {
		t.Errorf("%d listed, %d unlisted, counts %v, clean %v; want %d listed, 5 unlisted, all counted, not clean",
			n, rep.Unlisted, rep.Counts(), rep.Clean(), idemreconcile.MaxListed)
	}
}
