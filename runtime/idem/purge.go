package idem

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
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
	// HistoryDeleted counts the history rows (Store.History) deleted for being older than
	// Config.HistoryRetention; with DryRun, those that would be.
	HistoryDeleted int64
}

// Purge deletes expired completed keys (and in-flight rows whose lease and TTL are both long
// gone; never an uncertain key, which waits for Resolve) and then the history rows older than
// Config.HistoryRetention, in batches, walking the key table once in its physical order, until the walk ends or
// ctx does.
//
// Each batch is its own short DELETE of at most BatchSize rows from a window of pages (a few
// batches' worth of rows), so purging never blocks claims for long and no statement reads more
// than its window; a window is read again while its batches come back full. It re-checks each
// row's expiry as it deletes it, so a key a request has just taken over stays, and a row a
// concurrent request moved behind the walk waits for the next run. It is safe to run from
// several processes at once (one purger per database is enough). docs/deploy.md has the rates.
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
	// Every statement of the purge goes with the simple protocol: maintenance, planned with its
	// values, which Citus cannot plan generically where sessions force generic plans.
	if o.DryRun {
		if err := s.db.QueryRow(ctx, s.sql.purgeCount, pgx.QueryExecModeSimpleProtocol).Scan(&res.Deleted); err != nil {
			return nil, storeError(ctx, "purge: count expired keys", err)
		}
		err := s.db.QueryRow(ctx, `SELECT count(*) FROM `+s.events+` WHERE at < $1::timestamptz`, pgx.QueryExecModeSimpleProtocol, s.historyHorizon()).Scan(&res.HistoryDeleted)
		if err != nil && pgCode(err) != undefinedTable {
			return nil, storeError(ctx, "purge: count old history", err)
		}
		return res, nil
	}
	pages, citus, err := s.purgePages(ctx)
	if err != nil {
		return res, err
	}
	stmt := s.sql.purge
	if citus {
		stmt = s.sql.purgeCitus
	}
	window := max(1, int64(batch)/purgeRowsPerPage)
	for from := int64(0); from < pages; {
		tag, err := s.db.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol, batch, from, from+window)
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
			from += window // the window has no expired row left (or only rows a request holds)
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
	}
	return res, s.purgeHistory(ctx, batch, res, o.Progress)
}

// undefinedTable is SQLSTATE 42P01: a Store on a table migrated before version 6 has no history
// table, and its purge has no history to delete.
const undefinedTable = "42P01"

// historyHorizon is the time before which history rows are deleted: now less
// Config.HistoryRetention, on the process's clock (the rows' times are the database's: a skew
// between the two moves the horizon by as much, which a retention of months does not notice).
func (s *Store) historyHorizon() time.Time { return time.Now().Add(-s.cfg.HistoryRetention) }

// purgeHistory deletes the history rows older than the retention, batch rows per statement
// (sql/purge_history.sql), counting them in res and reporting each batch as EventPurged.
func (s *Store) purgeHistory(ctx context.Context, batch int, res *PurgeResult, progress func(int64)) error {
	horizon := s.historyHorizon()
	for {
		tag, err := s.db.Exec(ctx, s.sql.purgeHistory, pgx.QueryExecModeSimpleProtocol, batch, horizon)
		if pgCode(err) == undefinedTable {
			return nil
		}
		if err != nil {
			return storeError(ctx, "purge: old history", err)
		}
		n := tag.RowsAffected()
		if n > 0 {
			res.HistoryDeleted += n
			res.Batches++
			s.emit(ctx, Event{Kind: EventPurged, Count: int(n)})
			if progress != nil {
				progress(res.Deleted + res.HistoryDeleted)
			}
		}
		if n < int64(batch) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// purgeRowsPerPage sizes Purge's window of pages: a page of the key table holds a few dozen
// rows, so a window of BatchSize/8 pages holds several batches' worth when most rows have
// expired, and a statement reads at most BatchSize/8 pages (1 MB at the default) when few have.
const purgeRowsPerPage = 8

// purgePages is how many pages of the key table Purge walks: its size when the run starts (rows
// written later have not expired), and whether the database has Citus, asked anew (unlike the
// Store's own check at NewStore, which a database not yet reachable leaves false). On Citus each
// purge statement reads the same window on every shard, so the walk goes as far as the largest
// shard.
func (s *Store) purgePages(ctx context.Context) (pages int64, citus bool, err error) {
	if err := s.db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')").Scan(&citus); err != nil {
		return 0, false, storeError(ctx, "purge: look for Citus", err)
	}
	sql := "SELECT pg_relation_size($1::text::regclass) / current_setting('block_size')::bigint"
	if citus {
		sql = `SELECT greatest(pg_relation_size(t), CASE WHEN EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = t)
			THEN (SELECT coalesce(max(result::bigint), 0) FROM run_command_on_shards(t, $$SELECT pg_relation_size('%s')$$)) ELSE 0 END)
			/ current_setting('block_size')::bigint
			FROM (SELECT $1::text::regclass AS t) AS r`
	}
	if err := s.db.QueryRow(ctx, sql, s.table).Scan(&pages); err != nil {
		return 0, false, storeError(ctx, "purge: size of the key table", err)
	}
	return pages, citus, nil
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
