package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/runtime/idemprom"
	"github.com/idemgen/idemgen/runtime/idemreconcile"
)

// mappingFile is --mapping: the column mapping of the provider's export, in YAML or JSON.
type mappingFile struct {
	Key         string `yaml:"key"`
	Reference   string `yaml:"reference"`
	Amount      string `yaml:"amount"`
	Currency    string `yaml:"currency"`
	At          string `yaml:"at"`
	Tenant      string `yaml:"tenant"`
	Provider    string `yaml:"provider"`
	AmountScale int    `yaml:"amount_scale"`
	TimeLayout  string `yaml:"time_layout"`
	Format      string `yaml:"format"`
}

func newReconcileCmd(s *streams) *cobra.Command {
	var f dbFlags
	var files, providers []string
	var recordsFormat, format, mapping, from, to, actor, metricsFile string
	var grace time.Duration
	var resolve bool
	var cols idemreconcile.Columns
	cmd := &cobra.Command{
		Use:   "reconcile --records FILE --provider NAME [--from DAY --to DAY] [--resolve]",
		Short: "Compare the provider's records with the calls the key history recorded, and settle uncertain keys",
		Long: "Read the provider's records (CSV with a header row, or JSON lines) and the key history of the\n" +
			"window [--from, --to) (default: yesterday, UTC), match them by the derived provider key, and\n" +
			"report each discrepancy per tenant and day. --resolve settles the uncertain keys the provider has no\n" +
			"record of as failed (their next retry runs anew), but only where the records cover the call: records of\n" +
			"that provider, in time order, dated on both sides of it (the later one at least --grace after it). An\n" +
			"empty or partial report settles nothing and reports the calls it does not cover as not_covered. The\n" +
			"uncertain keys the provider charged are listed with the command that settles them as completed, since\n" +
			"that needs the application's answer.\n" +
			"Exit 0 when clean, 1 when there is a discrepancy (a call not covered is one), 2 on bad usage or\n" +
			"unreadable input.\n" +
			"docs/reconcile.md says what each discrepancy means and what to do about it.",
		Example: "  idemgen reconcile --records settlement-2026-12-04.csv --provider acquirer \\\n" +
			"      --column-key idempotency_key --column-reference charge_id --amount-scale 2 --resolve\n" +
			"  idemgen reconcile --records charges.jsonl --provider acquirer --from 2026-12-01 --to 2026-12-04 --format json",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return fail(ExitUsage, errors.New("reconcile: give the provider's records with --records FILE"))
			}
			if format != "text" && format != "json" {
				return fail(ExitUsage, fmt.Errorf("reconcile: --format %s: use text or json", strconv.Quote(format)))
			}
			if mapping != "" {
				if err := readMapping(mapping, &cols, &recordsFormat, cmd); err != nil {
					return fail(ExitUsage, fmt.Errorf("reconcile: --mapping %s: %v", mapping, err))
				}
			}
			opts := &idemreconcile.Opts{Grace: grace, Resolve: resolve, Actor: actor, Providers: providers}
			var err error
			if opts.From, opts.To, err = window(from, to, time.Now()); err != nil {
				return fail(ExitUsage, err)
			}
			// The files are read as streams, so memory does not grow with their size: once to
			// check them (a bad row is a usage error before the database is asked anything), then
			// while Reconcile matches them.
			var src idemreconcile.Sources
			for _, path := range files {
				if err := checkRecords(path, recordsFormat, cols); err != nil {
					return fail(ExitUsage, fmt.Errorf("reconcile: %v", err))
				}
			}
			for _, path := range files {
				rs, closeFile, err := openRecords(path, recordsFormat, cols)
				if err != nil {
					return fail(ExitUsage, fmt.Errorf("reconcile: %v", err))
				}
				defer closeFile()
				src = append(src, rs)
			}
			ctx := cmd.Context()
			pool, err := f.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			rep, err := idemreconcile.Reconcile(ctx, pool, f.config(), src, opts)
			if err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000" || pgErr.Code == "42703") {
					return fail(ExitUsage, fmt.Errorf("reconcile: %s (check --schema and --table, or run idemgen migrate: reconciliation needs migration 7)", quote(pgErr.Message)))
				}
				return fail(ExitUsage, fmt.Errorf("reconcile: %v", err))
			}
			if metricsFile != "" {
				var labels prometheus.Labels
				if len(providers) == 1 {
					labels = prometheus.Labels{"provider": providers[0]}
				}
				if err := idemprom.WriteReconcileTextfile(metricsFile, rep, labels); err != nil {
					return fail(ExitUsage, fmt.Errorf("reconcile: --metrics-file: %v", err))
				}
			}
			if format == "json" {
				if rep.Discrepancies == nil {
					rep.Discrepancies = []idemreconcile.Discrepancy{}
				}
				if rep.Resolved == nil {
					rep.Resolved = []idemreconcile.Resolved{}
				}
				if err := writeJSON(s.out, rep); err != nil {
					return err
				}
			} else {
				writeReport(s.out, rep, &f)
			}
			if !rep.Clean() {
				return fail(ExitFindings, nil)
			}
			return nil
		},
	}
	f.addURL(cmd)
	f.addTable(cmd)
	fl := cmd.Flags()
	fl.StringArrayVar(&files, "records", nil, "the provider's records: a .csv file (header row) or .jsonl/.ndjson (repeatable)")
	fl.StringVar(&recordsFormat, "records-format", "", "csv or jsonl (default: by the file's extension)")
	fl.StringArrayVar(&providers, "provider", nil, "the provider the records are from, as the application names it to idem.ProviderKey; only its calls are compared (repeatable; default: every provider's)")
	fl.StringVar(&mapping, "mapping", "", "a YAML or JSON file mapping the columns (key, reference, amount, currency, at, tenant, provider, amount_scale, time_layout, format)")
	fl.StringVar(&cols.Key, "column-key", "", "column of the derived idempotency key (default key)")
	fl.StringVar(&cols.Reference, "column-reference", "", "column of the provider's charge id (default reference)")
	fl.StringVar(&cols.Amount, "column-amount", "", "column of the amount (default amount)")
	fl.StringVar(&cols.Currency, "column-currency", "", "column of the currency (default currency)")
	fl.StringVar(&cols.At, "column-at", "", "column of the charge's time (default at)")
	fl.StringVar(&cols.Tenant, "column-tenant", "", "column of the tenant (default tenant, when present)")
	fl.StringVar(&cols.Provider, "column-provider", "", "column of the provider (default provider, when present)")
	fl.IntVar(&cols.AmountScale, "amount-scale", 0, "0: amounts are minor units (1250); n: decimals with n fraction digits (12.50 with 2)")
	fl.StringVar(&cols.TimeLayout, "time-layout", "", "rfc3339 (default), date, or a Go time layout")
	fl.StringVar(&from, "from", "", "first day of the window, YYYY-MM-DD (UTC; default yesterday)")
	fl.StringVar(&to, "to", "", "day after the window, YYYY-MM-DD (default the day after --from)")
	fl.DurationVar(&grace, "grace", 0, "how late the provider may record a charge after the call (e.g. 2h): records cover a call only when one is dated GRACE after it")
	fl.BoolVar(&resolve, "resolve", false, "settle uncertain keys the provider has no record of as failed, where its records cover the call")
	fl.StringVar(&actor, "actor", idemreconcile.DefaultActor, "who resolutions are recorded as")
	fl.StringVar(&format, "format", "text", "output: text or json")
	fl.StringVar(&metricsFile, "metrics-file", "", "also write the run's metrics here, for node_exporter's textfile collector (a .prom file)")
	return cmd
}

// readMapping fills cols (and the records' format) from a mapping file; flags given on the
// command line win.
func readMapping(path string, cols *idemreconcile.Columns, recordsFormat *string, cmd *cobra.Command) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var m mappingFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil && err != io.EOF {
		return err
	}
	set := func(flag string, dst *string, v string) {
		if !cmd.Flags().Changed(flag) && v != "" {
			*dst = v
		}
	}
	set("column-key", &cols.Key, m.Key)
	set("column-reference", &cols.Reference, m.Reference)
	set("column-amount", &cols.Amount, m.Amount)
	set("column-currency", &cols.Currency, m.Currency)
	set("column-at", &cols.At, m.At)
	set("column-tenant", &cols.Tenant, m.Tenant)
	set("column-provider", &cols.Provider, m.Provider)
	set("time-layout", &cols.TimeLayout, m.TimeLayout)
	set("records-format", recordsFormat, m.Format)
	if !cmd.Flags().Changed("amount-scale") && m.AmountScale != 0 {
		cols.AmountScale = m.AmountScale
	}
	return nil
}

// checkRecords reads a file of the provider's records through, and returns its first error.
func checkRecords(path, format string, cols idemreconcile.Columns) error {
	src, closeFile, err := openRecords(path, format, cols)
	if err != nil {
		return err
	}
	defer closeFile()
	for _, err := range src.Records(context.Background(), time.Time{}, time.Time{}) {
		if err != nil {
			return err
		}
	}
	return nil
}

// openRecords opens a file of the provider's records as a Source read while Reconcile runs;
// closeFile closes it.
func openRecords(path, format string, cols idemreconcile.Columns) (src idemreconcile.Source, closeFile func(), err error) {
	if format == "" {
		switch strings.ToLower(filepath.Ext(path)) {
		case ".csv":
			format = "csv"
		case ".jsonl", ".ndjson":
			format = "jsonl"
		default:
			return nil, nil, fmt.Errorf("%s: cannot tell the format from the extension: name it .csv, .jsonl or .ndjson, or pass --records-format", quote(path))
		}
	}
	if format != "csv" && format != "jsonl" && format != "ndjson" {
		return nil, nil, fmt.Errorf("--records-format %s: use csv or jsonl", quote(format))
	}
	file, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	close := func() { file.Close() }
	if format == "csv" {
		return idemreconcile.CSVSource(file, path, cols), close, nil
	}
	return idemreconcile.JSONLSource(file, path, cols), close, nil
}

// window reads --from and --to (days, UTC); both empty is yesterday.
func window(from, to string, now time.Time) (time.Time, time.Time, error) {
	parse := func(flag, v string) (time.Time, error) {
		t, err := time.Parse(time.DateOnly, v)
		if err != nil {
			return t, fmt.Errorf("reconcile: --%s %s: want a day, YYYY-MM-DD", flag, strconv.Quote(v))
		}
		return t, nil
	}
	var f, t time.Time
	var err error
	switch {
	case from == "" && to != "":
		return f, t, errors.New("reconcile: --to needs --from")
	case from == "":
		y, m, d := now.UTC().Date()
		t = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return t.AddDate(0, 0, -1), t, nil
	}
	if f, err = parse("from", from); err != nil {
		return f, t, err
	}
	if to == "" {
		return f, f.AddDate(0, 0, 1), nil
	}
	if t, err = parse("to", to); err != nil {
		return f, t, err
	}
	if !f.Before(t) {
		return f, t, fmt.Errorf("reconcile: --to %s is not after --from %s: the window [from, to) is empty", to, from)
	}
	return f, t, nil
}

// writeReport prints the report per tenant and day. Keys are printed as their hash, with the
// command that shows them: the raw key stays out of terminals, tickets and logs. Every value
// that came from the provider's records or the database is quoted when it is not plain, so
// that no terminal escape reaches the operator.
func writeReport(w io.Writer, rep *idemreconcile.Report, f *dbFlags) {
	fmt.Fprintf(w, "reconciliation of [%s, %s): %d provider records read (%d in the window), %d of our calls, %d matched, %d pending (in the grace)\n",
		rep.From.Format(time.DateOnly), rep.To.Format(time.DateOnly), rep.Records, rep.InWindow, rep.Calls, rep.Matched, rep.Pending)
	for _, c := range rep.Coverage {
		order := "in time order"
		if !c.InTimeOrder {
			order = "NOT in time order: they cover no call"
		}
		fmt.Fprintf(w, "records of %s: %d, dated %s to %s, %s\n", bare(c.Provider), c.Records,
			c.First.UTC().Format(time.RFC3339), c.Last.UTC().Format(time.RFC3339), order)
	}
	if rep.Unattributed > 0 {
		fmt.Fprintf(w, "%d records name no provider: they cover no call (give exactly one --provider, or map a provider column)\n", rep.Unattributed)
	}
	if n := rep.Counts()[idemreconcile.NotCovered]; n > 0 {
		fmt.Fprintf(w, "%d calls without a record are not covered by the records: nothing is concluded or settled about them\n", n)
	}
	if rep.Clean() {
		fmt.Fprintln(w, "clean: no discrepancy")
	}
	if rep.Unlisted > 0 {
		var parts []string
		for _, k := range idemreconcile.Kinds {
			if n := rep.Counts()[k]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n, k))
			}
		}
		fmt.Fprintf(w, "%s: %d not listed below (at most %d of a kind are)\n", strings.Join(parts, ", "), rep.Unlisted, idemreconcile.MaxListed)
	}
	for _, g := range rep.Groups() {
		tenant := "(tenant unknown)"
		if g.Tenant != "" {
			tenant = "tenant " + quote(g.Tenant)
		}
		fmt.Fprintf(w, "\n%s, %s: %d discrepancies\n", tenant, g.Day.Format(time.DateOnly), len(g.Discrepancies))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, d := range g.Discrepancies {
			writeDiscrepancy(tw, d, f)
		}
		tw.Flush()
	}
	if len(rep.Resolved) > 0 {
		fmt.Fprintf(w, "\nresolved %d uncertain keys:\n", len(rep.Resolved))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, r := range rep.Resolved {
			fmt.Fprintf(tw, "  %s\ttenant %s\tkey hash %s\t%s\tas %s: %s\n", bare(r.Ours.Operation), quote(r.Ours.Tenant), r.Ours.KeyHash,
				quote(r.ProviderKey), r.As, quote(r.Evidence))
		}
		tw.Flush()
	}
}

func writeDiscrepancy(w io.Writer, d idemreconcile.Discrepancy, f *dbFlags) {
	ours, theirs := "we have no call with this key", "no record"
	if o := d.Ours; o != nil {
		ours = fmt.Sprintf("ours: %s key hash %s, %s, %s", bare(o.Operation), o.KeyHash, outcomeText(o), money(o.Amount, o.Currency))
	}
	if len(d.Theirs) > 0 {
		var parts []string
		for _, r := range d.Theirs {
			parts = append(parts, fmt.Sprintf("%s %s at %s", quote(r.Reference), money(r.Amount, r.Currency), r.At.UTC().Format(time.RFC3339)))
		}
		theirs = "theirs: " + strings.Join(parts, "; ")
	}
	fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", d.Kind, quote(d.ProviderKey), ours, theirs)
	if d.Reason != "" {
		fmt.Fprintf(w, "  \t\tnot covered: %s\n", d.Reason)
	}
	if d.Error != "" {
		fmt.Fprintf(w, "  \t\tresolution failed: %s\n", quote(d.Error))
	}
	if o := d.Ours; o != nil {
		fmt.Fprintf(w, "  \t\tshow it: idemgen keys show --tenant %s --hash %s%s\n", shellQuote(o.Tenant), o.KeyHash, tableFlags(f))
		if d.Kind == idemreconcile.UncertainCharged {
			fmt.Fprintf(w, "  \t\tsettle it: idemgen keys resolve --tenant %s --key-hash %s --as completed --status STATUS --body-file ANSWER --evidence %s%s\n",
				shellQuote(o.Tenant), o.KeyHash, shellQuote(fmt.Sprintf("charged at %s: %s %d %s", o.Provider, d.Theirs[0].Reference, d.Theirs[0].Amount, d.Theirs[0].Currency)), tableFlags(f))
		}
	}
}

func tableFlags(f *dbFlags) string {
	s := ""
	if f.schema != "public" {
		s += " --schema " + shellQuote(f.schema)
	}
	if f.table != "idempotency_keys" {
		s += " --table " + shellQuote(f.table)
	}
	return s
}

func outcomeText(o *idemreconcile.Side) string {
	if o.Status != 0 {
		return fmt.Sprintf("%s (%d)", o.Outcome, o.Status)
	}
	return o.Outcome
}

func money(amount int64, currency string) string {
	if currency == "" && amount == 0 {
		return "amount not recorded"
	}
	return fmt.Sprintf("%d %s", amount, bare(currency))
}

// shellQuote quotes s for a POSIX shell, with the same escaping of controls and markup as
// quote when it holds anything but plain characters.
func shellQuote(s string) string {
	if s != "" && bareRE.MatchString(s) {
		return s
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '<' || r == '>' || r == '&' || r > 0x7e }) {
		return "$'" + strings.ReplaceAll(strings.Trim(quote(s), `"`), "'", `\'`) + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
