package proxy

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/h1server"
)

// ownLoopFront serves h on tether's own HTTP/1.1 server loop on a
// loopback port and returns its address.
func ownLoopFront(tb testing.TB, h http.Handler) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second}
	own := h1server.New(srv)
	go func() { _ = own.ServeHandoff() }()
	go func() { _ = own.Serve(ln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = own.Shutdown(ctx)
	})
	return ln.Addr().String()
}
