package idemhttp

// ScopeString exposes scopeString to the tests.
var ScopeString = scopeString
