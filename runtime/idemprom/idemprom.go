// Package idemprom exports the events of runtime/idem as Prometheus metrics. It is a separate
// package so that runtime/idem keeps importing only the standard library and pgx: only a program
// that wants Prometheus pulls in client_golang.
//
//	metrics := idemprom.New(nil)
//	prometheus.MustRegister(metrics)
//	store, err := idem.NewStore(pool, &idem.Config{Observer: metrics.Observer()})
//
// The metrics, each with the label operation (the operationId, or the DoParams.Operation):
//
//	idemgen_idempotency_events_total{operation,event}        counter: one per idem.Event, event = its Kind
//	idemgen_idempotency_purged_keys_total                     counter: rows deleted by purge
//	idemgen_idempotency_handler_duration_seconds{operation,outcome}
//	                                                          histogram: handler time, outcome completed, released,
//	                                                          handler_timeout or handler_failed
//	idemgen_idempotency_keys_in_flight{operation}             gauge: keys this process holds while their handler runs
//	idemgen_idempotency_listener_deaf                         gauge: 1 while the Store's listener's last self-check
//	                                                          went unheard (idem.EventListenerDeaf), else 0
//
// event="store_error" counts statements of the runtime itself that failed (an outage, a
// misconfigured table); event="handler_failed" counts handlers that answered after a statement
// of their own had aborted their transaction (idem.ErrHandlerAborted): a bug in the handler, not
// an outage, and each is a 500 whose work was rolled back.
//
// The listener's events (listener_deaf, listener_heard) name no operation: they count under
// operation "". Alert on idemgen_idempotency_listener_deaf == 1: waiting duplicates then poll
// instead of waking on their holder's notification (see Store.ListenerHealth).
//
// [NewKeyStats] adds gauges read from the key table itself (the stale in-flight keys a dead
// process left behind are no process's events): idemgen_idempotency_keys{operation,state},
// idemgen_idempotency_stale_in_flight_keys{operation},
// idemgen_idempotency_oldest_in_flight_seconds{operation}, idemgen_idempotency_uncertain_keys{operation},
// idemgen_idempotency_oldest_uncertain_seconds{operation} and idemgen_idempotency_key_stats_up.
//
// [NewReconcile] and [WriteReconcileTextfile] export the last reconciliation against a provider's
// records (runtime/idemreconcile): idemgen_idempotency_reconcile_discrepancies{kind},
// idemgen_idempotency_reconcile_resolved_keys{resolution}, idemgen_idempotency_reconcile_records
// and idemgen_idempotency_reconcile_last_run_timestamp_seconds.
// deploy/prometheus/idemgen-alerts.yaml alerts on these metrics.
package idemprom

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Metric names, for dashboards and alerts.
const (
	EventsTotal     = "idemgen_idempotency_events_total"
	PurgedKeysTotal = "idemgen_idempotency_purged_keys_total"
	HandlerDuration = "idemgen_idempotency_handler_duration_seconds"
	KeysInFlight    = "idemgen_idempotency_keys_in_flight"
	ListenerDeaf    = "idemgen_idempotency_listener_deaf"
)

// DefaultStaleHold is Options.StaleHold's default.
const DefaultStaleHold = 10 * time.Minute

// Options tune New; nil means defaults.
type Options struct {
	// Operations are created up front with every counter at zero, so that a rate or an
	// increase over the first event of an operation is seen (Prometheus cannot tell a series that
	// starts at 1 from one that was always 1). Other operations appear with their first event.
	Operations []string
	// Buckets of the handler duration histogram, in seconds; default prometheus.DefBuckets.
	Buckets []float64
	// StaleHold is how long a key counts as in flight at most. The runtime reports the end of a
	// handler's hold (completed, released, lease lost) on every path but two, which it only logs:
	// a release that fails, and a commit that fails in transaction mode. Without a bound, each of
	// those would keep the gauge up until the process restarts. Set it above your longest
	// handler (renewal lets a handler hold a key past its lease); default 10 minutes.
	StaleHold time.Duration
	// ConstLabels are added to every metric, e.g. the service name.
	ConstLabels prometheus.Labels
}

// Collector turns idem events into metrics. Register it with a prometheus.Registerer (it is a
// prometheus.Collector) and pass Observer() to idem.Config.Observer. It is safe for concurrent
// use; several Stores may share one.
type Collector struct {
	events   *prometheus.CounterVec
	purged   prometheus.Counter
	duration *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	deaf     prometheus.Gauge

	stale time.Duration
	now   func() time.Time // tests replace it to age holds without sleeping

	mu sync.Mutex
	// holds are the start times of the holds this process has seen begin and not yet end, per
	// operation and key hash. The same key can be held twice here: a handler whose lease ran out
	// and the request that took the key over. An end is matched to the oldest start.
	holds map[holdKey][]time.Time
	// perOp is the number of holds per operation, what the gauge shows.
	perOp     map[string]int
	lastSweep time.Time

	// series are the metrics of each of Options.Operations, looked up once in New: WithLabelValues
	// hashes and checks its label values on every call, about 1,500 instructions, and a request
	// reports two or three events. Read-only after New; other operations take WithLabelValues.
	series map[string]*series
}

// series is one operation's metrics.
type series struct {
	events              map[idem.EventKind]prometheus.Counter // every kind in kinds but purged
	completed, released prometheus.Observer
	inFlight            prometheus.Gauge
}

type holdKey struct{ operation, keyHash string }

// New returns a Collector. opts may be nil.
func New(opts *Options) *Collector {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Buckets == nil {
		o.Buckets = prometheus.DefBuckets
	}
	if o.StaleHold <= 0 {
		o.StaleHold = DefaultStaleHold
	}
	c := &Collector{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        EventsTotal,
			Help:        "Idempotency events by operation and event (the runtime's event kind; purged counts batches).",
			ConstLabels: o.ConstLabels,
		}, []string{"operation", "event"}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        PurgedKeysTotal,
			Help:        "Expired idempotency keys deleted by purge.",
			ConstLabels: o.ConstLabels,
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        HandlerDuration,
			Help:        "Time the handler of an idempotent request ran while holding its key, by outcome: completed (committed with its stored outcome), released (rolled back, key given back), handler_timeout (ran past its timeout) or handler_failed (answered with its transaction aborted by a failed statement of its own).",
			Buckets:     o.Buckets,
			ConstLabels: o.ConstLabels,
		}, []string{"operation", "outcome"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        KeysInFlight,
			Help:        "Idempotency keys this process holds while their handler runs.",
			ConstLabels: o.ConstLabels,
		}, []string{"operation"}),
		deaf: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        ListenerDeaf,
			Help:        "1 while the idempotency store's listener did not hear its own last self-check notification (waiting duplicates poll instead of waking on notifications), else 0.",
			ConstLabels: o.ConstLabels,
		}),
		stale:  o.StaleHold,
		now:    time.Now,
		holds:  map[holdKey][]time.Time{},
		perOp:  map[string]int{},
		series: map[string]*series{},
	}
	for _, op := range o.Operations {
		ser := &series{
			events:    map[idem.EventKind]prometheus.Counter{},
			completed: c.duration.WithLabelValues(op, string(idem.EventCompleted)),
			released:  c.duration.WithLabelValues(op, string(idem.EventReleased)),
			inFlight:  c.inFlight.WithLabelValues(op),
		}
		for _, k := range kinds {
			if k != idem.EventPurged {
				ser.events[k] = c.events.WithLabelValues(op, string(k))
			}
		}
		ser.inFlight.Set(0)
		c.series[op] = ser
	}
	if len(o.Operations) > 0 {
		c.events.WithLabelValues("", string(idem.EventPurged))
		c.events.WithLabelValues("", string(idem.EventListenerDeaf))
		c.events.WithLabelValues("", string(idem.EventListenerHeard))
	}
	return c
}

// kinds are the event kinds an operation can see, for the zero series of Options.Operations.
var kinds = []idem.EventKind{
	idem.EventAcquired, idem.EventTakenOver, idem.EventReplayed, idem.EventInProgress,
	idem.EventKeyReused, idem.EventCompleted, idem.EventLeaseLost, idem.EventReleased,
	idem.EventPurged, idem.EventStoreError, idem.EventHandlerTimeout, idem.EventHandlerFailed,
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.events.Describe(ch)
	c.purged.Describe(ch)
	c.duration.Describe(ch)
	c.inFlight.Describe(ch)
	c.deaf.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	c.sweep(true)
	c.mu.Unlock()
	c.events.Collect(ch)
	c.purged.Collect(ch)
	c.duration.Collect(ch)
	c.inFlight.Collect(ch)
	c.deaf.Collect(ch)
}

// Observer returns the function for idem.Config.Observer. To keep an observer you already
// have, pass Chain(metrics.Observer(), yours).
func (c *Collector) Observer() func(ctx context.Context, e idem.Event) {
	return c.observe
}

func (c *Collector) observe(_ context.Context, e idem.Event) {
	ser := c.series[e.Operation]
	c.eventOf(ser, e.Operation, e.Kind).Inc()
	switch e.Kind {
	case idem.EventPurged:
		c.purged.Add(float64(max(e.Count, 0)))
	case idem.EventAcquired, idem.EventTakenOver:
		c.begin(e)
	case idem.EventCompleted, idem.EventReleased, idem.EventHandlerTimeout, idem.EventHandlerFailed:
		c.durationOf(ser, e.Operation, e.Kind).Observe(e.Duration.Seconds())
		c.end(e)
	case idem.EventLeaseLost:
		c.end(e)
	case idem.EventListenerDeaf:
		c.deaf.Set(1)
	case idem.EventListenerHeard:
		c.deaf.Set(0)
	}
}

// eventOf is the event counter of op (whose series is ser, or nil for an operation not in
// Options.Operations) and kind k.
func (c *Collector) eventOf(ser *series, op string, k idem.EventKind) prometheus.Counter {
	if ser != nil {
		if counter, ok := ser.events[k]; ok {
			return counter
		}
	}
	return c.events.WithLabelValues(op, string(k))
}

// durationOf is the handler duration histogram of op (whose series is ser, or nil) with outcome k.
func (c *Collector) durationOf(ser *series, op string, k idem.EventKind) prometheus.Observer {
	switch {
	case ser != nil && k == idem.EventCompleted:
		return ser.completed
	case ser != nil && k == idem.EventReleased:
		return ser.released
	}
	return c.duration.WithLabelValues(op, string(k))
}

// inFlightOf is the in-flight gauge of op.
func (c *Collector) inFlightOf(op string) prometheus.Gauge {
	if ser := c.series[op]; ser != nil {
		return ser.inFlight
	}
	return c.inFlight.WithLabelValues(op)
}

func (c *Collector) begin(e idem.Event) {
	k := holdKey{e.Operation, e.KeyHash}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(false)
	c.holds[k] = append(c.holds[k], c.now())
	c.perOp[e.Operation]++
	c.inFlightOf(e.Operation).Set(float64(c.perOp[e.Operation]))
}

// end closes the oldest hold of the event's key. An end without a begin this Collector saw
// (a hold swept as stale, or an end reported twice) changes nothing: the gauge never counts
// below the holds it knows of.
func (c *Collector) end(e idem.Event) {
	k := holdKey{e.Operation, e.KeyHash}
	c.mu.Lock()
	defer c.mu.Unlock()
	starts := c.holds[k]
	if len(starts) == 0 {
		return
	}
	if len(starts) == 1 {
		delete(c.holds, k)
	} else {
		c.holds[k] = starts[1:]
	}
	c.drop(e.Operation, 1)
}

func (c *Collector) drop(op string, n int) {
	c.perOp[op] -= n
	c.inFlightOf(op).Set(float64(c.perOp[op]))
	if c.perOp[op] == 0 {
		delete(c.perOp, op) // the series stays, at 0
	}
}

// sweep forgets holds older than StaleHold. It walks every hold, so on the request path it runs
// at most once a second; a scrape always runs it, so what is shown is never staler than that.
// c.mu must be held.
func (c *Collector) sweep(always bool) {
	now := c.now()
	if !always && now.Sub(c.lastSweep) < time.Second {
		return
	}
	c.lastSweep = now
	for k, starts := range c.holds {
		n := 0
		for n < len(starts) && now.Sub(starts[n]) > c.stale {
			n++
		}
		if n == 0 {
			continue
		}
		if n == len(starts) {
			delete(c.holds, k)
		} else {
			c.holds[k] = starts[n:]
		}
		c.drop(k.operation, n)
	}
}

// Chain returns an Observer that calls each non-nil observer in turn, for a program that
// already has one (a logger, a tracer) and adds metrics.
func Chain(observers ...func(ctx context.Context, e idem.Event)) func(ctx context.Context, e idem.Event) {
	var obs []func(context.Context, idem.Event)
	for _, o := range observers {
		if o != nil {
			obs = append(obs, o)
		}
	}
	return func(ctx context.Context, e idem.Event) {
		for _, o := range obs {
			o(ctx, e)
		}
	}
}
