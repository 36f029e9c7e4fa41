//go:build !linux

package proxy

import (
	"net"
	"testing"
)

// deadAddr is a loopback address nothing listens on (connections are
// refused); unlike Linux's, another test's server may take it later.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
