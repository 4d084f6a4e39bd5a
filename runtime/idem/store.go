package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is what the store needs from a pool: *pgxpool.Pool satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Sentinel errors. Wrapped errors keep them reachable through errors.Is. Each names one
// outcome, as its event and its HTTP problem code do (see docs/runtime.md for the table).
var (
	// ErrInProgress: the key is held by a request still in flight (problem in-progress).
	ErrInProgress = errors.New("idem: request with this key is in progress")
	// ErrKeyReused: the key was used before with a different request (problem key-reused).
	ErrKeyReused = errors.New("idem: key reused with a different request")
	// ErrLeaseLost: the claim's lease expired and another request took the key over; the
	// caller's business transaction was rolled back.
	ErrLeaseLost = errors.New("idem: lease lost to another request")
	// ErrStoreUnavailable: the key store could not be reached; no handler ran (fail closed;
	// problem store-unavailable).
	ErrStoreUnavailable = errors.New("idem: key store unavailable")
	// ErrHandlerTimeout: the handler ran past its timeout (DoParams.Timeout); its context was
	// cancelled, its work rolled back and the key released (problem handler-timeout).
	ErrHandlerTimeout = errors.New("idem: the handler ran past its timeout")
)

// Defaults for zero-valued settings.
const (
	DefaultSchema        = "public"
	DefaultTable         = "idempotency_keys"
	DefaultLease         = 60 * time.Second
	DefaultTTL           = 24 * time.Hour
	DefaultMaxStoredBody = 1 << 20
	// DefaultUnavailableRetryAfter is the Retry-After of a store-unavailable problem.
	DefaultUnavailableRetryAfter = 1 * time.Second
	// DefaultStoreTimeout bounds each step taken before a handler runs.
	DefaultStoreTimeout = 5 * time.Second
	// DefaultPurgeBatchSize is how many expired rows one purge statement deletes.
	DefaultPurgeBatchSize = 1000
)

// Config configures a Store. The zero value of every field means its default.
type Config struct {
	// Schema and Table name the key table; defaults "public" and "idempotency_keys". Table is
	// at most MaxTableBytes long.
	Schema string
	Table  string
	// Tenant returns the tenant of a request, for policies whose scope includes "tenant".
	// Called after authentication (it reads what middleware put in ctx). An error is answered
	// like the handler's own error; an empty tenant is allowed only when Tenant is nil.
	Tenant func(ctx context.Context) (string, error)
	// Logger receives structured logs; keys are logged only as hashes. Default: slog.Default().
	Logger *slog.Logger
	// Observer, when set, is called for every event (claimed, replayed, …) for metrics.
	// It runs on the request's goroutine: keep it fast and never block in it.
	Observer func(ctx context.Context, e Event)
	// MaxStoredBody caps a stored response body in bytes; default 1 MiB.
	MaxStoredBody int
	// UnavailableRetryAfter is the Retry-After sent with a store-unavailable problem; default 1s.
	UnavailableRetryAfter time.Duration
	// StoreTimeout bounds each store step Serve and Do take before the handler runs (begin, the
	// claim; for a transaction-mode claim, on top of its wait). A store that does not answer in
	// time counts as unavailable: no handler runs. Default 5s.
	StoreTimeout time.Duration
	// ReplayCacheBytes, when above zero, turns on the replay cache: completed outcomes this
	// process stored or replayed are kept in memory, up to this many bytes, so that replaying
	// them again needs no database. A completed key's answer is final until it expires, so the
	// cache answers exactly as the database would, and drops each outcome no later than its key
	// expires. It assumes that keys are removed only by expiry (Purge); after deleting keys by
	// hand, restart the processes that cache. Off by default. See docs/runtime.md.
	ReplayCacheBytes int64
	// Topology says what the Store's statements reach: plain PostgreSQL (TopologyPostgres),
	// PostgreSQL behind a transaction-mode pooler (TopologyPooler) or Citus (TopologyCitus). By
	// default (TopologyDetect) the Store asks the database, at NewStore or, when the database does
	// not answer then, at the first request; until it knows, it refuses to claim
	// (ErrStoreUnavailable). A topology set here is checked against the database the same way,
	// and refused when it does not match (ErrTopologyMismatch). Behind a transaction-mode pooler
	// NewStore refuses the pgx exec modes that cannot work there (ErrPoolerMode).
	Topology Topology
	// Pooler is the older form of Topology.
	//
	// Deprecated: set Topology.
	Pooler Pooler
	// HistoryRetention is how long the history of keys (see Store.History) is kept: Purge
	// deletes older rows. Default DefaultHistoryRetention.
	HistoryRetention time.Duration
	// ListenConn, when set, opens the connection the Store LISTENs on for finished keys (waiting
	// duplicates wake on their holder's notification). LISTEN needs a session of its own: behind
	// a pooler in transaction mode, point it past the pooler, at the database itself
	// (pgx.Connect with a direct URL). Default: a connection configured as the pool's are.
	ListenConn func(ctx context.Context) (*pgx.Conn, error)
}

// Event is passed to Config.Observer.
type Event struct {
	Kind      EventKind
	Operation string
	KeyHash   string        // hex SHA-256 prefix of scope+key; never the raw key
	Duration  time.Duration // handler time for EventCompleted, EventReleased and EventHandlerTimeout
	Count     int           // rows for EventPurged
	// Cached says an EventReplayed or EventKeyReused was answered from the replay cache
	// (Config.ReplayCacheBytes), without the database.
	Cached bool
	// Early says an EventReplayed was answered by a claim made ahead (Store.ClaimAhead), before
	// the request was served (idemhttp answers retries of completed keys so, ahead of its router
	// and validation).
	Early bool
	// Start is when the claim whose outcome this event reports was sent (EventAcquired,
	// EventTakenOver, EventReplayed, EventInProgress, EventKeyReused); zero for other events
	// and for answers of the replay cache. With it a tracer can draw the claim as a span.
	Start time.Time
	// Attempt is the held claim's Claim.Attempt (EventAcquired, EventTakenOver, EventCompleted,
	// EventReleased, EventHandlerTimeout); zero where no claim is held.
	Attempt int
	// Completion is the part of an EventCompleted's Duration spent storing the outcome and
	// committing, after the handler returned.
	Completion time.Duration
}

// Store is the runtime: it owns the key table and runs claims, completions and replays.
// A Store is safe for concurrent use.
type Store struct {
	db    DB
	cfg   Config
	table string // sanitised "schema"."table"
	// events is the history table beside it, sanitised (HistoryTableName).
	events string
	// preparedMark names, in a connection's CustomData, the mark that its statements (whose
	// texts name table, and differ with the replay cache: sql/replay.sql) are prepared on it.
	preparedMark string
	log          *slog.Logger
	sql          statements

	// noRenew turns off lease renewal; tests use it to let a lease run out under a live handler.
	noRenew bool
	// oneLock gives every key the same advisory lock (claimlock.go); tests use it to check that
	// keys whose lock ids collide only wait for each other.
	oneLock bool
	// lockSeed is lockSeed(table): where every advisory lock id of the table starts (lockOf).
	lockSeed uint64
	// notifyAfter: a transaction-mode completion under the key's lock notifies only after a hold
	// this long (sql/notify_locked.sql): the shortest wait on the lock that can run out with the
	// waiter still waiting (txLockWait; see Store.claimWaiting). Tests raise it to see that a
	// short hold sends nothing.
	notifyAfter time.Duration

	// execMode is the exec mode every connection of the pool has, when the pool's configuration
	// says so (it has no BeforeConnect that could change it per connection): acquire then need
	// not copy each connection's configuration to read it (execModeKnown).
	execMode      pgx.QueryExecMode
	execModeKnown bool

	bg  *background // what runs beside requests: release retries (release.go)
	est estimates   // handler times per operation, for Retry-After (estimate.go)
	ln  *listener   // wakes waiting duplicates (listen.go); nil when db is not a pool

	cache *replayCache // completed outcomes (cache.go); nil unless Config.ReplayCacheBytes

	owed    *owedConns    // connections whose rollback the next batch sends (owed.go)
	owedAge time.Duration // owedMaxAge (tests raise it)

	// topo is the Store's topology once it is known (topology.go): set once, by settleTopology, and
	// read without a lock on every request.
	topo   atomic.Pointer[topology]
	detect detector

	boxed     [8]atomic.Pointer[boxedInterval] // boxInterval's intervals
	boxedNext atomic.Uint32                    // the slot boxInterval replaces next, modulo 8

	// replays counts the replays of keys that keep a history until they are flushed
	// (history_write.go).
	replays replayCounter

	channel      string        // the key table's notification channel
	fallbackPoll time.Duration // how often a waiter claims again while notifications arrive
}

// NewStore returns a Store on db. cfg may be nil. It always asks the database what it is (one
// short transaction, bounded by Config.StoreTimeout; a database that cannot be reached yet is
// asked by the first request, and claims are refused until then): a Config.Topology that names
// a topology is checked against the answer (ErrTopologyMismatch), and it fails with
// ErrPoolerMode when pgx's exec mode cannot work through the pooler it finds or is told of.
func NewStore(db DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("idem: NewStore: db is nil (pass a *pgxpool.Pool)")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if err := checkTable(c.Table); err != nil {
		return nil, err
	}
	if c.MaxStoredBody <= 0 {
		c.MaxStoredBody = DefaultMaxStoredBody
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.HistoryRetention <= 0 {
		c.HistoryRetention = DefaultHistoryRetention
	}
	if c.UnavailableRetryAfter <= 0 {
		c.UnavailableRetryAfter = DefaultUnavailableRetryAfter
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	table := pgx.Identifier{c.Schema, c.Table}.Sanitize()
	events := pgx.Identifier{c.Schema, HistoryTableName(c.Table)}.Sanitize()
	st, err := newStatements(table, events, c.ReplayCacheBytes > 0)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, cfg: c, table: table, events: events, preparedMark: preparedMark(table, c.ReplayCacheBytes > 0), log: c.Logger, sql: st, bg: newBackground(),
		channel: channelOf(table), fallbackPoll: fallbackPoll, notifyAfter: txLockWait, cache: newReplayCache(c.ReplayCacheBytes),
		owed: newOwedConns(db), owedAge: owedMaxAge, lockSeed: lockSeed(table)}
	if p, ok := db.(interface{ Config() *pgxpool.Config }); ok {
		if pc := p.Config(); pc != nil && pc.ConnConfig != nil && pc.BeforeConnect == nil {
			s.execMode, s.execModeKnown = pc.ConnConfig.DefaultQueryExecMode, true
		}
	}
	connect, direct := poolConnector(db), false
	if c.ListenConn != nil {
		connect, direct = c.ListenConn, true
	}
	if connect != nil {
		s.ln = &listener{s: s, connect: connect, direct: direct, subs: map[string]map[*subscription]struct{}{},
			checkEvery: listenCheckEvery, checkWithin: listenCheckWithin}
	}
	if c.Topology < TopologyDetect || c.Topology > TopologyCitus {
		return nil, fmt.Errorf("idem: NewStore: Config.Topology %d is none of TopologyDetect, TopologyPostgres, TopologyPooler, TopologyCitus", int(c.Topology))
	}
	if _, err := s.topology(context.Background()); err != nil {
		if !errors.Is(err, ErrStoreUnavailable) {
			return nil, err
		}
		// An application may start before its database: the first request asks again, and
		// claims are refused until the database answers.
		s.log.Warn("idem: could not ask the database for its topology; requests are refused (store unavailable) until it answers", "error", err)
	}
	return s, nil
}

// Config returns the Store's configuration with every default applied.
func (s *Store) Config() Config { return s.cfg }

// Table returns the sanitised, schema-qualified name of the key table.
func (s *Store) Table() string { return s.table }

// KeyHash returns the form in which a key appears in logs and events: a hex prefix of the
// SHA-256 of scope and key. Equal keys give equal hashes, so logs can be correlated.
func KeyHash(scope, key string) string {
	// scope, a NUL and key, hashed in one pass: on the stack when they fit (a key event reaching
	// an Observer hashes one per claim).
	var room [128]byte
	b := room[:0]
	if n := len(scope) + 1 + len(key); n > len(room) {
		b = make([]byte, 0, n)
	}
	b = append(append(append(b, scope...), 0), key...)
	sum := sha256.Sum256(b)
	var text [16]byte
	hex.Encode(text[:], sum[:8])
	return string(text[:])
}

// emitClaim is emit for an event about c, with c's key hash, which it computes only when the
// event reaches someone: the request path reports several events per request, and usually
// nobody receives them.
func (s *Store) emitClaim(ctx context.Context, c *Claim, e Event) {
	if s.cfg.Observer == nil && !s.log.Enabled(ctx, eventLevel(e.Kind)) {
		return
	}
	e.KeyHash = c.hash()
	s.emit(ctx, e)
}

// eventLevel is the level an event of kind k is logged at.
func eventLevel(k EventKind) slog.Level {
	switch k {
	case EventLeaseLost, EventStoreError, EventHandlerTimeout:
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

func (s *Store) emit(ctx context.Context, e Event) {
	if e.Kind == EventStoreError && ctx.Err() != nil && !errors.Is(context.Cause(ctx), errStoreBound) {
		// The caller gave up (a client that disconnected, a waiter whose deadline passed): the
		// store did nothing wrong, and counting it would make the outage metric cry wolf. A
		// store step whose own bound ran out (errStoreBound) is the store's error, and counts.
		return
	}
	if s.cfg.Observer != nil {
		s.cfg.Observer(ctx, e)
	}
	level := eventLevel(e.Kind)
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("event", string(e.Kind))}
	if e.Operation != "" {
		attrs = append(attrs, slog.String("operation", e.Operation))
	}
	if e.KeyHash != "" {
		attrs = append(attrs, slog.String("key_hash", e.KeyHash))
	}
	if e.Duration > 0 {
		attrs = append(attrs, slog.Duration("duration", e.Duration))
	}
	if e.Kind == EventPurged {
		attrs = append(attrs, slog.Int("count", e.Count))
	}
	if e.Cached {
		attrs = append(attrs, slog.Bool("cached", true))
	}
	if e.Early {
		attrs = append(attrs, slog.Bool("early", true))
	}
	s.log.LogAttrs(ctx, level, "idem: "+string(e.Kind), attrs...)
}

// bounded runs step with Config.StoreTimeout (plus extra) on top of ctx.
func (s *Store) bounded(ctx context.Context, extra time.Duration, step func(ctx context.Context) error) error {
	limit := s.cfg.StoreTimeout + extra
	sctx, bound := newBound(ctx, limit)
	defer bound.end()
	err := step(sctx)
	if err != nil && sctx.Err() != nil && ctx.Err() == nil && !errors.Is(err, ErrStoreUnavailable) {
		return fmt.Errorf("%w: no answer within %s: %w", ErrStoreUnavailable, limit, err)
	}
	return err
}

// preparedMark is the mark of a connection on which the statements of a Store on table are
// prepared (Store.preparedMark). Two Stores on one table share their statements, but for the
// replay check, which returns more with the replay cache on (remember): each kind has its mark,
// so that neither takes the other's for its own.
func preparedMark(table string, remember bool) string {
	if remember {
		return "idem.prepared " + table + " (replay cache)"
	}
	return "idem.prepared " + table
}

// storeError classifies an error from the database. Errors that mean the store cannot be
// reached or cannot serve right now are wrapped with ErrStoreUnavailable; the caller's own
// context ending is returned as it is; anything else is wrapped with what was being done.
func storeError(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("idem: %s: %w", what, ctx.Err())
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %s: %w", ErrStoreUnavailable, what, err)
	}
	return fmt.Errorf("idem: %s: %w", what, err)
}

// unavailable classifies an error of the runtime's own statements: on top of lostStore, any
// network error, EOF or internal deadline is the store's, since nothing else was called.
func unavailable(err error) bool {
	var netErr net.Error
	switch {
	case lostStore(err), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	case errors.Is(err, context.DeadlineExceeded):
		// An internal deadline (the caller's own context is still live): the store was too slow.
		return true
	}
	return false
}

// lostStore reports the errors that only pgx or PostgreSQL give and that mean the database cannot
// be reached or cannot serve now: a failed connection attempt, a connection pgx found closed or
// could not use, a statement that timed out inside pgx, a closed pool, and SQLSTATE classes 08
// (connection exception) and 53 (insufficient resources), 57P01..57P03 (shutdown, cannot connect
// now), and Citus's XX000 "could not commit transaction …" (the coordinator lost a worker at the
// commit: whether the work committed is the store's question, not the handler's). A bare network error is not among them: from a handler it may be another service's.
func lostStore(err error) bool {
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &connErr), errors.Is(err, pgconn.ErrConnClosed), pgconn.Timeout(err), pgconn.SafeToRetry(err):
		return true
	case errors.As(err, &pgErr):
		c := pgErr.Code
		return strings.HasPrefix(c, "08") || strings.HasPrefix(c, "53") ||
			c == "57P01" || c == "57P02" || c == "57P03" ||
			c == "XX000" && strings.HasPrefix(pgErr.Message, "could not commit transaction")
	}
	// pgxpool reports a closed pool with puddle's error, which this package does not import.
	return strings.Contains(err.Error(), "closed pool")
}

// IsStoreUnavailable reports whether err means the database cannot be reached or cannot serve
// now: ErrStoreUnavailable, or an error only pgx or PostgreSQL give for that (a failed connection
// attempt, a connection found closed, a closed pool, SQLSTATE classes 08 and 53, 57P01..57P03).
// A cancelled context is never an outage (the caller went away). A bare network error is not
// counted either, since a handler may have got it from another service. It is what
// idemhttp.ErrorProblem answers 503 for, so an operation that is not idempotent (a GET during an
// outage) gets the same answer as an idempotent one.
func IsStoreUnavailable(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, ErrStoreUnavailable):
		return true
	}
	return lostStore(err)
}
