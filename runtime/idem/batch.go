package idem

import "github.com/jackc/pgx/v5"

// batchSlots is how many statements a batch holds without allocating for them: as many as lease
// mode's fast claim sends with the ROLLBACK it owes and the business BEGIN, its longest common
// batch (its full claim, which only a key with a row pays for, queues two more the usual way).
const batchSlots = 6

// batch is a pgx.Batch allocated together with room for its statements: pgx's Queue allocates a
// QueuedQuery per statement and grows the batch's slice as it goes, and a request sends its
// statements in two or three batches, so that would be most of a dozen allocations per request.
// Beyond batchSlots statements, Queue is pgx's own. A batch is sent once and then dropped, like
// a pgx.Batch: nothing reuses its slots.
type batch struct {
	pgx.Batch
	used   int
	queued [batchSlots]*pgx.QueuedQuery
	slots  [batchSlots]pgx.QueuedQuery
}

func newBatch() *batch {
	b := &batch{}
	b.QueuedQueries = b.queued[:0]
	return b
}

// Queue is pgx.Batch.Queue, the statement held in one of b's slots while they last.
func (b *batch) Queue(query string, arguments ...any) *pgx.QueuedQuery {
	if b.used == len(b.slots) {
		return b.Batch.Queue(query, arguments...)
	}
	qq := &b.slots[b.used]
	b.used++
	qq.SQL, qq.Arguments = query, arguments
	b.QueuedQueries = append(b.QueuedQueries, qq)
	return qq
}
