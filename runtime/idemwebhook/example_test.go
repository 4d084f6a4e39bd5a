package idemwebhook_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgen/idemgen/runtime/idemwebhook"
)

// A receiver outside generated code: verify first, then take the delivery id as the key of the
// work (idem.Store.Do, say). A refusal names its reason and binds nothing.
func ExampleReceiver() {
	secret := "whsec_ZXhhbXBsZS1zZWNyZXQtMDEyMzQ1Njc4OQ=="
	r := &idemwebhook.Receiver{
		Verifier: idemwebhook.Verifier{
			Scheme:  idemwebhook.StandardWebhooks,
			Secrets: idemwebhook.Static(secret), // during a rotation: the new and the old one
		},
		Key: idemwebhook.KeySource{Header: idemwebhook.HeaderWebhookID},
	}
	body := []byte(`{"type":"charge.settled"}`)
	now := time.Now()
	sig, _ := idemwebhook.SignStandard("msg_1", now, body, secret)
	h := http.Header{}
	h.Set("webhook-id", "msg_1")
	h.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	h.Set("webhook-signature", sig)

	key, err := r.Receive(context.Background(), h, body)
	fmt.Println(key, err)

	h.Set("webhook-signature", "v1,bm90IHRoZSBzaWduYXR1cmU=")
	_, err = r.Receive(context.Background(), h, body)
	fmt.Println(err.(*idemwebhook.Error).Reason)
	// Output:
	// msg_1 <nil>
	// mismatch
}
