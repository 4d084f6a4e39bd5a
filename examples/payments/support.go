package payments

import (
	"crypto/subtle"
	"net/http"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

// supportPath is where the example serves idemadmin's support page.
const supportPath = "/admin/idempotency"

// withSupportPage serves the read-only support page at supportPath, behind HTTP Basic
// authentication (user admin, password token), and everything else through api. The page
// stands outside the tenant check: support looks at every tenant's keys. A real application
// puts it behind its own staff authentication instead.
func withSupportPage(api http.Handler, store *idem.Store, recent *idemadmin.Recent, token string) http.Handler {
	page := idemadmin.NewHandler(store, &idemadmin.Options{
		Title:  "Payments: idempotency keys",
		Recent: recent,
		// capturePayment stores the payment id: the page links it to the payment.
		ReferenceURLs: map[string]string{"capturePayment": "/v1/payments/{reference}"},
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
