package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Resolution is how Resolve settles an uncertain key. It is also the resolution column of the
// key's history (HistoryEvent.Resolution).
type Resolution int

const (
	// ResolveCompleted: the lost attempt took effect (the provider charged). The key becomes
	// complete with the outcome given, which every retry replays.
	ResolveCompleted Resolution = iota + 1
	// ResolveFailed: the lost attempt took no effect (the provider has no record of it). The key
	// is given back: the next retry executes anew.
	ResolveFailed
)

func (r Resolution) String() string {
	switch r {
	case ResolveCompleted:
		return "completed"
	case ResolveFailed:
		return "failed"
	}
	return fmt.Sprintf("Resolution(%d)", int(r))
}

// ParseResolution parses "completed" or "failed".
func ParseResolution(s string) (Resolution, error) {
	switch s {
	case "completed":
		return ResolveCompleted, nil
	case "failed":
		return ResolveFailed, nil
	}
	return 0, fmt.Errorf("idem: resolution %q: want completed or failed", s)
}

// ResolveParams say which uncertain key to settle, how, by whom and why.
type ResolveParams struct {
	// Tenant, Scope and Key name the key as KeyInfo gives them.
	Tenant, Scope, Key string
	As                 Resolution
	// Outcome is what retries replay once the key is resolved as completed (required then; a
	// reference for reference storage, a status for marker storage). Ignored for ResolveFailed.
	Outcome *Outcome
	// TTL is how long the completed key is remembered from now; default DefaultTTL.
	TTL time.Duration
	// Actor (who settles it) and Evidence (why: a ticket, the provider's record) are required,
	// and go to the history.
	Actor, Evidence string
}

func (p *ResolveParams) check() error {
	switch {
	case p == nil:
		return errors.New("idem: Resolve: params are nil")
	case p.As != ResolveCompleted && p.As != ResolveFailed:
		return errors.New("idem: Resolve: As must be ResolveCompleted or ResolveFailed")
	case p.As == ResolveCompleted && p.Outcome == nil:
		return errors.New("idem: Resolve: resolving as completed needs the Outcome retries will replay")
	case p.As == ResolveCompleted && (p.Outcome.Status < 100 || p.Outcome.Status > 599):
		return fmt.Errorf("idem: Resolve: outcome status %d is not an HTTP status", p.Outcome.Status)
	case p.As == ResolveCompleted && (p.Outcome.Status < MinResolvedStatus || p.Outcome.Status > MaxResolvedStatus):
		return fmt.Errorf("idem: Resolve: outcome status %d: a resolved key replays a final answer, %d to %d "+
			"(a 1xx is no answer; a 5xx would tell every retry, as final, that the server failed)", p.Outcome.Status, MinResolvedStatus, MaxResolvedStatus)
	case strings.TrimSpace(p.Actor) == "":
		return errors.New("idem: Resolve: Actor is required: the history records who settled the key")
	case strings.TrimSpace(p.Evidence) == "":
		return errors.New("idem: Resolve: Evidence is required: the history records why the key was settled")
	case p.As == ResolveCompleted:
		if err := CheckHeader(p.Outcome.Header); err != nil {
			return fmt.Errorf("idem: Resolve: outcome %w", err)
		}
	}
	return nil
}

// The statuses a key resolved as completed may replay: a final answer a retry can be given
// again. The runtime never stores a 5xx as a key's outcome (a failed handler gives the key
// back), so none is accepted here either.
const (
	MinResolvedStatus = 200
	MaxResolvedStatus = 499
)

// CheckHeader reports a header that cannot be sent as a response's: a name that is not an
// HTTP token, or a value holding a control character (CR and LF included, which would split
// the response), other than a tab.
func CheckHeader(h http.Header) error {
	for name, values := range h {
		if name == "" || strings.IndexFunc(name, func(r rune) bool { return r > 0x7e || !tokenChar[r] }) >= 0 {
			return fmt.Errorf("header name %q is not an HTTP token", name)
		}
		for _, v := range values {
			if strings.ContainsFunc(v, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }) {
				return fmt.Errorf("header %s: value %q holds a control character", name, v)
			}
		}
	}
	return nil
}

// tokenChar are the characters of an HTTP token (RFC 9110, 5.6.2).
var tokenChar = func() [0x7f]bool {
	var t [0x7f]bool
	for _, c := range "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" {
		t[c] = true
	}
	return t
}()

// Resolve settles an uncertain key in a transaction of its own. ErrNotUncertain when the key is
// not uncertain (already settled, or never was), ErrNoSuchKey when there is no such key.
func (s *Store) Resolve(ctx context.Context, p *ResolveParams) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return s.ResolveTx(ctx, tx, p) })
}

// ResolveTx is Resolve inside the caller's transaction, so that an application can write what
// the lost attempt should have written (the payment row the provider's record proves) in the
// same commit that settles the key. The key's row stays locked until tx ends, so two resolutions
// of one key cannot both succeed.
func (s *Store) ResolveTx(ctx context.Context, tx pgx.Tx, p *ResolveParams) error {
	if err := p.check(); err != nil {
		return err
	}
	row := rowID{storedText(p.Tenant), storedText(p.Scope), storedText(p.Key)}
	var state KeyState
	var operation string
	err := tx.QueryRow(ctx, s.sql.op.resolveLock, row.tenant, row.scope, row.key).Scan(&state, &operation)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNoSuchKey
	case err != nil:
		return fmt.Errorf("idem: resolve: %w", err)
	case state != KeyUncertain:
		return fmt.Errorf("%w (it is %s)", ErrNotUncertain, state)
	}
	t, err := s.resolved(row, operation, p)
	if err == nil {
		var made *transition
		if made, err = s.applyIn(ctx, tx, t); err == nil && made == nil {
			err = errors.New("the key's row changed under its lock")
		}
	}
	if err != nil {
		return fmt.Errorf("idem: resolve: %w", err)
	}
	return nil
}
