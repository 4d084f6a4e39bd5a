package idemprom

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Metric names of KeyStatsCollector: what the key table holds, read from the database. Every
// process that registers one reports the same table, so aggregate them with max, not sum.
const (
	// KeysStored is a gauge of the keys in the table, by operation and state (in_flight, complete).
	KeysStored = "idemgen_idempotency_keys"
	// StaleInFlightKeys is a gauge of the in-flight keys whose lease ran out, by operation: their
	// holder died or lost the database (idem.KeyInfo.Stale).
	StaleInFlightKeys = "idemgen_idempotency_stale_in_flight_keys"
	// OldestInFlightSeconds is a gauge of how long the oldest in-flight key of an operation has
	// been in flight (0 when none is).
	OldestInFlightSeconds = "idemgen_idempotency_oldest_in_flight_seconds"
	// UncertainKeys is a gauge of the keys whose outcome is uncertain, by operation: an
	// attempt was lost after a provider call, and the key waits for an operator or a
	// reconciliation to settle it (idem.KeyUncertain).
	UncertainKeys = "idemgen_idempotency_uncertain_keys"
	// OldestUncertainSeconds is a gauge of how long ago the oldest uncertain key of an operation
	// called its provider (0 when none is uncertain).
	OldestUncertainSeconds = "idemgen_idempotency_oldest_uncertain_seconds"
	// KeyStatsUp is 1 when the last read of the key table succeeded, 0 when it failed (the
	// other gauges are then missing from the scrape).
	KeyStatsUp = "idemgen_idempotency_key_stats_up"
)

// Defaults of KeyStatsOptions.
const (
	DefaultKeyStatsMaxAge  = 30 * time.Second
	DefaultKeyStatsTimeout = 5 * time.Second
)

// KeyStatsOptions tune NewKeyStats; nil means defaults.
type KeyStatsOptions struct {
	// MaxAge is how long one read of the key table answers scrapes: idem.Store.KeyStats reads
	// the whole table, so frequent scrapes (or many scrapers) reuse a read this recent. Default
	// 30s.
	MaxAge time.Duration
	// Timeout bounds one read; default 5s.
	Timeout time.Duration
	// ConstLabels are added to every metric, e.g. the service name.
	ConstLabels prometheus.Labels
}

// KeyStatsCollector exports idem.Store.KeyStats as gauges, for the alerts on stale in-flight
// keys (deploy/prometheus/idemgen-alerts.yaml). Register it beside a Collector:
//
//	prometheus.MustRegister(idemprom.NewKeyStats(store, nil))
//
// It reads the database at most once per MaxAge, during a scrape.
type KeyStatsCollector struct {
	store *idem.Store
	opts  KeyStatsOptions
	now   func() time.Time

	keys, stale, oldest, uncertain, oldestUncertain, up *prometheus.Desc

	mu     sync.Mutex // held across a read, so concurrent scrapes share it
	last   *idem.KeyStats
	readAt time.Time
}

// NewKeyStats returns a collector of store's key table. opts may be nil.
func NewKeyStats(store *idem.Store, opts *KeyStatsOptions) *KeyStatsCollector {
	var o KeyStatsOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultKeyStatsMaxAge
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultKeyStatsTimeout
	}
	return &KeyStatsCollector{
		store: store, opts: o, now: time.Now,
		keys: prometheus.NewDesc(KeysStored, "Idempotency keys in the key table, by operation and state.",
			[]string{"operation", "state"}, o.ConstLabels),
		stale: prometheus.NewDesc(StaleInFlightKeys, "In-flight idempotency keys whose lease ran out (their holder died or lost the database), by operation.",
			[]string{"operation"}, o.ConstLabels),
		oldest: prometheus.NewDesc(OldestInFlightSeconds, "How long the oldest in-flight idempotency key of an operation has been in flight.",
			[]string{"operation"}, o.ConstLabels),
		uncertain: prometheus.NewDesc(UncertainKeys, "Idempotency keys whose outcome is uncertain (an attempt was lost after a provider call), by operation.",
			[]string{"operation"}, o.ConstLabels),
		oldestUncertain: prometheus.NewDesc(OldestUncertainSeconds, "How long ago the oldest uncertain idempotency key of an operation called its provider.",
			[]string{"operation"}, o.ConstLabels),
		up: prometheus.NewDesc(KeyStatsUp, "1 when the last read of the idempotency key table succeeded, else 0.", nil, o.ConstLabels),
	}
}

// Describe implements prometheus.Collector.
func (c *KeyStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.stale
	ch <- c.oldest
	ch <- c.uncertain
	ch <- c.oldestUncertain
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *KeyStatsCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.read()
	if !ok {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, o := range st.Operations {
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(o.InFlight), o.Operation, string(idem.KeyInFlight))
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(o.Complete), o.Operation, string(idem.KeyComplete))
		ch <- prometheus.MustNewConstMetric(c.stale, prometheus.GaugeValue, float64(o.Stale), o.Operation)
		age := 0.0
		if !o.OldestInFlight.IsZero() {
			age = max(st.Now.Sub(o.OldestInFlight).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, o.Operation)
		ch <- prometheus.MustNewConstMetric(c.uncertain, prometheus.GaugeValue, float64(o.Uncertain), o.Operation)
		uncertainAge := 0.0
		if !o.OldestUncertain.IsZero() {
			uncertainAge = max(st.Now.Sub(o.OldestUncertain).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(c.oldestUncertain, prometheus.GaugeValue, uncertainAge, o.Operation)
	}
}

// read returns the key table's statistics, reusing a read younger than MaxAge. A failed read is
// never reused: the next scrape tries again.
func (c *KeyStatsCollector) read() (*idem.KeyStats, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && c.now().Sub(c.readAt) < c.opts.MaxAge {
		return c.last, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	st, err := c.store.KeyStats(ctx)
	if err != nil {
		c.last = nil
		return nil, false
	}
	c.last, c.readAt = st, c.now()
	return st, true
}
