package idem

import (
	"context"
	"time"
)

// PurgeOpts tune Purge; nil means defaults.
type PurgeOpts struct {
	BatchSize int                      // rows per DELETE; default DefaultPurgeBatchSize
	DryRun    bool                     // count only
	Progress  func(deletedSoFar int64) // called after each batch
}

// PurgeResult counts what Purge did. With DryRun, Deleted is what would be deleted.
type PurgeResult struct {
	Deleted int64
	Batches int
}

// Purge deletes expired completed keys (and in-flight rows whose lease and TTL are both long
// gone) in batches until none is left or ctx ends.
//
// Each batch is its own short DELETE of at most BatchSize rows, so purging never blocks claims
// for long; it re-checks each row's expiry as it deletes it, so a key a request has just taken
// over stays. It is safe to run from several processes at once (they then mostly wait for each
// other's batches: one purger per database is enough). docs/deploy.md has the rates.
func (s *Store) Purge(ctx context.Context, opts *PurgeOpts) (*PurgeResult, error) {
	batch := DefaultPurgeBatchSize
	var o PurgeOpts
	if opts != nil {
		o = *opts
	}
	if o.BatchSize > 0 {
		batch = o.BatchSize
	}
	res := &PurgeResult{}
	if o.DryRun {
		if err := s.db.QueryRow(ctx, s.sql.purgeCount).Scan(&res.Deleted); err != nil {
			return nil, storeError(ctx, "purge: count expired keys", err)
		}
		return res, nil
	}
	for {
		tag, err := s.db.Exec(ctx, s.sql.purge, batch)
		if err != nil {
			return res, storeError(ctx, "purge", err)
		}
		n := tag.RowsAffected()
		if n > 0 {
			res.Deleted += n
			res.Batches++
			s.emit(ctx, Event{Kind: EventPurged, Count: int(n)})
			if o.Progress != nil {
				o.Progress(res.Deleted)
			}
		}
		if n < int64(batch) {
			return res, nil
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
	}
}

// PurgeEvery runs Purge now and then every interval until ctx ends; it returns ctx's error.
// Failed runs are logged and retried at the next tick. Start it with `go store.PurgeEvery(…)`.
func (s *Store) PurgeEvery(ctx context.Context, interval time.Duration, opts *PurgeOpts) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := s.Purge(ctx, opts); err != nil && ctx.Err() == nil {
			s.log.Warn("idem: purge failed; retrying at the next interval", "error", err, "interval", interval)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
