package payments

import (
	"fmt"
	"net"
	"net/http/httptest"
	"testing"
	"time"
)

// A client that sends its request head slowly is cut off by the server, not kept forever.
func TestSlowClientIsCutOff(t *testing.T) {
	t.Parallel()
	srv := newServer(nil)
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Fatalf("newServer leaves a limit unset: %+v", srv)
	}
	srv.ReadHeaderTimeout = 200 * time.Millisecond // the example's limits, shortened for the test
	ts := httptest.NewUnstartedServer(srv.Handler)
	ts.Config = srv
	ts.Start()
	defer ts.Close()
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/payments HTTP/1.1\r\nHost: x\r\n") // and then nothing more
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1)
	start := time.Now()
	_, err = conn.Read(buf)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server kept a client that never finished its head for %s", time.Since(start))
	}
	// The server closed the connection (io.EOF) or answered 408: either way it let go.
}
