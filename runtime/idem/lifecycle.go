package idem

import "fmt"

// The key's life in one vocabulary: the states a key is in and every kind of event that moves it
// or is told about it. The runtime, the CLI, the support page (runtime/idemadmin) and
// reconciliation (runtime/idemreconcile) all speak it; the SQL statements in sql/ take the state
// literals from here too ({{inFlight}}, …), so a state's spelling lives in one place.
//
//	           claimed / taken over               completed
//	(none) ────────────────────────▶ in_flight ────────────────▶ complete ──▶ (gone: expired, purged)
//	   ▲                              │  │ released, lease lost
//	   │       resolved as failed     │  └───────────────────────▶ (gone: a retry runs anew)
//	   └──────────── uncertain ◀──────┘ lost after a provider call (held or abandoned)
//	                     │ resolved as completed
//	                     └──────────────────────────────────────▶ complete

// KeyState is the state of a key: the key table's state column, or KeyGone for a key that has no
// row any more but whose history is kept.
type KeyState string

const (
	// KeyInFlight: claimed; its handler runs, or its holder died (see KeyInfo.Stale).
	KeyInFlight KeyState = "in_flight"
	// KeyComplete: the outcome is stored and replayed.
	KeyComplete KeyState = "complete"
	// KeyUncertain: an attempt was lost after a provider call (see ErrUncertain); the key waits
	// for an operator or a reconciliation to settle it (Store.Resolve).
	KeyUncertain KeyState = "uncertain"
	// KeyGone: the key has no row any more (released, resolved as failed, or expired and
	// purged) but its history is kept (see Store.GoneKeys).
	KeyGone KeyState = "gone"
)

// sqlLiteral is the state as a SQL string literal, for the statements in sql/.
func (k KeyState) sqlLiteral() string { return "'" + string(k) + "'" }

// stateFuncs write the states and the event kinds in the statements in sql/: {{inFlight}},
// {{complete}}, {{uncertain}}, and {{event "completed"}} for a history row's kind, which fails
// to render for a kind this file does not declare (functions, so that the shared fragments,
// which take a value of their own, can use them too).
var stateFuncs = map[string]any{
	"inFlight":  KeyInFlight.sqlLiteral,
	"complete":  KeyComplete.sqlLiteral,
	"uncertain": KeyUncertain.sqlLiteral,
	"event":     eventLiteral,
}

// historyKinds are the event kinds a key's history holds.
var historyKinds = []EventKind{EventAcquired, EventTakenOver, EventReplayed, EventKeyReused, EventCompleted,
	EventLeaseLost, EventReleased, EventProviderCall, EventUncertain, EventResolved}

// eventLiteral is the history kind name as a SQL string literal; an error for a name that is
// not one.
func eventLiteral(name string) (string, error) {
	for _, k := range historyKinds {
		if string(k) == name {
			return "'" + name + "'", nil
		}
	}
	return "", fmt.Errorf("%q is not an event kind of the key's history", name)
}

// EventKind names what happened to a key: one word per outcome, shared with what a claim
// decided, the sentinel errors ([ErrInProgress], [ErrKeyReused], …), the problem codes of
// runtime/idemhttp (docs/runtime.md has the table) and the kind column of the key's history.
type EventKind string

// What a claim decided, and what became of the claimed key.
const (
	EventAcquired   EventKind = "acquired"    // a new key was claimed: the handler runs
	EventTakenOver  EventKind = "taken_over"  // an abandoned claim was taken over: the handler runs
	EventReplayed   EventKind = "replayed"    // a completed key answered with its stored outcome
	EventInProgress EventKind = "in_progress" // the key was held by a request in flight
	EventKeyReused  EventKind = "key_reused"  // the key came with a different request
	EventCompleted  EventKind = "completed"   // the handler's outcome committed with its work
	EventLeaseLost  EventKind = "lease_lost"  // a holder found its lease taken over: its work rolled back
	EventReleased   EventKind = "released"    // the handler's work rolled back and the key was given back
	// EventHandlerTimeout: the handler ran past its timeout; its work rolled back and the key was
	// given back, as for EventReleased.
	EventHandlerTimeout EventKind = "handler_timeout"
	// EventHandlerFailed: the handler answered, but its transaction had been aborted by a
	// statement of its own that failed (ErrHandlerAborted); its work rolled back and the key was
	// given back, as for EventReleased. Duration is the handler's time.
	EventHandlerFailed EventKind = "handler_failed"
)

// The provider's side and the uncertain state; each is also a row of the key's history.
const (
	// EventProviderCall: the holder of a claim asked for a derived provider key (ProviderKey),
	// and the call was recorded before the key was handed out.
	EventProviderCall EventKind = "provider_call"
	// EventUncertain: a claim of an operation declared uncertain-on-loss was lost after a
	// provider call (its holder crashed, timed out, failed or lost its lease): the provider may
	// have acted, so the key is not run again until an operator or a reconciliation settles it.
	EventUncertain EventKind = "uncertain"
	// EventResolved: an uncertain key was settled (Store.Resolve), as completed or as failed.
	EventResolved EventKind = "resolved"
)

// The store's own events, about no key.
const (
	EventPurged     EventKind = "purged"      // expired keys were deleted (Count says how many)
	EventStoreError EventKind = "store_error" // a statement failed (an outage, or a misconfigured table)
	// EventListenerDeaf: the listener did not hear its own notification: waiting duplicates
	// poll instead of waking on their holder's notification (see Store.ListenerHealth).
	EventListenerDeaf EventKind = "listener_deaf"
	// EventListenerHeard: a check was heard again after EventListenerDeaf.
	EventListenerHeard EventKind = "listener_heard"
)
