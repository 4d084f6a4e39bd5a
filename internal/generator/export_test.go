package generator

import "github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

// OapiConfiguration is the oapi-codegen configuration idemgen runs with for a package and the
// std-http router, for BenchmarkGenerate (package generator_test), which compares idemgen with
// oapi-codegen alone on the same options.
func OapiConfiguration(pkg string) (codegen.Configuration, error) {
	return oapiConfiguration(Options{Package: pkg, Router: DefaultRouter()})
}
