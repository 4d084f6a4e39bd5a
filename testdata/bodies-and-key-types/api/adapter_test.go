package api_test

// Behaviour of the generated adapter for a key header typed as a UUID, a body sent as JSON or as a
// form, and a claim made inside the business transaction. internal/cli's TestGenerateGolden runs
// it on the PostgreSQL of TEST_DATABASE_URL.

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"

	"idemgen.test/golden/bodies-and-key-types/api"
	"idemgen.test/golden/internal/goldenhttp"
)

type server struct{}

func (server) Donate(ctx context.Context, tx pgx.Tx, req api.DonateRequestObject) (api.DonateResponseObject, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO donations (campaign) VALUES ($1)`, req.Params.Campaign); err != nil {
		return nil, err
	}
	return api.Donate201Response{}, nil
}

func (server) PutPledge(ctx context.Context, tx pgx.Tx, req api.PutPledgeRequestObject) (api.PutPledgeResponseObject, error) {
	return api.PutPledge200Response{}, nil
}

func TestUUIDKeyFormBodyAndTransactionClaim(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	if _, err := sch.Pool.Exec(context.Background(), `CREATE TABLE donations (campaign text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(sch.Pool, &idem.Config{
		Schema: sch.Name,
		Tenant: func(context.Context) (string, error) { return "t", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	h := api.NewIdempotentHandler(server{}, store, nil)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	post := func(contentType, body, key string) (int, string) {
		h := http.Header{}
		if key != "" {
			h.Set("Idempotency-Key", key)
		}
		a := goldenhttp.Send(t, "POST", hs.URL+"/donations?campaign=trees", contentType, body, h)
		if a.Status == 400 {
			return a.Status, goldenhttp.ProblemCode(t, a)
		}
		return a.Status, a.Header.Get("Idempotent-Replayed")
	}

	const key = "0b6f2c9e-3a7d-4f1e-9c2b-5d8e7f6a1b2c"
	if status, code := post("application/json", `{"amount_minor": 5}`, "not-a-uuid"); status != 400 || code != idemhttp.CodeKeyInvalid {
		t.Errorf("malformed UUID key: %d %q, want 400 key-invalid (through IdempotencyParamErrorHandler)", status, code)
	}
	if status, code := post("application/json", `{"amount_minor": 5}`, ""); status != 400 || code != idemhttp.CodeKeyMissing {
		t.Errorf("no key: %d %q, want 400 key-missing", status, code)
	}
	if status, replayed := post("application/json", `{"amount_minor": 5}`, key); status != 201 || replayed != "" {
		t.Errorf("first: %d replayed=%q", status, replayed)
	}
	// The fingerprint covers the body as sent: the same donation sent as a form is another
	// request for this key (a client's retry repeats its own encoding).
	if status, _ := post("application/x-www-form-urlencoded", "amount_minor=5", key); status != 422 {
		t.Errorf("same key as a form: %d, want 422 key-reused", status)
	}
	const formKey = "1c7a3d0f-4b8e-4a2f-8d3c-6e9f0a7b2c3d"
	if status, replayed := post("application/x-www-form-urlencoded", "amount_minor=7&note=a", formKey); status != 201 || replayed != "" {
		t.Errorf("first form: %d replayed=%q", status, replayed)
	}
	// Forms are fingerprinted field by field: the order of differently named fields is no
	// difference.
	if status, replayed := post("application/x-www-form-urlencoded", "note=a&amount_minor=7", formKey); status != 201 || replayed != "true" {
		t.Errorf("form retry, fields reordered: %d replayed=%q, want a replay", status, replayed)
	}
	var n int
	if err := sch.Pool.QueryRow(context.Background(), `SELECT count(*) FROM donations`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d donations (%v), want 2 (one per key)", n, err)
	}
}

func (server) PostNote(ctx context.Context, tx pgx.Tx, req api.PostNoteRequestObject) (api.PostNoteResponseObject, error) {
	_, err := tx.Exec(ctx, `INSERT INTO donations (campaign) VALUES ('note')`)
	return api.PostNote201Response{}, err
}

func (server) PostBlob(ctx context.Context, tx pgx.Tx, req api.PostBlobRequestObject) (api.PostBlobResponseObject, error) {
	if _, err := io.Copy(io.Discard, req.Body); err != nil { // the handler still reads the body it was given
		return nil, err
	}
	_, err := tx.Exec(ctx, `INSERT INTO donations (campaign) VALUES ('blob')`)
	return api.PostBlob201Response{}, err
}

func (server) Upload(ctx context.Context, tx pgx.Tx, req api.UploadRequestObject) (api.UploadResponseObject, error) {
	for {
		p, err := req.Body.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if _, err := io.Copy(io.Discard, p); err != nil {
			return nil, err
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO donations (campaign) VALUES ('upload')`)
	return api.Upload201Response{}, err
}

// Text, binary and multipart bodies are fingerprinted as sent: the same key with other bytes is
// key-reused, the same bytes replay, and a multipart body's random boundary is no difference.
func TestTextBinaryAndMultipartBodiesAreFingerprinted(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	if _, err := sch.Pool.Exec(context.Background(), `CREATE TABLE donations (campaign text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(sch.Pool, &idem.Config{Schema: sch.Name, Tenant: func(context.Context) (string, error) { return "t", nil }})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.NewIdempotentHandler(server{}, store, nil))
	t.Cleanup(hs.Close)
	post := func(path, contentType, body, key string) (int, string) {
		t.Helper()
		a := goldenhttp.Send(t, "POST", hs.URL+path, contentType, body, http.Header{"Idempotency-Key": {key}})
		if a.Status >= 400 {
			return a.Status, goldenhttp.ProblemCode(t, a)
		}
		return a.Status, a.Header.Get("Idempotent-Replayed")
	}
	multipartBody := func(boundary, title, file string) (string, string) {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		if err := w.SetBoundary(boundary); err != nil {
			t.Fatal(err)
		}
		_ = w.WriteField("title", title)
		fw, _ := w.CreateFormFile("file", "a.txt")
		_, _ = io.WriteString(fw, file)
		_ = w.Close()
		return w.FormDataContentType(), b.String()
	}
	ctA, bodyA := multipartBody("boundary-one", "report", "hello")
	ctB, bodyB := multipartBody("another-boundary-2", "report", "hello")
	ctC, bodyC := multipartBody("boundary-one", "report", "HELLO")
	for _, c := range []struct {
		what, path, ct, first, same, other string
		sameCT, otherCT                    string
	}{
		{"text", "/notes", "text/plain", "buy milk", "buy milk", "buy bread", "text/plain", "text/plain"},
		{"binary", "/blobs", "application/octet-stream", "\x00\x01\x02", "\x00\x01\x02", "\x00\x01\x03", "application/octet-stream", "application/octet-stream"},
		{"multipart", "/uploads", ctA, bodyA, bodyB, bodyC, ctB, ctC},
	} {
		key := "k-" + c.what
		if status, replayed := post(c.path, c.ct, c.first, key); status != 201 || replayed != "" {
			t.Errorf("%s first: %d replayed=%q", c.what, status, replayed)
		}
		if status, replayed := post(c.path, c.sameCT, c.same, key); status != 201 || replayed != "true" {
			t.Errorf("%s, the same content again: %d replayed=%q, want a replay", c.what, status, replayed)
		}
		if status, code := post(c.path, c.otherCT, c.other, key); status != 422 || code != idemhttp.CodeKeyReused {
			t.Errorf("%s, other content, same key: %d %q, want 422 key-reused", c.what, status, code)
		}
	}
	var n int
	if err := sch.Pool.QueryRow(context.Background(), `SELECT count(*) FROM donations`).Scan(&n); err != nil || n != 3 {
		t.Errorf("%d rows (%v), want 3: one execution per key", n, err)
	}
}
