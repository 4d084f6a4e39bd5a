package idemwebhook_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemwebhook"
)

// The example of the Standard Webhooks specification's reference libraries: a signature
// computed elsewhere, so the message layout and the secret's decoding are checked against the
// scheme, not against this package's own signer.
func TestStandardWebhooksReferenceVector(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	v := &idemwebhook.Verifier{
		Scheme:  idemwebhook.StandardWebhooks,
		Secrets: idemwebhook.Static("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
		Now:     func() time.Time { return time.Unix(1614265330, 0) },
	}
	if err := v.Verify(context.Background(), h, []byte(`{"test": 2432232314}`)); err != nil {
		t.Fatalf("the reference delivery was refused: %v", err)
	}
}

const (
	oldSecret = "whsec_b2xkLXNlY3JldC1vbGQtc2VjcmV0LTAwMDAwMA=="
	newSecret = "whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0LTExMTExMQ=="
)

var now = time.Unix(1_800_000_000, 0)

func standard(t *testing.T, id string, ts time.Time, body string, secrets ...string) http.Header {
	t.Helper()
	sig, err := idemwebhook.SignStandard(id, ts, []byte(body), secrets...)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h
}

func TestVerify(t *testing.T) {
	t.Parallel()
	body := `{"id":"evt_1","type":"charge.settled"}`
	stripeSecret, githubSecret := "whsec_stripe_test", "gh-secret"
	with := func(h http.Header, kv ...string) http.Header {
		h = h.Clone()
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				h.Del(kv[i])
				continue
			}
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	good := standard(t, "msg_1", now, body, oldSecret)
	tests := []struct {
		name    string
		scheme  idemwebhook.Scheme
		secrets []string
		h       http.Header
		body    string
		want    idemwebhook.Reason // "" accepted
	}{
		{"standard", idemwebhook.StandardWebhooks, []string{oldSecret}, good, body, ""},
		{"standard, rotated: the new secret is tried too", idemwebhook.StandardWebhooks, []string{newSecret, oldSecret}, good, body, ""},
		{"standard, signed with both during a rotation", idemwebhook.StandardWebhooks, []string{newSecret}, standard(t, "msg_1", now, body, oldSecret, newSecret), body, ""},
		{"standard, a changed body", idemwebhook.StandardWebhooks, []string{oldSecret}, good, body + " ", idemwebhook.ReasonMismatch},
		{"standard, another id", idemwebhook.StandardWebhooks, []string{oldSecret}, with(good, "webhook-id", "msg_2"), body, idemwebhook.ReasonMismatch},
		{"standard, another secret", idemwebhook.StandardWebhooks, []string{newSecret}, good, body, idemwebhook.ReasonMismatch},
		{"standard, unsigned", idemwebhook.StandardWebhooks, []string{oldSecret}, with(good, "webhook-signature", ""), body, idemwebhook.ReasonUnsigned},
		{"standard, no timestamp", idemwebhook.StandardWebhooks, []string{oldSecret}, with(good, "webhook-timestamp", ""), body, idemwebhook.ReasonUnsigned},
		{"standard, expired", idemwebhook.StandardWebhooks, []string{oldSecret}, standard(t, "msg_1", now.Add(-6*time.Minute), body, oldSecret), body, idemwebhook.ReasonExpired},
		{"standard, from the future", idemwebhook.StandardWebhooks, []string{oldSecret}, standard(t, "msg_1", now.Add(6*time.Minute), body, oldSecret), body, idemwebhook.ReasonExpired},
		{"standard, a timestamp that is no number", idemwebhook.StandardWebhooks, []string{oldSecret}, with(good, "webhook-timestamp", "yesterday"), body, idemwebhook.ReasonMalformed},
		{"standard, no v1 signature", idemwebhook.StandardWebhooks, []string{oldSecret}, with(good, "webhook-signature", "v2,abc"), body, idemwebhook.ReasonMalformed},
		{"standard, no secret configured", idemwebhook.StandardWebhooks, nil, good, body, idemwebhook.ReasonNoSecret},
		{"stripe", idemwebhook.Stripe, []string{stripeSecret}, http.Header{"Stripe-Signature": {idemwebhook.SignStripe(now, []byte(body), stripeSecret)}}, body, ""},
		{"stripe, rotated", idemwebhook.Stripe, []string{"whsec_new", stripeSecret}, http.Header{"Stripe-Signature": {idemwebhook.SignStripe(now, []byte(body), stripeSecret)}}, body, ""},
		{"stripe, forged", idemwebhook.Stripe, []string{stripeSecret}, http.Header{"Stripe-Signature": {idemwebhook.SignStripe(now, []byte(body), "whsec_guess")}}, body, idemwebhook.ReasonMismatch},
		{"stripe, expired", idemwebhook.Stripe, []string{stripeSecret}, http.Header{"Stripe-Signature": {idemwebhook.SignStripe(now.Add(-time.Hour), []byte(body), stripeSecret)}}, body, idemwebhook.ReasonExpired},
		{"stripe, unsigned", idemwebhook.Stripe, []string{stripeSecret}, http.Header{}, body, idemwebhook.ReasonUnsigned},
		{"stripe, no v1", idemwebhook.Stripe, []string{stripeSecret}, http.Header{"Stripe-Signature": {"t=1800000000,v0=abcd"}}, body, idemwebhook.ReasonMalformed},
		{"github", idemwebhook.GitHub, []string{githubSecret}, http.Header{"X-Hub-Signature-256": {idemwebhook.SignGitHub([]byte(body), githubSecret)}}, body, ""},
		{"github, forged", idemwebhook.GitHub, []string{githubSecret}, http.Header{"X-Hub-Signature-256": {idemwebhook.SignGitHub([]byte(body), "guess")}}, body, idemwebhook.ReasonMismatch},
		{"github, sha1 only", idemwebhook.GitHub, []string{githubSecret}, http.Header{"X-Hub-Signature": {"sha1=abcd"}}, body, idemwebhook.ReasonUnsigned},
		{"github, twice", idemwebhook.GitHub, []string{githubSecret}, http.Header{"X-Hub-Signature-256": {idemwebhook.SignGitHub([]byte(body), githubSecret), "sha256=00"}}, body, idemwebhook.ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := &idemwebhook.Verifier{Scheme: tc.scheme, Secrets: idemwebhook.Static(tc.secrets...), Now: func() time.Time { return now }}
			err := v.Verify(context.Background(), tc.h, []byte(tc.body))
			var refused *idemwebhook.Error
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && !errors.As(err, &refused):
				t.Fatalf("accepted (err %v), want refused as %s", err, tc.want)
			case tc.want != "" && refused.Reason != tc.want:
				t.Fatalf("refused as %s (%v), want %s", refused.Reason, err, tc.want)
			}
		})
	}
}

func TestSecretsErrorRefuses(t *testing.T) {
	t.Parallel()
	v := &idemwebhook.Verifier{Scheme: idemwebhook.GitHub, Secrets: func(context.Context) ([]string, error) {
		return nil, errors.New("vault sealed")
	}}
	err := v.Verify(context.Background(), http.Header{"X-Hub-Signature-256": {"sha256=00"}}, nil)
	var refused *idemwebhook.Error
	if !errors.As(err, &refused) || refused.Reason != idemwebhook.ReasonNoSecret {
		t.Fatalf("Verify = %v, want a no-secret refusal", err)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  idemwebhook.KeySource
		h    http.Header
		body string
		want string // "" refused
	}{
		{idemwebhook.KeySource{Header: "webhook-id"}, http.Header{"Webhook-Id": {"msg_1"}}, `{}`, "msg_1"},
		{idemwebhook.KeySource{Header: "X-GitHub-Delivery"}, http.Header{}, `{}`, ""},
		{idemwebhook.KeySource{Header: "webhook-id"}, http.Header{"Webhook-Id": {"a", "b"}}, `{}`, ""},
		{idemwebhook.KeySource{Pointer: "/id"}, nil, `{"id":"evt_1","object":"event"}`, "evt_1"},
		{idemwebhook.KeySource{Pointer: "/data/object/id"}, nil, `{"data":{"object":{"id":"ch_9"}}}`, "ch_9"},
		{idemwebhook.KeySource{Pointer: "/items/1"}, nil, `{"items":["a","b"]}`, "b"},
		{idemwebhook.KeySource{Pointer: "/a~1b"}, nil, `{"a/b":"x"}`, "x"},
		{idemwebhook.KeySource{Pointer: "/seq"}, nil, `{"seq":12345678901234567890}`, "12345678901234567890"},
		{idemwebhook.KeySource{Pointer: "/id"}, nil, `{"id":""}`, ""},
		{idemwebhook.KeySource{Pointer: "/id"}, nil, `{"id":{"nested":1}}`, ""},
		{idemwebhook.KeySource{Pointer: "/id"}, nil, `{"other":"x"}`, ""},
		{idemwebhook.KeySource{Pointer: "/id"}, nil, `not json`, ""},
	}
	for _, tc := range tests {
		got, err := tc.src.Key(tc.h, []byte(tc.body))
		var refused *idemwebhook.Error
		switch {
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("%s of %s = %q, %v; want %q", tc.src, tc.body, got, err, tc.want)
		case tc.want == "" && (!errors.As(err, &refused) || refused.Reason != idemwebhook.ReasonNoKey):
			t.Errorf("%s of %s = %q, %v; want a no-key refusal", tc.src, tc.body, got, err)
		}
	}
}

// A forged delivery's id is never read: Receive verifies first.
func TestReceiveVerifiesFirst(t *testing.T) {
	t.Parallel()
	r := &idemwebhook.Receiver{
		Verifier: idemwebhook.Verifier{Scheme: idemwebhook.Stripe, Secrets: idemwebhook.Static("whsec_x"), Now: func() time.Time { return now }},
		Key:      idemwebhook.KeySource{Pointer: "/id"},
	}
	body := []byte(`{"id":"evt_1"}`)
	key, err := r.Receive(context.Background(), http.Header{"Stripe-Signature": {idemwebhook.SignStripe(now, body, "whsec_x")}}, body)
	if err != nil || key != "evt_1" {
		t.Fatalf("Receive = %q, %v; want evt_1", key, err)
	}
	key, err = r.Receive(context.Background(), http.Header{"Stripe-Signature": {idemwebhook.SignStripe(now, body, "whsec_y")}}, body)
	if err == nil || key != "" {
		t.Fatalf("a forged delivery gave key %q (err %v)", key, err)
	}
}
