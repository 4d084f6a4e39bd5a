package idemopenapi_test

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemopenapi"
)

// BenchmarkCreatePaymentBody is the cost validation adds to a request: the payments example's
// createPayment body checked against its schema (a pattern, a minimum, no additional
// properties). The fingerprint's own pass over the same bytes (idem.CanonicalBody) runs beside
// it as the scale.
func BenchmarkCreatePaymentBody(b *testing.B) {
	doc, err := openapi3.NewLoader().LoadFromFile("../../examples/payments/openapi.yaml")
	if err != nil {
		b.Fatal(err)
	}
	check, err := idemopenapi.BodyValidator(doc, "POST /v1/payments")
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"amount_minor": 19900, "currency": "RUB"}`)
	ctx := context.Background()
	b.Run("validate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if p := check(ctx, "application/json", body); p != nil {
				b.Fatal(p.Detail)
			}
		}
	})
	b.Run("fingerprint-canonical-body", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := idem.CanonicalBody("application/json", body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
