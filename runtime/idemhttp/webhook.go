package idemhttp

import (
	"context"
	"errors"
	"net/http"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemwebhook"
)

// A webhook receiver (x-idempotency delivery) is an operation a sender delivers events to, at
// least once. Its key is the delivery's own id, found by [Op.Receive] after the delivery's
// signature was verified on the body as sent; everything after that is the request path's:
// claim, run in the transaction that completes the key, replay. What the sender sees:
//
//   - a delivery that succeeded before: the stored 2xx, the handler does not run again;
//   - a delivery whose handler failed (an error, a timeout, a 5xx it answered): 5xx and nothing
//     kept, so the sender retries and the retry runs;
//   - a delivery while the same one is still running: it waits for the first (the policy's
//     wait, which for a receiver defaults to the lease) and gets its stored 2xx, or runs itself
//     when the first failed. A 2xx before the effect commits would tell the sender to stop
//     retrying an event that may yet be rolled back;
//   - an unsigned, forged or expired delivery: 401 signature-invalid, before any claim;
//   - a delivery without its id where the spec says it is: 400 key-missing, before any claim.

// receive runs op.Receive on the captured request and returns the delivery's id, or the problem
// that answers the delivery.
func receive[R any](ctx context.Context, s *idem.Store, p *Policy, op *Op[R]) (string, *Problem) {
	b, ok := BodyFromContext(ctx)
	if !ok || b.req == nil {
		s.Config().Logger.ErrorContext(ctx, "idem: a webhook receiver's request was not captured with its headers, so its signature cannot be verified; answered 500 and claimed nothing",
			"operation", p.Operation)
		return "", problemNotCaptured()
	}
	key, err := op.Receive(ctx, b.req.Header, b.Bytes)
	if err == nil {
		return key, nil
	}
	return "", deliveryProblem(ctx, s, p, err)
}

// deliveryProblem is the answer to a delivery [Op.Receive] refused.
func deliveryProblem(ctx context.Context, s *idem.Store, p *Policy, err error) *Problem {
	var refused *idemwebhook.Error
	if !errors.As(err, &refused) {
		s.Config().Logger.ErrorContext(ctx, "idem: a webhook receiver failed to read a delivery; answered 500 and claimed nothing", "operation", p.Operation, "error", err)
		return newProblem(http.StatusInternalServerError, CodeInternal, "the delivery could not be processed and nothing of it was kept: deliver it again")
	}
	switch refused.Reason {
	case idemwebhook.ReasonNoSecret:
		// The receiver's setup, not the delivery, is at fault: a 5xx makes the sender retry, so
		// nothing is lost once a secret is configured.
		s.Config().Logger.ErrorContext(ctx, "idem: a webhook receiver cannot verify deliveries; answered 500 and claimed nothing (configure its signing secrets)",
			"operation", p.Operation, "error", err)
		return newProblem(http.StatusInternalServerError, CodeInternal, "the receiver cannot verify deliveries yet, so it kept nothing of this one: deliver it again later")
	case idemwebhook.ReasonNoKey:
		return newProblem(http.StatusBadRequest, CodeKeyMissing, refused.Detail+": a delivery is deduplicated by its id, so one without it is refused")
	}
	return newProblem(http.StatusUnauthorized, CodeSignatureInvalid, "the delivery's signature was not accepted ("+string(refused.Reason)+"): "+refused.Detail+"; nothing was kept")
}
