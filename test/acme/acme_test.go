package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/tether-proxy/tether/node"
	"github.com/tether-proxy/tether/test/testutil"
)

// pebbleVersion is the pebble the test builds.
const pebbleVersion = "v2.10.3"

// domain is the name on the certificate; the test's DNS server answers it.
const domain = "www.tether.test"

// buildPebble installs pebble into a temporary directory with the Go
// toolchain (from the module proxy; the build cache makes it quick after
// the first time) and returns the binary and pebble's module directory
// (its test certificates).
func buildPebble(t *testing.T) (bin, modDir string) {
	t.Helper()
	gobin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/letsencrypt/pebble/v2/cmd/pebble@"+pebbleVersion)
	cmd.Dir = gobin // outside tether's module: its go.mod does not need pebble
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building pebble: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(gobin, "pebble"), filepath.Join(strings.TrimSpace(string(out)), "github.com/letsencrypt/pebble/v2@"+pebbleVersion)
}

// dnsServer answers A queries for domain with whatever addrs returns, and
// counts them.
type dnsServer struct {
	addr    string
	addrs   func() []string
	queries atomic.Int64
}

func startDNS(t *testing.T, addrs func() []string) *dnsServer {
	t.Helper()
	// pebble asks over TCP: serve UDP and TCP on one port.
	var pc net.PacketConn
	var ln net.Listener
	for i := 0; ln == nil; i++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			pc.Close()
			if i == 20 {
				t.Fatal(err)
			}
		}
	}
	d := &dnsServer{addr: pc.LocalAddr().String(), addrs: addrs}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		for _, q := range r.Question {
			if !strings.EqualFold(q.Name, domain+".") {
				m.Rcode = dns.RcodeNameError
				continue
			}
			if q.Qtype != dns.TypeA {
				continue // no AAAA, no CAA: an empty answer
			}
			d.queries.Add(1)
			for _, a := range d.addrs() {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0}, A: net.ParseIP(a)})
			}
		}
		_ = w.WriteMsg(m)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		go func() { _ = srv.ActivateAndServe() }()
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return d
}

// freePort finds a port free on every loopback address the nodes use.
func freePort(t *testing.T, ips []string) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ok := true
		for _, ip := range ips {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on every loopback address")
	return 0
}

// pebbleCA runs pebble and returns its directory URL and the pool that
// verifies the certificates it issues.
func startPebble(t *testing.T, bin, modDir, dnsAddr string, httpPort, tlsPort int, validity time.Duration) (dir, minica string, roots func() *x509.CertPool, logs *testutil.SyncBuffer) {
	t.Helper()
	apiPort, mgmtPort := freePort(t, []string{"127.0.0.1"}), freePort(t, []string{"127.0.0.1"})
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":           fmt.Sprintf("127.0.0.1:%d", apiPort),
		"managementListenAddress": fmt.Sprintf("127.0.0.1:%d", mgmtPort),
		"certificate":             filepath.Join(modDir, "test/certs/localhost/cert.pem"),
		"privateKey":              filepath.Join(modDir, "test/certs/localhost/key.pem"),
		"httpPort":                httpPort,
		"tlsPort":                 tlsPort,
		"ocspResponderURL":        "",
		"retryAfter":              map[string]int{"authz": 1, "order": 1},
		"keyAlgorithm":            "ecdsa",
		"profiles": map[string]any{"default": map[string]any{
			"description": "short-lived, so that the test sees a renewal", "validityPeriod": int(validity.Seconds()),
		}},
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(t.TempDir(), "pebble.json")
	testutil.WriteFile(t, cfgFile, string(b))
	logs = new(testutil.SyncBuffer)
	cmd := exec.Command(bin, "-config", cfgFile, "-dnsserver", dnsAddr)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("pebble's log:\n%s", logs.String())
		}
	})
	minica = filepath.Join(modDir, "test/certs/pebble.minica.pem")
	pem, err := os.ReadFile(minica)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	dir = fmt.Sprintf("https://127.0.0.1:%d/dir", apiPort)
	testutil.Eventually(t, 30*time.Second, "pebble serving its directory", func() bool {
		resp, err := client.Get(dir)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	roots = func() *x509.CertPool {
		p := x509.NewCertPool()
		for i := range 2 {
			resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/roots/%d", mgmtPort, i))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				p.AppendCertsFromPEM(b)
			}
		}
		return p
	}
	return dir, minica, roots, logs
}

// member is one node of the test's cluster.
type member struct {
	id, ip string
	cfg    node.Config
	n      *node.Node
}

// env is a 3-node cluster on 127.0.0.1-3 whose HTTPS listener asks pebble
// for domain, with the test's DNS answering the followers' addresses only.
type env struct {
	mu       sync.Mutex
	members  []*member
	tlsPort  int
	dns      *dnsServer
	roots    func() *x509.CertPool
	validity time.Duration
	// pebbleLog is pebble's output (it logs every request).
	pebbleLog *testutil.SyncBuffer
}

// newEnv starts pebble and the cluster. pebble validates HTTP-01 on the
// nodes' cleartext listener and TLS-ALPN-01 on their Acme listener, except
// the type named by off, which it tries on a port where nothing listens
// (so only the other one can succeed).
func newEnv(t *testing.T, validity time.Duration, off string) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs pebble")
	}
	bin, modDir := buildPebble(t)
	ips := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	for _, ip := range ips[1:] {
		l, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Skipf("loopback address %s cannot be bound here: %v", ip, err)
		}
		l.Close()
	}
	e := &env{validity: validity}
	httpPort, tlsPort := freePort(t, ips), freePort(t, ips)
	e.tlsPort = tlsPort
	pebbleHTTP, pebbleTLS := httpPort, tlsPort
	switch off {
	case "http-01":
		pebbleHTTP = freePort(t, ips)
	case "tls-alpn-01":
		pebbleTLS = freePort(t, ips)
	}
	// The CA reaches the followers only: the challenge is answered by a
	// node other than the leader that ordered the certificate.
	followerIPs := func() []string {
		e.mu.Lock()
		defer e.mu.Unlock()
		leader := ""
		for _, m := range e.members {
			if m.n != nil && m.n.Leader() != "" {
				leader = m.n.Leader()
			}
		}
		var out []string
		for _, m := range e.members {
			if m.n != nil && leader != "" && m.id != leader {
				out = append(out, m.ip)
			}
		}
		return out
	}
	e.dns = startDNS(t, followerIPs)
	dir, minica, roots, logs := startPebble(t, bin, modDir, e.dns.addr, pebbleHTTP, pebbleTLS, validity)
	e.roots, e.pebbleLog = roots, logs

	tmp := t.TempDir()
	secret := filepath.Join(tmp, "secret")
	testutil.WriteFile(t, secret, "the-acme-test-cluster-secret-0123456789")
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })}
	bl, _ := net.Listen("tcp", "127.0.0.1:0")
	go backend.Serve(bl)
	t.Cleanup(func() { backend.Close() })

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("TETHER_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var join []string
	for i, ip := range ips {
		id := fmt.Sprintf("n%d", i+1)
		cfgFile := filepath.Join(tmp, id+".json")
		testutil.WriteFile(t, cfgFile, fmt.Sprintf(`{
		  "Listeners": [
		    { "Address": "%[1]s:%[2]d" },
		    { "Address": "%[1]s:%[3]d", "Acme": { "Directory": %[4]q, "Email": "ops@tether.test", "Domains": [%[5]q], "CA": %[6]q } }
		  ],
		  "ReverseProxy": {
		    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
		    "Clusters": { "app": { "Destinations": { "d1": { "Address": "http://%[7]s/" } } } }
		  }
		}`, ip, httpPort, tlsPort, dir, domain, minica, bl.Addr()))
		m := &member{id: id, ip: ip, cfg: node.Config{
			ConfigPath: cfgFile, NodeID: id, DataDir: filepath.Join(tmp, id), AdminAddr: "127.0.0.1:0",
			RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", ClusterSecretFile: secret,
			BootstrapExpect: 3, Join: slices.Clone(join), FastTimings: true, Logger: logger.With("node", id),
		}}
		start(t, m)
		e.mu.Lock()
		e.members = append(e.members, m)
		e.mu.Unlock()
		join = append(join, m.n.GossipAddr())
	}
	t.Cleanup(func() {
		for _, m := range e.members {
			stop(m)
		}
	})
	return e
}

// isMember reports whether id names one of the cluster's nodes.
func (e *env) isMember(id any) bool {
	for _, m := range e.members {
		if m.id == id {
			return true
		}
	}
	return false
}

// leader is the member that leads, or nil.
func (e *env) leader() *member {
	for _, m := range e.members {
		if m.n != nil && m.n.Leader() == m.id {
			return m
		}
	}
	return nil
}

func (e *env) waitLeader(t *testing.T, not *member) *member {
	t.Helper()
	var l *member
	testutil.Eventually(t, 30*time.Second, "a leader", func() bool { l = e.leader(); return l != nil && l != not })
	return l
}

// waitServed waits until every running member serves one certificate from
// the CA other than old, and returns it.
func (e *env) waitServed(t *testing.T, within time.Duration, what string, old *x509.Certificate) *x509.Certificate {
	t.Helper()
	var c *x509.Certificate
	testutil.Eventually(t, within, what, func() bool {
		c = sameCertificate(t, e.members, e.tlsPort, e.roots())
		return c != nil && (old == nil || c.SerialNumber.Cmp(old.SerialNumber) != 0)
	})
	return c
}

func TestAcmeClusterObtainsOnceServesEverywhereAndRenewsAfterFailover(t *testing.T) {
	e := newEnv(t, 45*time.Second, "")
	leader := e.waitLeader(t, nil)

	// One certificate, served by every node.
	first := e.waitServed(t, 60*time.Second, "every node serving one certificate from the CA", nil)
	if e.dns.queries.Load() == 0 {
		t.Fatal("the CA never looked the name up: it validated nothing")
	}
	if n := strings.Count(e.pebbleLog.String(), "POST /order-plz"); n != 1 {
		t.Fatalf("the cluster placed %d orders for its first certificate, want 1", n)
	}
	st := status(t, e.members[0])
	if len(st) != 1 || !e.isMember(st[0]["obtained_by"]) || st[0]["failures"] != float64(0) {
		t.Fatalf("status after the first order: %v (want one certificate obtained by the leader %s)", st, leader.id)
	}
	metrics := fetch(t, "http://"+e.members[2].n.AdminAddr().String()+"/metrics")
	for _, want := range []string{
		`tether_acme_certificate_not_after_timestamp_seconds{domains="` + domain + `"}`,
		`tether_acme_failures{domains="` + domain + `"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// The leader dies; the new one renews once a third of the lifetime is
	// left, answering through the remaining follower.
	leader = e.waitLeader(t, nil) // the one now, should an election have moved it
	stop(leader)
	next := e.waitLeader(t, leader)
	renewed := e.waitServed(t, e.validity+20*time.Second, "a renewed certificate on the remaining nodes", first)
	// Obtained by a leader of the remaining two (leadership may have moved
	// between them since: elections on a loaded machine).
	if st := status(t, next); len(st) != 1 || st[0]["obtained_by"] == leader.id || st[0]["obtained_by"] == "" {
		t.Fatalf("status after the renewal: %v (want obtained by a node other than the stopped leader %s)", st, leader.id)
	}

	// A node restarted alone (no quorum) still serves the last certificate.
	for _, m := range e.members {
		stop(m)
	}
	alone := e.members[0]
	if alone == leader {
		alone = e.members[1]
	}
	start(t, alone)
	testutil.Eventually(t, 20*time.Second, "the node restarted alone serving the last certificate", func() bool {
		c := served(alone, e.tlsPort, e.roots())
		return c != nil && c.SerialNumber.Cmp(renewed.SerialNumber) == 0
	})
}

func TestAcmeEachChallengeTypeIsAnsweredByAFollower(t *testing.T) {
	for _, tc := range []struct{ desc, only, off string }{
		{"HTTP-01 on the cleartext listener", "http-01", "tls-alpn-01"},
		{"TLS-ALPN-01 on the Acme listener", "tls-alpn-01", "http-01"},
	} {
		t.Run(tc.only, func(t *testing.T) {
			e := newEnv(t, time.Hour, tc.off)
			leader := e.waitLeader(t, nil)
			e.waitServed(t, 60*time.Second, "every node serving a certificate validated with "+tc.desc, nil)
			if st := status(t, e.members[0]); len(st) != 1 || !e.isMember(st[0]["obtained_by"]) {
				t.Fatalf("%s: status %v (want obtained by the leader %s)", tc.desc, st, leader.id)
			}
		})
	}
}

func start(t *testing.T, m *member) {
	t.Helper()
	n, err := node.New(m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatalf("start %s: %v", m.id, err)
	}
	m.n = n
}

func stop(m *member) {
	if m.n == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.n.Shutdown(ctx)
	m.n = nil
}

// served is the certificate m serves for domain, verified against roots,
// or nil.
func served(m *member, port int, roots *x509.CertPool) *x509.Certificate {
	if m.n == nil {
		return nil
	}
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(m.ip, fmt.Sprint(port)), &tls.Config{ServerName: domain, RootCAs: roots})
	if err != nil {
		return nil
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

// sameCertificate is the certificate every running member serves, or nil
// while they differ or one serves none.
func sameCertificate(t *testing.T, members []*member, port int, roots *x509.CertPool) *x509.Certificate {
	var cert *x509.Certificate
	for _, m := range members {
		if m.n == nil {
			continue
		}
		c := served(m, port, roots)
		if c == nil || (cert != nil && !c.Equal(cert)) {
			return nil
		}
		cert = c
	}
	return cert
}

func fetch(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func status(t *testing.T, m *member) []map[string]any {
	t.Helper()
	var s struct {
		Acme []map[string]any `json:"acme"`
	}
	if err := json.Unmarshal([]byte(fetch(t, "http://"+m.n.AdminAddr().String()+"/v1/status")), &s); err != nil {
		t.Fatal(err)
	}
	return s.Acme
}
