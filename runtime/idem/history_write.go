package idem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// What the runtime appends to a key's history, and where (only for claims whose operation keeps
// one: Claim.history; a claim without history sends exactly the statements it always sent):
//
//	acquired, taken_over  lease mode: in the claim's own transaction (sql/history_claim.sql);
//	                      transaction mode: with the completion, or after the rollback that
//	                      gives the key back
//	completed             in the completion's transaction, before its COMMIT
//	released, uncertain,  with the transition that makes the change, in its transaction
//	provider_call,        (transition.go: Store.apply); transaction mode's released after the
//	lease_lost            rollback, and lease_lost, which change no row, in a statement of their
//	                      own; provider_call committed before the provider key is handed out
//	replayed, key_reused  counted in memory and flushed every replayFlushEvery and at Close
//	                      (replayCounter): the counts of a process that dies since its last
//	                      flush are lost
//
// Each is also the Observer's event of the same kind (emit), but for a release, which the
// Observer sees as EventReleased, EventHandlerTimeout or EventHandlerFailed.

// historyInsertSQL appends n history rows to events: $1–$3 the key's row (stored form), then
// for each row its kind, operation, attempt, status, detail, actor, replays, provider,
// provider_key, amount and currency (historyArgs).
func historyInsertSQL(events string, n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + events + ` (tenant, scope, key, kind, operation, attempt, status, detail, actor,
	replays, provider, provider_key, amount, currency) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		p := 4 + i*historyEventParams
		fmt.Fprintf(&b, "($1, $2, $3, $%d, $%d, NULLIF($%d, 0), NULLIF($%d, 0), NULLIF($%d, ''), NULLIF($%d, ''), "+
			"NULLIF($%d, 0), NULLIF($%d, ''), NULLIF($%d, ''), NULLIF($%d, 0::bigint), NULLIF($%d, ''))",
			p, p+1, p+2, p+3, p+4, p+5, p+6, p+7, p+8, p+9, p+10)
	}
	return b.String()
}

// historyEventParams is how many parameters each row of historyInsertSQL takes.
const historyEventParams = 11

// historyArgs are the parameters of historyInsertSQL for evs about row.
func historyArgs(row rowID, evs ...HistoryEvent) []any {
	args := make([]any, 0, 3+len(evs)*historyEventParams)
	args = append(args, row.tenant, row.scope, row.key)
	for _, ev := range evs {
		args = append(args, string(ev.Kind), storedText(ev.Operation), int32(ev.Attempt), int32(ev.Status), ev.Detail,
			ev.Actor, int32(ev.Replays), ev.Provider, ev.ProviderKey, ev.Amount, ev.Currency)
	}
	return args
}

// historyExecer is what appends history rows: a transaction the runtime runs, or the pool.
type historyExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// appendHistory appends evs (one or two) to row's history through q: a transaction the runtime
// already runs, or the pool for an event that happens outside one.
func (s *Store) appendHistory(ctx context.Context, q historyExecer, row rowID, evs ...HistoryEvent) error {
	if _, err := q.Exec(ctx, s.sql.historyInsert[len(evs)], historyArgs(row, evs...)...); err != nil {
		return fmt.Errorf("idem: history: %w", err)
	}
	return nil
}

// claimKind is the history's kind of c's claim: acquired, or taken_over after a lost attempt.
func (c *Claim) claimKind() EventKind {
	if c.Attempt > 1 {
		return EventTakenOver
	}
	return EventAcquired
}

// claimEvent is c's history row of kind k.
func (c *Claim) event(k EventKind) HistoryEvent {
	return HistoryEvent{Kind: k, Operation: c.Operation, Attempt: c.Attempt}
}

// queueClaimHistory queues the history row of a lease-mode claim behind its write, in its
// transaction (sql/history_claim.sql): it inserts a row only if the claim made c the key's holder.
func (s *Store) queueClaimHistory(b *batch, c *Claim) {
	if c.history {
		b.Queue(s.sql.historyClaim, c.args()...)
	}
}

// completionHistory is what a completion of c appends to the key's history, in its transaction:
// completed, behind the claim's own row in transaction mode (whose claim wrote none).
func (c *Claim) completionHistory(status int) []HistoryEvent {
	done := c.event(EventCompleted)
	done.Status = status
	if c.txMode {
		return []HistoryEvent{c.event(c.claimKind()), done}
	}
	return []HistoryEvent{done}
}

// giveBackWhy says why a claim's work was rolled back and its key given back, for the history's
// released (or uncertain) row: the cause first, as the Observer names it where it has a name.
// callerGone says the caller's context ended: only then is a cancellation the caller's; a
// handler's own call that timed out (a provider's answer that never came) is the handler's
// error, with its text.
func giveBackWhy(kind EventKind, err error, callerGone bool) string {
	switch {
	case kind == EventHandlerTimeout:
		return "handler_timeout: the handler ran past its timeout"
	case kind == EventHandlerFailed:
		return "handler_failed: a statement of the handler aborted its transaction"
	case err == nil:
		return "panic: the handler panicked"
	case callerGone && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return "cancelled: the caller went away"
	case IsStoreUnavailable(err):
		return "store_unavailable: the database connection was lost under the handler"
	}
	msg := err.Error()
	if len(msg) > maxWhyBytes {
		msg = clipUTF8(msg, maxWhyBytes) + "…"
	}
	return "handler error: " + msg
}

// maxWhyBytes bounds the handler's error text kept in a released row's detail.
const maxWhyBytes = 200

// txReturned is Store.returned inside tx.
func txReturned(ctx context.Context, tx pgx.Tx, sql string, args ...any) (n int, err error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// replayFlushEvery is how often the replays counted in memory are written to the history.
const replayFlushEvery = 5 * time.Second

// maxReplayKeys bounds the keys whose replays are counted between two flushes: reaching it
// wakes the flusher at once, and while the counts cannot be written (the database is down) a
// replay of a key beyond it is not counted (the flush's warning says how many were not), so
// memory stays bounded whatever clients send.
const maxReplayKeys = 10000

// replayCounter counts the replays and mismatched retries of keys that keep a history, per key
// and kind, between flushes.
type replayCounter struct {
	mu      sync.Mutex
	counts  map[replayKey]int
	dropped int           // replays not counted since the last flush: counts was full
	failing bool          // the last flush failed (its warning is not repeated until one succeeds)
	started bool          // the flusher runs
	kick    chan struct{} // wakes the flusher before its tick: counts is full
	every   time.Duration // replayFlushEvery when zero
	max     int           // maxReplayKeys when zero
}

// limit is how many keys' replays rc counts between two flushes.
func (rc *replayCounter) limit() int {
	if rc.max > 0 {
		return rc.max
	}
	return maxReplayKeys
}

type replayKey struct {
	row       rowID
	operation string    // stored text
	kind      EventKind // EventReplayed or EventKeyReused
}

// countedDetail is what the history's counted row of kind says.
func countedDetail(kind EventKind) string {
	if kind == EventKeyReused {
		return "another fingerprint: a retry with this key came with a different request"
	}
	return ""
}

// countAnswer counts an answer of kind (EventReplayed, EventKeyReused) to p's key in its
// history's next row of that kind, and starts the flusher on the first one.
func (s *Store) countAnswer(p *DoParams, kind EventKind) {
	if !p.History && !p.UncertainOnLoss {
		return
	}
	rc := &s.replays
	rc.mu.Lock()
	if rc.counts == nil {
		rc.counts = map[replayKey]int{}
	}
	k := replayKey{rowOf(p), storedText(p.Operation), kind}
	limit := rc.limit()
	if _, ok := rc.counts[k]; ok || len(rc.counts) < limit {
		rc.counts[k]++
	} else {
		rc.dropped++
	}
	full := len(rc.counts) >= limit
	start := !rc.started
	if start {
		rc.started = true
		rc.kick = make(chan struct{}, 1)
	}
	kick := rc.kick
	rc.mu.Unlock()
	if start {
		s.startReplayFlusher(kick)
	}
	if full {
		select {
		case kick <- struct{}{}:
		default: // a flush is due already
		}
	}
}

// startReplayFlusher flushes the counted replays every replayFlushEvery, and when kick says the
// counts are full, until Close, which flushes what is left.
func (s *Store) startReplayFlusher(kick <-chan struct{}) {
	bg := s.bg
	select {
	case <-bg.closing:
		return
	default:
	}
	every := s.replays.every
	if every <= 0 {
		every = replayFlushEvery
	}
	bg.wg.Add(1)
	go func() {
		defer bg.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-bg.closing:
				return
			case <-t.C:
				s.flushReplays(context.Background())
			case <-kick:
				s.flushReplays(context.Background())
			}
		}
	}()
}

// flushReplays writes the replays counted since the last flush, one replayed row per key, in one
// statement (sql/history_counted.sql) bounded by Config.StoreTimeout. Counts that could not be
// written are kept for the next flush (while they fit). A failure is logged once, when flushes
// start failing, and again when they write again, not at every tick of an outage.
func (s *Store) flushReplays(ctx context.Context) {
	rc := &s.replays
	rc.mu.Lock()
	counts, dropped := rc.counts, rc.dropped
	rc.counts, rc.dropped = nil, 0
	rc.mu.Unlock()
	if dropped > 0 {
		s.log.Warn("idem: replays of keys that keep a history were not counted: more keys were replayed between two flushes than are kept",
			"replays", dropped, "keys_kept", rc.limit())
	}
	if len(counts) == 0 {
		return
	}
	n := len(counts)
	tenants, scopes, keys, ops, ns := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]int32, 0, n)
	kinds, details := make([]string, 0, n), make([]string, 0, n)
	for k, c := range counts {
		tenants, scopes, keys, ops = append(tenants, k.row.tenant), append(scopes, k.row.scope), append(keys, k.row.key), append(ops, k.operation)
		ns = append(ns, int32(min(c, 1<<31-1)))
		kinds, details = append(kinds, string(k.kind)), append(details, countedDetail(k.kind))
	}
	fctx, bound := newBound(ctx, s.cfg.StoreTimeout)
	defer bound.end()
	// The simple protocol, as the purge's: a background statement, planned with its values, which
	// Citus cannot plan generically where sessions force generic plans.
	_, err := s.db.Exec(fctx, s.sql.historyCounted, pgx.QueryExecModeSimpleProtocol, tenants, scopes, keys, ops, ns, kinds, details)
	rc.mu.Lock()
	wasFailing := rc.failing
	rc.failing = err != nil
	rc.mu.Unlock()
	switch {
	case err == nil && wasFailing:
		s.log.Info("idem: the replays counted for the keys' history are written again", "keys", n)
	case err != nil && !wasFailing:
		s.log.Warn("idem: could not write the replays counted for the keys' history; keeping them for the next flush, and saying so again once they are written",
			"keys", n, "error", err)
	}
	if err != nil {
		rc.mu.Lock()
		if rc.counts == nil {
			rc.counts = map[replayKey]int{}
		}
		for k, c := range counts {
			if len(rc.counts) >= rc.limit() {
				break
			}
			rc.counts[k] += c
		}
		rc.mu.Unlock()
	}
}
