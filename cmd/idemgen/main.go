// Command idemgen generates idempotent Go servers from OpenAPI documents marked with x-idempotency.
package main

import (
	"os"

	"github.com/idemgen/idemgen/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
