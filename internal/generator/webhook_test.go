package generator

import (
	"strings"
	"testing"
)

// TestReceiversAreWired: a receiver's Op verifies with its scheme and takes the delivery id from
// where the spec says (Stripe's body /id, GitHub's X-GitHub-Delivery), its secrets come from a
// method of the interface (and Unimplemented returns none), and it has no client key: the API's
// own clients do not call a webhook, and its Op reads no request field for the key.
func TestReceiversAreWired(t *testing.T) {
	t.Parallel()
	files, err := Generate(load(t, "testdata/receivers/openapi.yaml"), Options{Package: "api"})
	if err != nil {
		t.Fatal(err)
	}
	src := string(files[IdempotencyFile])
	for _, want := range []string{
		`"github.com/idemgen/idemgen/runtime/idemwebhook"`,
		"ReceiveStripeSecrets(ctx context.Context) ([]string, error)",
		"ReceiveGitHubSecrets(ctx context.Context) ([]string, error)",
		"func (UnimplementedIdempotentServer) ReceiveStripeSecrets(ctx context.Context) ([]string, error) {\n\treturn nil, nil\n}",
		"Verifier: idemwebhook.Verifier{Scheme: idemwebhook.Stripe, Tolerance: 5 * time.Minute, Secrets: s.impl.ReceiveStripeSecrets},",
		`Key:      idemwebhook.KeySource{Pointer: "/id"},`,
		"Verifier: idemwebhook.Verifier{Scheme: idemwebhook.GitHub, Tolerance: 0, Secrets: s.impl.ReceiveGitHubSecrets},",
		`Key:      idemwebhook.KeySource{Header: "X-GitHub-Delivery"},`,
		"NoFingerprint: true,",
		`Persist:        idem.Statuses("2xx"),`,
	} {
		if !strings.Contains(src, want) {
			t.Errorf("%s lacks %q", IdempotencyFile, want)
		}
	}
	if n := strings.Count(src, `Key:   "",`); n != 2 {
		t.Errorf("%d receivers' Ops read no request field for their key, want 2:\n%s", n, src)
	}
}

// TestReceiverDeliveryHeadersAreOptional: the delivery headers a receiver declares required reach
// its verification when missing (oapi-codegen binds them as optional), while its other required
// headers stay required.
func TestReceiverDeliveryHeadersAreOptional(t *testing.T) {
	t.Parallel()
	files, err := Generate(load(t, "testdata/receivers/openapi.yaml"), Options{Package: "api"})
	if err != nil {
		t.Fatal(err)
	}
	src := string(files[OapiFile])
	for _, want := range []string{
		"XGitHubDelivery  *string `json:\"X-GitHub-Delivery,omitempty\"`",
		"XHubSignature256 *string `json:\"X-Hub-Signature-256,omitempty\"`",
		"XGitHubEvent     string  `json:\"X-GitHub-Event\"`",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("%s lacks %q", OapiFile, want)
		}
	}
}
