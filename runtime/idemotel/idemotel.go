// Package idemotel traces the events of runtime/idem with OpenTelemetry. It is a separate
// package, as runtime/idemprom is for Prometheus, so that runtime/idem keeps importing only the
// standard library and pgx: only a program that wants traces pulls in the OpenTelemetry API.
//
//	tracing := idemotel.New(nil) // the global TracerProvider; or pass your SDK's
//	store, err := idem.NewStore(pool, &idem.Config{Observer: tracing.Observer()})
//
// With both, chain them: idemprom.Chain(metrics.Observer(), tracing.Observer()).
//
// The spans are children of the span in the request's context (the server span of otelhttp,
// say), one per step of an idempotent request:
//
//	idem.claim     the claim statement: outcome acquired, taken_over, in_progress or key_reused
//	idem.replay    the claim that found the key completed, or the replay cache's answer
//	idem.handler   the handler's run holding the key: outcome completed, released or handler_timeout
//	idem.complete  storing the outcome and committing, after the handler returned
//
// Each carries idem.operation, idem.outcome (the event kind), idem.key_hash and, where a claim
// is held, idem.attempt (2 and more after takeovers of abandoned claims). The key itself is
// never recorded: only the hash the runtime's logs and metrics use (idem.KeyHash). A handler
// timeout, a lost lease and a store error mark their span (or, having none, the request's) as
// an error; a refused key (in progress, reused) does not: the client, not the server, has to
// act.
package idemotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgen/idemgen/runtime/idem"
)

// ScopeName is the instrumentation scope of the spans, the tracer's name.
const ScopeName = "github.com/idemgen/idemgen/runtime/idemotel"

// Span names.
const (
	SpanClaim    = "idem.claim"
	SpanReplay   = "idem.replay"
	SpanHandler  = "idem.handler"
	SpanComplete = "idem.complete"
)

// Attribute keys.
const (
	AttrOperation = attribute.Key("idem.operation")
	AttrOutcome   = attribute.Key("idem.outcome")
	AttrKeyHash   = attribute.Key("idem.key_hash")
	AttrAttempt   = attribute.Key("idem.attempt")
	AttrCached    = attribute.Key("idem.cached")
	AttrPurged    = attribute.Key("idem.purged")
)

// Tracer turns idem events into spans. It is safe for concurrent use; several Stores may share
// one.
type Tracer struct {
	tracer trace.Tracer
	now    func() time.Time
}

// New returns a Tracer whose spans come from tp; nil means otel.GetTracerProvider(), resolved
// at each span, so a provider installed after New is used.
func New(tp trace.TracerProvider) *Tracer {
	t := &Tracer{now: time.Now}
	if tp != nil {
		t.tracer = tp.Tracer(ScopeName)
	}
	return t
}

func (t *Tracer) get() trace.Tracer {
	if t.tracer != nil {
		return t.tracer
	}
	return otel.GetTracerProvider().Tracer(ScopeName)
}

// Observer returns the function for idem.Config.Observer.
func (t *Tracer) Observer() func(ctx context.Context, e idem.Event) {
	return t.observe
}

func (t *Tracer) observe(ctx context.Context, e idem.Event) {
	end := t.now()
	switch e.Kind {
	case idem.EventAcquired, idem.EventTakenOver, idem.EventInProgress, idem.EventKeyReused:
		t.span(ctx, SpanClaim, e, startOr(e.Start, end), end, false)
	case idem.EventReplayed:
		t.span(ctx, SpanReplay, e, startOr(e.Start, end), end, false)
	case idem.EventCompleted:
		returned := end.Add(-e.Completion)
		t.span(ctx, SpanHandler, e, end.Add(-e.Duration), returned, false)
		t.span(ctx, SpanComplete, e, returned, end, false)
	case idem.EventReleased:
		t.span(ctx, SpanHandler, e, end.Add(-e.Duration), end, false)
	case idem.EventHandlerTimeout, idem.EventHandlerFailed:
		// The handler ran past its timeout, or answered over a transaction one of its own
		// statements had aborted: either way its work rolled back, a failed handler step.
		t.span(ctx, SpanHandler, e, end.Add(-e.Duration), end, true)
	default:
		// lease_lost, store_error, purged, provider_call, uncertain, resolved: no step of their
		// own to draw; they are noted on the span they happened under, and those that mean a
		// failure mark it failed.
		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return
		}
		attrs := attributes(e)
		if e.Kind == idem.EventPurged {
			attrs = append(attrs, AttrPurged.Int(e.Count))
		}
		span.AddEvent("idem."+string(e.Kind), trace.WithTimestamp(end), trace.WithAttributes(attrs...))
		switch e.Kind {
		case idem.EventLeaseLost, idem.EventStoreError, idem.EventUncertain:
			span.SetStatus(codes.Error, "idem: "+string(e.Kind))
		}
	}
}

func (t *Tracer) span(ctx context.Context, name string, e idem.Event, start, end time.Time, failed bool) {
	_, span := t.get().Start(ctx, name, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attributes(e)...))
	if failed {
		span.SetStatus(codes.Error, "idem: "+string(e.Kind))
	}
	span.End(trace.WithTimestamp(end))
}

func attributes(e idem.Event) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrOutcome.String(string(e.Kind))}
	if e.Operation != "" {
		attrs = append(attrs, AttrOperation.String(e.Operation))
	}
	if e.KeyHash != "" {
		attrs = append(attrs, AttrKeyHash.String(e.KeyHash))
	}
	if e.Attempt > 0 {
		attrs = append(attrs, AttrAttempt.Int(e.Attempt))
	}
	if e.Cached {
		attrs = append(attrs, AttrCached.Bool(true))
	}
	return attrs
}

func startOr(start, end time.Time) time.Time {
	if start.IsZero() || start.After(end) {
		return end
	}
	return start
}
