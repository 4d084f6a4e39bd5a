package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"os/user"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/runtime/idem"
)

// keysFlags are what every keys subcommand shares: the database, the key table and the format.
type keysFlags struct {
	dbFlags
	json bool
}

func (f *keysFlags) add(cmd *cobra.Command) {
	f.addURL(cmd)
	f.addTable(cmd)
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON instead of text, for scripts")
}

// store connects and returns a Store on the key table the flags name, and a function that
// closes the pool.
func (f *keysFlags) store(ctx context.Context) (*idem.Store, func(), error) {
	pool, err := f.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	store, err := idem.NewStore(pool, f.config())
	if err != nil {
		pool.Close()
		return nil, nil, fail(ExitUsage, err)
	}
	return store, func() { store.Close(); pool.Close() }, nil
}

// readError turns a failed read of the key table into an exit: a table that does not exist is
// almost always a wrong --schema or --table, so it says so.
func (f *keysFlags) readError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return fail(ExitUsage, fmt.Errorf("keys: there is no key table %s.%s: %s (check --schema and --table, or run idemgen migrate)",
			f.schema, f.table, pgErr.Message))
	}
	return fail(ExitUsage, fmt.Errorf("keys: read %s.%s: %v", f.schema, f.table, err))
}

// historyError turns a failed read of the history table into an exit: a key table without one
// was migrated by an older idemgen.
func (f *keysFlags) historyError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fail(ExitUsage, fmt.Errorf("keys: there is no history table beside %s.%s (%s): run idemgen migrate, whose version 6 adds it",
			f.schema, f.table, idem.HistoryTableName(f.table)))
	}
	if errors.As(err, &pgErr) && pgErr.Code == "42703" {
		return fail(ExitUsage, fmt.Errorf("keys: the history table beside %s.%s lacks a column this idemgen reads (%s): run idemgen migrate, whose version 7 adds it",
			f.schema, f.table, quote(pgErr.Message)))
	}
	return fail(ExitUsage, fmt.Errorf("keys: read the history of keys in %s.%s: %v", f.schema, f.table, err))
}

func newKeysCmd(s *streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Look up idempotency keys: what happened to a key, which keys are stuck, how many there are",
		Long: "Read the key table as the runtime writes it: show one key and its history (by tenant and key, or by\n" +
			"the key hash a log line prints), list keys (stale in-flight or uncertain ones, say), or count them.\n" +
			"resolve is the one that writes: it settles an uncertain key, recording who and why.\n" +
			"Stored bodies are printed only with show --body: they may hold personal data.",
		Args: noArgs,
	}
	cmd.AddCommand(newKeysShowCmd(s), newKeysListCmd(s), newKeysStatsCmd(s), newKeysResolveCmd(s))
	return cmd
}

func newKeysShowCmd(s *streams) *cobra.Command {
	var f keysFlags
	var tenant, key, hash, operation string
	var body bool
	cmd := &cobra.Command{
		Use:   "show (--tenant T --key K | --hash H) [--operation O]",
		Short: "Show everything stored about one key: state, attempts, stored status, reference, times, lease, history",
		Long: "Show one key: by --key (with --tenant, the tenant the server's Config.Tenant returned; without it,\n" +
			"every tenant's key of that name), or by --hash, the key_hash a log line prints.\n" +
			"Below the key's facts comes its history, oldest first (claims, takeovers, mismatches refused,\n" +
			"completions, releases, provider calls, uncertain, resolved), for operations that keep one.\n" +
			"A key that has no row any more (released after a failure, resolved as failed, expired and\n" +
			"purged) is shown as gone, with its history, while the history is kept (120 days by default).\n" +
			"Exit 1 when no such key exists and none has a history.",
		Example: "  idemgen keys show --tenant acme --key 5f0c8f0e-3a7e-4f0e-9d3c-2b7f1c9e8a10\n" +
			"  idemgen keys show --hash 3f2a9c1d0b7e6f45 --json",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (key == "") == (hash == "") {
				return fail(ExitUsage, errors.New("keys show: give --key (and --tenant) or --hash"))
			}
			p := &idem.LookupKeyParams{Key: key, KeyHash: hash, Operation: operation, IncludeBody: body}
			if cmd.Flags().Changed("tenant") {
				p.Tenant = &tenant
			}
			if hash != "" {
				// A malformed hash is a usage error, said before any connection.
				if _, err := idem.ParseKeyHash(hash); err != nil {
					return fail(ExitUsage, fmt.Errorf("keys show: --hash: %v", strings.TrimPrefix(err.Error(), "idem: ")))
				}
			}
			store, done, err := f.store(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			keys, err := store.LookupKey(cmd.Context(), p)
			if errors.Is(err, idem.ErrNoSuchKey) {
				// No row: a key whose history is kept longer than the key is still shown, as gone.
				// (A table without a history, before migration 6, has nothing more to say.)
				if gone, gerr := store.GoneKeys(cmd.Context(), p); gerr == nil && len(gone) > 0 {
					keys, err = gone, nil
				}
			}
			if errors.Is(err, idem.ErrNoSuchKey) {
				return fail(ExitFindings, fmt.Errorf("no such key: %s in %s.%s (never claimed, released after a failure so a retry runs anew, or expired and purged)",
					describeLookup(p), f.schema, f.table))
			}
			if err != nil {
				return f.readError(err)
			}
			histories := make([][]idem.HistoryEvent, len(keys))
			for i, k := range keys {
				if histories[i], err = store.History(cmd.Context(), k.Tenant, k.Scope, k.Key); err != nil {
					return f.historyError(err)
				}
			}
			if f.json {
				out := jsonKeys(keys, body)
				for i := range out {
					h := jsonHistory(histories[i])
					out[i].History = &h
				}
				return writeJSON(s.out, out)
			}
			for i, k := range keys {
				if i > 0 {
					fmt.Fprintln(s.out)
				}
				writeKey(s.out, &k, body)
				writeHistory(s.out, histories[i], k.Operation)
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&tenant, "tenant", "", "the key's tenant (default: every tenant; --tenant '' means keys without a tenant)")
	cmd.Flags().StringVar(&key, "key", "", "the key as the client sent it (the Idempotency-Key header)")
	cmd.Flags().StringVar(&hash, "hash", "", "the key hash a log line prints (key_hash=…)")
	cmd.Flags().StringVar(&operation, "operation", "", "only this operation's key (an operationId)")
	cmd.Flags().BoolVar(&body, "body", false, "also print the stored response body (it may hold personal data)")
	return cmd
}

func newKeysListCmd(s *streams) *cobra.Command {
	var f keysFlags
	var tenant, operation, state, since string
	var stale bool
	var limit int
	cmd := &cobra.Command{
		Use:   "list [--state in_flight|complete|uncertain] [--stale] [--operation O] [--tenant T] [--since D] [--limit N]",
		Short: "List keys, newest first: in flight, stale (their holder died), uncertain, by operation or tenant",
		Example: "  idemgen keys list --state in_flight --stale\n" +
			"  idemgen keys list --state uncertain\n" +
			"  idemgen keys list --operation createPayment --since 1h --json",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := &idem.ListKeysParams{Operation: operation, State: idem.KeyState(state), Stale: stale, Limit: limit}
			if cmd.Flags().Changed("tenant") {
				p.Tenant = &tenant
			}
			switch idem.KeyState(state) {
			case "", idem.KeyInFlight, idem.KeyComplete, idem.KeyUncertain:
			default:
				return fail(ExitUsage, fmt.Errorf("keys list: --state %s: use %s, %s or %s", strconv.Quote(state), idem.KeyInFlight, idem.KeyComplete, idem.KeyUncertain))
			}
			if stale && state != "" && idem.KeyState(state) != idem.KeyInFlight {
				return fail(ExitUsage, fmt.Errorf("keys list: --stale keys are in flight: drop --state %s", state))
			}
			if limit < 1 || limit > idem.MaxListLimit {
				return fail(ExitUsage, fmt.Errorf("keys list: --limit must be between 1 and %d, got %d", idem.MaxListLimit, limit))
			}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return fail(ExitUsage, err)
				}
				p.Since = t
			}
			store, done, err := f.store(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			keys, err := store.ListKeys(cmd.Context(), p)
			if err != nil {
				return f.readError(err)
			}
			if f.json {
				return writeJSON(s.out, jsonKeys(keys, false))
			}
			if len(keys) == 0 {
				fmt.Fprintf(s.err, "no keys in %s.%s match\n", f.schema, f.table)
				return nil
			}
			tw := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "CREATED\tSTATE\tOPERATION\tTENANT\tKEY\tKEY HASH\tSTATUS\tATTEMPTS")
			for _, k := range keys {
				st := k.State
				if k.Stale() {
					st += " (stale)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", k.CreatedAt.UTC().Format(time.RFC3339), st,
					bare(k.Operation), quote(k.Tenant), quote(k.Key), k.KeyHash, statusText(k.Status), k.Attempt)
			}
			return tw.Flush()
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&state, "state", "", "only keys in this state: in_flight, complete or uncertain (waiting for keys resolve)")
	cmd.Flags().BoolVar(&stale, "stale", false, "only in-flight keys whose lease ran out: their holder died or lost the database")
	cmd.Flags().StringVar(&operation, "operation", "", "only this operation's keys")
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's keys (default: every tenant)")
	cmd.Flags().StringVar(&since, "since", "", "only keys created since then: a duration back from now (30m, 2h, 3d) or an RFC 3339 time")
	cmd.Flags().IntVar(&limit, "limit", idem.DefaultListLimit, "at most this many keys")
	return cmd
}

func newKeysStatsCmd(s *streams) *cobra.Command {
	var f keysFlags
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count keys by operation and state, with the stale in-flight ones, the uncertain ones and the oldest of each",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, done, err := f.store(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			st, err := store.KeyStats(cmd.Context())
			if err != nil {
				return f.readError(err)
			}
			if f.json {
				out := jsonStats{Table: f.schema + "." + f.table, Now: st.Now.UTC(), Total: jsonOpStats(st.Total, st.Now), Operations: []jsonOpStat{}}
				for _, o := range st.Operations {
					out.Operations = append(out.Operations, jsonOpStats(o, st.Now))
				}
				return writeJSON(s.out, out)
			}
			fmt.Fprintf(s.out, "%s.%s at %s\n", f.schema, f.table, st.Now.UTC().Format(time.RFC3339))
			tw := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "OPERATION\tIN FLIGHT\tSTALE\tCOMPLETE\tEXPIRED\tOLDEST IN FLIGHT\tUNCERTAIN\tOLDEST UNCERTAIN")
			oldest := func(t time.Time) string {
				if t.IsZero() {
					return "-"
				}
				return when(t, st.Now)
			}
			row := func(name string, o idem.OperationKeyStats) {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n", name, o.InFlight, o.Stale, o.Complete, o.Expired,
					oldest(o.OldestInFlight), o.Uncertain, oldest(o.OldestUncertain))
			}
			for _, o := range st.Operations {
				row(bare(o.Operation), o)
			}
			row("(all)", st.Total)
			return tw.Flush()
		},
	}
	f.add(cmd)
	return cmd
}

// parseSince reads --since: a duration back from now (with d for days) or an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if n, ok := strings.CutSuffix(v, "d"); ok && err != nil {
		if days, derr := strconv.Atoi(n); derr == nil {
			d, err = time.Duration(days)*24*time.Hour, nil
		}
	}
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("keys list: --since %s: want a duration back from now (30m, 2h, 3d) or an RFC 3339 time (2025-01-31T09:00:00Z)", strconv.Quote(v))
	}
	return now.Add(-d), nil
}

func describeLookup(p *idem.LookupKeyParams) string {
	var parts []string
	if p.Tenant != nil {
		parts = append(parts, "tenant "+quote(*p.Tenant))
	}
	if p.Key != "" {
		parts = append(parts, "key "+quote(p.Key))
	} else {
		parts = append(parts, "key hash "+quote(p.KeyHash))
	}
	if p.Operation != "" {
		parts = append(parts, "operation "+quote(p.Operation))
	}
	return strings.Join(parts, ", ")
}

// quote prints a value that came from a client (a tenant, a key, a header): in Go's quoted
// form, so control characters (a terminal escape, a newline that would fake another line) show
// as escapes, and with <, > and & escaped as JSON escapes them, so pasting the output into a
// web page or a ticket cannot inject markup.
func quote(s string) string {
	return htmlEscaper.Replace(strconv.Quote(s))
}

var htmlEscaper = strings.NewReplacer("<", `\u003c`, ">", `\u003e`, "&", `\u0026`)

var bareRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]+$`)

// bare prints a name the server chose (an operation, a fingerprint) as it is when it is plain,
// and quoted otherwise.
func bare(s string) string {
	if bareRE.MatchString(s) {
		return s
	}
	return quote(s)
}

func statusText(code int) string {
	if code == 0 {
		return "-"
	}
	return strconv.Itoa(code)
}

// when prints t in UTC with its distance from now (both database clock).
func when(t, now time.Time) string {
	d := now.Sub(t).Round(time.Second)
	rel := d.String() + " ago"
	if d < 0 {
		rel = "in " + (-d).String()
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z") + " (" + rel + ")"
}

func writeKey(w io.Writer, k *idem.KeyInfo, withBody bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(name, value string) { fmt.Fprintf(tw, "%s\t%s\n", name, value) }
	line("key", quote(k.Key))
	line("tenant", quote(k.Tenant))
	line("operation", bare(k.Operation))
	line("scope", quote(k.Scope))
	line("key hash", k.KeyHash)
	if k.State == idem.KeyGone {
		line("state", "gone (no key row: released after a failure so a retry runs anew, resolved as failed, or expired and purged; its history is kept)")
		line("first seen", k.CreatedAt.UTC().Format(time.RFC3339))
		tw.Flush()
		return
	}
	state := string(k.State)
	switch {
	case k.Stale():
		state += " (stale: the lease ran out, its holder is gone; the next retry with the same request takes it over)"
	case k.State == idem.KeyInFlight:
		state += " (its handler is running)"
	case k.State == idem.KeyUncertain:
		state += " (an attempt was lost after it called its provider: retries are refused until it is settled with idemgen keys resolve)"
	}
	if k.Expired() && k.State != idem.KeyUncertain {
		state += " (expired: behaves as a new key until purged)"
	}
	line("state", state)
	line("attempts", strconv.Itoa(k.Attempt))
	line("status", statusText(k.Status))
	if k.Reference != "" {
		line("reference", quote(k.Reference))
	}
	for _, name := range slices.Sorted(mapKeys(k.Header)) {
		for _, v := range k.Header[name] {
			line("header", quote(name)+": "+quote(v))
		}
	}
	switch {
	case k.State == idem.KeyInFlight:
	case withBody:
		line("body", bodyText(k.Body))
	case k.BodySize > 0:
		line("body", fmt.Sprintf("%d bytes (pass --body to print it; it may hold personal data)", k.BodySize))
	default:
		line("body", "none")
	}
	line("created", when(k.CreatedAt, k.Now))
	if !k.CompletedAt.IsZero() {
		line("completed", when(k.CompletedAt, k.Now))
	}
	if k.State == idem.KeyUncertain {
		line("expires", "not until it is settled")
	} else {
		line("expires", when(k.ExpiresAt, k.Now))
	}
	if k.State == idem.KeyInFlight {
		line("lease expires", when(k.LeaseExpiresAt, k.Now))
	}
	line("fingerprint", bare(k.Fingerprint))
	tw.Flush()
}

func mapKeys(h http.Header) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}
}

func bodyText(b []byte) string {
	if len(b) == 0 {
		return "none"
	}
	if utf8.Valid(b) {
		return quote(string(b))
	}
	return fmt.Sprintf("%d bytes, not text: %x", len(b), b)
}

type jsonKey struct {
	Tenant         string        `json:"tenant"`
	Key            string        `json:"key"`
	Operation      string        `json:"operation"`
	Scope          string        `json:"scope"`
	KeyHash        string        `json:"key_hash"`
	State          idem.KeyState `json:"state"`
	Stale          bool          `json:"stale"`
	Expired        bool          `json:"expired"`
	Attempt        int           `json:"attempt"`
	Status         *int          `json:"status"`
	Reference      *string       `json:"reference"`
	Headers        http.Header   `json:"headers"`
	BodySize       int           `json:"body_size"`
	Body           *string       `json:"body,omitempty"`
	BodyBase64     []byte        `json:"body_base64,omitempty"`
	Fingerprint    string        `json:"fingerprint"`
	CreatedAt      time.Time     `json:"created_at"`
	CompletedAt    *time.Time    `json:"completed_at"`
	ExpiresAt      *time.Time    `json:"expires_at"` // null for an uncertain key: it expires once settled
	LeaseExpiresAt *time.Time    `json:"lease_expires_at"`
	Now            time.Time     `json:"now"`
	// History is the key's history, oldest first (keys show only; [] when it has none).
	History *[]jsonEvent `json:"history,omitempty"`
}

func jsonKeys(keys []idem.KeyInfo, withBody bool) []jsonKey {
	out := make([]jsonKey, 0, len(keys))
	for _, k := range keys {
		j := jsonKey{Tenant: k.Tenant, Key: k.Key, Operation: k.Operation, Scope: k.Scope, KeyHash: k.KeyHash,
			State: k.State, Stale: k.Stale(), Expired: k.Expired(), Attempt: k.Attempt, Headers: k.Header,
			BodySize: k.BodySize, Fingerprint: k.Fingerprint, CreatedAt: k.CreatedAt.UTC(), Now: k.Now.UTC()}
		if k.State == idem.KeyGone { // no row: only who it was, and when it was first seen
			j.Expired, j.Now = false, time.Now().UTC()
		} else if k.State != idem.KeyUncertain {
			t := k.ExpiresAt.UTC()
			j.ExpiresAt = &t
		}
		if k.Status != 0 {
			j.Status = &k.Status
		}
		if k.Reference != "" {
			j.Reference = &k.Reference
		}
		if !k.CompletedAt.IsZero() {
			t := k.CompletedAt.UTC()
			j.CompletedAt = &t
		}
		if k.State == idem.KeyInFlight {
			t := k.LeaseExpiresAt.UTC()
			j.LeaseExpiresAt = &t
		}
		if withBody && k.Body != nil {
			if utf8.Valid(k.Body) {
				b := string(k.Body)
				j.Body = &b
			} else {
				j.BodyBase64 = k.Body
			}
		}
		out = append(out, j)
	}
	return out
}

type jsonStats struct {
	Table      string       `json:"table"`
	Now        time.Time    `json:"now"`
	Total      jsonOpStat   `json:"total"`
	Operations []jsonOpStat `json:"operations"`
}

type jsonOpStat struct {
	Operation      string     `json:"operation,omitempty"`
	InFlight       int64      `json:"in_flight"`
	Stale          int64      `json:"stale_in_flight"`
	Complete       int64      `json:"complete"`
	Expired        int64      `json:"expired"`
	OldestInFlight *time.Time `json:"oldest_in_flight"`
	// OldestInFlightSeconds is how long the oldest in-flight key has been in flight.
	OldestInFlightSeconds *float64 `json:"oldest_in_flight_seconds"`
	Uncertain             int64    `json:"uncertain"`
	// OldestUncertain is when the oldest uncertain key called its provider.
	OldestUncertain        *time.Time `json:"oldest_uncertain"`
	OldestUncertainSeconds *float64   `json:"oldest_uncertain_seconds"`
}

func jsonOpStats(o idem.OperationKeyStats, now time.Time) jsonOpStat {
	j := jsonOpStat{Operation: o.Operation, InFlight: o.InFlight, Stale: o.Stale, Complete: o.Complete, Expired: o.Expired, Uncertain: o.Uncertain}
	j.OldestInFlight, j.OldestInFlightSeconds = timeAndAge(o.OldestInFlight, now)
	j.OldestUncertain, j.OldestUncertainSeconds = timeAndAge(o.OldestUncertain, now)
	return j
}

// timeAndAge are t in UTC and its age in seconds at now, both nil when t is zero.
func timeAndAge(t, now time.Time) (*time.Time, *float64) {
	if t.IsZero() {
		return nil, nil
	}
	u, age := t.UTC(), now.Sub(t).Seconds()
	return &u, &age
}

// writeJSON prints v indented. encoding/json escapes <, > and & and the C0 controls; the
// other characters a terminal would not show as themselves (C1 controls, bidi overrides such as
// U+202E, which reorder what follows) are escaped too, so JSON on a terminal is as safe as text.
func writeJSON(w io.Writer, v any) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	var out strings.Builder
	for _, r := range b.String() {
		switch {
		case r == '\n' || unicode.IsPrint(r):
			out.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// noHistory says why a key has no history: the runtime records one only for operations that
// ask for it, and keeps it for a retention.
const noHistory = "none recorded: its operation keeps no history (the runtime records one only for operations that opt in, " +
	"and always for those uncertain on loss), or its events are older than the history retention (default 120 days)"

// writeHistory prints a key's history below its facts: one line per event, oldest first. op is
// the key's operation: an event of another one says so.
func writeHistory(w io.Writer, events []idem.HistoryEvent, op string) {
	if len(events) == 0 {
		fmt.Fprintf(w, "history  %s\n", noHistory)
		return
	}
	fmt.Fprintf(w, "\nhistory (%d events, oldest first)\n", len(events))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tEVENT\tATTEMPT\tSTATUS\tDETAILS")
	for _, ev := range events {
		attempt := "-"
		if ev.Attempt > 0 {
			attempt = strconv.Itoa(ev.Attempt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ev.At.UTC().Format("2006-01-02T15:04:05.000Z"), bare(string(ev.Kind)),
			attempt, statusText(ev.Status), eventDetails(&ev, op))
	}
	tw.Flush()
}

// eventDetails prints what an event carries besides its time, kind, attempt and status, every
// value that may come from a client or an operator quoted.
func eventDetails(ev *idem.HistoryEvent, op string) string {
	var parts []string
	if ev.Operation != "" && ev.Operation != op {
		parts = append(parts, "operation "+bare(ev.Operation))
	}
	if ev.Resolution != 0 {
		parts = append(parts, "as "+ev.Resolution.String())
	}
	if ev.Detail != "" {
		parts = append(parts, quote(ev.Detail))
	}
	if ev.Actor != "" {
		parts = append(parts, "by "+quote(ev.Actor))
	}
	if ev.Provider != "" || ev.ProviderKey != "" {
		p := "provider " + bare(ev.Provider)
		if ev.ProviderKey != "" {
			p += " key " + quote(ev.ProviderKey)
		}
		parts = append(parts, p)
	}
	if ev.Amount != 0 || ev.Currency != "" {
		parts = append(parts, fmt.Sprintf("amount %d %s (minor units)", ev.Amount, bare(ev.Currency)))
	}
	if ev.Replays > 0 {
		parts = append(parts, counted(ev.Kind, ev.Replays))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// jsonEvent is one history event as keys show --json prints it; fields an event does not carry
// are null.
type jsonEvent struct {
	At        time.Time `json:"at"`
	Kind      string    `json:"kind"`
	Operation string    `json:"operation"`
	Attempt   *int      `json:"attempt"`
	Status    *int      `json:"status"`
	Detail    *string   `json:"detail"`
	// Resolution is how a resolved key was settled: completed or failed.
	Resolution  *string `json:"resolution"`
	Actor       *string `json:"actor"`
	Replays     *int    `json:"replays"`
	Provider    *string `json:"provider"`
	ProviderKey *string `json:"provider_key"`
	// Amount is in minor units.
	Amount   *int64  `json:"amount"`
	Currency *string `json:"currency"`
}

func jsonHistory(events []idem.HistoryEvent) []jsonEvent {
	out := make([]jsonEvent, 0, len(events))
	for _, ev := range events {
		out = append(out, jsonEvent{At: ev.At.UTC(), Kind: string(ev.Kind), Operation: ev.Operation,
			Attempt: nonZero(ev.Attempt), Status: nonZero(ev.Status), Detail: nonZero(ev.Detail), Resolution: resolutionOf(ev), Actor: nonZero(ev.Actor),
			Replays: nonZero(ev.Replays), Provider: nonZero(ev.Provider), ProviderKey: nonZero(ev.ProviderKey),
			Amount: nonZero(ev.Amount), Currency: nonZero(ev.Currency)})
	}
	return out
}

func resolutionOf(ev idem.HistoryEvent) *string {
	if ev.Resolution == 0 {
		return nil
	}
	return nonZero(ev.Resolution.String())
}

// nonZero is a pointer to v, nil when v is its type's zero value (a null in JSON).
func nonZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// resolveFlags are keys resolve's own flags.
type resolveFlags struct {
	tenant, key, hash, operation string
	as, evidence, actor          string
	status                       int
	bodyFile, contentType, ref   string
	noBody                       bool
	ttl                          string
}

func newKeysResolveCmd(s *streams) *cobra.Command {
	var f keysFlags
	var r resolveFlags
	cmd := &cobra.Command{
		Use:   "resolve (--key K | --key-hash H) --as completed|failed --evidence TEXT",
		Short: "Settle an uncertain key: as completed (retries replay the outcome given) or failed (the next retry runs anew)",
		Long: "An uncertain key is one whose attempt was lost after it called its provider: the provider may have\n" +
			"acted, so the runtime refuses to run it again. Look the call up in the provider's records, then:\n" +
			"  --as completed  the provider acted: the key becomes complete with the outcome given (--status and\n" +
			"                  --body-file, --reference or --no-body), which every retry then replays as final:\n" +
			"                  a status of 200 to 499, a body unless it is 204 or 304, a valid --content-type;\n" +
			"  --as failed     the provider has no record of it: the key is given back, the next retry runs anew.\n" +
			"--evidence (why: a ticket, the provider's record) and the actor (--actor, default the OS user) go to\n" +
			"the key's history. When --key or --key-hash names keys of several tenants or operations, narrow it\n" +
			"with --tenant and --operation.\n" +
			"Exit 0 when the key was resolved, 1 when there is no such key or it is not uncertain, 2 for bad usage.",
		Example: "  idemgen keys resolve --tenant acme --key 5f0c8f0e --as failed --evidence 'acquirer: no such charge, ticket OPS-123'\n" +
			"  idemgen keys resolve --key-hash 3f2a9c1d0b7e6f45 --as completed --status 201 --body-file payment.json \\\n" +
			"      --content-type application/json --evidence 'acquirer charge ch_91 captured 15.00 RUB'",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, lookup, err := r.params(cmd, s)
			if err != nil {
				return fail(ExitUsage, fmt.Errorf("keys resolve: %v", err))
			}
			store, done, err := f.store(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			keys, err := store.LookupKey(cmd.Context(), lookup)
			if errors.Is(err, idem.ErrNoSuchKey) {
				return fail(ExitFindings, fmt.Errorf("keys resolve: no such key: %s in %s.%s", describeLookup(lookup), f.schema, f.table))
			}
			if err != nil {
				return f.readError(err)
			}
			if len(keys) > 1 {
				var b strings.Builder
				fmt.Fprintf(&b, "keys resolve: %s names %d keys; narrow it with --tenant and --operation:", describeLookup(lookup), len(keys))
				for _, k := range keys {
					fmt.Fprintf(&b, "\n  tenant %s, operation %s, scope %s: %s", quote(k.Tenant), bare(k.Operation), quote(k.Scope), k.State)
				}
				return fail(ExitUsage, errors.New(b.String()))
			}
			k := keys[0]
			p.Tenant, p.Scope, p.Key = k.Tenant, k.Scope, k.Key
			switch err := store.Resolve(cmd.Context(), p); {
			case errors.Is(err, idem.ErrNotUncertain):
				return fail(ExitFindings, fmt.Errorf("keys resolve: key %s (tenant %s, operation %s) is %s, not uncertain: nothing to settle",
					quote(k.Key), quote(k.Tenant), bare(k.Operation), stateOf(cmd.Context(), store, &k)))
			case errors.Is(err, idem.ErrNoSuchKey):
				return fail(ExitFindings, fmt.Errorf("keys resolve: key %s (tenant %s, operation %s) is gone: it was settled or purged meanwhile",
					quote(k.Key), quote(k.Tenant), bare(k.Operation)))
			case err != nil:
				return fail(ExitUsage, fmt.Errorf("keys resolve: %v", strings.TrimPrefix(err.Error(), "idem: ")))
			}
			if f.json {
				out := jsonResolved{Tenant: k.Tenant, Key: k.Key, Operation: k.Operation, Scope: k.Scope, KeyHash: k.KeyHash,
					As: p.As.String(), Actor: p.Actor, Evidence: p.Evidence}
				if p.As == idem.ResolveCompleted {
					out.Status, out.BodySize = &p.Outcome.Status, len(p.Outcome.Body)
					out.Reference = nonZero(p.Outcome.Reference)
				}
				return writeJSON(s.out, out)
			}
			fmt.Fprintf(s.out, "resolved key %s (tenant %s, operation %s, key hash %s) as %s\n", quote(k.Key), quote(k.Tenant), bare(k.Operation), k.KeyHash, p.As)
			switch p.As {
			case idem.ResolveCompleted:
				what := fmt.Sprintf("status %d", p.Outcome.Status)
				switch {
				case p.Outcome.Reference != "":
					what += ", reference " + quote(p.Outcome.Reference)
				case len(p.Outcome.Body) > 0:
					what += fmt.Sprintf(", a %d-byte body", len(p.Outcome.Body))
				}
				fmt.Fprintf(s.out, "  the key is complete: every retry now replays %s\n", what)
			case idem.ResolveFailed:
				fmt.Fprintln(s.out, "  the key is given back: the next retry with it runs the operation anew")
			}
			fmt.Fprintf(s.out, "  recorded in its history: by %s, evidence %s\n", quote(p.Actor), quote(p.Evidence))
			return nil
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&r.key, "key", "", "the key as the client sent it (the Idempotency-Key header)")
	fl.StringVar(&r.hash, "key-hash", "", "or the key hash a log line prints (key_hash=…)")
	fl.StringVar(&r.tenant, "tenant", "", "the key's tenant (default: every tenant; --tenant '' means keys without a tenant)")
	fl.StringVar(&r.operation, "operation", "", "the key's operation (an operationId), when the key was used by several")
	fl.StringVar(&r.as, "as", "", "completed (the provider acted) or failed (it did not)")
	fl.StringVar(&r.evidence, "evidence", "", "why: the provider's record, a ticket (recorded in the key's history)")
	fl.StringVar(&r.actor, "actor", "", "who settles it, for the history (default: $USER, or the OS user)")
	fl.IntVar(&r.status, "status", 0, "--as completed: the HTTP status retries replay")
	fl.StringVar(&r.bodyFile, "body-file", "", "--as completed: the file holding the body retries replay (- reads stdin)")
	fl.StringVar(&r.contentType, "content-type", "", "--as completed with --body-file: the body's Content-Type")
	fl.StringVar(&r.ref, "reference", "", "--as completed: the resource reference retries reload (operations that store a reference)")
	fl.BoolVar(&r.noBody, "no-body", false, "--as completed: the outcome has no body (a 204, or an operation that stores only the status)")
	fl.StringVar(&r.ttl, "ttl", "", "--as completed: how long the key is remembered from now (default the runtime's, 24h; 7d works)")
	return cmd
}

// stateOf rereads k's state after Resolve refused it, for the message; the state looked up
// before is the fallback.
func stateOf(ctx context.Context, store *idem.Store, k *idem.KeyInfo) idem.KeyState {
	keys, err := store.LookupKey(ctx, &idem.LookupKeyParams{Tenant: &k.Tenant, Key: k.Key, Operation: k.Operation})
	if err == nil {
		for _, now := range keys {
			if now.Scope == k.Scope {
				return now.State
			}
		}
	}
	return k.State
}

// params checks resolve's flags and returns what Resolve is given (without the key, which the
// lookup finds) and the lookup. Every mistake is found before connecting.
func (r *resolveFlags) params(cmd *cobra.Command, s *streams) (*idem.ResolveParams, *idem.LookupKeyParams, error) {
	changed := cmd.Flags().Changed
	lookup := &idem.LookupKeyParams{Key: r.key, Operation: r.operation}
	switch {
	case (r.key == "") == (r.hash == ""):
		return nil, nil, errors.New("give --key or --key-hash (one of them)")
	case r.hash != "":
		h, err := idem.ParseKeyHash(r.hash)
		if err != nil {
			return nil, nil, fmt.Errorf("--key-hash: %v", strings.TrimPrefix(err.Error(), "idem: "))
		}
		lookup.KeyHash = h
	}
	if changed("tenant") {
		lookup.Tenant = &r.tenant
	}
	if r.as == "" {
		return nil, nil, errors.New("--as is required: completed (the provider acted) or failed (it did not)")
	}
	as, err := idem.ParseResolution(r.as)
	if err != nil {
		return nil, nil, fmt.Errorf("--as %s: want completed or failed", strconv.Quote(r.as))
	}
	p := &idem.ResolveParams{As: as, Evidence: strings.TrimSpace(r.evidence), Actor: strings.TrimSpace(r.actor)}
	if p.Evidence == "" {
		return nil, nil, errors.New("--evidence is required: the history records why the key was settled (the provider's record, a ticket)")
	}
	if p.Actor == "" {
		if p.Actor = osUser(); p.Actor == "" {
			return nil, nil, errors.New("--actor is required: neither $USER nor the OS names the user")
		}
	}
	outcomeFlags := []string{"status", "body-file", "content-type", "reference", "no-body", "ttl"}
	if as == idem.ResolveFailed {
		for _, name := range outcomeFlags {
			if changed(name) {
				return nil, nil, fmt.Errorf("--%s is for --as completed: a key resolved as failed stores no outcome (the next retry runs anew)", name)
			}
		}
		return p, lookup, nil
	}
	if !changed("status") {
		return nil, nil, errors.New("--as completed needs the outcome retries will replay: --status, and --body-file, --reference or --no-body")
	}
	if r.status < 100 || r.status > 599 {
		return nil, nil, fmt.Errorf("--status %d is not an HTTP status", r.status)
	}
	if r.status < idem.MinResolvedStatus || r.status > idem.MaxResolvedStatus {
		return nil, nil, fmt.Errorf("--status %d: every retry would be given it as final; a resolved key answers %d to %d (a 5xx is never stored)",
			r.status, idem.MinResolvedStatus, idem.MaxResolvedStatus)
	}
	n := 0
	for _, name := range []string{"body-file", "reference", "no-body"} {
		if changed(name) {
			n++
		}
	}
	if n != 1 {
		return nil, nil, errors.New("--as completed: give one of --body-file (the body retries replay), --reference (operations that store a reference) or --no-body")
	}
	if changed("content-type") && !changed("body-file") {
		return nil, nil, errors.New("--content-type goes with --body-file")
	}
	if r.noBody && !answersWithoutBody(r.status) {
		return nil, nil, fmt.Errorf("--no-body with --status %d: a %d answers with a body, which every retry would get empty; give --body-file "+
			"with the body the operation answers (or --reference, for an operation that stores a reference). --no-body is for 204 and 304", r.status, r.status)
	}
	if changed("content-type") {
		if err := checkContentType(r.contentType); err != nil {
			return nil, nil, fmt.Errorf("--content-type %s: %v", quote(r.contentType), err)
		}
	}
	o := &idem.Outcome{Status: r.status, Reference: r.ref}
	if changed("reference") && strings.TrimSpace(r.ref) == "" {
		return nil, nil, errors.New("--reference is empty")
	}
	if changed("body-file") {
		if o.Body, err = readBodyFile(r.bodyFile, s.in); err != nil {
			return nil, nil, err
		}
		if r.contentType != "" {
			o.Header = http.Header{"Content-Type": {r.contentType}}
		}
	}
	if r.ttl != "" {
		if p.TTL, err = parseDays(r.ttl); err != nil || p.TTL <= 0 {
			return nil, nil, fmt.Errorf("--ttl %s: want a positive duration (24h, 7d)", strconv.Quote(r.ttl))
		}
	}
	p.Outcome = o
	return p, lookup, nil
}

// answersWithoutBody reports the statuses whose answer has no body: a key resolved as
// completed with another status and no body would replay an empty body to every retry.
func answersWithoutBody(status int) bool {
	return status == http.StatusNoContent || status == http.StatusNotModified
}

// checkContentType reports a Content-Type that is not a media type (type/subtype and
// parameters) or that holds a control character (CR LF would split the replayed response).
func checkContentType(v string) error {
	if err := idem.CheckHeader(http.Header{"Content-Type": {v}}); err != nil {
		return errors.New("it holds a control character")
	}
	mt, _, err := mime.ParseMediaType(v)
	if typ, sub, ok := strings.Cut(mt, "/"); err != nil || !ok || typ == "" || sub == "" {
		return errors.New("not a media type (application/json, say)")
	}
	return nil
}

// maxResolveBody caps --body-file: a stored body is a response, not a payload.
const maxResolveBody = 8 << 20

func readBodyFile(name string, stdin io.Reader) ([]byte, error) {
	var src io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("--body-file: %v", err)
		}
		defer f.Close()
		src = f
	}
	b, err := io.ReadAll(io.LimitReader(src, maxResolveBody+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("--body-file: %v", err)
	case len(b) > maxResolveBody:
		return nil, fmt.Errorf("--body-file %s is over %d MiB: not a response body", name, maxResolveBody>>20)
	}
	return b, nil
}

// parseDays is time.ParseDuration that also takes whole days (7d).
func parseDays(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil {
			return time.Duration(days) * 24 * time.Hour, nil
		}
	}
	return time.ParseDuration(v)
}

// osUser names who runs the command: $USER, or the OS's name for the process's user.
func osUser() string {
	if u := strings.TrimSpace(os.Getenv("USER")); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

// jsonResolved is what keys resolve --json prints.
type jsonResolved struct {
	Tenant    string  `json:"tenant"`
	Key       string  `json:"key"`
	Operation string  `json:"operation"`
	Scope     string  `json:"scope"`
	KeyHash   string  `json:"key_hash"`
	As        string  `json:"resolved_as"`
	Status    *int    `json:"status,omitempty"`
	Reference *string `json:"reference,omitempty"`
	BodySize  int     `json:"body_size,omitempty"`
	Actor     string  `json:"actor"`
	Evidence  string  `json:"evidence"`
}

// counted says what a counted history row counts: n replays, or n retries refused as another
// request under the key (key_reused).
func counted(kind idem.EventKind, n int) string {
	switch {
	case kind == idem.EventKeyReused && n == 1:
		return "1 retry refused"
	case kind == idem.EventKeyReused:
		return strconv.Itoa(n) + " retries refused"
	case n == 1:
		return "1 replay"
	}
	return strconv.Itoa(n) + " replays"
}
