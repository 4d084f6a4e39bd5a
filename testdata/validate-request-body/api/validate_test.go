package api_test

// validate-request-body over HTTP on gin: the idempotent operation's invalid body binds no key,
// the other operation's invalid body never reaches its handler.

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"

	"idemgen.test/golden/internal/goldenhttp"
	"idemgen.test/golden/internal/routertest"
	"idemgen.test/golden/validate-request-body/api"
)

type teams struct{ creates, renames atomic.Int64 }

func (s *teams) CreateTeam(ctx context.Context, tx pgx.Tx, req api.CreateTeamRequestObject) (api.CreateTeamResponseObject, error) {
	s.creates.Add(1)
	return api.CreateTeam201JSONResponse{TeamId: "t1", Name: req.Body.Name}, nil
}

func (s *teams) RenameTeam(ctx context.Context, req api.RenameTeamRequestObject) (api.RenameTeamResponseObject, error) {
	s.renames.Add(1)
	return api.RenameTeam200JSONResponse{TeamId: req.TeamId, Name: req.Body.Name}, nil
}

func (s *teams) GetTeam(ctx context.Context, req api.GetTeamRequestObject) (api.GetTeamResponseObject, error) {
	return api.GetTeam200JSONResponse{TeamId: req.TeamId, Name: "red"}, nil
}

func TestValidateRequestBody(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	sch := idemtest.TestSchema(t, nil)
	store, err := idem.NewStore(sch.Pool, &idem.Config{Schema: sch.Name})
	if err != nil {
		t.Fatal(err)
	}
	impl := &teams{}
	e := gin.New()
	api.RegisterIdempotentHandlers(e, impl, store, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	routertest.ServeHTTP(t, ln, e)
	url := "http://" + ln.Addr().String()
	keyed := http.Header{"Idempotency-Key": {"k1"}}
	send := func(method, path, body string, h http.Header) goldenhttp.Answer {
		return goldenhttp.Send(t, method, url+path, "application/json", body, h)
	}
	refused := func(what string, a goldenhttp.Answer, field string) {
		t.Helper()
		if a.Status != 400 || goldenhttp.ProblemCode(t, a) != "request-invalid" || !strings.Contains(a.Body, field) {
			t.Errorf("%s: %s; want 400 request-invalid naming %s", what, a, field)
		}
	}
	rows := func() int {
		var n int
		if err := sch.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+store.Table()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	refused("create, name too short", send("POST", "/v1/teams", `{"name": "x"}`, keyed), "/name")
	refused("create, an undeclared member", send("POST", "/v1/teams", `{"name": "red", "colour": "red"}`, keyed), "colour")
	if n := rows(); n != 0 || impl.creates.Load() != 0 {
		t.Fatalf("%d key rows and %d creates after invalid bodies; want none", n, impl.creates.Load())
	}
	if a := send("POST", "/v1/teams", `{"name": "red"}`, keyed); a.Status != 201 || a.Replayed() {
		t.Errorf("create, corrected, same key: %s; want a fresh 201", a)
	}
	if n := rows(); n != 1 || impl.creates.Load() != 1 {
		t.Errorf("%d key rows and %d creates after the valid request; want 1 and 1", n, impl.creates.Load())
	}

	refused("rename, name missing", send("PUT", "/v1/teams/t1", `{}`, nil), "/name")
	if n := impl.renames.Load(); n != 0 {
		t.Fatalf("the rename handler ran %d times for an invalid body; want 0", n)
	}
	if a := send("PUT", "/v1/teams/t1", `{"name": "blue"}`, nil); a.Status != 200 || impl.renames.Load() != 1 {
		t.Errorf("rename, valid: %s (%d runs); want 200, once", a, impl.renames.Load())
	}
	if a := send("GET", "/v1/teams/t1", "", nil); a.Status != 200 {
		t.Errorf("get, no body: %s; want 200", a)
	}
}
