package proxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/frontdoor"
)

// mustParse loads a JSON config through config.Parse (defaults filled).
func mustParse(t testing.TB, js string) *config.Config {
	t.Helper()
	cfg, _, err := config.Parse([]byte(js), "json")
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, js)
	}
	return cfg
}

// backend is an httptest server that records the last request it saw.
type backend struct {
	*httptest.Server
	mu   sync.Mutex
	last *http.Request
	hits int
}

func newBackend(t testing.TB, h http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }
	}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.last = r.Clone(context.Background())
		b.hits++
		b.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *backend) lastRequest() *http.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

func (b *backend) hitCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits
}

// simpleConfig is one catch-all route "r" to cluster "c" with the given
// destinations (id -> address); extra is spliced into the cluster object,
// top into the top-level object.
func simpleConfig(dests map[string]string, cluster, route, top string) string {
	var ds []string
	for id, addr := range dests {
		ds = append(ds, fmt.Sprintf("%q: {\"Address\": %q}", id, addr))
	}
	if cluster != "" {
		cluster += ","
	}
	if route != "" {
		route += ","
	}
	if top != "" {
		top += ","
	}
	return fmt.Sprintf(`{ %s
  "ReverseProxy": {
    "Routes": { "r": { %s "ClusterId": "c", "Match": { "Path": "{**catch-all}" } } },
    "Clusters": { "c": { %s "Destinations": { %s } } }
  }
}`, top, route, cluster, strings.Join(ds, ", "))
}

type harness struct {
	p      *Proxy
	front  *httptest.Server
	reg    *prometheus.Registry
	access *bytes.Buffer
	mu     *sync.Mutex
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// newHarness builds a Proxy for cfg served by an httptest front server.
func newHarness(t testing.TB, cfg *config.Config, mod func(*Options)) *harness {
	t.Helper()
	h := &harness{reg: prometheus.NewRegistry(), access: &bytes.Buffer{}, mu: &sync.Mutex{}}
	h.p = newTestProxy(t, cfg, h.reg, lockedWriter{h.mu, h.access}, mod)
	h.front = httptest.NewServer(h.p)
	t.Cleanup(h.front.Close)
	return h
}

// accessLines decodes the access log written so far.
func (h *harness) accessLines(t testing.TB) []map[string]any {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	return jsonLines(t, h.access.Bytes())
}

// jsonLines decodes a log of JSON lines.
func jsonLines(t testing.TB, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		m := map[string]any{}
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// echoUpgrade is a backend's minimal WebSocket-style answer: 101, then
// one line read and echoed back after "echo:".
func echoUpgrade(w http.ResponseWriter) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	_ = brw.Flush()
	line, _ := brw.ReadString('\n')
	_, _ = brw.WriteString("echo:" + line)
	_ = brw.Flush()
}

func get(t testing.TB, c *http.Client, url string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	return send(t, c, http.MethodGet, url, nil, hdr)
}

// send makes one request (c nil: http.DefaultClient) and returns the
// response with its body read.
func send(t testing.TB, c *http.Client, method, url string, body io.Reader, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// testKeyring "seals" by prefixing; enough for the data path's tests.
// Plaintexts that are not plain text (the session values of package
// affinity) travel base64url-encoded behind "k2.", so header values stay
// valid.
type testKeyring struct{}

func (testKeyring) Seal(purpose, plaintext []byte) (string, error) {
	for _, c := range plaintext {
		if c <= ' ' || c >= 0x7f || c == ';' || c == ',' || c == '"' {
			return "k2." + base64.RawURLEncoding.EncodeToString(plaintext), nil
		}
	}
	return "k1." + string(plaintext), nil
}

func (testKeyring) Open(purpose []byte, value string) ([]byte, error) {
	if s, ok := strings.CutPrefix(value, "k2."); ok {
		return base64.RawURLEncoding.DecodeString(s)
	}
	s, ok := strings.CutPrefix(value, "k1.")
	if !ok {
		return nil, fmt.Errorf("bad value")
	}
	return []byte(s), nil
}

// newTestProxy is New with the tests' options: metrics into reg, the access
// log as JSON into access, a 2 s dial timeout and the test keyring; mod may
// change them. The proxy is closed when the test ends.
func newTestProxy(t testing.TB, cfg *config.Config, reg *prometheus.Registry, access io.Writer, mod func(*Options)) *Proxy {
	t.Helper()
	opts := Options{
		Registerer: reg,
		AccessLog:  slog.New(slog.NewJSONHandler(access, nil)),
		Dial:       (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		Keyring:    testKeyring{},
	}
	if mod != nil {
		mod(&opts)
	}
	p, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// newFrontDoor serves h on cfg's listeners with HTTP/2 served by testHTTP2
// unless opts choose.
func newFrontDoor(cfg *config.Config, h http.Handler, opts ...frontdoor.Option) (*frontdoor.Server, error) {
	return frontdoor.New(cfg, h, nil, append([]frontdoor.Option{frontdoor.WithHTTP2Server(testHTTP2)}, opts...)...)
}

// startServer runs a front door serving h for cfg on 127.0.0.1:0 listeners.
func startServer(t *testing.T, cfg *config.Config, h http.Handler) *frontdoor.Server {
	t.Helper()
	s, err := newFrontDoor(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}
