package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// metrics prints the server's idempotency metrics that are not zero, read from its /metrics
// (runtime/idemprom). The server `make demo` starts is fresh, so these are what the scenario
// moved; against a server that ran before, they include its earlier requests.
func (d *demo) metrics(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return fmt.Errorf("read the server's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("read the server's metrics: GET %s/metrics answered %s", d.base, resp.Status)
	}
	fmt.Fprintf(d.out, "\nThe server's idempotency metrics (GET /metrics), those not at zero:\n")
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	shown := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "idemgen_") {
			continue // comments, and the Go runtime's own metrics if a server adds them
		}
		i := strings.LastIndexByte(line, ' ') // label values may hold spaces; the value cannot
		if i < 0 {
			continue
		}
		series, value := line[:i], line[i+1:]
		// Histograms: the count and sum say enough; the buckets would be a screenful.
		if strings.Contains(series, "_bucket{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err != nil || v == 0 {
			continue
		}
		fmt.Fprintf(d.out, "   %s %s\n", series, value)
		shown++
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the server's metrics: %w", err)
	}
	if shown == 0 {
		return fmt.Errorf("the server's /metrics shows no idempotency metric above zero after the scenario: is the idemprom observer wired into its idem.Config?")
	}
	return nil
}
