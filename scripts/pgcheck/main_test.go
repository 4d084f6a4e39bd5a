package main

import (
	"os"
	"strings"
	"testing"
)

func TestCheckRefusesWhatCannotWork(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"", "empty"},
		{"postgres://[::1", "not a PostgreSQL URL"},
		{"postgres://nobody@/postgres?host=/nonexistent&connect_timeout=2", "is the server running"},
	} {
		if err := check(c.url); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("check(%q) = %v; want an error saying %q", c.url, err, c.want)
		}
	}
}

func TestCheckAcceptsTheSuitesServer(t *testing.T) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		t.Fatal("TEST_DATABASE_URL is not set: run make test, which sets it")
	}
	if err := check(url); err != nil {
		t.Fatalf("check(TEST_DATABASE_URL) = %v; the suite runs on this server, so it must pass", err)
	}
}
