// Command payments serves idemgen's payments example (package payments, one directory up) until
// SIGINT or SIGTERM:
//
//	go run ./examples/payments/cmd/payments -addr 127.0.0.1:8080 -database-url postgres://…
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemgen/idemgen/examples/payments"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := payments.Main(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}
