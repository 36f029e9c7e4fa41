package health

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"

	"github.com/tether-proxy/tether/test/testutil"
)

// block is a scripted status meaning: hold the request until the client
// gives up (a probe timeout).
const block = -1

// backend is a real HTTP server on 127.0.0.1 whose answer to the n-th probe
// (1-based) is script(n).
type backend struct {
	srv        *httptest.Server
	hits       atomic.Int64
	redirected atomic.Int64
	mu         sync.Mutex
	last       *http.Request
}

func newBackend(t *testing.T, script func(n int64) int) *backend {
	b := &backend{}
	done := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/redirected", func(w http.ResponseWriter, r *http.Request) { b.redirected.Add(1) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		n := b.hits.Add(1)
		b.mu.Lock()
		b.last = r.Clone(r.Context())
		b.mu.Unlock()
		status := script(n)
		if status == block {
			select {
			case <-r.Context().Done():
			case <-done:
			}
			return
		}
		if status >= 300 && status < 400 {
			w.Header().Set("Location", "/redirected")
		}
		w.WriteHeader(status)
		fmt.Fprint(w, "probe answer")
	})
	b.srv = httptest.NewServer(mux)
	t.Cleanup(func() { close(done); b.srv.Close() })
	return b
}

func (b *backend) lastRequest() *http.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

func always(status int) func(int64) int { return func(int64) int { return status } }

// seq answers statuses in order, then repeats the last one forever.
func seq(statuses ...int) func(int64) int {
	return func(n int64) int { return statuses[min(int(n), len(statuses))-1] }
}

// countingTransport counts probes sent, failed or not.
type countingTransport struct {
	inner  *http.Transport
	probes atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.probes.Add(1)
	return c.inner.RoundTrip(r)
}

func newTransport(t *testing.T) *countingTransport {
	tr := &countingTransport{inner: &http.Transport{}}
	t.Cleanup(tr.inner.CloseIdleConnections)
	return tr
}

// event is one verdict change and how many probes had been sent by then.
type event struct {
	Dest   string
	Health upstream.Health
	Probes int64
}

type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) onChange(tr *countingTransport) func(string, *upstream.Destination, upstream.Health) {
	return func(_ string, d *upstream.Destination, h upstream.Health) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, event{d.ID, h, tr.probes.Load()})
	}
}

func (r *recorder) get() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func activeCfg(mod func(*config.ActiveHealthCheck)) config.ActiveHealthCheck {
	c := config.ActiveHealthCheck{
		Enabled:  true,
		Interval: config.Duration{Duration: 10 * time.Millisecond},
		Timeout:  config.Duration{Duration: 2 * time.Second},
	}
	if mod != nil {
		mod(&c)
	}
	return c
}

// refusedURL is an address where nothing listens.
func refusedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/"
}

func TestActiveVerdicts(t *testing.T) {
	U, H := upstream.Unhealthy, upstream.Healthy
	tests := []struct {
		desc     string
		script   func(int64) int
		refused  bool // no backend listening: every probe is a transport error
		cfg      func(*config.ActiveHealthCheck)
		metadata map[string]string
		want     []event // Dest is always "d1"
	}{
		{
			desc: "unhealthy after exactly ConsecutiveFailures failures", script: always(500),
			cfg:  func(c *config.ActiveHealthCheck) { c.ConsecutiveFailures = 4 },
			want: []event{{"d1", U, 4}},
		},
		{
			desc: "ConsecutiveFailures defaults to 3", script: always(503),
			want: []event{{"d1", U, 3}},
		},
		{
			desc: "a success resets the failure count", script: seq(500, 500, 200, 500, 500, 500),
			want: []event{{"d1", H, 3}, {"d1", U, 6}},
		},
		{
			desc: "healthy again after ConsecutiveSuccesses successes", script: seq(500, 500, 200, 200, 200),
			cfg: func(c *config.ActiveHealthCheck) {
				c.ConsecutiveFailures = 2
				c.ConsecutiveSuccesses = 3
			},
			want: []event{{"d1", U, 2}, {"d1", H, 5}},
		},
		{
			desc: "ConsecutiveSuccesses defaults to 1", script: seq(500, 500, 200),
			cfg:  func(c *config.ActiveHealthCheck) { c.ConsecutiveFailures = 2 },
			want: []event{{"d1", U, 2}, {"d1", H, 3}},
		},
		{
			desc: "default HealthyStatuses 200-399: a redirect is healthy and not followed", script: always(302),
			want: []event{{"d1", H, 1}},
		},
		{
			desc: "default HealthyStatuses: 400 is a failure", script: always(400),
			cfg:  func(c *config.ActiveHealthCheck) { c.ConsecutiveFailures = 1 },
			want: []event{{"d1", U, 1}},
		},
		{
			desc: "custom HealthyStatuses: a code outside them is a failure", script: seq(204, 200),
			cfg: func(c *config.ActiveHealthCheck) {
				c.HealthyStatuses = "204, 300-302"
				c.ConsecutiveFailures = 1
			},
			want: []event{{"d1", H, 1}, {"d1", U, 2}},
		},
		{
			desc: "cluster metadata threshold applies when ConsecutiveFailures is unset", script: always(500),
			metadata: map[string]string{"consecutiveFailuresHealthPolicy.threshold": "5"},
			want:     []event{{"d1", U, 5}},
		},
		{
			desc: "ConsecutiveFailures wins over the metadata threshold", script: always(500),
			cfg:      func(c *config.ActiveHealthCheck) { c.ConsecutiveFailures = 2 },
			metadata: map[string]string{ThresholdMetadataKey: "5"},
			want:     []event{{"d1", U, 2}},
		},
		{
			desc: "a probe timeout is a failure", script: seq(200, block),
			cfg: func(c *config.ActiveHealthCheck) {
				c.Timeout = config.Duration{Duration: 30 * time.Millisecond}
				c.ConsecutiveFailures = 2
			},
			want: []event{{"d1", H, 1}, {"d1", U, 3}},
		},
		{
			desc: "a transport error is a failure", refused: true,
			cfg:  func(c *config.ActiveHealthCheck) { c.ConsecutiveFailures = 2 },
			want: []event{{"d1", U, 2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			addr := refusedURL(t)
			var b *backend
			if !tt.refused {
				b = newBackend(t, tt.script)
				addr = b.srv.URL
			}
			d := upstream.NewDestination("d1", mustURL(t, addr), nil, "", nil)
			c := upstream.NewCluster("c1", []*upstream.Destination{d})
			tr := newTransport(t)
			var rec recorder
			a := NewActive("c1", c, activeCfg(tt.cfg), ActiveOptions{
				Transport: tr, Metadata: tt.metadata, Logger: discardLogger(), OnChange: rec.onChange(tr),
			})
			a.Start()
			defer a.Stop()
			testutil.Eventually(t, 10*time.Second, fmt.Sprintf("events %v", tt.want), func() bool { return len(rec.get()) >= len(tt.want) })
			// Let a few more probes run so an extra (wrong) flip would show.
			last := tt.want[len(tt.want)-1].Probes
			testutil.Eventually(t, 10*time.Second, "more probes", func() bool { return tr.probes.Load() >= last+3 })
			a.Stop()
			if got := rec.get(); !slices.Equal(got, tt.want) {
				t.Fatalf("events = %v, want %v", got, tt.want)
			}
			final := tt.want[len(tt.want)-1].Health
			if d.LocalHealth() != final || d.ActiveHealth() != final {
				t.Fatalf("LocalHealth %v, ActiveHealth %v, want both %v", d.LocalHealth(), d.ActiveHealth(), final)
			}
			if b != nil && b.redirected.Load() != 0 {
				t.Fatalf("a redirect was followed")
			}
		})
	}
}

func TestActiveProbeRequest(t *testing.T) {
	b := newBackend(t, always(200))
	health := mustURL(t, b.srv.URL+"/base/")
	d := upstream.NewDestination("d1", mustURL(t, "http://192.0.2.1:9/"), health, "app.example", nil)
	c := upstream.NewCluster("c1", []*upstream.Destination{d})
	a := NewActive("c1", c, activeCfg(func(c *config.ActiveHealthCheck) {
		c.Path = "/healthz"
		c.Query = "?ready=1"
	}), ActiveOptions{Transport: newTransport(t), Logger: discardLogger()})
	a.Start()
	defer a.Stop()
	testutil.Eventually(t, 10*time.Second, "a probe", func() bool { return b.hits.Load() >= 1 })
	r := b.lastRequest()
	tests := []struct{ desc, got, want string }{
		{"probe is a GET", r.Method, http.MethodGet},
		{"path is the health address joined with Path", r.URL.Path, "/base/healthz"},
		{"Query is appended", r.URL.RawQuery, "ready=1"},
		{"the destination's Host override is sent", r.Host, "app.example"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.desc, tt.got, tt.want)
		}
	}
}

func TestActiveProbeURL(t *testing.T) {
	tests := []struct{ desc, base, path, query, want string }{
		{"root base and default path", "http://h:8080/", "/", "", "http://h:8080/"},
		{"base without slash", "http://h:8080", "/healthz", "", "http://h:8080/healthz"},
		{"base path kept", "http://h/api/", "/healthz", "", "http://h/api/healthz"},
		{"path without leading slash", "http://h/api", "healthz", "", "http://h/api/healthz"},
		{"query with question mark", "http://h/", "/hc", "?a=1&b=2", "http://h/hc?a=1&b=2"},
		{"query without question mark", "http://h/", "/hc", "a=1", "http://h/hc?a=1"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := probeURL(mustURL(t, tt.base), tt.path, tt.query); got != tt.want {
				t.Fatalf("probeURL = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestActiveFirstRoundAtStart(t *testing.T) {
	b := newBackend(t, always(200))
	d := upstream.NewDestination("d1", mustURL(t, b.srv.URL), nil, "", nil)
	a := NewActive("c1", upstream.NewCluster("c1", []*upstream.Destination{d}), activeCfg(func(c *config.ActiveHealthCheck) {
		c.Interval = config.Duration{Duration: time.Hour}
	}), ActiveOptions{Transport: newTransport(t), Logger: discardLogger()})
	a.Start()
	defer a.Stop()
	testutil.Eventually(t, 10*time.Second, "the first probe, long before the interval", func() bool { return d.ActiveHealth() == upstream.Healthy })
}

func TestActiveDisabledProbesNothing(t *testing.T) {
	b := newBackend(t, always(200))
	d := upstream.NewDestination("d1", mustURL(t, b.srv.URL), nil, "", nil)
	a := NewActive("c1", upstream.NewCluster("c1", []*upstream.Destination{d}), activeCfg(func(c *config.ActiveHealthCheck) {
		c.Enabled = false
	}), ActiveOptions{Transport: newTransport(t), Logger: discardLogger()})
	a.Start()
	a.Stop()
	if n := b.hits.Load(); n != 0 || a.running.Load() != 0 {
		t.Fatalf("disabled checker probed %d times (%d goroutines)", n, a.running.Load())
	}
}

func TestActiveObserverDecidesEffectiveHealth(t *testing.T) {
	b := newBackend(t, always(200))
	d := upstream.NewDestination("d1", mustURL(t, b.srv.URL), nil, "", nil)
	type obs struct {
		cluster, dest string
		h             upstream.Health
	}
	got := make(chan obs, 10)
	a := NewActive("c1", upstream.NewCluster("c1", []*upstream.Destination{d}), activeCfg(nil), ActiveOptions{
		Transport: newTransport(t), Logger: discardLogger(),
		Observer: ObserverFunc(func(c, id string, h upstream.Health) { got <- obs{c, id, h} }),
	})
	a.Start()
	defer a.Stop()
	select {
	case o := <-got:
		if o != (obs{"c1", "d1", upstream.Healthy}) {
			t.Fatalf("observed %v, want c1/d1 healthy", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("observer never called")
	}
	if d.LocalHealth() != upstream.Healthy {
		t.Fatalf("LocalHealth = %v, want healthy (this node's verdict)", d.LocalHealth())
	}
	if d.ActiveHealth() != upstream.Unknown {
		t.Fatalf("ActiveHealth = %v, want unknown: only the observer sets it", d.ActiveHealth())
	}
}

func TestActiveShouldProbe(t *testing.T) {
	probed, skipped := newBackend(t, always(500)), newBackend(t, always(500))
	da := upstream.NewDestination("a", mustURL(t, probed.srv.URL), nil, "", nil)
	db := upstream.NewDestination("b", mustURL(t, skipped.srv.URL), nil, "", nil)
	var probeA atomic.Bool
	probeA.Store(true)
	tr := newTransport(t)
	var rec recorder
	a := NewActive("c1", upstream.NewCluster("c1", []*upstream.Destination{db, da}), activeCfg(func(c *config.ActiveHealthCheck) {
		c.ConsecutiveFailures = 2
	}), ActiveOptions{
		Transport: tr, Logger: discardLogger(), OnChange: rec.onChange(tr),
		ShouldProbe: func(cluster, id string) bool { return cluster == "c1" && id == "a" && probeA.Load() },
	})
	a.Start()
	defer a.Stop()
	testutil.Eventually(t, 10*time.Second, "a unhealthy", func() bool { return da.ActiveHealth() == upstream.Unhealthy })
	testutil.Eventually(t, 10*time.Second, "more probes of a", func() bool { return probed.hits.Load() >= 5 })
	if n := skipped.hits.Load(); n != 0 {
		t.Fatalf("destination b (ShouldProbe false) was probed %d times", n)
	}
	if db.LocalHealth() != upstream.Unknown {
		t.Fatalf("b LocalHealth = %v, want unknown", db.LocalHealth())
	}

	// When this node stops probing a, its verdict on a is withdrawn.
	probeA.Store(false)
	testutil.Eventually(t, 10*time.Second, "a unknown", func() bool { return da.LocalHealth() == upstream.Unknown })
	a.Stop()
	want := []event{{"a", upstream.Unhealthy, 2}}
	got := rec.get()
	if len(got) != 2 || got[0] != want[0] || got[1].Dest != "a" || got[1].Health != upstream.Unknown {
		t.Fatalf("events = %v, want a unhealthy after 2 probes, then a unknown", got)
	}
	if da.ActiveHealth() != upstream.Unknown {
		t.Fatalf("a ActiveHealth = %v, want unknown after the withdrawal", da.ActiveHealth())
	}
}

func TestActiveStartsFromTheDestinationsVerdict(t *testing.T) {
	// A reload keeps destinations: a healthy one must not flip on one failure
	// nor report a change it did not make.
	b := newBackend(t, seq(500, 200))
	d := upstream.NewDestination("d1", mustURL(t, b.srv.URL), nil, "", nil)
	d.SetLocalHealth(upstream.Healthy)
	d.SetActiveHealth(upstream.Healthy)
	tr := newTransport(t)
	var rec recorder
	a := NewActive("c1", upstream.NewCluster("c1", []*upstream.Destination{d}), activeCfg(nil), ActiveOptions{
		Transport: tr, Logger: discardLogger(), OnChange: rec.onChange(tr),
	})
	a.Start()
	defer a.Stop()
	testutil.Eventually(t, 10*time.Second, "probes", func() bool { return tr.probes.Load() >= 4 })
	a.Stop()
	if got := rec.get(); len(got) != 0 {
		t.Fatalf("events = %v, want none", got)
	}
}

func TestActivePanicDoesNotStopProbing(t *testing.T) {
	b := newBackend(t, always(200))
	d := upstream.NewDestination("d1", mustURL(t, b.srv.URL), nil, "", nil)
	a := NewActive("c1", upstream.NewCluster("c1", []*upstream.Destination{d}), activeCfg(nil), ActiveOptions{
		Transport: newTransport(t), Logger: discardLogger(),
		OnChange: func(string, *upstream.Destination, upstream.Health) { panic("callback bug") },
	})
	a.Start()
	defer a.Stop()
	testutil.Eventually(t, 10*time.Second, "probing after the panic", func() bool { return b.hits.Load() >= 3 })
}

func TestActiveStopLeavesNoGoroutine(t *testing.T) {
	b := newBackend(t, always(200))
	var dests []*upstream.Destination
	for i := range 5 {
		dests = append(dests, upstream.NewDestination(fmt.Sprintf("d%d", i), mustURL(t, b.srv.URL), nil, "", nil))
	}
	tr := newTransport(t)
	before := runtime.NumGoroutine()
	a := NewActive("c1", upstream.NewCluster("c1", dests), activeCfg(nil), ActiveOptions{Transport: tr, Logger: discardLogger()})
	a.Start()
	a.Start() // idempotent
	testutil.Eventually(t, 10*time.Second, "every destination probed", func() bool {
		for _, d := range dests {
			if d.ActiveHealth() != upstream.Healthy {
				return false
			}
		}
		return true
	})
	if n := a.running.Load(); n != 5 {
		t.Fatalf("%d probe goroutines, want 5", n)
	}
	a.Stop()
	if n := a.running.Load(); n != 0 {
		t.Fatalf("%d probe goroutines still running after Stop", n)
	}
	a.Stop() // idempotent
	tr.inner.CloseIdleConnections()
	testutil.Eventually(t, 10*time.Second, "goroutines back to the count before Start", func() bool { return runtime.NumGoroutine() <= before })
	hits := b.hits.Load()
	a.Start() // no restart after Stop
	if a.running.Load() != 0 || b.hits.Load() != hits {
		t.Fatal("Start after Stop probed again")
	}
}

func TestActiveStopCancelsAProbeInFlight(t *testing.T) {
	b := newBackend(t, always(block))
	d := upstream.NewDestination("d1", mustURL(t, b.srv.URL), nil, "", nil)
	tr := newTransport(t)
	var rec recorder
	a := NewActive("c1", upstream.NewCluster("c1", []*upstream.Destination{d}), activeCfg(func(c *config.ActiveHealthCheck) {
		c.Timeout = config.Duration{Duration: time.Hour}
		c.ConsecutiveFailures = 1
	}), ActiveOptions{Transport: tr, Logger: discardLogger(), OnChange: rec.onChange(tr)})
	a.Start()
	testutil.Eventually(t, 10*time.Second, "a probe in flight", func() bool { return b.hits.Load() >= 1 })
	stopped := make(chan struct{})
	go func() { a.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return while a probe was in flight")
	}
	if got := rec.get(); len(got) != 0 {
		t.Fatalf("a probe cancelled by Stop counted as a verdict: %v", got)
	}
}

func TestActiveLogsEachFlipOnce(t *testing.T) {
	b := newBackend(t, seq(500, 500, 500, 500, 500, 200))
	d := upstream.NewDestination("d1", mustURL(t, b.srv.URL), nil, "", nil)
	var buf strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	a := NewActive("c1", upstream.NewCluster("c1", []*upstream.Destination{d}), activeCfg(func(c *config.ActiveHealthCheck) {
		c.ConsecutiveFailures = 2
	}), ActiveOptions{Transport: newTransport(t), Logger: logger})
	a.Start()
	defer a.Stop()
	testutil.Eventually(t, 10*time.Second, "healthy again", func() bool { return d.ActiveHealth() == upstream.Healthy && b.hits.Load() >= 8 })
	a.Stop()
	mu.Lock()
	defer mu.Unlock()
	out := buf.String()
	if n := strings.Count(out, "destination health changed"); n != 2 {
		t.Fatalf("logged %d changes for 2 flips:\n%s", n, out)
	}
	for _, want := range []string{"cluster=c1", "destination=d1", "health=unhealthy", "health=healthy", "reason=\"probe answered 500\""} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestActiveReloadSeesTheOldCheckersFlip: a reload builds the new checker
// while the old one still probes; a flip the old one makes before it stops
// must not be hidden from the new one by a copy taken at build time.
func TestActiveReloadSeesTheOldCheckersFlip(t *testing.T) {
	U, H := upstream.Unhealthy, upstream.Healthy
	tests := []struct {
		desc string
		// before is the destination's verdict when the new checker is built;
		// oldStatus makes the old checker flip it; newStatus is what the
		// backend answers once only the new checker probes.
		before               upstream.Health
		oldStatus, newStatus int
		want                 upstream.Health
	}{
		{"old checker marks unhealthy, backend recovers: new checker marks healthy", H, 500, 200, H},
		{"old checker marks healthy, backend fails: new checker marks unhealthy", U, 200, 500, U},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var status atomic.Int64
			status.Store(int64(tt.oldStatus))
			b := newBackend(t, func(int64) int { return int(status.Load()) })
			d := upstream.NewDestination("d1", mustURL(t, b.srv.URL), nil, "", nil)
			d.SetLocalHealth(tt.before)
			d.SetActiveHealth(tt.before)
			c := upstream.NewCluster("c1", []*upstream.Destination{d})
			cfg := activeCfg(func(c *config.ActiveHealthCheck) { c.ConsecutiveFailures = 1 })
			tr := newTransport(t)
			oldA := NewActive("c1", c, cfg, ActiveOptions{Transport: tr, Logger: discardLogger()})
			var rec recorder
			newA := NewActive("c1", c, cfg, ActiveOptions{Transport: tr, Logger: discardLogger(), OnChange: rec.onChange(tr)})

			oldA.Start()
			testutil.Eventually(t, 10*time.Second, "the old checker's flip", func() bool { return d.LocalHealth() != tt.before })
			oldA.Stop()
			status.Store(int64(tt.newStatus))
			newA.Start()
			defer newA.Stop()
			testutil.Eventually(t, 10*time.Second, "the new checker to record "+tt.want.String(), func() bool {
				return d.LocalHealth() == tt.want && d.ActiveHealth() == tt.want
			})
			newA.Stop()
			if got := rec.get(); len(got) != 1 || got[0].Health != tt.want {
				t.Fatalf("new checker's changes = %v, want one change to %v", got, tt.want)
			}
		})
	}
}
