package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"testing"
	"testing/quick"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// identity is one request's (tenant, scope, key) and the provider a key is derived for.
type identity struct{ Tenant, Scope, Key, Provider string }

func (i identity) derived() string {
	return idem.NewDerivation(i.Tenant, i.Scope, i.Key).Key(i.Provider)
}

// separators are the bytes a naive encoding (joining with a separator) would confuse.
var separators = []string{"", "\x00", ":", "|", "\x00\x00", "a\x00", "\x00a", "\xff", "\x00\x00\x00\x00\x00\x00\x00\x08"}

// TestDerivedKeyIsInjective: any difference in tenant, scope, key or provider gives another key,
// for arbitrary byte strings and for strings built from separators, where shifting a byte from
// one field to the next is the collision a length prefix prevents.
func TestDerivedKeyIsInjective(t *testing.T) {
	t.Parallel()
	differ := func(a, b identity) bool {
		if a == b {
			return a.derived() == b.derived()
		}
		return a.derived() != b.derived()
	}
	if err := quick.Check(differ, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
	// One field changed at a time: each must change the key.
	oneField := func(base identity, other string, field uint8) bool {
		changed := base
		switch field % 4 {
		case 0:
			changed.Tenant = other
		case 1:
			changed.Scope = other
		case 2:
			changed.Key = other
		case 3:
			changed.Provider = other
		}
		return differ(base, changed)
	}
	if err := quick.Check(oneField, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
	// Every combination of separator-made fields: all distinct identities, all distinct keys.
	seen := map[string]identity{}
	for _, a := range separators {
		for _, b := range separators {
			for _, c := range separators {
				for _, d := range separators {
					id := identity{a, b, c, d}
					k := id.derived()
					if prev, dup := seen[k]; dup {
						t.Fatalf("%q and %q derive the same key %s", prev, id, k)
					}
					seen[k] = id
				}
			}
		}
	}
}

var uuidV8 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDerivedKeyIsAStableUUID(t *testing.T) {
	t.Parallel()
	d := idem.NewDerivation("acme", "1:createPayout", "7d0c5a1e")
	k := d.Key("bank")
	if !uuidV8.MatchString(k) {
		t.Fatalf("derived key %q; want a version 8 UUID", k)
	}
	// Pinned: a change of the encoding would change every key in flight, and providers would
	// charge the retries of requests made before the upgrade again.
	if want := "a5fd7d62-4de7-837c-a20a-2263e5ec3db6"; k != want {
		t.Fatalf("derived key %s; want %s (the encoding changed)", k, want)
	}
	// A Derivation survives a job's JSON arguments unchanged.
	b, err := json.Marshal(struct{ D idem.Derivation }{d})
	if err != nil {
		t.Fatal(err)
	}
	var back struct{ D idem.Derivation }
	if err := json.Unmarshal(b, &back); err != nil || back.D != d || back.D.Key("bank") != k {
		t.Fatalf("round trip of %s = %+v, %v; want the same derivation", b, back, err)
	}
	if err := json.Unmarshal([]byte(`{"D":"abc"}`), &back); err == nil {
		t.Fatal("a short derivation was accepted")
	}
}

// TestDerivedKeyIsStableAcrossAttempts runs one request three times through Do, as a retry
// after a failure and a takeover of an abandoned claim do, and wants the same derived key from
// each; another key, scope or tenant gets another one.
func TestDerivedKeyIsStableAcrossAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	p := &idem.DoParams{Tenant: "acme", Scope: "payouts", Key: "k1", Operation: "createPayout", Fingerprint: "fp", Lease: time.Second}
	var keys []string
	var attempts []int
	derive := func(fail bool) idem.HandlerFunc {
		return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			k, err := idem.DerivedKey(ctx, "bank")
			if err != nil {
				return nil, err
			}
			c, _ := idem.ClaimFromContext(ctx)
			keys, attempts = append(keys, k), append(attempts, c.Attempt)
			if fail {
				return nil, errors.New("provider timed out")
			}
			return &idem.Outcome{Status: 202}, nil
		}
	}
	// 1: fails, the key is released. 2: claimed and abandoned (a crash), so 3 takes it over.
	if _, err := e.Store.Do(ctx, p, derive(true)); err == nil {
		t.Fatal("failing attempt: no error")
	}
	cr, err := e.Store.Claim(ctx, &idem.ClaimParams{Tenant: p.Tenant, Scope: p.Scope, Key: p.Key, Operation: p.Operation, Fingerprint: p.Fingerprint, Lease: 200 * time.Millisecond})
	if err != nil || cr.Status != idem.ClaimAcquired {
		t.Fatalf("abandoned claim = %+v, %v", cr, err)
	}
	keys = append(keys, cr.Claim.Derivation().Key("bank"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := e.Store.Do(ctx, p, derive(false))
		if err == nil && !r.Replayed {
			break
		}
		if !errors.Is(err, idem.ErrInProgress) || time.Now().After(deadline) {
			t.Fatalf("takeover after the abandoned claim's lease = %+v, %v; want an execution within 10s", r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(attempts) != 2 || attempts[1] < 2 {
		t.Fatalf("attempts %v; want the last to be a takeover (attempt 2 or more)", attempts)
	}
	for _, k := range keys[1:] {
		if k != keys[0] {
			t.Fatalf("derived keys across attempts %q; want one key", keys)
		}
	}
	if k := idem.NewDerivation("acme", "payouts", "k1").Key("bank"); k != keys[0] {
		t.Fatalf("NewDerivation gives %s, the handler %s; want the same", k, keys[0])
	}
	for _, other := range []identity{{"acme", "payouts", "k2", "bank"}, {"acme", "refunds", "k1", "bank"}, {"globex", "payouts", "k1", "bank"}, {"acme", "payouts", "k1", "acquirer"}} {
		if other.derived() == keys[0] {
			t.Fatalf("%+v derives the same key as acme/payouts/k1/bank", other)
		}
	}
	if _, err := idem.DerivedKey(ctx, "bank"); !errors.Is(err, idem.ErrNoClaim) {
		t.Fatalf("DerivedKey outside a claim = %v; want ErrNoClaim", err)
	}
}
