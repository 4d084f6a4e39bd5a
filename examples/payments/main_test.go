package payments

import (
	"os"
	"testing"
)

// TestMain lets this test binary also be a child process that the killed-server,
// killed-worker and restart tests start: each names itself by an environment variable.
func TestMain(m *testing.M) {
	switch {
	case os.Getenv(restartChildURL) != "":
		os.Exit(restartChild())
	case os.Getenv(childURL) != "":
		os.Exit(childServer())
	case os.Getenv(workerChildURL) != "":
		os.Exit(workerChild())
	case os.Getenv(senderChildURL) != "":
		os.Exit(senderChild())
	}
	os.Exit(m.Run())
}
