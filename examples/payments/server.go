package payments

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemprom"
)

// tenantHeader stands in for authentication; see the spec's TenantID parameter.
const tenantHeader = "X-Tenant-ID"

type tenantKey struct{}

// TenantFrom returns the request's tenant, which [OuterHandler]'s tenant check put in ctx.
func TenantFrom(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(tenantKey{}).(string)
	return t, ok && t != ""
}

// requireTenant answers 401 to a request without a tenant. It wraps the whole API, so it runs
// before oapi-codegen binds parameters and before idemgen's adapter claims a key: an
// unauthenticated request never binds a key.
func requireTenant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := r.Header.Get(tenantHeader)
		if tenant == "" || len(tenant) > 64 {
			writeProblem(w, problem(http.StatusUnauthorized, "unauthenticated", "Missing tenant",
				"send the "+tenantHeader+" header (1 to 64 bytes); it stands in for authentication in this example"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

// tenantForStore is idem.Config.Tenant: idempotency keys are scoped by tenant.
func tenantForStore(ctx context.Context) (string, error) {
	t, ok := TenantFrom(ctx)
	if !ok {
		return "", fmt.Errorf("payments: no tenant in the request context (is requireTenant installed?)")
	}
	return t, nil
}

var currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)

// accountRE is the spec's pattern for an account: what the bank accepts. Checked before the key
// is claimed, an account the bank would refuse (a NUL byte, a control character) never reaches
// it, so no client can leave a key uncertain with one.
var accountRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// checkMoneyTo is what Validate says of an amount sent to an account (a payout, a transfer), or
// "" when it is valid.
func checkMoneyTo(amountMinor int64, currency, account string) string {
	switch {
	case amountMinor < 1:
		return fmt.Sprintf("amount_minor must be at least 1, got %d", amountMinor)
	case !currencyRE.MatchString(currency):
		return fmt.Sprintf("currency must be an upper-case ISO 4217 code such as RUB, got %q", currency)
	case account == "" || len(account) > 64:
		return "account must be 1 to 64 characters"
	case !accountRE.MatchString(account):
		return "account may hold only letters, digits, '.', '_' and '-'"
	}
	return ""
}

// Validate checks what oapi-codegen's binding does not (minimum, pattern). It is a strict
// middleware, so it runs after binding and BEFORE idemgen's adapter claims the key: an invalid
// request is answered 400 and never binds a key.
func Validate(next api.StrictHandlerFunc, operationID string) api.StrictHandlerFunc {
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		var detail string
		switch req := request.(type) {
		case api.CreatePaymentRequestObject:
			switch {
			case req.Body == nil:
				detail = "the body is required"
			case req.Body.AmountMinor < 1:
				detail = fmt.Sprintf("amount_minor must be at least 1, got %d", req.Body.AmountMinor)
			case !currencyRE.MatchString(req.Body.Currency):
				detail = fmt.Sprintf("currency must be an upper-case ISO 4217 code such as RUB, got %q", req.Body.Currency)
			}
		case api.CreatePayoutRequestObject:
			if req.Body == nil {
				detail = "the body is required"
			} else {
				detail = checkMoneyTo(req.Body.AmountMinor, req.Body.Currency, req.Body.Account)
			}
		case api.CreateTransferRequestObject:
			if req.Body == nil {
				detail = "the body is required"
			} else {
				detail = checkMoneyTo(req.Body.AmountMinor, req.Body.Currency, req.Body.Account)
			}
		case api.RefundPaymentRequestObject:
			switch {
			case req.Body == nil:
				detail = "the body is required"
			case req.Body.AmountMinor < 1:
				detail = fmt.Sprintf("amount_minor must be at least 1, got %d", req.Body.AmountMinor)
			}
		}
		if detail != "" {
			writeProblem(w, problemResponse{idemhttp.NewProblem(http.StatusBadRequest, idemhttp.CodeRequestInvalid, operationID+": "+detail)})
			return nil, nil // nil response: the strict handler writes nothing more
		}
		return next(ctx, w, r, request)
	}
}

// writeProblem answers a problem outside the strict server (before routing, or for errors it
// hands back), the same way as the handlers' problemResponse.
func writeProblem(w http.ResponseWriter, p problemResponse) {
	// An error here is a client that went away; there is no one left to answer.
	_ = p.WriteTo(w)
}

// NewHandler builds the whole HTTP stack: /healthz, /metrics, and the API behind the tenant check, with
// idemgen's adapter between oapi-codegen's strict server and the handlers in payments.go.
func NewHandler(pool *pgxpool.Pool, cfg *idem.Config, log *slog.Logger) (http.Handler, error) {
	h, _, err := newService(pool, cfg, log)
	return h, err
}

// newService is NewHandler that also returns the idempotency store, for main to close on
// shutdown (it stops the store's listener and waits for its background release retries).
func newService(pool *pgxpool.Pool, cfg *idem.Config, log *slog.Logger) (http.Handler, *idem.Store, error) {
	return newServiceWith(pool, cfg, log, serviceOptions{})
}

// serviceOptions are what main sets beyond newService's defaults.
type serviceOptions struct {
	// Mode is the claim mode the API is served in (claimmode.go); zero means lease.
	Mode idem.ClaimMode
	// BankURL is the bank transfers are made through (transfers.go); "" answers transfers 503
	// bank-unavailable.
	BankURL string
	// WebhookSecrets are the secrets the bank signs its settlement webhooks with (settlements.go):
	// more than one while it rotates them. None: every delivery is answered 500.
	WebhookSecrets []string
}

// newServiceWith is newService with opts.
func newServiceWith(pool *pgxpool.Pool, cfg *idem.Config, log *slog.Logger, opts serviceOptions) (http.Handler, *idem.Store, error) {
	mode := opts.Mode
	if mode == 0 {
		mode = idem.ClaimLease
	}
	c := idem.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Tenant = tenantForStore
	if c.Logger == nil {
		c.Logger = log
	}
	// A registry of the handler's own, not the global one: tests build several handlers in one
	// process, and each must count only its own requests.
	metrics := idemprom.New(&idemprom.Options{Operations: []string{"createPayment", "capturePayment", "refundPayment", "createPayout", "createTransfer", "receiveBankSettlement"}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	c.Observer = idemprom.Chain(metrics.Observer(), c.Observer)
	store, err := idem.NewStore(pool, &c)
	if err != nil {
		return nil, nil, fmt.Errorf("idempotency store: %w", err)
	}
	// The key table's own gauges (stale in-flight keys and the like), for the shipped alerts.
	reg.MustRegister(idemprom.NewKeyStats(store, nil))

	// The generated default wiring: bodies kept as sent for the fingerprint (and capped), and
	// every binding error, unknown route and handler error answered as a problem. validate runs
	// after binding and before the adapter claims a key.
	handlers, err := newPayments(pool, c.Schema, log)
	if err != nil {
		return nil, nil, err
	}
	if opts.BankURL != "" {
		handlers.bank = newBankClient(opts.BankURL, bankTimeout)
	}
	handlers.webhookSecrets = opts.WebhookSecrets
	apiHandler := NewIdempotentAPI(mode, handlers, store)
	return OuterHandler(pool, log, apiHandler, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), store, nil
}

// NewAPI returns the example's handlers, the implementation of the generated
// api.IdempotentServerInterface: payments on pool, payouts enqueued as River jobs in schema
// (see payouts.go). [NewHandler] serves them behind idemgen's adapter.
func NewAPI(pool *pgxpool.Pool, schema string, log *slog.Logger) (api.IdempotentServerInterface, error) {
	return newPayments(pool, schema, log)
}

// newPayments is NewAPI as its own type, without a bank (transfers answer bank-unavailable).
func newPayments(pool *pgxpool.Pool, schema string, log *slog.Logger) (*payments, error) {
	jobs, err := newJobInserter(pool, schema, log)
	if err != nil {
		return nil, err
	}
	return &payments{db: pool, jobs: jobs}, nil
}

// OuterHandler wraps the routed API in what every request passes first: the access log,
// /healthz, /metrics (when metrics is not nil), and the tenant check ([TenantFrom] reads it).
// NewHandler and the benchmark's other servers (bench/) share it, so they differ only in the API
// behind it.
func OuterHandler(pool *pgxpool.Pool, log *slog.Logger, api, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			// The cause goes to the log, never to the client: it can name hosts and addresses.
			log.WarnContext(r.Context(), "healthz: database unreachable", "err", err)
			writeProblem(w, problem(http.StatusServiceUnavailable, "database-unavailable", "Database unavailable",
				"the database did not answer a ping within 2s"))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	if metrics != nil {
		// Outside the tenant check, like /healthz: a scraper is no tenant.
		mux.Handle("GET /metrics", metrics)
	}
	mux.Handle("/", requireTenant(api))
	// The bank's webhooks carry no tenant: their signature authenticates them (settlements.go).
	mux.Handle("POST /webhooks/", api)
	return accessLog(log, mux)
}

// The limits no client can stretch: a request's head and body must arrive in time, an answer
// must be taken in time, and an idle connection is closed. Request bodies are capped by the
// generated handler (1 MiB, 413 body-too-large); the body's ReadTimeout also bounds a client
// that trickles it.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 75 * time.Second // longer than a handler may run (its lease, 60s by default), so a slow success still reaches the client
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
)

// newServer is the example's http.Server: handler behind the limits above.
func newServer(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func accessLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		log.InfoContext(r.Context(), "request",
			"method", r.Method, "path", r.URL.Path, "status", sw.status,
			"replayed", sw.Header().Get("Idempotent-Replayed") == "true",
			"duration", time.Since(start).Round(time.Microsecond))
	})
}
