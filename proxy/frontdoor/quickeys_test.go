package frontdoor

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/tether-proxy/tether/proxy/config"
)

// secretKeys derives QUIC keys from a cluster secret as keyring.Secrets
// does.
type secretKeys []byte

func (s secretKeys) KEK(info string) []byte {
	k, err := hkdf.Key(sha256.New, s, nil, info, 32)
	if err != nil {
		panic(err)
	}
	return k
}

// startH3Node starts an HTTP/3-only listener on addr with keys (none when
// nil) that sends every new connection a Retry when retry is set.
func startH3Node(t *testing.T, l config.Listener, addr string, keys QUICKeySource, retry bool) *Server {
	t.Helper()
	l.Address = addr
	s, err := New(&config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(okHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	if keys != nil {
		s.UseQUICKeys(keys)
	}
	if retry {
		s.ls[0].h3.retry.threshold = -1
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// balancer is a client socket that stands for a load balancer moving a
// client to another node: once it has received a Retry (from), it sends
// what the client addresses to from to another node (to) instead, and
// makes to's answers look like from's.
type balancer struct {
	net.PacketConn
	from, to *net.UDPAddr
	moved    atomic.Bool
}

func (b *balancer) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := b.PacketConn.ReadFrom(p)
	if n > 0 && p[0]&0x80 != 0 && p[0]&0x30 == 0x30 {
		b.moved.Store(true)
	}
	if ua, ok := a.(*net.UDPAddr); ok && ua.Port == b.to.Port {
		a = b.from
	}
	return n, a, err
}

func (b *balancer) WriteTo(p []byte, a net.Addr) (int, error) {
	if b.moved.Load() {
		a = b.to
	}
	return b.PacketConn.WriteTo(p, a)
}

// TestHTTP3RetryTokenOfOneNodeAcceptedByAnother: nodes keyed from the
// same cluster secret accept each other's Retry tokens, so a client
// validated by one node and then sent to another is served at once; a
// node with its own key cannot open the token and the handshake fails.
func TestHTTP3RetryTokenOfOneNodeAcceptedByAnother(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true") // the balancer is no *net.UDPConn
	l, pool := h3Listener(t, config.ProtocolsHttp3)
	shared := secretKeys("the cluster secret of a and b, 32 bytes or more")
	a := startH3Node(t, l, "127.0.0.1:0", shared, true)
	b := startH3Node(t, l, "127.0.0.1:0", shared, true)
	c := startH3Node(t, l, "127.0.0.1:0", secretKeys("another cluster's secret, also long enough"), true)
	get := func(to *Server) error {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		from := a.Addrs()[0].(*net.UDPAddr)
		bal := &balancer{PacketConn: pc, from: from, to: to.Addrs()[0].(*net.UDPAddr)}
		qt := &quic.Transport{Conn: bal}
		defer func() { _ = qt.Close(); _ = pc.Close() }()
		tr := &http3.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"},
			QUICConfig:      &quic.Config{HandshakeIdleTimeout: 2 * time.Second},
			Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				return qt.DialEarly(ctx, from, tc, qc)
			},
		}
		defer tr.Close()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + from.String() + "/")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if !bal.moved.Load() {
			t.Fatal("node a sent no Retry")
		}
		return nil
	}
	if err := get(b); err != nil {
		t.Fatalf("node b refused node a's Retry token: %v", err)
	}
	if err := get(c); err == nil {
		t.Fatal("a node of another cluster accepted node a's Retry token")
	}
}

// TestHTTP3StatelessResetAfterRestart: a node restarted with the cluster's
// keys answers a packet of a connection from before the restart with the
// stateless reset the client was promised, so the client drops it at
// once; without the keys the client waits for its idle timeout.
func TestHTTP3StatelessResetAfterRestart(t *testing.T) {
	l, pool := h3Listener(t, config.ProtocolsHttp3)
	for _, keyed := range []bool{true, false} {
		t.Run("keyed="+strconv.FormatBool(keyed), func(t *testing.T) {
			var keys QUICKeySource
			if keyed {
				keys = secretKeys("the cluster secret, 32 bytes or more, kept on restart")
			}
			first := startH3Node(t, l, "127.0.0.1:0", keys, false)
			addr := first.Addrs()[0].String()
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			qt := &quic.Transport{Conn: pc}
			t.Cleanup(func() { _ = qt.Close(); _ = pc.Close() })
			var conn atomic.Pointer[quic.Conn]
			tr := &http3.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"},
				QUICConfig:      &quic.Config{MaxIdleTimeout: 10 * time.Second},
				Dial: func(ctx context.Context, a string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
					ua, err := net.ResolveUDPAddr("udp", a)
					if err != nil {
						return nil, err
					}
					c, err := qt.DialEarly(ctx, ua, tc, qc)
					if err == nil {
						conn.Store(c)
					}
					return c, err
				},
			}
			t.Cleanup(func() { _ = tr.Close() })
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			h3Get(t, client, "https://"+addr+"/")
			c := conn.Load()
			// The node goes away without a word (a crash: its socket
			// closes first), and comes back on the same port.
			first.ls[0].h3.mu.Lock()
			closeAll(first.ls[0].h3.pcs)
			first.ls[0].h3.mu.Unlock()
			_ = first.Shutdown(context.Background())
			startH3Node(t, l, addr, keys, false)
			wait := 3 * time.Second
			if !keyed {
				wait = time.Second // long enough for a reset to have come
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/", nil)
			resp, err := client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
				t.Fatal("a request on the connection from before the restart was answered")
			}
			var reset *quic.StatelessResetError
			if keyed {
				if ctx.Err() != nil {
					t.Fatalf("no stateless reset within %v: request %v, connection %v", wait, err, context.Cause(c.Context()))
				}
				// The reset fails the connection's streams (the request)
				// first and ends its context a moment later.
				select {
				case <-c.Context().Done():
				case <-ctx.Done():
				}
				if !errors.As(context.Cause(c.Context()), &reset) {
					t.Fatalf("no stateless reset: request %v, connection %v", err, context.Cause(c.Context()))
				}
				return
			}
			if errors.As(context.Cause(c.Context()), &reset) || c.Context().Err() != nil {
				t.Fatalf("without the keys: request %v, connection %v; want the connection waiting for its idle timeout", err, context.Cause(c.Context()))
			}
		})
	}
}
