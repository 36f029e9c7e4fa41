package testutil

import (
	"crypto/tls"
	"net"
	"sync"
	"testing"
)

// HeldSession is a TLS client session cache holding the first session a
// server gave it and offering that one only, whatever the server's
// address, so a test presents one ticket to as many servers as it likes
// (servers issue new tickets on resumption; they are ignored).
type HeldSession struct {
	mu sync.Mutex
	cs *tls.ClientSessionState
}

func (h *HeldSession) Get(string) (*tls.ClientSessionState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cs, h.cs != nil
}

func (h *HeldSession) Put(_ string, cs *tls.ClientSessionState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cs == nil && cs != nil {
		h.cs = cs
	}
}

// Held reports whether a session is held.
func (h *HeldSession) Held() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cs != nil
}

// TakenUDPPort holds a loopback UDP port whose TCP port is free, until the
// test ends: a listener on its address can open TCP but not UDP.
func TakenUDPPort(t testing.TB) net.PacketConn {
	t.Helper()
	for {
		p, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if ln, err := net.Listen("tcp", p.LocalAddr().String()); err == nil {
			ln.Close()
			t.Cleanup(func() { p.Close() })
			return p
		}
		p.Close()
	}
}

// Copy is another cache offering the session h holds (to present the same
// ticket again after h's own use).
func (h *HeldSession) Copy() *HeldSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	return &HeldSession{cs: h.cs}
}

// Session is the session h holds (nil: none yet).
func (h *HeldSession) Session() *tls.ClientSessionState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cs
}
