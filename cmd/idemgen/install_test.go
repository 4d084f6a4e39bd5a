package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/idemgen/idemgen/runtime/idemtest"
)

// The tests below do what the README's Install section says, in scratch modules outside this
// repository, and then what a newcomer does next. Modules come from the module cache (served as
// a file:// module proxy), so they need no network once this repository's dependencies are
// downloaded; a release of idemgen is this checkout served by a local module proxy.

// toolEnv is the environment of the go command in a scratch module: the local proxies come
// first, then the module cache, so nothing already downloaded is fetched again, and then, if
// network is set, the developer's own proxy (unless it is off). Checksums come from the go.sum
// the test seeds.
func toolEnv(t *testing.T, network bool, local ...string) []string {
	t.Helper()
	cache := strings.TrimSpace(goEnv(t, "GOMODCACHE"))
	list := append(local, "file://"+filepath.ToSlash(filepath.Join(cache, "cache", "download")))
	if p := strings.TrimSpace(goEnv(t, "GOPROXY")); network && p != "" && p != "off" {
		list = append(list, p)
	}
	return append(os.Environ(),
		"GOPROXY="+strings.Join(list, ","),
		"GOFLAGS=-mod=mod "+os.Getenv("GOFLAGS"),
		"GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return string(out)
}

// run runs a command in dir and returns its stdout; it fails the test with everything the
// command printed when it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s in %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), dir, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// runScript runs a README shell block as it is written, stopping at the first command that fails.
func runScript(t *testing.T, dir string, env []string, b readmeBlock) string {
	t.Helper()
	return run(t, dir, env, "bash", "-euo", "pipefail", "-c", b.text)
}

// newUserModule creates a user's module, example.com/orders, in dir/orders, with go.sum seeded
// from this repository's (the module cache's checksums; the README's steps do not depend on it).
func newUserModule(t *testing.T, dir string, env []string) string {
	t.Helper()
	mod := filepath.Join(dir, "orders")
	if err := os.Mkdir(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, mod, env, "go", "mod", "init", "example.com/orders")
	copyGoSum(t, mod)
	return mod
}

// TestInstallFromCheckout runs the README's steps for a checkout (../idemgen next to the user's
// module, here a link to this repository) and then a newcomer's first hour with a single-tenant
// orders API: annotate, lint, generate, and a server built with idem.NewStore(pool, nil) that
// answers a request and replays it.
func TestInstallFromCheckout(t *testing.T) {
	t.Parallel()
	blocks := readmeBlocks(t, readmeNames...)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "idemgen")); err != nil {
		t.Fatal(err)
	}
	// The module cache holds idemgen's dependencies, but go mod tidy may want a module that
	// only a dependency's tests import: that one may come from the module proxy.
	env := toolEnv(t, true)
	mod := newUserModule(t, dir, env)

	out := runScript(t, mod, env, blocks[readmeInstallLocal])
	if want := "idemgen v0.0.0 (replaced by ../idemgen)\n"; !strings.HasSuffix(out, want) {
		t.Fatalf("README.md:%d: the install steps printed %q, want it to end with %q", blocks[readmeInstallLocal].line, out, want)
	}

	// The first hour: an orders API with one tenant and a 409 of its own.
	writeFile(t, filepath.Join(mod, "openapi.yaml"), ordersSpec)
	annotate := exec.Command("go", "tool", "idemgen", "annotate", "openapi.yaml", "-w")
	annotate.Dir, annotate.Env = mod, env
	msg, err := annotate.CombinedOutput()
	if err != nil {
		t.Fatalf("idemgen annotate: %v\n%s", err, msg)
	}
	if !strings.Contains(string(msg), "openapi.yaml: scope [operation] for 1 operation(s) (POST /v1/orders)") {
		t.Errorf("idemgen annotate does not say it chose scope [operation]:\n%s", msg)
	}
	lint := exec.Command("go", "tool", "idemgen", "lint", "openapi.yaml")
	lint.Dir, lint.Env = mod, env
	msg, err = lint.CombinedOutput()
	if err != nil || !strings.Contains(string(msg), "responses.409: this 409 now also answers a duplicate") {
		t.Errorf("idemgen lint: %v, want exit 0 and the conflict-status-shared warning for the out-of-stock 409:\n%s", err, msg)
	}
	writeFile(t, filepath.Join(mod, "idemgen.yaml"), "version: 1\nspec: openapi.yaml\npackage: api\noutput: api\n")
	writeFile(t, filepath.Join(mod, "api", "generate.go"), "package api\n\n//go:generate go tool idemgen generate -c ../idemgen.yaml\n")
	run(t, mod, env, "go", "generate", "./...")
	writeFile(t, filepath.Join(mod, "main.go"), ordersMain)
	run(t, mod, env, "go", "mod", "tidy")

	// The server runs on a database of its own, dropped when the test ends: NewStore(pool, nil)
	// keeps its keys in public.idempotency_keys, which on a server of the user's own
	// (TEST_DATABASE_URL) must not be left behind, nor found by the next run.
	u := throwawayDatabase(t)
	got := run(t, mod, append(env, "DATABASE_URL="+u.String(), "ORDER_KEY=order-1"), "go", "run", ".")
	want := "first: 201 replayed=\"\"\nretry: 201 replayed=\"true\" same body=true\norders in the database: 1\n"
	if got != want {
		t.Errorf("the single-tenant server printed\n%s\nwant\n%s", got, want)
	}
}

// ordersSpec is a newcomer's API: no security, no tenant header, and an out-of-stock 409.
const ordersSpec = `openapi: 3.0.3
info:
  title: Orders
  version: 1.0.0
paths:
  /v1/orders:
    post:
      operationId: createOrder
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              required: [sku]
              properties:
                sku: {type: string}
      responses:
        '201':
          description: Created.
          content:
            application/json:
              schema: {$ref: '#/components/schemas/Order'}
        '409':
          description: Out of stock.
components:
  schemas:
    Order:
      type: object
      required: [id, sku]
      properties:
        id: {type: string}
        sku: {type: string}
`

// throwawayDatabase creates a database of its own on the test server and drops it when t ends
// (ending its sessions first); it returns its URL.
func throwawayDatabase(t *testing.T) *url.URL {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "idemtest_install_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, idemtest.URL(t))
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u
}

// ordersMain is the newcomer's server, with no tenant configured: annotate chose scope
// [operation], so idem.NewStore(pool, nil) must be enough.
const ordersMain = `package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/orders/api"
)

type orders struct{}

func (orders) CreateOrder(ctx context.Context, tx pgx.Tx, req api.CreateOrderRequestObject) (api.CreateOrderResponseObject, error) {
	var o api.Order
	err := tx.QueryRow(ctx, "INSERT INTO orders (sku) VALUES ($1) RETURNING 'ord_' || id, sku", req.Body.Sku).Scan(&o.Id, &o.Sku)
	if err != nil {
		return nil, err
	}
	return api.CreateOrder201JSONResponse{Body: o}, nil
}

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	migrator, err := idem.NewMigrator(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, idem.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	store, err := idem.NewStore(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	h := api.NewIdempotentHandler(orders{}, store, nil)
	srv := httptest.NewServer(h)
	defer srv.Close()
	send := func() (int, string, string) {
		req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/orders", strings.NewReader(` + "`" + `{"sku": "tea"}` + "`" + `))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", os.Getenv("ORDER_KEY"))
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			log.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(body)
	}
	status, replayed, first := send()
	fmt.Printf("first: %d replayed=%q\n", status, replayed)
	status, replayed, again := send()
	fmt.Printf("retry: %d replayed=%q same body=%v\n", status, replayed, again == first)
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("orders in the database: %d\n", n)
}
`

// TestInstallFromRelease runs the README's steps for a release against a module proxy that
// serves this checkout as github.com/idemgen/idemgen v0.1.0: what `go get -tool …@latest`
// does with the public proxy once a version is tagged.
func TestInstallFromRelease(t *testing.T) {
	t.Parallel()
	blocks := readmeBlocks(t, readmeNames...)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	m := module.Version{Path: "github.com/idemgen/idemgen", Version: "v0.1.0"}
	at := filepath.Join(proxy, "github.com", "idemgen", "idemgen", "@v")
	var zip bytes.Buffer
	if err := modzip.CreateFromDir(&zip, m, root); err != nil {
		t.Fatalf("zip this checkout as %s: %v", m, err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{m.Version, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(at, "list"), m.Version+"\n")
	writeFile(t, filepath.Join(at, m.Version+".info"), string(info))
	writeFile(t, filepath.Join(at, m.Version+".mod"), string(gomod))
	writeFile(t, filepath.Join(at, m.Version+".zip"), zip.String())

	// Only local proxies: go get also asks whether github.com/idemgen/idemgen/cmd/idemgen is a
	// module of its own, which must be answered "no such module" by the local proxy rather than
	// by a network proxy that knows nothing of this release.
	env := toolEnv(t, false, "file://"+filepath.ToSlash(proxy))
	mod := newUserModule(t, t.TempDir(), env)
	out := runScript(t, mod, env, blocks[readmeInstallRelease])
	if want := "idemgen v0.1.0\n"; !strings.HasSuffix(out, want) {
		t.Fatalf("README.md:%d: the install steps printed %q, want it to end with %q", blocks[readmeInstallRelease].line, out, want)
	}
}

// TestMakeInstall: `make install` installs a working idemgen where GOBIN says.
func TestMakeInstall(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	run(t, repoRoot, append(os.Environ(), "GOBIN="+bin), "make", "-s", "install")
	if got := run(t, bin, os.Environ(), filepath.Join(bin, "idemgen"), "version"); got != "idemgen (devel)\n" {
		t.Errorf("the installed idemgen's version is %q, want \"idemgen (devel)\\n\"", got)
	}
}
