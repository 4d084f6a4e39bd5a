package bench

import (
	"os"
	"testing"
)

// TestMain lets this test binary also be a bench server: BenchmarkHTTP starts it as a child
// process with envServe naming the server (servers_test.go).
func TestMain(m *testing.M) {
	if mode := os.Getenv(envServe); mode != "" {
		os.Exit(serveChild(mode))
	}
	os.Exit(m.Run())
}
