package frontdoor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/test/testutil"
)

// ticketSource is a TicketKeySource whose keys the test sets.
type ticketSource struct {
	mu   sync.Mutex
	keys [][32]byte
}

func (s *ticketSource) TicketKeys(time.Time) [][32]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}

func (s *ticketSource) set(keys ...[32]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = keys
}

var _ TicketKeySource = (*ticketSource)(nil)

func ticketKey(b byte) [32]byte {
	var k [32]byte
	for i := range k {
		k[i] = b
	}
	return k
}

// startTicketServer starts an HTTPS listener serving cert, with Sni entries
// when sni is set, whose tickets use src.
func startTicketServer(t *testing.T, certFile, keyFile string, sni bool, src TicketKeySource) string {
	t.Helper()
	return serveWithTickets(t, &config.Config{Listeners: []config.Listener{certListener(certFile, keyFile, "", sni)}}, src)
}

// certListener is a listener on 127.0.0.1:0 serving the certificate files
// with protocols ("": the default), with one Sni entry "*" when sni is set.
func certListener(certFile, keyFile, protocols string, sni bool) config.Listener {
	l := config.Listener{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: certFile, KeyPath: keyFile},
		ListenerOptions: config.ListenerOptions{KestrelEndpointDefaults: config.KestrelEndpointDefaults{Protocols: protocols}}}
	if sni {
		l.Sni = []config.SniRule{{Pattern: "*"}}
	}
	return l
}

// serveWithTickets starts a Server for cfg, answering okHandler, whose
// session tickets use src (the keys nodes of a cluster share; nil: the
// server's own), and returns its first address.
func serveWithTickets(t *testing.T, cfg *config.Config, src TicketKeySource) string {
	t.Helper()
	s, err := New(cfg, http.HandlerFunc(okHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	if src != nil {
		s.UseTicketKeys(src)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s.Addrs()[0].String()
}

// resumes makes a new TLS connection to addr with the client's session
// cache and reports whether the session was resumed.
func resumes(t *testing.T, addr string, version uint16, pool *x509.CertPool, cache tls.ClientSessionCache) bool {
	t.Helper()
	did, _ := getOverTLS(t, addr, version, pool, cache, false)
	return did
}

// resumesProto is resumes, offering h2 and http/1.1, and also returns the
// protocol the response came in.
func resumesProto(t *testing.T, addr string, version uint16, pool *x509.CertPool, cache tls.ClientSessionCache) (bool, string) {
	t.Helper()
	return getOverTLS(t, addr, version, pool, cache, true)
}

// getOverTLS makes a GET on a new TLS connection to addr (offering h2 too
// when h2) and returns whether the session was resumed and the response's
// protocol.
func getOverTLS(t *testing.T, addr string, version uint16, pool *x509.CertPool, cache tls.ClientSessionCache, h2 bool) (bool, string) {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{
			RootCAs: pool, ServerName: "127.0.0.1", ClientSessionCache: cache,
			MinVersion: version, MaxVersion: version,
		},
		ForceAttemptHTTP2: h2,
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Reading the body reads TLS 1.3's tickets, which follow the handshake.
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.TLS.DidResume, resp.Proto
}

// forEachTicketSetup runs f for TLS 1.2 and TLS 1.3, each on listeners
// without and with Sni entries.
func forEachTicketSetup(t *testing.T, f func(t *testing.T, version uint16, sni bool)) {
	for _, v := range []struct {
		desc    string
		version uint16
	}{{"TLS 1.2", tls.VersionTLS12}, {"TLS 1.3", tls.VersionTLS13}} {
		for _, sni := range []bool{false, true} {
			name := v.desc
			if sni {
				name += " with Sni entries"
			}
			t.Run(name, func(t *testing.T) { f(t, v.version, sni) })
		}
	}
}

func TestSessionTicketResumesOnEveryListenerSharingTheKeys(t *testing.T) {
	certFile, keyFile, pool := testutil.CertFiles(t)
	forEachTicketSetup(t, func(t *testing.T, version uint16, sni bool) {
		shared := &ticketSource{}
		shared.set(ticketKey(1))
		a := startTicketServer(t, certFile, keyFile, sni, shared)
		b := startTicketServer(t, certFile, keyFile, sni, shared)
		other := &ticketSource{}
		other.set(ticketKey(9))
		foreign := startTicketServer(t, certFile, keyFile, sni, other)
		empty := startTicketServer(t, certFile, keyFile, sni, &ticketSource{})
		empty2 := startTicketServer(t, certFile, keyFile, sni, &ticketSource{})

		steps := []struct {
			desc   string
			before func()
			addr   string
			want   bool
		}{
			{"a first connection is a full handshake", nil, a, false},
			{"a ticket from one listener resumes on another with the same keys", nil, b, true},
			{"a listener with other keys falls back to a full handshake", nil, foreign, false},
			{"its own ticket resumes there", nil, foreign, true},
			{"a fresh ticket from the first listener", nil, a, false},
			{"after a rotation (new key first, old one kept) the old ticket still resumes", func() { shared.set(ticketKey(2), ticketKey(1)) }, b, true},
			{"the ticket issued after the rotation is under the new key: it resumes once the old key is gone", func() { shared.set(ticketKey(2)) }, a, true},
			{"once its key is dropped a ticket no longer resumes", func() { shared.set(ticketKey(3)) }, b, false},
			{"without shared keys a listener's own ticket resumes on itself", nil, empty, false},
			{"its own ticket resumes there", nil, empty, true},
			{"but not on another listener without shared keys", nil, empty2, false},
		}
		cache := tls.NewLRUClientSessionCache(8)
		for _, s := range steps {
			if s.before != nil {
				s.before()
			}
			if got := resumes(t, s.addr, version, pool, cache); got != s.want {
				t.Fatalf("%s: resumed %t, want %t", s.desc, got, s.want)
			}
		}
	})
}

// pausingSource is a ticketSource that pauses tickets while it has none.
type pausingSource struct{ ticketSource }

func (*pausingSource) PausesTickets() bool { return true }

var _ TicketPauser = (*pausingSource)(nil)

// countingCache is a client session cache that counts the tickets servers
// gave it.
type countingCache struct {
	tls.ClientSessionCache
	mu   sync.Mutex
	puts int
}

func (c *countingCache) Put(key string, cs *tls.ClientSessionState) {
	if cs != nil {
		c.mu.Lock()
		c.puts++
		c.mu.Unlock()
	}
	c.ClientSessionCache.Put(key, cs)
}

func (c *countingCache) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts
}

func TestATicketPauserWithoutKeysIssuesNoTicketAndLeavesTheClientsOne(t *testing.T) {
	certFile, keyFile, pool := testutil.CertFiles(t)
	forEachTicketSetup(t, func(t *testing.T, version uint16, sni bool) {
		shared := &ticketSource{}
		shared.set(ticketKey(1))
		a := startTicketServer(t, certFile, keyFile, sni, shared)
		paused := &pausingSource{}
		p := startTicketServer(t, certFile, keyFile, sni, paused)

		cache := &countingCache{ClientSessionCache: tls.NewLRUClientSessionCache(8)}
		if resumed, _ := resumesProto(t, a, version, pool, cache); resumed || cache.count() != 1 {
			t.Fatalf("a first connection: resumed %t with %d tickets, want a full handshake and one ticket", resumed, cache.count())
		}
		resumed, proto := resumesProto(t, p, version, pool, cache)
		if resumed || cache.count() != 1 {
			t.Fatalf("a listener without keys: resumed %t, %d tickets in all; want a full handshake and no new ticket", resumed, cache.count())
		}
		if proto != "HTTP/2.0" {
			t.Fatalf("a listener without keys served %s, want HTTP/2.0 as with tickets on", proto)
		}
		if resumed, _ := resumesProto(t, a, version, pool, cache); !resumed {
			t.Fatal("the client's ticket no longer resumes on the listener that gave it: the paused listener replaced it")
		}
		paused.set(ticketKey(1))
		if resumed, _ := resumesProto(t, p, version, pool, cache); !resumed {
			t.Fatal("once the keys came the shared ticket did not resume")
		}
	})
}

func TestATicketPauserKeepsTheListenersProtocols(t *testing.T) {
	certFile, keyFile, pool := testutil.CertFiles(t)
	for _, c := range []struct {
		protocols, want string
	}{{config.ProtocolsHttp1, "HTTP/1.1"}, {config.ProtocolsHttp2, "HTTP/2.0"}, {"", "HTTP/2.0"}} {
		l := config.Listener{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: certFile, KeyPath: keyFile}}
		l.Protocols = c.protocols
		s, err := New(&config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(okHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		s.UseTicketKeys(&pausingSource{})
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		_, got := resumesProto(t, s.Addrs()[0].String(), tls.VersionTLS13, pool, tls.NewLRUClientSessionCache(1))
		_ = s.Shutdown(t.Context())
		if got != c.want {
			t.Errorf("Protocols %q with tickets paused: served %s, want %s", c.protocols, got, c.want)
		}
	}
}
