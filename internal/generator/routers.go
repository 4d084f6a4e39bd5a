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

// router is all idemgen knows of one router besides its templates. Its templates are the
// shared idempotency.go.tmpl, whose {{block}}s hold the net/http defaults, then base's folder
// (when set), then its own folder, each {{define}} replacing the block of that name: so
// fiber-v3 is fiber's templates plus the few blocks that differ.
type router struct {
	name string
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
var routerTable = []router{
	{name: RouterStdHTTP, module: "net/http (`ServeMux`)", server: func(g *codegen.GenerateOptions) { g.StdHTTPServer = true }},
	{name: RouterChi, module: "`github.com/go-chi/chi/v5`", server: func(g *codegen.GenerateOptions) { g.ChiServer = true }},
	{name: RouterGorilla, module: "`github.com/gorilla/mux`", server: func(g *codegen.GenerateOptions) { g.GorillaServer = true }},
	{name: RouterEcho, module: "`github.com/labstack/echo/v4`", methods: upperMethods,
		server: func(g *codegen.GenerateOptions) { g.EchoServer = true }},
	{name: RouterEcho5, module: "`github.com/labstack/echo/v5`", base: RouterEcho, methods: upperMethods,
		server: func(g *codegen.GenerateOptions) { g.Echo5Server = true }},
	{name: RouterGin, module: "`github.com/gin-gonic/gin`", server: func(g *codegen.GenerateOptions) { g.GinServer = true }},
	{name: RouterFiber, module: "`github.com/gofiber/fiber/v2` (on `github.com/valyala/fasthttp` v1.69.0)", methods: titleMethods,
		server: func(g *codegen.GenerateOptions) { g.FiberServer = true }},
	{name: RouterFiberV3, module: "`github.com/gofiber/fiber/v3`", base: RouterFiber, methods: titleMethods,
		server: func(g *codegen.GenerateOptions) { g.FiberV3Server = true }},
	{name: RouterIris, module: "`github.com/kataras/iris/v12`", server: func(g *codegen.GenerateOptions) { g.IrisServer = true }},
}

// Routers lists every router, the default first; messages list them in this order.
var Routers = func() []string {
	names := make([]string, len(routerTable))
	for i, r := range routerTable {
		names[i] = r.name
	}
	return names
}()

// IsRouter reports whether name is one of Routers.
func IsRouter(name string) bool {
	_, ok := lookupRouter(name)
	return ok
}

func lookupRouter(name string) (router, bool) {
	for _, r := range routerTable {
		if r.name == name {
			return r, true
		}
	}
	return router{}, false
}

// UnknownRouterError is the error for a router name idemgen does not know; it lists the ones
// it does.
func UnknownRouterError(name string) error {
	return fmt.Errorf("unknown router %q (supported: %s)", name, strings.Join(Routers, ", "))
}

// templateFolders are the template folders of r, base first.
func (r router) templateFolders() []string {
	if r.base == "" {
		return []string{r.name}
	}
	return []string{r.base, r.name}
}
