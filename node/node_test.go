package node

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	demobackend "github.com/tether-proxy/tether/node/demo/backend"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/test/testutil"
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(quietWriter(), nil))
}

// quietWriter is where quietLogger writes: stderr with TETHER_TEST_LOG set,
// else nowhere.
func quietWriter() io.Writer {
	if os.Getenv("TETHER_TEST_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

func testConfig(backendURL string, extraRoute string) string {
	return fmt.Sprintf(`{
	  "Listeners": [ { "Address": "127.0.0.1:0" } ],
	  "ReverseProxy": {
	    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } %s },
	    "Clusters": { "app": {
	      "SessionAffinity": { "Enabled": true, "Policy": "Cookie", "AffinityKeyName": "aff" },
	      "Destinations": { "d1": { "Address": "%s" }, "d2": { "Address": "%s" } } } }
	  }
	}`, extraRoute, backendURL, backendURL)
}

// startNode starts a node over one backend and returns it with a helper
// that calls its admin API.
func startNode(t *testing.T, token string) (*Node, func(method, path string) (int, map[string]any)) {
	t.Helper()
	backend := httptest.NewServer(demobackend.Handler("b"))
	t.Cleanup(backend.Close)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tether.json")
	if err := os.WriteFile(cfgPath, []byte(testConfig(backend.URL+"/", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ConfigPath: cfgPath, NodeID: "t1", DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0", Logger: quietLogger()}
	if token != "" {
		cfg.AdminTokenFile = filepath.Join(dir, "token")
		os.WriteFile(cfg.AdminTokenFile, []byte(token), 0o600)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	call := func(method, path string) (int, map[string]any) {
		req, _ := http.NewRequest(method, "http://"+n.AdminAddr().String()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	return n, call
}

func TestAdminKeyringRotateAndRevoke(t *testing.T) {
	_, call := startNode(t, "")
	status, list := call("GET", "/v1/keyring")
	if status != 200 || list["active_key_id"] == "" {
		t.Fatalf("keyring list: %d %v", status, list)
	}
	first := list["active_key_id"].(string)
	status, rotated := call("POST", "/v1/keyring/rotate")
	if status != 200 || rotated["id"] == first || rotated["id"] == "" {
		t.Fatalf("rotate: %d %v", status, rotated)
	}
	// Rotate returns once the key is committed; the leader activates it
	// once every member holds it (here: at once, the node is alone).
	testutil.Eventually(t, 10*time.Second, "the rotated key active", func() bool {
		_, list = call("GET", "/v1/keyring")
		return list["active_key_id"] == rotated["id"]
	})
	states := map[string]int{}
	for _, k := range list["keys"].([]any) {
		states[k.(map[string]any)["state"].(string)]++
	}
	if states["active"] != 1 || states["inactive"] != 1 {
		t.Fatalf("after rotation want exactly one active and one inactive key, got %v", states)
	}
	raw, _ := json.Marshal(list)
	if strings.Contains(strings.ToLower(string(raw)), "material") {
		t.Fatalf("keyring list shows key material: %s", raw)
	}
	if status, _ := call("POST", "/v1/keyring/"+first+"/revoke"); status != 200 {
		t.Fatalf("revoke: %d", status)
	}
	_, list = call("GET", "/v1/keyring")
	for _, k := range list["keys"].([]any) {
		k := k.(map[string]any)
		if k["id"] == first && k["state"] != "revoked" {
			t.Fatalf("revoked key shows state %v", k["state"])
		}
	}
	if status, body := call("POST", "/v1/keyring/nope/revoke"); status != 404 || body["error"] == "" {
		t.Fatalf("revoke unknown: %d %v", status, body)
	}
}

func TestAdminDrainAndDestinations(t *testing.T) {
	_, call := startNode(t, "")
	if status, body := call("POST", "/v1/clusters/app/destinations/d1/drain"); status != 200 || body["draining"] != true {
		t.Fatalf("drain: %d %v", status, body)
	}
	status, body := call("GET", "/v1/clusters/app/destinations")
	if status != 200 {
		t.Fatalf("destinations: %d", status)
	}
	found := false
	for _, d := range body["destinations"].([]any) {
		d := d.(map[string]any)
		if _, ok := d["health"].(map[string]any)["local"]; !ok {
			t.Errorf("destination %v has no health.local", d["id"])
		}
		if d["id"] == "d1" {
			found = d["draining"] == true
		}
	}
	if !found {
		t.Fatalf("d1 not shown draining: %v", body)
	}
	if status, _ := call("DELETE", "/v1/clusters/app/destinations/d1/drain"); status != 200 {
		t.Fatalf("undo drain: %d", status)
	}
	if status, body := call("POST", "/v1/clusters/app/destinations/zz/drain"); status != 404 || body["error"] == "" {
		t.Fatalf("drain unknown destination: %d %v", status, body)
	}
	if status, _ := call("GET", "/v1/clusters/nope/destinations"); status != 404 {
		t.Fatalf("unknown cluster: %d", status)
	}
}

func TestAdminTokenRequiredExceptHealthAndReady(t *testing.T) {
	n, _ := startNode(t, "tok")
	base := "http://" + n.AdminAddr().String()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/v1/status": 401, "/metrics": 401, "/v1/keyring": 401} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s without token = %d, want %d", path, resp.StatusCode, want)
		}
	}
	req, _ := http.NewRequest("GET", base+"/v1/status", nil)
	req.Header.Set("Authorization", "Bearer wrong")
	resp, _ := http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("wrong token = %d", resp.StatusCode)
	}
}

func TestReloadRejectsInvalidConfigAndKeepsOld(t *testing.T) {
	n, _ := startNode(t, "")
	if err := os.WriteFile(n.cfg.ConfigPath, []byte(`{"ReverseProxy": {"Routes": {"x": {"ClusterId": "none", "Match": {"Path": "/"}}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.Reload(); err == nil {
		t.Fatal("invalid config accepted")
	}
	resp, err := http.Get("http://" + n.ProxyAddrs()[0].String() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after rejected reload: %d, want the old config serving", resp.StatusCode)
	}
}

func TestKeyringSurvivesRestartEncryptedWithClusterSecret(t *testing.T) {
	backend := httptest.NewServer(demobackend.Handler("b"))
	defer backend.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tether.json")
	os.WriteFile(cfgPath, []byte(testConfig(backend.URL+"/", "")), 0o600)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("a-cluster-secret-of-enough-length"), 0o600)
	cfg := Config{ConfigPath: cfgPath, NodeID: "t1", DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0",
		RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", FastTimings: true, ClusterSecretFile: secret, Logger: quietLogger()}

	var material [][]byte
	// A restarted leader acts only once its log is replayed: it finds the
	// key and creates no other (it once did, under load).
	activeAfterStart := func() string {
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		defer n.Shutdown(context.Background())
		testutil.Eventually(t, 10*time.Second, "an active key", func() bool { return n.ring.ActiveKeyID(time.Now()) != "" })
		if keys := n.ring.Snapshot(); len(keys) != 1 {
			t.Fatalf("%d keys after a start, want the one", len(keys))
		}
		for _, k := range n.ring.Snapshot() {
			material = append(material, k.Material)
		}
		return n.ring.ActiveKeyID(time.Now())
	}
	first := activeAfterStart()
	if second := activeAfterStart(); second != first {
		t.Fatalf("active key changed across restart: %s then %s", first, second)
	}
	// No file of the data dir holds key material in the clear (raw, hex or
	// base64): the Raft log and snapshots carry it wrapped.
	filepath.WalkDir(filepath.Join(dir, "data"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, _ := os.ReadFile(path)
		for _, m := range material {
			for _, enc := range [][]byte{m, []byte(hex.EncodeToString(m)), []byte(base64.StdEncoding.EncodeToString(m)), []byte(base64.RawURLEncoding.EncodeToString(m))} {
				if bytes.Contains(raw, enc) {
					t.Fatalf("%s holds key material in the clear", path)
				}
			}
		}
		return nil
	})
}

func TestNewRefusesBadNodeFlags(t *testing.T) {
	cases := []struct {
		desc string
		cfg  Config
		want string
	}{
		{"config required", Config{NodeID: "x"}, "--config"},
		{"node id without slashes", Config{ConfigPath: "f", NodeID: "a/b"}, "--node-id"},
		{"a clustered node needs a secret (join)", Config{ConfigPath: "f", NodeID: "a", Join: []string{"x"}}, "--cluster-secret-file"},
		{"a clustered node needs a secret (expect)", Config{ConfigPath: "f", NodeID: "a", BootstrapExpect: 3}, "--cluster-secret-file"},
		{"voters odd", Config{ConfigPath: "f", NodeID: "a", RaftVoters: 4}, "--raft-voters"},
		{"expect within voters", Config{ConfigPath: "f", NodeID: "a", BootstrapExpect: 7, ClusterSecretFile: "s"}, "--bootstrap-expect"},
		{"tls flags together", Config{ConfigPath: "f", NodeID: "a", TLSCert: "c"}, "--tls-"},
		{"raft addr", Config{ConfigPath: "f", NodeID: "a", RaftAddr: "nope"}, "--raft-addr"},
		{"http1 server own or stdlib", Config{ConfigPath: "f", NodeID: "a", HTTP1Server: "off"}, "--http1-server"},
		{"http2 server own or stdlib", Config{ConfigPath: "f", NodeID: "a", HTTP2Server: "fast"}, "--http2-server"},
		{"write yield auto, on or off", Config{ConfigPath: "f", NodeID: "a", WriteYield: "maybe"}, "--write-yield"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			_, err := New(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to name %s", err, c.want)
			}
		})
	}
}

func TestListenersChangedOnlyOnRealChanges(t *testing.T) {
	base := func() *config.Config {
		return &config.Config{Listeners: []config.Listener{{Address: ":8443", Certificate: &config.Certificate{Path: "c", KeyPath: "k"}}}}
	}
	cases := []struct {
		desc   string
		change func(c *config.Config)
		want   bool
	}{
		{"same listeners (fresh pointers) are no change", func(c *config.Config) {}, false},
		{"another address", func(c *config.Config) { c.Listeners[0].Address = ":9443" }, true},
		{"another certificate is applied by reload, no restart", func(c *config.Config) { c.Listeners[0].Certificate.Path = "c2" }, false},
		{"TLS turned off", func(c *config.Config) { c.Listeners[0].Certificate = nil }, true},
		{"a redirect added", func(c *config.Config) { c.Listeners[0].Redirect = &config.Redirect{Scheme: "https"} }, true},
		{"a listener added", func(c *config.Config) { c.Listeners = append(c.Listeners, config.Listener{Address: ":80"}) }, true},
		{"header limit changed", func(c *config.Config) { c.Limits.MaxRequestHeadersTotalSize = 1 }, true},
		{"shutdown timeout is read at stop, no restart", func(c *config.Config) { c.Limits.ShutdownTimeout.Duration = time.Minute }, false},
		{"Kestrel Protocols changed", func(c *config.Config) { c.Listeners[0].Protocols = config.ProtocolsHttp1 }, true},
		{"connection cap changed", func(c *config.Config) { c.Limits.MaxConcurrentConnections = 10 }, true},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			next := base()
			c.change(next)
			if got := listenersChanged(base(), next); got != c.want {
				t.Fatalf("listenersChanged = %v, want %v", got, c.want)
			}
		})
	}
}

// selfSigned writes a fresh self-signed certificate and key for 127.0.0.1
// to certPath and keyPath and returns the certificate's DER.
func selfSigned(t *testing.T, certPath, keyPath string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return der
}

// TestReloadRotatesCertificateRewrittenInPlace, as cert-manager does: the
// same paths, new contents, a reload (SIGHUP) and new handshakes use it.
func TestReloadRotatesCertificateRewrittenInPlace(t *testing.T) {
	backend := httptest.NewServer(demobackend.Handler("b"))
	defer backend.Close()
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := selfSigned(t, certPath, keyPath)
	cfgPath := filepath.Join(dir, "tether.json")
	cfg := strings.Replace(testConfig(backend.URL+"/", ""), `{ "Address": "127.0.0.1:0" }`,
		fmt.Sprintf(`{ "Address": "127.0.0.1:0", "Certificate": { "Path": %q, "KeyPath": %q } }`, certPath, keyPath), 1)
	os.WriteFile(cfgPath, []byte(cfg), 0o600)
	n, err := New(Config{ConfigPath: cfgPath, NodeID: "t1", DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	served := func() []byte {
		conn, err := tls.Dial("tcp", n.ProxyAddrs()[0].String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	if !bytes.Equal(served(), first) {
		t.Fatal("not serving the first certificate")
	}
	second := selfSigned(t, certPath, keyPath)
	if err := n.Reload(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served(), second) {
		t.Fatal("reload did not rotate the certificate")
	}
	// A key caught half-written keeps the current certificate but does not
	// hold back a route change.
	os.WriteFile(keyPath, []byte("not a key"), 0o600)
	cfg = strings.Replace(cfg, `"Routes": { "all"`, `"Routes": { "more": { "ClusterId": "app", "Match": { "Path": "/more" } }, "all"`, 1)
	os.WriteFile(cfgPath, []byte(cfg), 0o600)
	if err := n.Reload(); err == nil || !strings.Contains(err.Error(), "Listeners[0].Certificate") {
		t.Fatalf("a broken key file went unreported: %v", err)
	}
	if !bytes.Equal(served(), second) {
		t.Fatal("a certificate that does not load replaced the served one")
	}
	n.reloadMu.Lock()
	routes := len(n.current.ReverseProxy.Routes)
	n.reloadMu.Unlock()
	if routes != 2 {
		t.Fatalf("%d routes after the reload, want the route change applied", routes)
	}
}

// TestWatcherReloadsWhenSymlinkedDirectoryIsRepointed, as git-sync and
// similar tools publish a new config: no event names the file itself.
func TestWatcherReloadsWhenSymlinkedDirectoryIsRepointed(t *testing.T) {
	backend := httptest.NewServer(demobackend.Handler("b"))
	defer backend.Close()
	dir := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		os.Mkdir(filepath.Join(dir, v), 0o700)
	}
	os.WriteFile(filepath.Join(dir, "v1", "tether.json"), []byte(testConfig(backend.URL+"/", "")), 0o600)
	os.WriteFile(filepath.Join(dir, "v2", "tether.json"), []byte(testConfig(backend.URL+"/",
		`, "extra": { "ClusterId": "app", "Match": { "Path": "/extra", "Hosts": ["extra.example"] } }`)), 0o600)
	current := filepath.Join(dir, "current")
	if err := os.Symlink("v1", current); err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{ConfigPath: filepath.Join(current, "tether.json"), NodeID: "t1", DataDir: filepath.Join(dir, "data"),
		AdminAddr: "127.0.0.1:0", WatchConfig: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	routes := func() int {
		n.reloadMu.Lock()
		defer n.reloadMu.Unlock()
		return len(n.current.ReverseProxy.Routes)
	}
	if routes() != 1 {
		t.Fatalf("%d routes at start", routes())
	}
	tmp := filepath.Join(dir, "current.tmp")
	if err := os.Symlink("v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "reload after the directory symlink moved", func() bool { return routes() == 2 })
}

func TestIsLoopback(t *testing.T) {
	cases := []struct {
		desc string
		addr net.Addr
		want bool
	}{
		{"127.0.0.1", &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}, true},
		{"::1", &net.TCPAddr{IP: net.IPv6loopback}, true},
		{"all interfaces", &net.TCPAddr{IP: net.IPv4zero}, false},
		{"a private address", &net.TCPAddr{IP: net.ParseIP("10.0.0.1")}, false},
	}
	for _, c := range cases {
		if got := isLoopback(c.addr); got != c.want {
			t.Errorf("%s: isLoopback = %v, want %v", c.desc, got, c.want)
		}
	}
}

func TestShutdownTimeoutHonoursAGivenZero(t *testing.T) {
	cases := []struct {
		desc string
		lim  config.Limits
		want time.Duration
	}{
		{"given 0: stop at once", config.Limits{ShutdownTimeout: config.Duration{Set: true}}, 0},
		{"given 5s", config.Limits{ShutdownTimeout: config.Duration{Duration: 5 * time.Second, Set: true}}, 5 * time.Second},
		{"absent: 30s", config.Limits{}, 30 * time.Second},
	}
	for _, c := range cases {
		n := &Node{current: &config.Config{Limits: c.lim}}
		if got := n.ShutdownTimeout(); got != c.want {
			t.Errorf("%s: ShutdownTimeout = %v, want %v", c.desc, got, c.want)
		}
	}
}

// TestWatcherDoesNotReloadAnUnchangedFile, given a relative path too: the
// fingerprint poll must not see a change where there is none.
func TestWatcherDoesNotReloadAnUnchangedFile(t *testing.T) {
	backend := httptest.NewServer(demobackend.Handler("b"))
	defer backend.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tether.json"), []byte(testConfig(backend.URL+"/", "")), 0o600)
	t.Chdir(dir)
	n, err := New(Config{ConfigPath: "tether.json", NodeID: "t1", DataDir: "data", AdminAddr: "127.0.0.1:0", WatchConfig: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	if fp := fingerprint(filepath.Join(dir, "tether.json")); fp != n.loadedFingerprint() {
		t.Fatalf("fingerprint of the absolute path %q differs from the loaded %q", fp, n.loadedFingerprint())
	}
}
