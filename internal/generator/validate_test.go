package generator

import (
	"strings"
	"testing"
)

// TestValidateRequestBodyIsOptIn: without validate-request-body the generated files neither embed
// the spec nor import kin-openapi, so a server that does not validate does not link it; with it,
// api.gen.go embeds the spec (GetSpec) and every operation with a body gets its check, the
// idempotent ones in their policy, the others before their handler.
func TestValidateRequestBodyIsOptIn(t *testing.T) {
	t.Parallel()
	in := load(t, "../../testdata/payments/openapi.yaml")
	off, err := Generate(in, Options{Package: "api"})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range off {
		for _, s := range []string{"kin-openapi", "idemopenapi", "GetSpec", "swaggerSpec"} {
			if strings.Contains(string(b), s) {
				t.Errorf("without the option, %s mentions %s", name, s)
			}
		}
	}
	on, err := Generate(load(t, "../../testdata/payments/openapi.yaml"), Options{Package: "api", ValidateRequestBody: true})
	if err != nil {
		t.Fatal(err)
	}
	api, idem := string(on[OapiFile]), string(on[IdempotencyFile])
	for _, s := range []string{"func GetSpec() (", `"github.com/getkin/kin-openapi/openapi3"`} {
		if !strings.Contains(api, s) {
			t.Errorf("with the option, %s lacks %s", OapiFile, s)
		}
	}
	for _, s := range []string{
		"var idemValidation = idemopenapi.NewValidation(GetSpec)",
		`ValidateBody:  idemValidation.Body("POST /v1/payments")`,
		"idemValidation.Check(),",
	} {
		if !strings.Contains(idem, s) {
			t.Errorf("with the option, %s lacks %s", IdempotencyFile, s)
		}
	}
}
