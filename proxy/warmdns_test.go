package proxy

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/tether-proxy/tether/proxy/dnscache"
)

// warmDNSServer answers A queries for *.test with 127.0.0.1 and records
// the names asked.
type warmDNSServer struct {
	mu    sync.Mutex
	asked map[string]bool
}

func (s *warmDNSServer) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	q := req.Question[0]
	s.mu.Lock()
	s.asked[strings.ToLower(q.Name)] = true
	s.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(req)
	if q.Qtype == dns.TypeA && strings.HasSuffix(q.Name, ".test.") {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(127, 0, 0, 1)})
	}
	_ = w.WriteMsg(m)
}

func (s *warmDNSServer) wasAsked(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[name]
}

// TestDestinationNamesAreLookedUpWithoutTraffic: every destination's
// host name is resolved as soon as a configuration is in place (New and
// Update), before any request needs it; IP literals are not queried.
func TestDestinationNamesAreLookedUpWithoutTraffic(t *testing.T) {
	srv := &warmDNSServer{asked: map[string]bool{}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	ds := &dns.Server{PacketConn: pc, Handler: srv, NotifyStartedFunc: func() { close(started) }}
	go func() { _ = ds.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = ds.Shutdown() })
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := dnscache.New(dnscache.Options{Servers: []string{pc.LocalAddr().String()}, HostsFile: hosts})
	t.Cleanup(res.Close)
	cfg := mustParse(t, simpleConfig(map[string]string{"d1": "http://one.test:8080/", "d2": "http://127.0.0.1:1/"}, "", "", ""))
	p, err := New(cfg, Options{Resolver: res, Keyring: testKeyring{}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitAsked := func(name string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !srv.wasAsked(name) {
			if time.Now().After(deadline) {
				t.Fatalf("%s was not looked up", name)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitAsked("one.test.")
	if err := p.Update(mustParse(t, simpleConfig(map[string]string{"d1": "http://one.test:8080/", "d3": "http://two.test:8080/"}, "", "", ""))); err != nil {
		t.Fatal(err)
	}
	waitAsked("two.test.")
	if srv.wasAsked("127.0.0.1.") {
		t.Error("an IP literal was queried")
	}
	// The cache holds them: a lookup now needs no query.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if addrs, err := res.LookupHost(ctx, "two.test"); err != nil || len(addrs) != 1 {
		t.Fatalf("two.test from the cache: %v %v", addrs, err)
	}
}
