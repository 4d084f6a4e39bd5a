package idem_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// tenantPairs are distinct tenants to keep apart: the escapes a stored encoding could confuse
// (a tenant that is not text beside the plain text its escape would read as), then arbitrary
// byte strings, each beside the forms an escape of it could take.
func tenantPairs(seed uint64, n int) [][2]string {
	pairs := [][2]string{
		{"\xff", "xff"},
		{"\xff", "\x01ff"},
		{"", "\x00"},
		{"\x01", "\x0101"},
		{"a\x00", "a"},
		{"acme", "acme\x00"},
		{"\x01", ""},
	}
	r := rand.New(rand.NewPCG(seed, seed))
	for range n {
		b := make([]byte, r.IntN(6))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(3) == 0 {
				b[i] = "\x00\x01xff"[r.IntN(5)] // the bytes escapes are made of
			}
		}
		t := string(b)
		for _, other := range []string{"x" + hex.EncodeToString(b), "\x01" + hex.EncodeToString(b), t + "\x00"} {
			if other != t {
				pairs = append(pairs, [2]string{t, other})
			}
		}
	}
	return pairs
}

// Distinct tenants never share a row, whatever bytes they are: for each pair, the same scope
// and key under the second tenant executes anew (it is neither replayed nor refused as a reused
// key), each tenant's retry replays its own outcome, and the table holds one row per tenant. In
// both claim modes, with and without the replay cache.
func TestDistinctTenantsNeverShareARow(t *testing.T) {
	t.Parallel()
	pairs := tenantPairs(16, 12)
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		for _, cache := range []int64{0, 1 << 20} {
			t.Run(fmt.Sprintf("%s/cache=%v", mode, cache > 0), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, &idem.Config{ReplayCacheBytes: cache}, nil)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				for i, pair := range pairs {
					key := fmt.Sprintf("order-%d", i)
					for j, tenant := range pair {
						body := fmt.Sprintf("tenant %d of pair %d", j, i)
						for attempt, wantReplay := range []bool{false, true} {
							p := &idem.DoParams{Tenant: tenant, Scope: "charges", Key: key, Operation: "charge",
								Fingerprint: "fp-" + body, Claim: mode}
							r, err := e.Store.Do(ctx, p, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
								return &idem.Outcome{Status: 201, Body: []byte(body)}, nil
							})
							switch {
							case errors.Is(err, idem.ErrKeyReused):
								t.Fatalf("pair %d %q: tenant %q was refused as a reuse of the other tenant's key", i, pair, tenant)
							case err != nil:
								t.Fatalf("pair %d %q: tenant %q, request %d: %v", i, pair, tenant, attempt+1, err)
							case r.Replayed != wantReplay || string(r.Outcome.Body) != body:
								t.Fatalf("pair %d %q: tenant %q, request %d: replayed=%v body %q; want replayed=%v body %q",
									i, pair, tenant, attempt+1, r.Replayed, r.Outcome.Body, wantReplay, body)
							}
						}
					}
					if n := e.Count("SELECT count(*) FROM "+e.Store.Table()+" WHERE key = $1", key); n != 2 {
						t.Fatalf("pair %d %q: %d rows for the key; want one per tenant", i, pair, n)
					}
				}
			})
		}
	}
}

// The stored form of a tenant, scope or key is the string itself when it is text that does not
// begin with the escape, and otherwise an escape no such text is stored as.
func TestStoredTextKeepsTextAndEscapesTheRest(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"acme": "acme", "": "", "xff": "xff", "ä": "ä",
		"\xff": "\x01ff", "a\x00": "\x01" + "6100", "\x01": "\x01" + "01",
	} {
		if got := idem.StoredText(in); got != want {
			t.Errorf("StoredText(%q) = %q; want %q", in, got, want)
		}
	}
}

func FuzzStoredText(f *testing.F) {
	f.Add("\xff", "xff")
	f.Add("\x01ff", "\xff")
	f.Fuzz(func(t *testing.T, a, b string) {
		sa, sb := idem.StoredText(a), idem.StoredText(b)
		if a != b && sa == sb {
			t.Fatalf("%q and %q are both stored as %q", a, b, sa)
		}
		if !isText(sa) {
			t.Fatalf("%q is stored as %q, which PostgreSQL text cannot hold", a, sa)
		}
	})
}

func isText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }
