package idemhttp

// RouteOf exposes routeOf to the tests.
var RouteOf = routeOf
