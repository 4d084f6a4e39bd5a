package idem

import (
	"context"
	"time"
)

// Replay answers p's request from its key's completed outcome, before anything else of the
// request runs: the answer Do would give a retry whose fingerprint matches a completed key, read
// from the replay cache when it has the key, else with one statement (sql/replay.sql) outside
// any transaction. A completed row is final until it expires, so reading it needs no claim and no
// lock. The replay is counted and reported as Do's are (EventReplayed, marked Early; the key's
// history).
//
// For every other request Replay returns nil and changes and counts nothing: a key without a
// row, in flight, uncertain or expired, a different fingerprint, an empty key. The caller then
// goes on to Do, which decides (and answers a mismatch or an in-progress duplicate) as it always
// does. So a request that is not a replay pays one lookup more than Do alone, and a replay pays
// nothing of what serving it anew would cost: idemhttp's edge (CaptureWith) calls Replay before
// routing, decoding and validating the request. The lookup is bounded by Config.StoreTimeout; a
// store that does not answer is an error wrapping ErrStoreUnavailable (the store_error event),
// which Do would meet too.
func (s *Store) Replay(ctx context.Context, p *DoParams) (*DoResult, error) {
	if p == nil || p.Key == "" {
		return nil, nil
	}
	if s.cache != nil {
		fp, o, hit := s.cache.get(cacheKey{p.Tenant, p.Scope, p.Key}, time.Now())
		if hit && fp == p.Fingerprint {
			s.emit(ctx, Event{Kind: EventReplayed, Operation: p.Operation, KeyHash: s.observedHash(ctx, p), Cached: true, Early: true})
			s.countAnswer(p, EventReplayed)
			return &DoResult{Outcome: o, Replayed: true}, nil
		}
		if hit {
			return nil, nil // another fingerprint: Do refuses it (and counts the refusal)
		}
	}
	row := rowOf(p)
	sent := time.Now()
	var pk *peeked
	err := s.bounded(ctx, 0, func(ctx context.Context) error {
		rows, err := s.db.Query(ctx, s.sql.replay, row.tenant, row.scope, row.key)
		if err != nil {
			return err
		}
		defer rows.Close()
		pk, err = s.scanPeek(rows)
		return err
	})
	if err != nil {
		err = storeError(ctx, "replay check", err)
		s.emit(ctx, Event{Kind: EventStoreError, Operation: p.Operation, KeyHash: s.observedHash(ctx, p)})
		return nil, err
	}
	if pk == nil {
		return nil, nil
	}
	r, err := pk.result(p.Fingerprint)
	if err != nil || r.status != claimReplayed {
		return nil, err
	}
	s.countAnswer(p, EventReplayed)
	s.remember(p, r, sent)
	s.emit(ctx, Event{Kind: EventReplayed, Operation: p.Operation, KeyHash: s.observedHash(ctx, p), Start: sent, Early: true})
	return &DoResult{Outcome: r.outcome, Replayed: true}, nil
}

// observedHash is p's key hash when events about it reach anyone (hashIfObserved), else "".
func (s *Store) observedHash(ctx context.Context, p *DoParams) string {
	if s.cfg.Observer != nil || s.log.Enabled(ctx, eventLevel(EventReplayed)) {
		return KeyHash(p.Scope, p.Key)
	}
	return ""
}
