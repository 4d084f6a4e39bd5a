package payments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// errSimulatedFailure is what CreatePayment returns for simulate_failure: a processor that failed
// after the payment's writes were made (or deferred), so the rollback and the key release are
// visible.
var errSimulatedFailure = errors.New("payments: simulated processor failure (simulate_failure: true)")

// keyRule mirrors the spec's Idempotency-Key, for normalising the key on a marker replay, where no
// claim is held and ClaimFromContext has nothing to offer.
var keyRule = idemhttp.KeyRule{Header: "Idempotency-Key", Required: true, MaxLength: 255}

// payments implements api.IdempotentServerInterface. Idempotent operations run inside the
// transaction idemgen's adapter opened: the business rows and the stored outcome commit together.
type payments struct {
	db   *pgxpool.Pool
	jobs *river.Client[pgx.Tx] // inserts payout jobs (payouts.go)
	bank *bankClient           // transfers (transfers.go); nil without a bank
	// webhookSecrets sign the bank's settlement webhooks (settlements.go); none refuses them.
	webhookSecrets []string
}

var _ api.IdempotentServerInterface = (*payments)(nil)

// derivedID is prefix + the first 24 hex digits of SHA-256(tenant NUL key). Deriving resource ids
// from the idempotency key makes the database itself refuse a second resource for one key.
func derivedID(prefix, tenant, key string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + key))
	return prefix + hex.EncodeToString(sum[:])[:24]
}

// claimed returns the request's tenant and the key of the claim the adapter holds for ctx.
func claimed(ctx context.Context) (tenant, key string, err error) {
	tenant, ok := TenantFrom(ctx)
	if !ok {
		return "", "", errors.New("payments: no tenant in the request context (is the tenant middleware installed?)")
	}
	c, ok := idem.ClaimFromContext(ctx)
	if !ok {
		return "", "", errors.New("payments: no idempotency claim in the context (is the handler wired through api.NewIdempotentServer?)")
	}
	return tenant, c.Key, nil
}

// event is one row of the ledger, payment_events.
type event struct {
	tenant, paymentID string
	refundID          string // refunded events only
	kind              string // authorized, captured or refunded
	amountMinor       int64
	key               string // the idempotency key the request carried
}

// record appends ev to the ledger inside the handler's transaction. Every handler that moves
// money writes exactly one event per execution, and the ledger has no unique key that could
// absorb a second one: the number of events for a key is the number of times a handler acted
// on it, which is what the exactly-once tests count.
func record(ctx context.Context, tx pgx.Tx, ev event) error {
	if _, err := tx.Exec(ctx, recordSQL, ev.args()...); err != nil {
		return ev.failed(err)
	}
	return nil
}

// recordSQL appends one event to the ledger.
const recordSQL = `
		INSERT INTO payment_events (tenant_id, payment_id, refund_id, kind, amount_minor, idempotency_key)
		VALUES ($1, $2, $3, $4, $5, $6)`

// args are recordSQL's parameters for ev.
func (ev event) args() []any {
	var refundID *string
	if ev.refundID != "" {
		refundID = &ev.refundID
	}
	return []any{ev.tenant, ev.paymentID, refundID, ev.kind, ev.amountMinor, ev.key}
}

// failed is the error of ev's insert.
func (ev event) failed(err error) error {
	return fmt.Errorf("payments: record the %s event of payment %s in the ledger: %w", ev.kind, ev.paymentID, err)
}

// createPaymentSQL inserts a new payment (CreatePaymentTx).
const createPaymentSQL = `
		INSERT INTO payments (tenant_id, payment_id, status, amount_minor, currency, created_at)
		VALUES ($1, $2, 'authorized', $3, $4, $5)`

const paymentColumns = `payment_id, status, amount_minor, currency, amount_refunded_minor, created_at, captured_at`

func scanPayment(row pgx.Row) (api.Payment, error) {
	var (
		p        api.Payment
		status   string
		captured *time.Time
	)
	if err := row.Scan(&p.PaymentId, &status, &p.AmountMinor, &p.Currency, &p.AmountRefundedMinor, &p.CreatedAt, &captured); err != nil {
		return api.Payment{}, err
	}
	p.Status = api.PaymentStatus(status)
	// UTC, so the JSON does not depend on the server's time zone.
	p.CreatedAt = p.CreatedAt.UTC()
	if captured != nil {
		t := captured.UTC()
		p.CapturedAt = &t
	}
	return p, nil
}

// querier is what pgx.Tx and *pgxpool.Pool share: handlers read through the adapter's
// transaction, replays and GET through the pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// loadPayment reads a payment of the request's tenant; lock adds FOR UPDATE.
func loadPayment(ctx context.Context, q querier, id string, lock bool) (api.Payment, error) {
	tenant, _ := TenantFrom(ctx)
	sql := `SELECT ` + paymentColumns + ` FROM payments WHERE tenant_id = $1 AND payment_id = $2`
	if lock {
		sql += ` FOR UPDATE`
	}
	return scanPayment(q.QueryRow(ctx, sql, tenant, id))
}

func (s *payments) CreatePayment(ctx context.Context, tx pgx.Tx, req api.CreatePaymentRequestObject) (api.CreatePaymentResponseObject, error) {
	tenant, key, err := claimed(ctx)
	if err != nil {
		return nil, err
	}
	return CreatePaymentTx(ctx, tx, tenant, key, req.Body)
}

// CreatePaymentTx is CreatePayment's business work inside the caller's tx, for tenant, the
// payment named after key: a payment row and its ledger event. It takes no claim, so a caller
// that holds none (the benchmark's ceiling and its hand-written peers) runs exactly this work.
func CreatePaymentTx(ctx context.Context, tx pgx.Tx, tenant, key string, body *api.CreatePaymentJSONRequestBody) (api.CreatePaymentResponseObject, error) {
	// The answer is known before anything is written: the payment is named after the key and
	// stamped with this server's clock (to the microsecond, as PostgreSQL keeps it), so nothing
	// needs reading back. Its two writes are then deferred (idem.Defer): they travel with the
	// key's outcome and the COMMIT in one round trip, as a careful hand-written handler sends
	// them; a caller that holds no claim (the benchmark's ceiling and its peers) sends them at
	// once, in one round trip as well.
	p := api.Payment{
		PaymentId:   derivedID("pay_", tenant, key),
		Status:      "authorized",
		AmountMinor: body.AmountMinor,
		Currency:    body.Currency,
		CreatedAt:   time.Now().UTC().Truncate(time.Microsecond),
	}
	loc := "/v1/payments/" + p.PaymentId
	ev := event{tenant: tenant, paymentID: p.PaymentId, kind: "authorized", amountMinor: body.AmountMinor, key: key}
	err := idem.Defer(ctx, tx, idem.Write{
		SQL:  createPaymentSQL,
		Args: []any{tenant, p.PaymentId, body.AmountMinor, body.Currency, p.CreatedAt},
		// A payment with this id means the key was used before and its record has expired since
		// (keys live 24h): the key is refused, never answered as a success the client could take
		// for its own. The ledger event behind the insert does not run, and nothing is kept.
		Refuse: func(err *pgconn.PgError) error {
			if err.Code == "23505" && err.TableName == "payments" {
				return keyUsed("payment", loc).Problem
			}
			return nil
		},
	}, idem.Write{SQL: recordSQL, Args: ev.args()})
	if err != nil {
		return nil, err
	}
	if body.SimulateFailure != nil && *body.SimulateFailure {
		return nil, errSimulatedFailure // the writes are rolled back (or never sent), the key given back
	}
	return api.CreatePayment201JSONResponse{Body: p, Headers: api.CreatePayment201ResponseHeaders{Location: &loc}}, nil
}

func (s *payments) GetPayment(ctx context.Context, req api.GetPaymentRequestObject) (api.GetPaymentResponseObject, error) {
	p, err := loadPayment(ctx, s.db, req.PaymentId, false)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound(req.PaymentId), nil
	}
	if err != nil {
		return nil, fmt.Errorf("payments: read payment %s: %w", req.PaymentId, err)
	}
	return api.GetPayment200JSONResponse(p), nil
}

// CapturePayment is stored by reference: the payment id is what a replay reloads.
func (s *payments) CapturePayment(ctx context.Context, tx pgx.Tx, req api.CapturePaymentRequestObject) (api.CapturePaymentResponseObject, string, error) {
	tenant, key, err := claimed(ctx)
	if err != nil {
		return nil, "", err
	}
	p, err := loadPayment(ctx, tx, req.PaymentId, true)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound(req.PaymentId), "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("payments: capture payment %s: %w", req.PaymentId, err)
	}
	if p.Status != "authorized" {
		return problem(http.StatusConflict, "not-capturable", "Payment cannot be captured",
			"payment "+p.PaymentId+" is "+string(p.Status)+"; only an authorized payment can be captured"), "", nil
	}
	p, err = scanPayment(tx.QueryRow(ctx, `
		UPDATE payments SET status = 'captured', captured_at = now()
		WHERE tenant_id = $1 AND payment_id = $2
		RETURNING `+paymentColumns, tenant, req.PaymentId))
	if err != nil {
		return nil, "", fmt.Errorf("payments: capture payment %s: %w", req.PaymentId, err)
	}
	if err := record(ctx, tx, event{tenant: tenant, paymentID: p.PaymentId, kind: "captured", amountMinor: p.AmountMinor, key: key}); err != nil {
		return nil, "", err
	}
	return api.CapturePayment200JSONResponse(p), p.PaymentId, nil
}

// ReplayCapturePayment answers a repeated capture with the payment as it is now: refunds made
// since the first capture show up, which a byte-for-byte replay could not do.
func (s *payments) ReplayCapturePayment(ctx context.Context, req api.CapturePaymentRequestObject, reference string) (api.CapturePaymentResponseObject, error) {
	p, err := loadPayment(ctx, s.db, reference, false)
	if err != nil {
		// The payment this key captured is gone: nothing deletes payments, so this is a fault.
		return nil, fmt.Errorf("payments: replay capture: reload payment %s: %w", reference, err)
	}
	return api.CapturePayment200JSONResponse(p), nil
}

const refundColumns = `refund_id, payment_id, amount_minor, status, created_at`

func scanRefund(row pgx.Row) (api.Refund, error) {
	var (
		r      api.Refund
		status string
	)
	if err := row.Scan(&r.RefundId, &r.PaymentId, &r.AmountMinor, &status, &r.CreatedAt); err != nil {
		return api.Refund{}, err
	}
	r.Status = api.RefundStatus(status)
	r.CreatedAt = r.CreatedAt.UTC()
	return r, nil
}

// RefundPayment is stored as a marker: only the status is kept, and ReplayRefundPayment rebuilds
// the answer from the request and the database.
func (s *payments) RefundPayment(ctx context.Context, tx pgx.Tx, req api.RefundPaymentRequestObject) (api.RefundPaymentResponseObject, error) {
	tenant, key, err := claimed(ctx)
	if err != nil {
		return nil, err
	}
	id := derivedID("re_", tenant, key)
	p, err := loadPayment(ctx, tx, req.PaymentId, true)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound(req.PaymentId), nil
	}
	if err != nil {
		return nil, fmt.Errorf("payments: refund payment %s: %w", req.PaymentId, err)
	}

	// As in CreatePayment, a refund this key made already refuses the key. The payment lock above
	// serialises the refunds of one payment, so this sees any earlier one of the same payment;
	// a second execution that got past it would fail on the refund's primary key.
	var paymentOfRefund string
	err = tx.QueryRow(ctx, `SELECT payment_id FROM refunds WHERE tenant_id = $1 AND refund_id = $2`, tenant, id).Scan(&paymentOfRefund)
	switch {
	case err == nil:
		return keyUsed("refund "+id+" of", "/v1/payments/"+paymentOfRefund), nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("payments: refund payment %s: look for an earlier refund with this key: %w", p.PaymentId, err)
	}

	conflict := func(code, title, detail string) api.RefundPaymentResponseObject {
		return problem(http.StatusConflict, code, title, detail)
	}
	if p.Status == "authorized" {
		return conflict("not-refundable", "Payment cannot be refunded",
			"payment "+p.PaymentId+" is authorized; capture it before refunding"), nil
	}
	left := p.AmountMinor - p.AmountRefundedMinor
	if req.Body.AmountMinor > left {
		return conflict("refund-too-large", "Refund exceeds the payment",
			fmt.Sprintf("payment %s has %d left to refund; asked for %d", p.PaymentId, left, req.Body.AmountMinor)), nil
	}
	r, err := scanRefund(tx.QueryRow(ctx, `
		INSERT INTO refunds (tenant_id, refund_id, payment_id, amount_minor, status)
		VALUES ($1, $2, $3, $4, 'pending')
		RETURNING `+refundColumns, tenant, id, p.PaymentId, req.Body.AmountMinor))
	if err != nil {
		return nil, fmt.Errorf("payments: refund payment %s: insert refund %s: %w", p.PaymentId, id, err)
	}
	if _, err := tx.Exec(ctx, `
		UPDATE payments
		SET amount_refunded_minor = amount_refunded_minor + $3,
		    status = CASE WHEN amount_refunded_minor + $3 = amount_minor THEN 'refunded' ELSE status END
		WHERE tenant_id = $1 AND payment_id = $2`, tenant, p.PaymentId, req.Body.AmountMinor); err != nil {
		return nil, fmt.Errorf("payments: refund payment %s: %w", p.PaymentId, err)
	}
	if err := record(ctx, tx, event{tenant: tenant, paymentID: p.PaymentId, refundID: id, kind: "refunded", amountMinor: r.AmountMinor, key: key}); err != nil {
		return nil, err
	}
	return api.RefundPayment201JSONResponse(r), nil
}

// ReplayRefundPayment recomputes a repeated refund's answer: the refund this key created is found
// again through its derived id and shown in its current state (pending, or succeeded once the
// processor settled it).
func (s *payments) ReplayRefundPayment(ctx context.Context, req api.RefundPaymentRequestObject, status int) (api.RefundPaymentResponseObject, error) {
	if status != http.StatusCreated {
		// persist: [2xx] in the spec, and 201 is the only 2xx this operation answers.
		return nil, fmt.Errorf("payments: replay refund: stored status %d, want 201 (check persist in openapi.yaml)", status)
	}
	var raw []string
	if req.Params.IdempotencyKey != nil {
		raw = []string{*req.Params.IdempotencyKey}
	}
	key, prob := idemhttp.ParseKey(raw, keyRule)
	if prob != nil {
		return nil, fmt.Errorf("payments: replay refund: the key that was claimed does not parse: %s", prob.Detail)
	}
	tenant, _ := TenantFrom(ctx)
	id := derivedID("re_", tenant, key)
	r, err := scanRefund(s.db.QueryRow(ctx,
		`SELECT `+refundColumns+` FROM refunds WHERE tenant_id = $1 AND refund_id = $2`, tenant, id))
	if err != nil {
		return nil, fmt.Errorf("payments: replay refund: reload refund %s: %w", id, err)
	}
	return api.RefundPayment201JSONResponse(r), nil
}

// problemTypePrefix begins the type URI of the example's own problems; idemgen's runtime uses
// idemhttp.ProblemTypePrefix for the idempotency ones.
const problemTypePrefix = "urn:idemgen:example:payments:problem:"

// problemResponse is every problem the example answers with itself (404, 409, 422, and through
// writeProblem 400, 401, 500 and 503), written like the runtime writes its own: RFC 9457
// application/problem+json with Cache-Control: no-store (idemhttp.Problem.WriteTo). The generated
// ...ApplicationProblemPlusJSONResponse types would leave Cache-Control out, so a cache between
// client and server could keep a "not found" or a "not capturable" that is no longer true. It is
// a response object of every operation.
type problemResponse struct{ *idemhttp.Problem }

var (
	_ api.CreatePaymentResponseObject  = problemResponse{}
	_ api.GetPaymentResponseObject     = problemResponse{}
	_ api.CapturePaymentResponseObject = problemResponse{}
	_ api.RefundPaymentResponseObject  = problemResponse{}
)

func (p problemResponse) VisitCreatePaymentResponse(w http.ResponseWriter) error {
	return p.WriteTo(w)
}

func (p problemResponse) VisitGetPaymentResponse(w http.ResponseWriter) error {
	return p.WriteTo(w)
}

func (p problemResponse) VisitCapturePaymentResponse(w http.ResponseWriter) error {
	return p.WriteTo(w)
}

func (p problemResponse) VisitRefundPaymentResponse(w http.ResponseWriter) error {
	return p.WriteTo(w)
}

func problem(status int, code, title, detail string) problemResponse {
	return problemResponse{&idemhttp.Problem{
		Type:   problemTypePrefix + code,
		Title:  title,
		Status: status,
		Detail: detail,
		Code:   code,
	}}
}

func notFound(id string) problemResponse {
	return problem(http.StatusNotFound, "not-found", "Payment not found", "no payment "+id+" for this tenant")
}

// keyUsed refuses a key that already made a resource (what, at path) although the runtime let
// the handler run: its record has expired (keys live 24h) and the first answer cannot be replayed
// any more. It is the problem (status, type, code and title) the runtime answers for a key reused
// while its record exists; only the detail says more.
func keyUsed(what, path string) problemResponse {
	return problemResponse{idemhttp.NewProblem(http.StatusUnprocessableEntity, idemhttp.CodeKeyReused,
		"this Idempotency-Key already made "+what+" "+path+" and its record has expired, so the first answer cannot be replayed: GET "+path+" to see it, or send a new key for a new request")}
}
