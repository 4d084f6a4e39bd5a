package generator

import (
	"fmt"
	"strings"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
)

// Routers idemgen can generate for: the names of oapi-codegen's *-server options.
const (
	RouterStdHTTP = "std-http" // net/http's ServeMux
	RouterChi     = "chi"      // github.com/go-chi/chi/v5
	RouterGorilla = "gorilla"  // github.com/gorilla/mux
	RouterEcho    = "echo"     // github.com/labstack/echo/v4
	RouterEcho5   = "echo5"    // github.com/labstack/echo/v5
	RouterGin     = "gin"      // github.com/gin-gonic/gin
	RouterFiber   = "fiber"    // github.com/gofiber/fiber/v2
	RouterFiberV3 = "fiber-v3" // github.com/gofiber/fiber/v3
	RouterIris    = "iris"     // github.com/kataras/iris/v12
)

// Router is one entry of the router registry: all idemgen knows of one router besides its
// templates. Options.Router points at one; LookupRouter resolves a name to it, once, when the
// config file or the flags are read. Its templates are the shared idempotency.go.tmpl, whose
// {{block}}s hold the net/http defaults, then base's folder (when set), then its own folder,
// each {{define}} replacing the block of that name: so fiber-v3 is fiber's templates plus the
// few blocks that differ.
type Router struct {
	Name string // as --router and router: name it
	// module is the framework's module as docs/routers.md's table names it (a test keeps the
	// two equal).
	module string
	base   string // the router whose templates this one's folder overrides; "" for none
	// server turns on oapi-codegen's server for this router.
	server func(*codegen.GenerateOptions)
	// methods are the route-registering methods the wiring wraps to put its middleware in front
	// of each route oapi-codegen registers, as the framework spells them.
	methods []string
}

// upperMethods and titleMethods are every method a route can have, as echo and fiber name
// their registering methods.
var (
	upperMethods = []string{"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
	titleMethods = []string{"Connect", "Delete", "Get", "Head", "Options", "Patch", "Post", "Put", "Trace"}
)

// routerTable is every router, the default first; messages, the docs and the config schema list
// them in this order.
var routerTable = []*Router{
	{Name: RouterStdHTTP, module: "net/http (`ServeMux`)", server: func(g *codegen.GenerateOptions) { g.StdHTTPServer = true }},
	{Name: RouterChi, module: "`github.com/go-chi/chi/v5`", server: func(g *codegen.GenerateOptions) { g.ChiServer = true }},
	{Name: RouterGorilla, module: "`github.com/gorilla/mux`", server: func(g *codegen.GenerateOptions) { g.GorillaServer = true }},
	{Name: RouterEcho, module: "`github.com/labstack/echo/v4`", methods: upperMethods,
		server: func(g *codegen.GenerateOptions) { g.EchoServer = true }},
	{Name: RouterEcho5, module: "`github.com/labstack/echo/v5`", base: RouterEcho, methods: upperMethods,
		server: func(g *codegen.GenerateOptions) { g.Echo5Server = true }},
	{Name: RouterGin, module: "`github.com/gin-gonic/gin`", server: func(g *codegen.GenerateOptions) { g.GinServer = true }},
	{Name: RouterFiber, module: "`github.com/gofiber/fiber/v2` (on `github.com/valyala/fasthttp` v1.69.0)", methods: titleMethods,
		server: func(g *codegen.GenerateOptions) { g.FiberServer = true }},
	{Name: RouterFiberV3, module: "`github.com/gofiber/fiber/v3`", base: RouterFiber, methods: titleMethods,
		server: func(g *codegen.GenerateOptions) { g.FiberV3Server = true }},
	{Name: RouterIris, module: "`github.com/kataras/iris/v12`", server: func(g *codegen.GenerateOptions) { g.IrisServer = true }},
}

// Routers lists every router, the default first; messages list them in this order.
var Routers = func() []string {
	names := make([]string, len(routerTable))
	for i, r := range routerTable {
		names[i] = r.Name
	}
	return names
}()

// DefaultRouter is the router of a run that names none: std-http.
func DefaultRouter() *Router { return routerTable[0] }

// LookupRouter returns the registry's entry for name, or an error listing the routers idemgen
// knows. It is the one place a router's name is resolved.
func LookupRouter(name string) (*Router, error) {
	for _, r := range routerTable {
		if r.Name == name {
			return r, nil
		}
	}
	return nil, fmt.Errorf("unknown router %q (supported: %s)", name, strings.Join(Routers, ", "))
}

// String is the router's name, as the config file and --router write it.
func (r *Router) String() string { return r.Name }

// templateFolders are the template folders of r, base first.
func (r *Router) templateFolders() []string {
	if r.base == "" {
		return []string{r.Name}
	}
	return []string{r.base, r.Name}
}
