package sockio

import (
	"crypto/tls"
	"net"
	"testing"
)

// wrapped is a wrapper that names its connection with NetConn, as the
// connection cap's does.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

// opaque is a wrapper without NetConn.
type opaque struct{ net.Conn }

// TestTCPOfUnwrapsThroughNetConn: the socket is reached through every
// wrapper that names it, never under TLS, and not at all under a wrapper
// that does not name it.
func TestTCPOfUnwrapsThroughNetConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			var b [1]byte
			_, _ = c.Read(b[:])
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := c.(*net.TCPConn)
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	for _, tt := range []struct {
		desc string
		c    net.Conn
		want *net.TCPConn
	}{
		{"a TCP connection is its own socket", tc, tc},
		{"a Conn names its socket", Wrap(tc), tc},
		{"a wrapper with NetConn around a Conn", wrapped{Wrap(tc)}, tc},
		{"TLS is never read under", tls.Client(wrapped{tc}, &tls.Config{}), nil},
		{"a wrapper without NetConn hides the socket", opaque{tc}, nil},
		{"a pipe has no socket", wrapped{p1}, nil},
	} {
		if got := TCPOf(tt.c); got != tt.want {
			t.Errorf("%s: TCPOf = %p, want %p", tt.desc, got, tt.want)
		}
	}
}
