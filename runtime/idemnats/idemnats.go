// Package idemnats consumes NATS JetStream messages idempotently: each message is handled at most
// once per message id, in a transaction that also marks it done (runtime/idemconsume, on
// idem.Store.Do's claim), and acknowledged only after that transaction committed.
//
// What each delivery gets:
//
//   - the first delivery runs the handler; once its transaction committed, the message is
//     acknowledged (and the server's confirmation awaited);
//   - a redelivery of a message already done (a consumer killed after its commit and before its
//     acknowledgement, a lost acknowledgement, a publisher that sent it twice) is acknowledged
//     without running the handler;
//   - a redelivery while another delivery of the message still runs (its acknowledgement
//     deadline passed under a slow handler) is not run: it is negatively acknowledged with the
//     delay the holder is expected to need (NakWithDelay), and a later redelivery finds it done;
//   - a handler that failed, a store that cannot be reached, a consumer killed mid-handler: the
//     work was rolled back, and the message is delivered again;
//   - a message whose id comes with another payload than the one it was handled with, or with no
//     id, or that the handler rejected (idemconsume.Reject), is published to the dead-letter
//     subject with the reason in headers (HeaderReason, …) and terminated (Term).
//
// The message id is the Nats-Msg-Id header by default, the id JetStream itself deduplicates
// publishes on within the stream's duplicate window; past that window a republished message
// reaches the consumer again, and the key table makes it harmless. See docs/consumers.md for
// the key's TTL against JetStream's redelivery window.
package idemnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/runtime/idemconsume"
)

// Headers of a dead-lettered message, besides the original message's own headers.
const (
	// HeaderReason is the one-word reason (idemconsume's Reason… constants, e.g. key_reused).
	HeaderReason = "Idem-Dead-Letter-Reason"
	// HeaderError is the reason in a sentence.
	HeaderError = "Idem-Dead-Letter-Error"
	// HeaderSource, HeaderMessageID: the message's source and id, as they were claimed.
	HeaderSource    = "Idem-Source"
	HeaderMessageID = "Idem-Message-Id"
	// HeaderSubject, HeaderStream, HeaderSequence: where the original message was stored.
	HeaderSubject  = "Idem-Original-Subject"
	HeaderStream   = "Idem-Original-Stream"
	HeaderSequence = "Idem-Original-Sequence"
)

// Handler is the work done once per message, in tx (see idemconsume.Handler).
type Handler func(ctx context.Context, tx pgx.Tx, msg jetstream.Msg) error

// Options tune a Consumer; nil means defaults.
type Options struct {
	// Source is the scope message ids are unique in; default "nats:" and the message's stream.
	Source string
	// ID returns a message's id; default its Nats-Msg-Id header. An empty id is dead-lettered
	// (no_message_id).
	ID func(msg jetstream.Msg) string
	// Tenant returns a message's tenant; default none.
	Tenant func(msg jetstream.Msg) string
	// Fingerprint digests a message's payload; default idemconsume.Fingerprint of its data.
	Fingerprint func(msg jetstream.Msg) string
	// DeadLetterSubject is where messages that cannot be handled are published, with
	// HeaderReason and the others. A stream must capture it: the publish waits for the stream's
	// acknowledgement before the message is terminated, so a dead letter is never lost. Empty:
	// such messages are only terminated, and logged.
	DeadLetterSubject string
	// Progress, when above zero, tells the server every Progress that the message is still being
	// worked on (InProgress), which restarts its acknowledgement deadline: a handler that takes
	// longer than the consumer's AckWait then gets no redelivery meanwhile. Keep it under
	// AckWait. Redeliveries that arrive anyway are not run twice.
	Progress time.Duration
	// RedeliverDelay is the delay of a redelivery when the result names none (a failed
	// handler); default one second. It keeps a failing message from spinning.
	RedeliverDelay time.Duration
	// AckTimeout bounds the wait for the server's confirmation of an acknowledgement and for a
	// dead letter's publish; default five seconds.
	AckTimeout time.Duration
	// Logger receives a line per dead letter and per failed acknowledgement; default
	// slog.Default().
	Logger *slog.Logger
}

// Consumer handles JetStream messages on an idemconsume.Consumer.
type Consumer struct {
	c    *idemconsume.Consumer
	js   jetstream.JetStream
	opts Options
}

// New returns a Consumer. js publishes dead letters; it may be nil when
// Options.DeadLetterSubject is empty.
func New(c *idemconsume.Consumer, js jetstream.JetStream, opts *Options) (*Consumer, error) {
	if c == nil {
		return nil, errors.New("idemnats: New: the idemconsume.Consumer is nil")
	}
	n := &Consumer{c: c, js: js}
	if opts != nil {
		n.opts = *opts
	}
	if n.opts.DeadLetterSubject != "" && js == nil {
		return nil, errors.New("idemnats: New: a DeadLetterSubject needs a JetStream to publish on (js is nil)")
	}
	if n.opts.RedeliverDelay <= 0 {
		n.opts.RedeliverDelay = time.Second
	}
	if n.opts.AckTimeout <= 0 {
		n.opts.AckTimeout = 5 * time.Second
	}
	if n.opts.Logger == nil {
		n.opts.Logger = slog.Default()
	}
	return n, nil
}

// Handle processes msg and settles it: [Consumer.Process], then [Consumer.Settle]. It suits
// jetstream.Consumer's Consume callback:
//
//	cons.Consume(func(m jetstream.Msg) { n.Handle(ctx, m, handler) })
func (n *Consumer) Handle(ctx context.Context, msg jetstream.Msg, fn Handler) idemconsume.Result {
	r := n.Process(ctx, msg, fn)
	if err := n.Settle(ctx, msg, r); err != nil {
		n.opts.Logger.WarnContext(ctx, "idemnats: could not settle a message; the server will deliver it again", "subject", msg.Subject(), "action", r.Action.String(), "error", err)
	}
	return r
}

// Process runs fn at most once for msg's id, without acknowledging anything: the result says
// what [Consumer.Settle] will do. Between the two the effect has committed (or not) and the
// message is still unacknowledged; a consumer that dies there gets the message delivered again,
// and that delivery is acknowledged without running fn.
func (n *Consumer) Process(ctx context.Context, msg jetstream.Msg, fn Handler) idemconsume.Result {
	m := &idemconsume.Message{Source: n.source(msg), ID: n.id(msg), Fingerprint: n.fingerprint(msg)}
	if n.opts.Tenant != nil {
		m.Tenant = n.opts.Tenant(msg)
	}
	if n.opts.Progress > 0 {
		stop := n.keepInProgress(msg)
		defer stop()
	}
	return n.c.Process(ctx, m, func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, tx, msg) })
}

// Settle tells the server what r decided: Ack waits for the server's confirmation; Redeliver
// is a NakWithDelay; DeadLetter publishes the message to the dead-letter subject, waits for its
// stream's acknowledgement, then terminates the message. An error means the server was not told
// (or did not confirm): it delivers the message again after its AckWait, and that delivery
// decides anew.
func (n *Consumer) Settle(ctx context.Context, msg jetstream.Msg, r idemconsume.Result) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.opts.AckTimeout)
	defer cancel()
	switch r.Action {
	case idemconsume.Ack:
		return msg.DoubleAck(actx)
	case idemconsume.DeadLetter:
		return n.deadLetter(actx, msg, r)
	}
	delay := r.RetryAfter
	if delay <= 0 {
		delay = n.opts.RedeliverDelay
	}
	return msg.NakWithDelay(delay)
}

// deadLetter publishes msg to the dead-letter subject and terminates it. The publish carries a
// Nats-Msg-Id made of the original's stream and sequence, so that a consumer that dies between
// the publish and the Term, and dead-letters the redelivery again, leaves one dead letter within
// the dead-letter stream's duplicate window.
func (n *Consumer) deadLetter(ctx context.Context, msg jetstream.Msg, r idemconsume.Result) error {
	why := ""
	if r.Err != nil {
		why = r.Err.Error()
	}
	md, mdErr := msg.Metadata()
	if n.opts.DeadLetterSubject == "" {
		n.opts.Logger.WarnContext(ctx, "idemnats: message terminated without a dead-letter subject", "subject", msg.Subject(), "reason", r.Reason, "error", why)
		return msg.Term()
	}
	dl := nats.NewMsg(n.opts.DeadLetterSubject)
	for k, vs := range msg.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			// Headers the server acts on (Nats-Msg-Id, Nats-Expected-Stream, …) were meant for
			// the original's publish: on the dead letter's they would deduplicate it against the
			// wrong id or refuse it.
			continue
		}
		dl.Header[k] = append([]string(nil), vs...)
	}
	dl.Header.Set(HeaderReason, r.Reason)
	dl.Header.Set(HeaderError, why)
	dl.Header.Set(HeaderSource, n.source(msg))
	dl.Header.Set(HeaderMessageID, n.id(msg))
	dl.Header.Set(HeaderSubject, msg.Subject())
	if mdErr == nil {
		dl.Header.Set(HeaderStream, md.Stream)
		dl.Header.Set(HeaderSequence, strconv.FormatUint(md.Sequence.Stream, 10))
		dl.Header.Set(nats.MsgIdHdr, fmt.Sprintf("dead-letter:%s:%d", md.Stream, md.Sequence.Stream))
	}
	dl.Data = msg.Data()
	if _, err := n.js.PublishMsg(ctx, dl); err != nil {
		// Not terminated: the message comes back, and is dead-lettered then.
		_ = msg.NakWithDelay(n.opts.RedeliverDelay)
		return fmt.Errorf("idemnats: publish the dead letter to %s: %w", n.opts.DeadLetterSubject, err)
	}
	n.opts.Logger.InfoContext(ctx, "idemnats: message dead-lettered", "subject", msg.Subject(), "dead_letter_subject", n.opts.DeadLetterSubject, "reason", r.Reason)
	return msg.Term()
}

// keepInProgress sends InProgress every Progress until the returned stop is called.
func (n *Consumer) keepInProgress(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(n.opts.Progress)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress() // a lost one only lets the deadline pass: the redelivery is not run twice
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (n *Consumer) source(msg jetstream.Msg) string {
	if n.opts.Source != "" {
		return n.opts.Source
	}
	if md, err := msg.Metadata(); err == nil {
		return "nats:" + md.Stream
	}
	return "nats:" + msg.Subject()
}

func (n *Consumer) id(msg jetstream.Msg) string {
	if n.opts.ID != nil {
		return n.opts.ID(msg)
	}
	return msg.Headers().Get(nats.MsgIdHdr)
}

func (n *Consumer) fingerprint(msg jetstream.Msg) string {
	if n.opts.Fingerprint != nil {
		return n.opts.Fingerprint(msg)
	}
	return idemconsume.Fingerprint(msg.Data())
}

// Consumer returns the idemconsume.Consumer n processes messages on.
func (n *Consumer) Consumer() *idemconsume.Consumer { return n.c }
