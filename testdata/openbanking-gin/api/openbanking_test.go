package api_test

// An Open Banking–style payments API on gin, over real HTTP and a real PostgreSQL: refusals in
// the API's own error format (OBErrorResponse1) with its interaction id, a retry with a new
// signature and a refreshed token replayed, the spec's key rules enforced, a unique violation
// handled with a savepoint answered (and replayed) as the handler's 400, and an operation the
// server does not implement answered 501 in the API's format.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"

	"idemgen.test/golden/internal/goldenhttp"
	"idemgen.test/golden/openbanking-gin/api"
)

// obMediaType is the media type the spec declares for OBErrorResponse1.
const obMediaType = "application/json; charset=utf-8"

// obErrorCodes maps the runtime's refusal codes to the API's own error codes.
var obErrorCodes = map[string]string{
	idemhttp.CodeKeyMissing:     "UK.OBIE.Header.Missing",
	idemhttp.CodeKeyInvalid:     "UK.OBIE.Header.Invalid",
	idemhttp.CodeKeyReused:      "UK.OBIE.Resource.ConsentMismatch",
	idemhttp.CodeInProgress:     "UK.OBIE.Resource.InvalidConsentStatus",
	idemhttp.CodeNotImplemented: "UK.OBIE.NotSupported",
}

// obRenderer writes the runtime's refusals as OBErrorResponse1.
var obRenderer = idemhttp.RendererFunc(func(w http.ResponseWriter, r *http.Request, p *idemhttp.Problem) error {
	code, ok := obErrorCodes[p.Code]
	if !ok {
		code = "UK.OBIE.UnexpectedError"
	}
	id := r.Header.Get("x-fapi-interaction-id")
	body, err := json.Marshal(api.OBErrorResponse1{
		Code:    fmt.Sprint(p.Status),
		Id:      &id,
		Message: p.Title,
		Errors:  []api.OBError1{{ErrorCode: code, Message: p.Detail}},
	})
	if err != nil {
		return err
	}
	// The API answers every request with its interaction id; an idempotent operation's refusals
	// have it already (x-idempotency echoHeaders), the others get it here.
	if w.Header().Get("x-fapi-interaction-id") == "" && id != "" {
		w.Header().Set("x-fapi-interaction-id", id)
	}
	w.Header().Set("Content-Type", obMediaType)
	w.WriteHeader(p.Status)
	_, err = w.Write(body)
	return err
})

// server implements createDomesticPayments; the other operations are left to the generated
// UnimplementedIdempotentServer.
type server struct {
	api.UnimplementedIdempotentServer
}

func (server) CreateDomesticPayments(ctx context.Context, tx pgx.Tx, req api.CreateDomesticPaymentsRequestObject) (api.CreateDomesticPaymentsResponseObject, error) {
	in := req.Body.Data
	interaction := ""
	if req.Params.XFapiInteractionId != nil {
		interaction = *req.Params.XFapiInteractionId
	}
	// An expected constraint violation runs in a savepoint (tx.Begin inside the handler's
	// transaction): rolling the savepoint back leaves tx usable, so the handler's own answer
	// commits with the stored outcome.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	var id string
	err = sp.QueryRow(ctx, `INSERT INTO ob_payments (end_to_end_id, consent_id, amount, currency)
		VALUES ($1, $2, $3, $4) RETURNING id::text`,
		in.Initiation.EndToEndIdentification, in.ConsentId, in.Initiation.InstructedAmount.Amount, in.Initiation.InstructedAmount.Currency).Scan(&id)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		if err := sp.Rollback(ctx); err != nil {
			return nil, err
		}
		path := "Data.Initiation.EndToEndIdentification"
		return api.CreateDomesticPayments400ApplicationJSONCharsetUTF8Response{N400ErrorApplicationJSONCharsetUTF8Response: api.N400ErrorApplicationJSONCharsetUTF8Response{
			Body: api.OBErrorResponse1{Code: "400", Message: "Duplicate payment", Errors: []api.OBError1{{
				ErrorCode: "UK.OBIE.Field.Duplicate", Message: "a payment with this EndToEndIdentification exists", Path: &path}}},
			Headers: api.N400ErrorResponseHeaders{XFapiInteractionId: interaction},
		}}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, err
	}
	var resp api.OBWriteDomesticResponse5
	resp.Data.DomesticPaymentId, resp.Data.ConsentId, resp.Data.Status = id, in.ConsentId, "AcceptedSettlementInProcess"
	sig := "server-signature-" + id
	return api.CreateDomesticPayments201JSONResponse{Body: resp,
		Headers: api.CreateDomesticPayments201ResponseHeaders{XFapiInteractionId: interaction, XJwsSignature: &sig}}, nil
}

func TestOpenBankingOnGin(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	sch := idemtest.TestSchema(t, nil)
	ctx := context.Background()
	if _, err := sch.Pool.Exec(ctx, `CREATE TABLE ob_payments (
		id bigint GENERATED ALWAYS AS IDENTITY, end_to_end_id text NOT NULL UNIQUE,
		consent_id text NOT NULL, amount text NOT NULL, currency text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(sch.Pool, &idem.Config{Schema: sch.Name})
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	api.RegisterIdempotentHandlers(e, server{}, store, &api.IdempotentHandlerOptions{Renderer: obRenderer})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()

	send := func(t *testing.T, method, path, body string, h map[string]string) goldenhttp.Answer {
		t.Helper()
		header := http.Header{}
		for k, v := range h {
			header.Set(k, v)
		}
		return goldenhttp.Send(t, method, base+path, "application/json", body, header)
	}
	payment := func(e2e string) string {
		return `{"Data":{"ConsentId":"c-1","Initiation":{"InstructionIdentification":"i-1","EndToEndIdentification":"` + e2e + `","InstructedAmount":{"Amount":"10.50","Currency":"GBP"}}}}`
	}
	attempt := func(key, token, sig, interaction string) map[string]string {
		return map[string]string{"x-idempotency-key": key, "Authorization": "Bearer " + token,
			"x-jws-signature": sig, "x-fapi-interaction-id": interaction, "x-fapi-auth-date": time.Now().Format(time.RFC1123)}
	}
	// obError checks that a is an OBErrorResponse1 refusal with status and error code, carrying
	// the request's interaction id.
	obError := func(t *testing.T, a goldenhttp.Answer, status int, code, interaction string) {
		t.Helper()
		if a.Status != status || a.Header.Get("Content-Type") != obMediaType {
			t.Fatalf("want %d %s, got %d %q: %s", status, obMediaType, a.Status, a.Header.Get("Content-Type"), a.Body)
		}
		var ob api.OBErrorResponse1
		if err := json.Unmarshal([]byte(a.Body), &ob); err != nil || len(ob.Errors) != 1 {
			t.Fatalf("not an OBErrorResponse1 with one error: %s (%v)", a.Body, err)
		}
		if ob.Errors[0].ErrorCode != code {
			t.Errorf("ErrorCode %q, want %q: %s", ob.Errors[0].ErrorCode, code, a.Body)
		}
		if got := a.Header.Get("x-fapi-interaction-id"); got != interaction {
			t.Errorf("x-fapi-interaction-id %q, want the request's %q", got, interaction)
		}
		if strings.Contains(a.Body, "urn:idemgen:problem") {
			t.Errorf("a refusal in the API's format still carries a problem type: %s", a.Body)
		}
	}
	payments := func(t *testing.T) int { t.Helper(); return goldenhttp.Count(t, sch.Pool, "ob_payments") }

	key := "6f1d2a9c-1b7e-4c3e-9a51-0d2f7b8e4c11"
	first := send(t, "POST", "/domestic-payments", payment("e2e-1"), attempt(key, "token-1", "sig-1", "ia-1"))
	if first.Status != http.StatusCreated || first.Replayed() || first.Header.Get("x-fapi-interaction-id") != "ia-1" {
		t.Fatalf("first payment: %s, interaction id %q", first, first.Header.Get("x-fapi-interaction-id"))
	}

	t.Run("a retry with a new signature and a refreshed token replays", func(t *testing.T) {
		again := send(t, "POST", "/domestic-payments", payment("e2e-1"), attempt(key, "token-2-refreshed", "sig-2-fresh", "ia-2"))
		if again.Status != http.StatusCreated || !again.Replayed() || again.Body != first.Body {
			t.Fatalf("retry: %s, want the first answer replayed: %s", again, first)
		}
		// The interaction id is the retry's own, never the stored one.
		if got := again.Header.Get("x-fapi-interaction-id"); got != "ia-2" {
			t.Errorf("replay's x-fapi-interaction-id %q, want the retry's ia-2", got)
		}
		if n := payments(t); n != 1 {
			t.Errorf("%d payments after a retry, want 1", n)
		}
	})

	t.Run("a 41-character key is refused in the API's format", func(t *testing.T) {
		long := strings.Repeat("a", 41)
		a := send(t, "POST", "/domestic-payments", payment("e2e-long"), attempt(long, "t", "s", "ia-long"))
		obError(t, a, http.StatusBadRequest, "UK.OBIE.Header.Invalid", "ia-long")
		if !strings.Contains(a.Body, "41 characters long") {
			t.Errorf("the detail does not say why: %s", a.Body)
		}
		forty := send(t, "POST", "/domestic-payments", payment("e2e-forty"), attempt(strings.Repeat("b", 40), "t", "s", "ia-40"))
		if forty.Status != http.StatusCreated {
			t.Errorf("a 40-character key: %s, want 201", forty)
		}
	})

	t.Run("a key outside the spec's pattern is refused", func(t *testing.T) {
		a := send(t, "POST", "/domestic-payments", payment("e2e-pattern"), attempt("under_score", "t", "s", "ia-pat"))
		obError(t, a, http.StatusBadRequest, "UK.OBIE.Header.Invalid", "ia-pat")
	})

	t.Run("a missing key and a reused key are refused in the API's format", func(t *testing.T) {
		h := attempt("", "t", "s", "ia-missing")
		delete(h, "x-idempotency-key")
		obError(t, send(t, "POST", "/domestic-payments", payment("e2e-x"), h), http.StatusBadRequest, "UK.OBIE.Header.Missing", "ia-missing")
		obError(t, send(t, "POST", "/domestic-payments", payment("e2e-other"), attempt(key, "t", "s", "ia-reused")),
			http.StatusUnprocessableEntity, "UK.OBIE.Resource.ConsentMismatch", "ia-reused")
	})

	t.Run("a unique violation handled with a savepoint answers the handler's 400", func(t *testing.T) {
		dupKey := "dup-0001"
		a := send(t, "POST", "/domestic-payments", payment("e2e-1"), attempt(dupKey, "t", "s", "ia-dup"))
		obError(t, a, http.StatusBadRequest, "UK.OBIE.Field.Duplicate", "ia-dup")
		again := send(t, "POST", "/domestic-payments", payment("e2e-1"), attempt(dupKey, "t2", "s2", "ia-dup-2"))
		if again.Status != http.StatusBadRequest || !again.Replayed() || again.Body != a.Body {
			t.Fatalf("retry of the duplicate: %s, want the stored 400 replayed: %s", again, a)
		}
		if got := again.Header.Get("x-fapi-interaction-id"); got != "ia-dup-2" {
			t.Errorf("replayed 400's x-fapi-interaction-id %q, want the retry's", got)
		}
		var state string
		if err := sch.Pool.QueryRow(ctx, `SELECT state FROM `+pgx.Identifier{sch.Name, "idempotency_keys"}.Sanitize()+` WHERE key = $1`, dupKey).Scan(&state); err != nil || state != "complete" {
			t.Errorf("the duplicate's key: state %q (%v), want complete: the 400 is a stored outcome", state, err)
		}
	})

	t.Run("an operation the server does not implement answers 501 in the API's format", func(t *testing.T) {
		obError(t, send(t, "GET", "/domestic-payments/1", "", map[string]string{"Authorization": "Bearer t", "x-fapi-interaction-id": "ia-get"}),
			http.StatusNotImplemented, "UK.OBIE.NotSupported", "ia-get")
		obError(t, send(t, "POST", "/domestic-payment-consents", payment("e2e-consent"), attempt("consent-1", "t", "s", "ia-consent")),
			http.StatusNotImplemented, "UK.OBIE.NotSupported", "ia-consent")
	})
}
