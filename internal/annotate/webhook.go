package annotate

import (
	"github.com/idemgen/idemgen/internal/policy"
)

// A webhook receiver is recognised by the delivery headers it declares (policy.DetectSender):
// annotate proposes x-idempotency delivery for it, with the sender's signature scheme, and a
// ttl that covers the sender's retry window when the document's default does not. It adds no
// Idempotency-Key parameter (the key is the delivery id) and no problem responses (a sender
// reads only the status).

// receiverOf is the signature scheme o's declared headers show it receives, or "".
func (p *planner) receiverOf(o op) string {
	var headers []string
	for _, holder := range []*node{o.node, o.pathItem} {
		params := holder.get("parameters")
		if params == nil || params.kind != kindSeq {
			continue
		}
		for _, it := range params.items {
			if pn := p.resolve(it); pn != nil && pn.str("in") == "header" {
				headers = append(headers, pn.str("name"))
			}
		}
	}
	return policy.DetectSender(headers)
}

// receiverRaw is the delivery annotate writes for a receiver of signature, as policy reads it.
func receiverRaw(signature string) policy.Field[policy.RawDelivery] {
	return policy.Value(policy.RawDelivery{Signature: policy.Value(signature, policy.Position{})}, policy.Position{})
}

// receiverTTL is the ttl to write for a receiver of signature: the sender's retry window when the
// policy's ttl (--ttl, else the document's) is shorter, else "".
func (p *planner) receiverTTL(signature string) string {
	sender, _ := policy.SenderOf(signature)
	ttl := p.def.TTL
	if p.flags.TTL.Set {
		ttl = p.flags.TTL.V
	}
	if ttl >= sender.RetryWindow {
		return ""
	}
	return policy.FormatDuration(sender.RetryWindow)
}

// annotateReceiver writes x-idempotency: {ttl: …, delivery: {signature: …}} on o.
func (p *planner) annotateReceiver(o op, signature string) error {
	opT := target{n: o.node}
	var kvs []kv
	if ttl := p.receiverTTL(signature); ttl != "" {
		kvs = append(kvs, kv{key: "ttl", v: str(ttl)})
	} else if p.flags.TTL.Set && p.flags.TTL.V != p.def.TTL {
		kvs = append(kvs, kv{key: "ttl", v: str(p.opts.TTL)})
	}
	kvs = append(kvs, kv{key: "delivery", v: mapping(kv{key: "signature", v: str(signature)})})
	opT.add(kv{key: "x-idempotency", v: mapping(kvs...)})
	if !p.opts.NoReplayedHeader {
		if err := p.addReplayed(o); err != nil {
			return err
		}
	}
	p.annotated = append(p.annotated, o.route())
	return nil
}
