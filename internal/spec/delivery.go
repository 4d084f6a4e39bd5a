package spec

import (
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/policy"
)

var deliveryFields = []string{"signature", "key", "tolerance", "retryWindow"}

// delivery reads x-idempotency.delivery, a webhook receiver's declaration; what its values mean
// is package policy's.
func (c *checker) delivery(field string, n *yaml.Node) policy.Field[policy.RawDelivery] {
	var d policy.RawDelivery
	if c.op == "" {
		c.errorf(n, policy.RuleDeliveryInvalid, "%s: declares one operation a webhook receiver, so it is not a document-level default (move it to the receiving operation)", field)
		return policy.Field[policy.RawDelivery]{}
	}
	if n == nil || n.Kind != yaml.MappingNode {
		c.errorf(n, policy.RuleTypeInvalid, "%s: expected a mapping like {signature: standard-webhooks, key: {header: webhook-id}}, got %s", field, show(n))
		return policy.Field[policy.RawDelivery]{}
	}
	for _, kv := range pairs(n) {
		k, v := kv[0], kv[1]
		name := field + "." + k.Value
		switch k.Value {
		case "signature":
			d.Signature.Pos = c.pos(v)
			if s, ok := c.str(name, v); ok {
				if sig, prob := policy.ParseSignature(s); prob != nil {
					c.problem(v, name, prob)
					d.Signature.Pos = c.pos(v)
				} else {
					d.Signature = policy.Value(sig, c.pos(v))
				}
			}
		case "key":
			c.deliveryKey(name, v, &d)
		case "tolerance", "retryWindow":
			if !isScalar(v) || (v.Tag != "!!str" && v.Tag != "!!int") {
				c.errorf(v, policy.RuleDurationInvalid, "%s: %s is not a duration (use e.g. 5m or 3d)", name, show(v))
				break
			}
			dur, prob := policy.ParseDurationField(k.Value, v.Value)
			if prob != nil {
				c.problem(v, name, prob)
				break
			}
			if k.Value == "tolerance" {
				d.Tolerance = policy.Value(dur, c.pos(v))
			} else {
				d.RetryWindow = policy.Value(dur, c.pos(v))
			}
		default:
			c.unknown(k, field, deliveryFields)
		}
	}
	return policy.Value(d, c.pos(n))
}

// deliveryKey reads delivery.key: {header: <Name>} or {body: <JSON pointer>}, exactly one.
func (c *checker) deliveryKey(field string, n *yaml.Node, d *policy.RawDelivery) {
	if n == nil || n.Kind != yaml.MappingNode || len(n.Content) != 2 {
		c.errorf(n, policy.RuleDeliveryInvalid, "%s: expected one source, {header: <Name>} or {body: <JSON pointer>}, got %s", field, show(n))
		return
	}
	k, v := n.Content[0], resolve(n.Content[1])
	s, ok := c.str(field+"."+k.Value, v)
	if !ok {
		return
	}
	src, prob := policy.ParseDeliveryKey(k.Value, s)
	if prob != nil {
		c.problem(v, field+"."+k.Value, prob)
		return
	}
	if k.Value == "header" {
		d.KeyHeader = policy.Value(src, c.pos(v))
	} else {
		d.KeyPointer = policy.Value(src, c.pos(v))
	}
}
