package idemprom

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgen/idemgen/runtime/idemreconcile"
)

// Metric names of ReconcileCollector: the last reconciliation against a provider's records
// (idemreconcile.Reconcile, idemgen reconcile --metrics-file).
const (
	// ReconcileDiscrepancies is a gauge of the discrepancies the last reconciliation found, by
	// kind (every idemreconcile.Kind, 0 when none); resolved keys are not counted.
	ReconcileDiscrepancies = "idemgen_idempotency_reconcile_discrepancies"
	// ReconcileResolvedKeys is a gauge of the uncertain keys the last reconciliation settled,
	// by resolution (completed, failed).
	ReconcileResolvedKeys = "idemgen_idempotency_reconcile_resolved_keys"
	// ReconcileRecords is a gauge of the provider's records the last reconciliation read.
	ReconcileRecords = "idemgen_idempotency_reconcile_records"
	// ReconcileLastRun is the Unix time of the last reconciliation that completed.
	ReconcileLastRun = "idemgen_idempotency_reconcile_last_run_timestamp_seconds"
)

// ReconcileCollector exports the last reconciliation's Report. Set it after each run; until
// the first, it exports nothing, so an alert on its absence sees a reconciliation that never
// ran. ConstLabels (the provider, say) tell several reconciliations apart.
type ReconcileCollector struct {
	discrepancies, resolved, records, lastRun *prometheus.Desc

	mu  sync.Mutex
	rep *idemreconcile.Report
}

// NewReconcile returns a collector of reconciliation reports; constLabels may be nil.
func NewReconcile(constLabels prometheus.Labels) *ReconcileCollector {
	return &ReconcileCollector{
		discrepancies: prometheus.NewDesc(ReconcileDiscrepancies, "Discrepancies the last reconciliation against the provider's records found, by kind.",
			[]string{"kind"}, constLabels),
		resolved: prometheus.NewDesc(ReconcileResolvedKeys, "Uncertain idempotency keys the last reconciliation settled, by resolution.",
			[]string{"resolution"}, constLabels),
		records: prometheus.NewDesc(ReconcileRecords, "Provider records the last reconciliation read.", nil, constLabels),
		lastRun: prometheus.NewDesc(ReconcileLastRun, "Unix time of the last reconciliation against the provider's records.", nil, constLabels),
	}
}

// Set makes rep the last reconciliation.
func (c *ReconcileCollector) Set(rep *idemreconcile.Report) {
	c.mu.Lock()
	c.rep = rep
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *ReconcileCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.discrepancies
	ch <- c.resolved
	ch <- c.records
	ch <- c.lastRun
}

// Collect implements prometheus.Collector.
func (c *ReconcileCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	rep := c.rep
	c.mu.Unlock()
	if rep == nil {
		return
	}
	counts := rep.Counts()
	for _, k := range idemreconcile.Kinds {
		ch <- prometheus.MustNewConstMetric(c.discrepancies, prometheus.GaugeValue, float64(counts[k]), string(k))
	}
	resolved := map[string]int{"completed": 0, "failed": 0}
	for _, r := range rep.Resolved {
		resolved[r.As]++
	}
	for _, as := range []string{"completed", "failed"} {
		ch <- prometheus.MustNewConstMetric(c.resolved, prometheus.GaugeValue, float64(resolved[as]), as)
	}
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.GaugeValue, float64(rep.Records))
	ch <- prometheus.MustNewConstMetric(c.lastRun, prometheus.GaugeValue, float64(rep.RunAt.UnixNano())/1e9)
}

// WriteReconcileTextfile writes rep's metrics to path in the text exposition format, for
// node_exporter's textfile collector (atomically: a scrape never sees half a file).
func WriteReconcileTextfile(path string, rep *idemreconcile.Report, constLabels prometheus.Labels) error {
	c := NewReconcile(constLabels)
	c.Set(rep)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return err
	}
	return prometheus.WriteToTextfile(path, reg)
}
