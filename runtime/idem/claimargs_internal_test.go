package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestClaimKeyHash: the key hash a claim keeps for its events (computed when they reach anyone)
// is KeyHash(scope, key), and a claim nobody observes hashes on demand to the same.
func TestClaimKeyHash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := &DoParams{Tenant: "acme", Scope: "0:|9:operation=13:createPayment", Key: "k-1", Operation: "createPayment", Fingerprint: "fp"}
	want := KeyHash(p.Scope, p.Key)
	quiet := slog.New(slog.DiscardHandler)
	observed := &Store{cfg: Config{Observer: func(context.Context, Event) {}}, log: quiet}
	logged := &Store{log: slog.New(slog.NewTextHandler(nopWriter{}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	unobserved := &Store{log: quiet}
	for name, s := range map[string]*Store{"observer": observed, "debug log": logged, "nobody": unobserved} {
		full := s.newClaim(ctx, p)
		locked := newClaimWith(s, p, pgtype.UUID{}, false)
		s.hashIfObserved(ctx, locked)
		for what, c := range map[string]*Claim{"full": full, "locked": locked} {
			if got := c.hash(); got != want {
				t.Errorf("%s, %s claim: hash = %s, want KeyHash(scope, key) = %s", name, what, got, want)
			}
			if memo := c.keyHash; (memo != "") != (s != unobserved) || (memo != "" && memo != want) {
				t.Errorf("%s, %s claim: kept hash %q, want %q only when observed", name, what, memo, want)
			}
		}
	}
}

type nopWriter struct{}

func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }

// TestCompleteArgs: the completion's parameters, which the claim's spare room holds, are the
// statements' own in their order (sql/complete.sql; sql/complete_insert.sql for a claim under the
// key's lock), and the claim's other parameters are left as they were.
func TestCompleteArgs(t *testing.T) {
	t.Parallel()
	s := &Store{log: slog.New(slog.DiscardHandler)}
	p := &DoParams{Tenant: "acme", Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Lease: time.Minute, TTL: time.Hour}
	o := &Outcome{Status: 201, Header: http.Header{"Location": {"/x"}}, Body: []byte("{}"), Reference: "ref"}
	ref := &o.Reference

	tok, tok2 := newToken(), newToken()
	c := newClaimWith(s, p, tok, true)
	claimArgs := append([]any(nil), c.claimArgs()...)
	args, err := s.completeArgs(c, o, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"acme", "s", "k", tok, int32(201), `{"Location":["/x"]}`, []byte("{}"), ref, time.Hour}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("completeArgs = %#v, want %#v", args, want)
	}
	if !reflect.DeepEqual(c.claimArgs(), claimArgs) {
		t.Errorf("claim's parameters after the completion's = %#v, want %#v", c.claimArgs(), claimArgs)
	}

	l := newClaimWith(nil, p, pgtype.UUID{}, false)
	l.locked, l.fingerprint, l.Attempt = true, p.Fingerprint, 2
	l.token = tok2
	l.argv[3] = l.token
	read := append([]any(nil), l.read...)
	args, err = s.completeArgs(l, &Outcome{Status: 404}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want = []any{"acme", "s", "k", tok2, int32(404), nil, []byte(nil), (*string)(nil), time.Hour, "op", "fp", int32(2)}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("locked completeArgs = %#v, want %#v", args, want)
	}
	if wantRead := []any{"acme", "s", "k", "fp"}; !reflect.DeepEqual(read, wantRead) || !reflect.DeepEqual(l.read, wantRead) {
		t.Errorf("locked read parameters = %#v (after the completion: %#v), want %#v", read, l.read, wantRead)
	}
	// A second completion of one claim (none is sent) gets parameters of its own.
	again, err := s.completeArgs(l, &Outcome{Status: 200}, time.Hour)
	if err != nil || again[4] != int32(200) || args[4] != int32(404) {
		t.Errorf("a second completeArgs = %#v, %v; the first's status is now %v", again, err, args[4])
	}
}

// TestKeyHashIsAPrefixOfSHA256: KeyHash is the hex of the first 8 bytes of the SHA-256 of scope,
// a NUL and key, short or longer than its stack room.
func TestKeyHashIsAPrefixOfSHA256(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{{"", ""}, {"s", "k-1"}, {"0:|9:operation=13:createPayment", "first-1"}, {strings.Repeat("s", 100), strings.Repeat("k", 300)}} {
		h := sha256.New()
		h.Write([]byte(c[0]))
		h.Write([]byte{0})
		h.Write([]byte(c[1]))
		if got, want := KeyHash(c[0], c[1]), hex.EncodeToString(h.Sum(nil)[:8]); got != want {
			t.Errorf("KeyHash(%q, %q) = %s, want %s", c[0], c[1], got, want)
		}
	}
}

// TestBoxInterval: the boxed intervals the Store hands out are the intervals asked for (whole
// milliseconds, at least one), whichever were asked for before (slots shared by several values
// included), and a nil Store boxes too.
func TestBoxInterval(t *testing.T) {
	t.Parallel()
	s := &Store{}
	for round := 0; round < 3; round++ {
		for _, d := range []time.Duration{0, time.Millisecond, 1500 * time.Microsecond, time.Minute, time.Hour, 24*time.Hour + time.Minute, 86400001 * time.Millisecond} {
			for i := time.Duration(0); i < 40; i++ {
				d := d + i*time.Millisecond
				if got, want := s.boxInterval(d), time.Duration(max(d.Milliseconds(), 1))*time.Millisecond; got != any(want) {
					t.Fatalf("boxInterval(%v) = %v, want %v", d, got, want)
				}
			}
		}
	}
	if got := (*Store)(nil).boxInterval(1500 * time.Microsecond); got != any(time.Millisecond) {
		t.Fatalf("nil Store: boxInterval(1.5ms) = %v, want 1ms", got)
	}
}
