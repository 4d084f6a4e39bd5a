package cli

import (
	"strings"
	"testing"
)

// runMain drives the CLI in-process, as a process would run it, and returns its exit code and
// what it printed.
func runMain(stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errb strings.Builder
	code = Main(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	code, out, stderr := runMain("", "frobnicate")
	if code != ExitUsage || out != "" || !strings.Contains(stderr, `unknown command "frobnicate"`) ||
		!strings.Contains(stderr, "idemgen --help") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 naming the command and --help", code, out, stderr)
	}
}
