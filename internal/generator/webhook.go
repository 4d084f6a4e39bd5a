package generator

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/runtime/idemwebhook"
)

// receiverData is a webhook receiver's verification and delivery id source (x-idempotency
// delivery), as Go expressions for the template.
type receiverData struct {
	Scheme    string // idemwebhook.StandardWebhooks
	Tolerance string // a duration literal; "0" for a scheme without timestamps
	KeySource string // idemwebhook.KeySource{Header: "webhook-id"}
	About     string // what the comments say: "standard-webhooks signatures, the id in header webhook-id"
}

// receiverLiteral renders p's delivery, or nil when the operation is no receiver.
func receiverLiteral(p *policy.Policy) (*receiverData, error) {
	d := p.Delivery
	if d == nil {
		return nil, nil
	}
	rd := &receiverData{Tolerance: durationLiteral(d.Tolerance)}
	switch d.Signature {
	case policy.SignatureStandardWebhooks:
		rd.Scheme = "idemwebhook.StandardWebhooks"
	case policy.SignatureStripe:
		rd.Scheme = "idemwebhook.Stripe"
	case policy.SignatureGitHub:
		rd.Scheme = "idemwebhook.GitHub"
	default:
		return nil, fmt.Errorf("delivery.signature %q is not one idemgen generates (standard-webhooks, stripe, github)", d.Signature)
	}
	if d.KeyHeader != "" {
		rd.KeySource = "idemwebhook.KeySource{Header: " + strconv.Quote(d.KeyHeader) + "}"
		rd.About = d.Signature + " signatures, the delivery id in the " + d.KeyHeader + " header"
	} else {
		rd.KeySource = "idemwebhook.KeySource{Pointer: " + strconv.Quote(d.KeyPointer) + "}"
		rd.About = d.Signature + " signatures, the delivery id at " + d.KeyPointer + " in the body"
	}
	return rd, nil
}

// deliveryHeaders are the headers a sender's scheme sends: a receiver's verification, not
// oapi-codegen's binding, judges whether they are there.
var deliveryHeaders = []string{
	idemwebhook.HeaderWebhookID, idemwebhook.HeaderWebhookTimestamp, idemwebhook.HeaderWebhookSignature,
	idemwebhook.HeaderStripeSignature, idemwebhook.HeaderGitHubSignature, idemwebhook.HeaderGitHubDelivery,
}

// relaxDeliveryHeaders makes the delivery headers a receiver declares optional in doc, as
// relaxKeyHeaders does for a key header, so that a delivery without them reaches the receiver's
// verification and is answered 401 signature-invalid (or 400 key-missing), as the spec's
// x-idempotency says, instead of oapi-codegen's binding error. The parameter is copied, never
// changed in place.
func relaxDeliveryHeaders(doc *openapi3.T, ops []*model.Operation) {
	if doc.Paths == nil {
		return
	}
	for _, op := range ops {
		if op.Policy == nil || op.Policy.Delivery == nil {
			continue
		}
		item := doc.Paths.Value(op.Path)
		if item == nil || item.GetOperation(op.Method) == nil {
			continue
		}
		o := item.GetOperation(op.Method)
		delivery := func(p *openapi3.ParameterRef) bool {
			return slices.ContainsFunc(deliveryHeaders, func(h string) bool { return isHeaderParam(p, h) })
		}
		for i, p := range o.Parameters {
			if delivery(p) && p.Value.Required {
				o.Parameters[i] = relaxedCopy(p)
			}
		}
		for _, p := range item.Parameters {
			if delivery(p) && p.Value.Required && !slices.ContainsFunc(o.Parameters, func(q *openapi3.ParameterRef) bool { return isHeaderParam(q, p.Value.Name) }) {
				o.Parameters = append(o.Parameters, relaxedCopy(p))
			}
		}
	}
}
