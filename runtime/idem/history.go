package idem

import (
	"errors"
	"time"
)

// A key's history is a durable, append-only list of what happened to it (claimed, taken over,
// completed, released and why, replays counted, a mismatch refused, a lease lost, a provider
// call, uncertain, resolved), kept in the history table beside the key table
// (HistoryTableName) for Config.HistoryRetention, longer than the key itself, so that a dispute
// ("I paid twice") months later can still be read. The runtime appends to it in the
// transactions it already runs, for operations that ask for it (DoParams.History), and always
// for those declared uncertain-on-loss (DoParams.UncertainOnLoss).

// DefaultHistoryRetention is how long history rows are kept by default: 120 days, the window in
// which card schemes take most chargebacks.
const DefaultHistoryRetention = 120 * 24 * time.Hour

var (
	// ErrUncertain: an earlier attempt of this key was lost after a provider call, and the key
	// waits for an operator or a reconciliation to settle it (problem operation-uncertain). A
	// retry cannot settle it, so clients must not retry.
	ErrUncertain = errors.New("idem: the outcome of an earlier attempt is uncertain")
	// ErrNotUncertain: Resolve was asked to settle a key that is not uncertain.
	ErrNotUncertain = errors.New("idem: the key is not uncertain")
)

// HistoryEvent is one row of a key's history.
type HistoryEvent struct {
	At        time.Time // the database clock
	Kind      EventKind
	Operation string
	Attempt   int    // the attempt the event belongs to; 0 when none does (resolved, replayed)
	Status    int    // completed: the stored status; resolved as completed: the status stored
	Detail    string // released: why; key_reused: what came; resolved: the evidence
	Actor     string // resolved: who
	// Resolution is how a resolved key was settled (ResolveCompleted or ResolveFailed); zero for
	// every other kind.
	Resolution Resolution
	Replays    int // replayed: how many replays the row counts; key_reused: how many mismatched retries
	// A provider call: the provider's name, the derived key sent to it, and the amount (minor
	// units) and currency the call moved, when the handler said.
	Provider    string
	ProviderKey string
	Amount      int64
	Currency    string
}

// ProviderCall describes a call to a provider, for the history and for reconciliation against
// the provider's records.
type ProviderCall struct {
	// Provider names the provider ("acquirer", "bank:payouts"); see Derivation.Key.
	Provider string
	// Amount (in minor units) and Currency (ISO 4217) the call moves, when it moves money;
	// reconciliation compares them with the provider's records. Zero and "" when it does not.
	Amount   int64
	Currency string
}
