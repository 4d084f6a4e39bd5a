package generator

import (
	"fmt"
	"strconv"

	"github.com/idemgen/idemgen/internal/policy"
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
