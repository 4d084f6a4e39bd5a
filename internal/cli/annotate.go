package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/internal/annotate"
	"github.com/idemgen/idemgen/internal/spec"
)

func newAnnotateCmd(s *streams) *cobra.Command {
	var (
		opts     annotate.Options
		write    bool
		showDiff bool
		mismatch int
	)
	cmd := &cobra.Command{
		Use:   "annotate SPEC",
		Short: "Add x-idempotency to the state-changing operations of an OpenAPI document",
		Long: `annotate adds x-idempotency to the operations that change state and lack it (POST and
PATCH unless --methods or --operations say otherwise), declares the key header they need, and
documents the problem responses (400/409/422/503) and the Idempotent-Replayed header. A
response the spec already declares on one of those statuses (or 413, 415, 500) keeps its own
schema; annotate says so on stderr, with the problem codes the runtime answers there, when that
schema is not application/problem+json.

Without --scope (and without a scope in the document's own x-idempotency defaults), annotate
chooses the scope of each new entry and says so on stderr: [tenant, operation] when the operation
requires security or declares a tenant header (X-Tenant-ID, an account or organization header),
so tenants never share keys and the server needs idem.Config.Tenant; [operation] otherwise, so a
single-tenant API runs with idem.NewStore(pool, nil).

It edits the document's own text: comments, key order, quoting, anchors and indentation survive,
JSON stays JSON. An operation that already has x-idempotency (true, false or a mapping) is left as
it is, so running annotate again changes nothing. An operation that cannot be made idempotent
(a multipart or binary body cannot be fingerprinted) is left alone, with one line on stderr.

With renderer: custom in the document's x-idempotency defaults, the refusal responses take the
spec's own error body (the media type and schema its error responses share), never an RFC 9457
problem; when it has none, none are added and lint's refusals-undocumented says so.

A key header whose pattern is not RE2 (a look-ahead, say) does not stop annotate: the operations
are annotated, and one line says what to write at the document's root, with the RE2 form when
annotate can derive it; generate refuses them until it is written.

The result goes to stdout; -w writes the file in place, --diff prints a unified diff instead.
SPEC "-" reads standard input. The exit status is 1 when an operation was left out or a key
pattern is still to be written in RE2 (the result is written or printed all the same), 2 for
bad options or a document that cannot be read.`,
		Example: `  idemgen annotate openapi.yaml --diff
  idemgen annotate openapi.yaml -w --methods post,patch,put --exclude uploadFile
  idemgen annotate openapi.json --operations createPayment --ttl 48h --storage reference`,
		Args: oneSpec("annotate (a file, or - for standard input)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			if !cmd.Flags().Changed("methods") {
				opts.Methods = nil
			}
			opts.MismatchStatus = mismatch
			if file == "-" && write {
				return fail(ExitUsage, errors.New("annotate: -w needs a file, not standard input"))
			}
			data, err := readSpec(s, file)
			if err != nil {
				return fail(ExitUsage, err)
			}
			name := file
			if file == "-" {
				name = "<stdin>"
			}
			// annotate reads the document its own way before loading it: a hostile one (too
			// large, too deep, a $ref loop) is refused first, as generate and lint refuse it.
			if err := spec.CheckBounds(name, data, nil); err != nil {
				return fail(ExitUsage, err)
			}
			// Bad option values, unreadable input and a document kin-openapi refuses all exit 2.
			res, err := annotate.Annotate(name, data, opts)
			var inputErr *annotate.InputError
			if errors.As(err, &inputErr) {
				// About the document: the file comes first, as in generate and lint.
				return fail(ExitUsage, err)
			}
			if err != nil {
				return fail(ExitUsage, fmt.Errorf("annotate: %w", err))
			}
			for _, sk := range res.Skipped {
				fmt.Fprintln(s.err, "idemgen: annotate:", sk)
			}
			// A key pattern that is not RE2 is said once, with the line that resolves it, however
			// many operations share the key header.
			for _, k := range res.KeyPatterns {
				fmt.Fprintln(s.err, "idemgen: annotate:", k)
			}
			// The scope decides whether the server needs Config.Tenant, so a scope annotate chose
			// is said, with the reason and the flag that overrides it.
			for _, c := range res.Scopes {
				fmt.Fprintln(s.err, "idemgen: annotate:", c)
			}
			// An error response of the spec's own stays, while the runtime answers problems on
			// its status: said here, so the review of the change sees it, and by lint afterwards.
			// One line per kind of response, however many operations share it.
			for _, k := range annotate.KeptSummary(res.Kept) {
				fmt.Fprintln(s.err, "idemgen: annotate:", k)
			}
			if u := annotate.UndeclaredSummary(name, res.RefusalsUndeclared); u != "" {
				fmt.Fprintln(s.err, "idemgen: annotate:", u)
			}
			// The headers the fingerprint leaves out are said, so that a reviewer who wants one
			// fingerprinted knows to include it.
			for _, u := range annotate.UnprintedSummary(res.Unprinted) {
				fmt.Fprintln(s.err, "idemgen: annotate:", u)
			}
			if showDiff {
				if err := writeDiff(s.out, name, data, res.Output); err != nil {
					return fail(ExitUsage, fmt.Errorf("annotate: %w", err))
				}
			}
			// An operation left out, or a key pattern to write in RE2, is work left for the user
			// before generate accepts the document: the exit status says so, as lint's does.
			done := func() error {
				if res.Incomplete() {
					return fail(ExitFindings, nil)
				}
				return nil
			}
			if write {
				if res.Changed() {
					if err := writeFileAtomic(file, res.Output); err != nil {
						return fail(ExitUsage, fmt.Errorf("annotate: %w", err))
					}
				}
				left := ""
				if n := len(res.Skipped); n > 0 {
					left = fmt.Sprintf(", %d left out", n)
				}
				fmt.Fprintf(s.err, "idemgen: annotate: %s: %d operation(s) annotated%s\n", file, len(res.Annotated), left)
				return done()
			}
			if !showDiff {
				if _, err := s.out.Write(res.Output); err != nil {
					return err
				}
			}
			return done()
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&write, "write", "w", false, "write the result to SPEC instead of stdout")
	f.BoolVar(&showDiff, "diff", false, "print a unified diff of the changes (the file is not changed unless -w is given too)")
	f.StringSliceVar(&opts.Methods, "methods", []string{"post", "patch"}, "HTTP methods to annotate (e.g. post,patch,put,delete)")
	f.StringSliceVar(&opts.Operations, "operations", nil, `annotate only these operations: operationIds or "POST /path" (any method unless --methods is given)`)
	f.StringSliceVar(&opts.Exclude, "exclude", nil, `leave these operations alone: operationIds or "POST /path"`)
	f.StringVar(&opts.Storage, "storage", "", "storage for new entries: response, reference or marker (default: the document's, else response)")
	f.StringVar(&opts.TTL, "ttl", "", "how long a completed key is remembered, e.g. 24h or 3d (default: the document's, else 24h)")
	f.StringVar(&opts.Lease, "lease", "", "how long an in-flight claim is held, e.g. 60s (default: the document's, else 60s)")
	f.StringVar(&opts.Wait, "wait", "", "how long a duplicate waits for the first request before 409")
	f.StringVar(&opts.Claim, "claim", "", "claim mode: lease or transaction (default: the document's, else lease)")
	f.StringSliceVar(&opts.Scope, "scope", nil, "what the key is unique within: tenant, operation, header:<Name>, path:<param> (default: the document's, else chosen per operation: tenant,operation with security or a tenant header, operation without)")
	f.IntVar(&mismatch, "mismatch-status", 0, "status for a key reused with a different request: 422, 409 or 400 (default: the document's, else 422)")
	f.BoolVar(&opts.NoKeyParam, "no-key-param", false, "do not declare the shared Idempotency-Key header parameter (operations without a key header then fail lint until you declare one)")
	f.BoolVar(&opts.NoProblems, "no-problems", false, "do not add the 400/409/422/503 problem responses")
	f.BoolVar(&opts.NoReplayedHeader, "no-replayed-header", false, "do not document the Idempotent-Replayed header on 2xx responses")
	return cmd
}

func readSpec(s *streams, file string) ([]byte, error) {
	limit := spec.MaxBytes(nil)
	if file == "-" {
		in := s.in
		if limit >= 0 {
			in = io.LimitReader(s.in, limit+1) // one byte more says it is over
		}
		data, err := io.ReadAll(in)
		if err != nil {
			return nil, fmt.Errorf("<stdin>: cannot read the spec: %w", err)
		}
		if limit >= 0 && int64(len(data)) > limit {
			return nil, spec.SizeError("<stdin>", int64(len(data)), limit)
		}
		return data, nil
	}
	// The bounds generate and lint read a spec within (spec.Load): a regular file, within the
	// size limit.
	data, err := spec.ReadFile(file, limit)
	if re := (*spec.ReadError)(nil); errors.As(err, &re) {
		// The same words as generate and lint: the file, then what went wrong.
		return nil, fmt.Errorf("%s: cannot read the spec: %w", file, re.Err)
	}
	return data, err
}

// pathCause drops the operation and path that *fs.PathError repeats ("open openapi.yaml: no
// such file or directory"), since messages name the file first already.
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func writeDiff(w io.Writer, name string, before, after []byte) error {
	text, err := annotate.UnifiedDiff(name, before, after)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, text)
	return err
}

// writeFileAtomic replaces path with data through a temporary file in the same directory and a
// rename, so a crash never leaves half a spec behind; the file keeps its mode. A symbolic link
// is followed, so the file it points at is updated and the link stays a link.
func writeFileAtomic(path string, data []byte) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	path = real
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".idemgen-*")
	if err != nil {
		return fmt.Errorf("cannot write next to %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err := tmp.Chmod(info.Mode().Perm()); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("cannot replace %s: %w", path, err)
	}
	return nil
}
