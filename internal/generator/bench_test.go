package generator_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/util"

	"github.com/idemgen/idemgen/internal/annotate"
	"github.com/idemgen/idemgen/internal/cli"
	"github.com/idemgen/idemgen/internal/generator"
)

// benchSpec is the largest document of the corpus that can be generated from: Adyen's Checkout
// API, 0.9 MB, 28 operations. The corpus's lob-api-bundled.yml is larger, but kin-openapi
// cannot load it, so neither idemgen nor oapi-codegen generates anything from it.
const benchSpec = "../annotate/testdata/corpus/adyen/CheckoutService-v71.json"

// BenchmarkGenerate times `idemgen generate` (config, load and lint, oapi-codegen, the adapter,
// formatting, writing both files) against oapi-codegen alone (kin-openapi's loader and
// codegen.Generate with the options idemgen uses, formatting included, as oapi-codegen does by
// default, after util.LoadSwagger, the loader its own command uses) on the same document, as annotated by `idemgen annotate`, so that idemgen also
// renders its adapter for every operation annotate marks.
//
// Each iteration runs both, alternating which goes first, so machine noise hits both alike. The
// metrics are medians over iterations: idemgen-ms/op, oapi-codegen-ms/op, and x-oapi-codegen, the
// median of each iteration's idemgen/oapi-codegen ratio (the target is at most 1.15). ns/op is
// the two together. make bench-http runs it and puts the ratio in its table.
func BenchmarkGenerate(b *testing.B) {
	raw, err := os.ReadFile(benchSpec)
	if err != nil {
		b.Fatalf("read the benchmark's spec: %v", err)
	}
	res, err := annotate.Annotate(benchSpec, raw, annotate.Options{})
	if err != nil {
		b.Fatalf("annotate %s: %v", benchSpec, err)
	}
	if len(res.Annotated) == 0 {
		b.Fatalf("annotate marked no operation of %s: the benchmark would not render any adapter", benchSpec)
	}
	dir := b.TempDir()
	specPath := filepath.Join(dir, "openapi.json")
	cfgPath := filepath.Join(dir, "idemgen.yaml")
	if err := os.WriteFile(specPath, res.Output, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte("version: 1\nspec: openapi.json\npackage: api\noutput: out\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	oapiCfg, err := generator.OapiConfiguration("api")
	if err != nil {
		b.Fatal(err)
	}
	// idemgen formats oapi-codegen's output itself (once, after replacing the header), so it
	// turns oapi-codegen's formatting off; oapi-codegen alone formats, as it does by default.
	oapiCfg.OutputOptions.SkipFmt = false

	idemgen := func() time.Duration {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		code := cli.Main([]string{"generate", "-c", cfgPath}, strings.NewReader(""), &stdout, &stderr)
		d := time.Since(start)
		if code != 0 {
			b.Fatalf("idemgen generate -c %s: exit %d\n%s%s", cfgPath, code, stdout.String(), stderr.String())
		}
		return d
	}
	oapiAlone := func() time.Duration {
		start := time.Now()
		// The loader oapi-codegen's own command uses (origins on, so routes keep source order).
		doc, err := util.LoadSwagger(specPath)
		if err != nil {
			b.Fatalf("kin-openapi: load %s: %v", specPath, err)
		}
		code, err := codegen.Generate(doc, oapiCfg)
		d := time.Since(start)
		if err != nil {
			b.Fatalf("oapi-codegen alone on %s: %v", specPath, err)
		}
		if len(code) == 0 {
			b.Fatalf("oapi-codegen alone on %s: empty output", specPath)
		}
		return d
	}

	var idemMS, oapiMS, ratios []float64
	first := true
	for b.Loop() {
		var a, o time.Duration
		if len(ratios)%2 == 0 {
			a, o = idemgen(), oapiAlone()
		} else {
			o, a = oapiAlone(), idemgen()
		}
		if first {
			first = false
			b.StopTimer()
			adapter, err := os.ReadFile(filepath.Join(dir, "out", generator.IdempotencyFile))
			if err != nil {
				b.Fatalf("idemgen generate wrote no adapter: %v", err)
			}
			if n := bytes.Count(adapter, []byte("= &idemhttp.Policy{")); n != len(res.Annotated) {
				b.Fatalf("the adapter has %d policies, want one per annotated operation (%d): the benchmark does not measure the adapter it claims to", n, len(res.Annotated))
			}
			b.StartTimer()
		}
		idemMS = append(idemMS, a.Seconds()*1000)
		oapiMS = append(oapiMS, o.Seconds()*1000)
		ratios = append(ratios, a.Seconds()/o.Seconds())
	}
	b.ReportMetric(median(idemMS), "idemgen-ms/op")
	b.ReportMetric(median(oapiMS), "oapi-codegen-ms/op")
	b.ReportMetric(median(ratios), "x-oapi-codegen")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
