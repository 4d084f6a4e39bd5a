package payments

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// cacheOnAndOff runs test twice, as a subtest each: with the store's replay cache off, and on.
// Replays must answer alike either way.
func cacheOnAndOff(t *testing.T, test func(t *testing.T, cache func(*idem.Config))) {
	for _, tc := range []struct {
		name  string
		bytes int64
	}{{"cache off", 0}, {"cache on", 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			test(t, func(c *idem.Config) { c.ReplayCacheBytes = tc.bytes })
		})
	}
}

// With the replay cache on, the HTTP contract is the same: concurrent duplicates execute once,
// replays repeat the first answer byte for byte, another body with the key is 422, and another
// tenant's same key is another request.
func TestReplayCacheKeepsTheHTTPContract(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *idem.Config) { c.ReplayCacheBytes = 1 << 20 })
	body := `{"amount_minor": 19900, "currency": "RUB"}`
	first := executedOnce(t, e.burst(20, create("acme", "k-1", body)), http.StatusCreated)
	for i := range 3 {
		again := e.send(create("acme", "k-1", body))
		if again.status != first.status || !again.replayed() || !bytes.Equal(again.body, first.body) ||
			again.header.Get("Location") != first.header.Get("Location") {
			t.Fatalf("replay %d: %d replayed=%v Location %q %s; want the first answer again: %d Location %q %s",
				i, again.status, again.replayed(), again.header.Get("Location"), again.body,
				first.status, first.header.Get("Location"), first.body)
		}
	}
	wantProblem(t, "the key with another body", e.send(create("acme", "k-1", `{"amount_minor": 100, "currency": "RUB"}`)),
		http.StatusUnprocessableEntity, "key-reused")
	other := e.send(create("globex", "k-1", body))
	if other.status != http.StatusCreated || other.replayed() {
		t.Fatalf("another tenant's same key: %d replayed=%v %s; want a first execution of its own", other.status, other.replayed(), other.body)
	}
	if got := e.events("authorized", "k-1"); got != 2 {
		t.Fatalf("%d authorized events for key k-1; want 2 (one per tenant)", got)
	}
}
