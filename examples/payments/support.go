package payments

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

// supportPath is where the example serves idemadmin's support page.
const supportPath = "/admin/idempotency"

// withSupportPage serves the support page at supportPath, behind HTTP Basic authentication
// (user admin, password token), and everything else through api. The page stands outside the
// tenant check: support looks at every tenant's keys. Its resolve form is on: the admin settles
// uncertain keys there, and the key's history records them as "admin". A real application puts
// the page behind its own staff authentication instead, and returns the signed-in user's name
// from Resolve (or "" for staff who may only look).
func withSupportPage(api http.Handler, store *idem.Store, recent *idemadmin.Recent, token string) http.Handler {
	// Every process started with the same admin token signs the resolve form alike, so a form
	// rendered by one is accepted by another behind a load balancer.
	secret := sha256.Sum256([]byte("payments support page resolve form\x00" + token))
	page := idemadmin.NewHandler(store, &idemadmin.Options{
		Title:  "Payments: idempotency keys",
		Recent: recent,
		// capturePayment stores the payment id: the page links it to the payment.
		ReferenceURLs: map[string]string{"capturePayment": "/v1/payments/{reference}"},
		// requireAdmin has let the request through: the user is the admin.
		Resolve: func(r *http.Request) string {
			user, _, _ := r.BasicAuth()
			return user
		},
		TokenSecret: secret[:],
	})
	mux := http.NewServeMux()
	mux.Handle(supportPath, requireAdmin(token, page))
	mux.Handle("/", api)
	return mux
}

func requireAdmin(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != "admin" || subtle.ConstantTimeCompare([]byte(pass), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="payments support", charset="UTF-8"`)
			http.Error(w, "401 unauthorized: the support page needs the user admin and the -admin-token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
