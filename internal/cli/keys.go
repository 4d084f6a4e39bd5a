package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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

func newKeysCmd(s *streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Look up idempotency keys: what happened to a key, which keys are stuck, how many there are",
		Long: "Read the key table, read only, as the runtime writes it: show one key (by tenant and key, or by the\n" +
			"key hash a log line prints), list keys (stale in-flight ones, say), or count them.\n" +
			"Stored bodies are printed only with show --body: they may hold personal data.",
		Args: noArgs,
	}
	cmd.AddCommand(newKeysShowCmd(s), newKeysListCmd(s), newKeysStatsCmd(s))
	return cmd
}

func newKeysShowCmd(s *streams) *cobra.Command {
	var f keysFlags
	var tenant, key, hash, operation string
	var body bool
	cmd := &cobra.Command{
		Use:   "show (--tenant T --key K | --hash H) [--operation O]",
		Short: "Show everything stored about one key: state, attempts, stored status, reference, times, lease",
		Long: "Show one key: by --key (with --tenant, the tenant the server's Config.Tenant returned; without it,\n" +
			"every tenant's key of that name), or by --hash, the key_hash a log line prints.\n" +
			"Exit 1 when no such key exists.",
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
				return fail(ExitFindings, fmt.Errorf("no such key: %s in %s.%s (never claimed, released after a failure so a retry runs anew, or expired and purged)",
					describeLookup(p), f.schema, f.table))
			}
			if err != nil {
				return f.readError(err)
			}
			if f.json {
				return writeJSON(s.out, jsonKeys(keys, body))
			}
			for i, k := range keys {
				if i > 0 {
					fmt.Fprintln(s.out)
				}
				writeKey(s.out, &k, body)
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
		Use:   "list [--state in_flight|complete] [--stale] [--operation O] [--tenant T] [--since D] [--limit N]",
		Short: "List keys, newest first: in flight, stale (their holder died), by operation or tenant",
		Example: "  idemgen keys list --state in_flight --stale\n" +
			"  idemgen keys list --operation createPayment --since 1h --json",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := &idem.ListKeysParams{Operation: operation, State: state, Stale: stale, Limit: limit}
			if cmd.Flags().Changed("tenant") {
				p.Tenant = &tenant
			}
			switch state {
			case "", idem.KeyInFlight, idem.KeyComplete:
			default:
				return fail(ExitUsage, fmt.Errorf("keys list: --state %s: use %s or %s", strconv.Quote(state), idem.KeyInFlight, idem.KeyComplete))
			}
			if stale && state == idem.KeyComplete {
				return fail(ExitUsage, errors.New("keys list: --stale keys are in flight: drop --state complete"))
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
	cmd.Flags().StringVar(&state, "state", "", "only keys in this state: in_flight or complete")
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
		Short: "Count keys by operation and state, with the stale in-flight ones and the oldest in flight",
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
			fmt.Fprintln(tw, "OPERATION\tIN FLIGHT\tSTALE\tCOMPLETE\tEXPIRED\tOLDEST IN FLIGHT")
			row := func(name string, o idem.OperationKeyStats) {
				oldest := "-"
				if !o.OldestInFlight.IsZero() {
					oldest = when(o.OldestInFlight, st.Now)
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", name, o.InFlight, o.Stale, o.Complete, o.Expired, oldest)
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
	state := k.State
	switch {
	case k.Stale():
		state += " (stale: the lease ran out, its holder is gone; the next retry with the same request takes it over)"
	case k.State == idem.KeyInFlight:
		state += " (its handler is running)"
	}
	if k.Expired() {
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
	line("expires", when(k.ExpiresAt, k.Now))
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
	Tenant         string      `json:"tenant"`
	Key            string      `json:"key"`
	Operation      string      `json:"operation"`
	Scope          string      `json:"scope"`
	KeyHash        string      `json:"key_hash"`
	State          string      `json:"state"`
	Stale          bool        `json:"stale"`
	Expired        bool        `json:"expired"`
	Attempt        int         `json:"attempt"`
	Status         *int        `json:"status"`
	Reference      *string     `json:"reference"`
	Headers        http.Header `json:"headers"`
	BodySize       int         `json:"body_size"`
	Body           *string     `json:"body,omitempty"`
	BodyBase64     []byte      `json:"body_base64,omitempty"`
	Fingerprint    string      `json:"fingerprint"`
	CreatedAt      time.Time   `json:"created_at"`
	CompletedAt    *time.Time  `json:"completed_at"`
	ExpiresAt      time.Time   `json:"expires_at"`
	LeaseExpiresAt *time.Time  `json:"lease_expires_at"`
	Now            time.Time   `json:"now"`
}

func jsonKeys(keys []idem.KeyInfo, withBody bool) []jsonKey {
	out := make([]jsonKey, 0, len(keys))
	for _, k := range keys {
		j := jsonKey{Tenant: k.Tenant, Key: k.Key, Operation: k.Operation, Scope: k.Scope, KeyHash: k.KeyHash,
			State: k.State, Stale: k.Stale(), Expired: k.Expired(), Attempt: k.Attempt, Headers: k.Header,
			BodySize: k.BodySize, Fingerprint: k.Fingerprint, CreatedAt: k.CreatedAt.UTC(), ExpiresAt: k.ExpiresAt.UTC(), Now: k.Now.UTC()}
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
}

func jsonOpStats(o idem.OperationKeyStats, now time.Time) jsonOpStat {
	j := jsonOpStat{Operation: o.Operation, InFlight: o.InFlight, Stale: o.Stale, Complete: o.Complete, Expired: o.Expired}
	if !o.OldestInFlight.IsZero() {
		t := o.OldestInFlight.UTC()
		age := now.Sub(o.OldestInFlight).Seconds()
		j.OldestInFlight, j.OldestInFlightSeconds = &t, &age
	}
	return j
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
