// Package alerts_test checks the Prometheus alerting rules shipped in this directory with
// promtool (Debian's prometheus package, installed by scripts/deps.sh when missing), and checks
// that they name only the metrics and events the runtime exports.
package alerts_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemprom"
)

const (
	rulesFile = "idemgen-alerts.yaml"
	testFile  = "idemgen-alerts.test.yaml"
)

func promtool(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("../../scripts/deps.sh", "promtool").CombinedOutput(); err != nil {
		t.Fatalf("scripts/deps.sh promtool: %v\n%s", err, out)
	}
	bin, err := exec.LookPath("promtool")
	if err != nil {
		bin = "/usr/bin/promtool"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("promtool %s did not finish within 60s", strings.Join(args, " "))
	}
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestRulesAreValid(t *testing.T) {
	t.Parallel()
	promtool(t, "check", "rules", rulesFile)
}

func TestRulesFireOnTheSampleSeries(t *testing.T) {
	t.Parallel()
	promtool(t, "test", "rules", testFile)
}

// TestRulesNameWhatTheRuntimeExports: a renamed metric or event would leave an alert that
// never fires and a promtool test that still passes on its own sample series.
func TestRulesNameWhatTheRuntimeExports(t *testing.T) {
	t.Parallel()
	rules := read(t, rulesFile)
	metrics := map[string]bool{}
	for _, m := range []string{idemprom.EventsTotal, idemprom.PurgedKeysTotal, idemprom.KeysInFlight,
		idemprom.KeysStored, idemprom.StaleInFlightKeys, idemprom.OldestInFlightSeconds, idemprom.KeyStatsUp,
		idemprom.ListenerDeaf, idemprom.UncertainKeys, idemprom.OldestUncertainSeconds, idemprom.ReconcileDiscrepancies,
		idemprom.ReconcileResolvedKeys, idemprom.ReconcileRecords, idemprom.ReconcileLastRun} {
		metrics[m] = true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		metrics[idemprom.HandlerDuration+suffix] = true
	}
	events := map[string]bool{}
	for _, k := range []idem.EventKind{idem.EventAcquired, idem.EventTakenOver, idem.EventReplayed, idem.EventInProgress,
		idem.EventKeyReused, idem.EventCompleted, idem.EventLeaseLost, idem.EventReleased, idem.EventPurged,
		idem.EventStoreError, idem.EventHandlerTimeout, idem.EventHandlerFailed} {
		events[string(k)] = true
	}
	// Only the expressions: the annotations name metrics in prose, and commands.
	var exprs []string
	for _, m := range regexp.MustCompile(`(?ms)^\s+expr: (?:\|\n)?(.*?)\n\s+for:`).FindAllStringSubmatch(rules, -1) {
		exprs = append(exprs, m[1])
	}
	if len(exprs) == 0 {
		t.Fatalf("no expr in %s", rulesFile)
	}
	for _, e := range exprs {
		for _, name := range regexp.MustCompile(`idemgen_[a-z_]+`).FindAllString(e, -1) {
			if !metrics[name] {
				t.Errorf("%s: metric %s is not one runtime/idemprom exports", rulesFile, name)
			}
		}
		for _, m := range regexp.MustCompile(`event=~?"([^"]+)"`).FindAllStringSubmatch(e, -1) {
			for _, ev := range strings.Split(m[1], "|") {
				if !events[ev] {
					t.Errorf("%s: event %q is not an idem.EventKind", rulesFile, ev)
				}
			}
		}
	}

	// Every alert is shown firing by the sample series at least once.
	tests := read(t, testFile)
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\S+)`).FindAllStringSubmatch(rules, -1) {
		if !regexp.MustCompile(`alertname: ` + m[1] + `\n\s+exp_alerts:\n\s+- exp_labels`).MatchString(tests) {
			t.Errorf("%s: no test in %s shows alert %s firing", rulesFile, testFile, m[1])
		}
	}
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
