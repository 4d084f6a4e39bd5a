package idem_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// In lease mode the claim inserts the key's row and the completion updates it. That update stays
// a HOT update (no new index entries, a fraction of the WAL) only if the completion changes no
// indexed column and the row's page has room for the new version: the claim fixes the expiry
// the completion keeps, and the key table leaves a tenth of each page free (migration 3). So
// every completed row must still be on the page its claim put it on, with the same expiry. With
// full pages (fillfactor 100) the pages fill with claims and completions, and a share of the
// completions land on another page.
func TestLeaseCompletionStaysOnItsPage(t *testing.T) {
	e := newEnv(t, nil, nil)
	p := policy()
	p.Claim = idem.ClaimLease
	ctx := context.Background()
	type place struct {
		page    string
		expires time.Time
	}
	at := func(ctx context.Context, q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, key string) place {
		var ctid string
		var pl place
		if err := q.QueryRow(ctx, "SELECT ctid::text, expires_at FROM "+e.Store.Table()+" WHERE key = $1", key).Scan(&ctid, &pl.expires); err != nil {
			t.Fatalf("read the row of %s: %v", key, err)
		}
		pl.page, _, _ = strings.Cut(strings.TrimPrefix(ctid, "("), ",")
		return pl
	}
	body := `{"id":"pay_1","amount":100,"currency":"EUR","status":"captured"}`
	const keys = 400 // a few dozen pages of claims and completions
	moved := 0
	for i := range keys {
		key := fmt.Sprintf("hot-%03d", i)
		var claimed place
		r, err := idemhttp.Serve(ctx, e.Store, p, request(key, "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			claimed = at(ctx, tx, key)
			return &idem.Outcome{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(body)}, nil
		})
		if err != nil || r.Kind != idemhttp.ResultExecuted {
			t.Fatalf("Serve %s = %+v, %v", key, r, err)
		}
		if done := at(ctx, e.Sch.Pool, key); done.page != claimed.page || !done.expires.Equal(claimed.expires) {
			moved++
			t.Logf("%s: claimed on page %s (expiry %s), completed on page %s (expiry %s)", key, claimed.page, claimed.expires, done.page, done.expires)
		}
	}
	if moved > 0 {
		t.Fatalf("%d of %d completions moved their key's row to another page or changed its expiry: they cannot have been HOT updates", moved, keys)
	}
}
