package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/accesslog"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/proxy/health"
	"github.com/tether-proxy/tether/proxy/upstream"
	"github.com/tether-proxy/tether/test/testutil"
)

func TestProxyForwardsToDestination(t *testing.T) {
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL + "/base/"}, "", "", "")), nil)
	resp, body := get(t, nil, h.front.URL+"/x/y?q=1", nil)
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	got := b.lastRequest()
	if got.URL.Path != "/base/x/y" || got.URL.RawQuery != "q=1" {
		t.Errorf("backend saw %s?%s, want /base/x/y?q=1 (base path joined, query kept)", got.URL.Path, got.URL.RawQuery)
	}
	bu, _ := url.Parse(b.URL)
	if got.Host != bu.Host {
		t.Errorf("Host = %q, want the destination's %q", got.Host, bu.Host)
	}
	if id := resp.Header.Get(forwarded.TraceHeader); !forwarded.ValidTraceID(id) || id != got.Header.Get(forwarded.TraceHeader) {
		t.Errorf("response trace id %q, backend %q: want the same valid id", id, got.Header.Get(forwarded.TraceHeader))
	}
}

func TestHostHeader(t *testing.T) {
	cases := []struct {
		desc    string
		dest    string
		route   string
		want    string // "" means the destination's address host
		reqHost string
	}{
		{desc: "default: the destination's host", reqHost: "client.example"},
		{desc: "Destination.Host overrides", dest: `"Host": "backend.example",`, want: "backend.example", reqHost: "client.example"},
		{desc: "RequestHeaderOriginalHost keeps the client's host", route: `"Transforms": [{"RequestHeaderOriginalHost": "true"}]`, want: "client.example", reqHost: "client.example"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			b := newBackend(t, nil)
			js := fmt.Sprintf(`{"ReverseProxy": {
  "Routes": {"r": {"ClusterId": "c", "Match": {"Path": "{**all}"} %s}},
  "Clusters": {"c": {"Destinations": {"d1": {%s "Address": %q}}}}}}`, prefixComma(c.route), c.dest, b.URL)
			h := newHarness(t, mustParse(t, js), nil)
			req, _ := http.NewRequest("GET", h.front.URL+"/", nil)
			req.Host = c.reqHost
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := c.want
			if want == "" {
				u, _ := url.Parse(b.URL)
				want = u.Host
			}
			if got := b.lastRequest().Host; got != want {
				t.Errorf("backend Host = %q, want %q", got, want)
			}
		})
	}
}

func prefixComma(s string) string {
	if s == "" {
		return ""
	}
	return ", " + s
}

func TestTransformsApplied(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "leaky/1.0")
		_, _ = io.WriteString(w, "ok")
	})
	route := `"Transforms": [{"PathRemovePrefix": "/api"}, {"RequestHeader": "X-Env", "Set": "prod"},
	  {"ResponseHeaderRemove": "Server"}, {"ResponseHeader": "X-Via", "Append": "tether", "When": "Always"}]`
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", route, "")), nil)
	resp, _ := get(t, nil, h.front.URL+"/api/users", nil)
	got := b.lastRequest()
	if got.URL.Path != "/users" || got.Header.Get("X-Env") != "prod" {
		t.Errorf("backend saw path %q X-Env %q", got.URL.Path, got.Header.Get("X-Env"))
	}
	if resp.Header.Get("Server") != "" || resp.Header.Get("X-Via") != "tether" {
		t.Errorf("response headers %v", resp.Header)
	}
}

func TestErrorStatuses(t *testing.T) {
	slow := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	})
	dead := newBackend(t, nil)
	deadURL := dead.URL
	dead.Close()
	cases := []struct {
		desc    string
		dests   map[string]string
		cluster string
		route   string
		prep    func(p *Proxy)
		method  string
		body    string
		want    int
		kind    string
		path    string
	}{
		{desc: "backend unreachable is 502", dests: map[string]string{"d1": deadURL}, want: 502, kind: "bad_gateway"},
		{desc: "backend slower than ActivityTimeout is 504", dests: map[string]string{"d1": slow.URL},
			cluster: `"HttpRequest": {"ActivityTimeout": "00:00:00.2"}`, want: 504, kind: "gateway_timeout"},
		{desc: "no healthy destination is 503", dests: map[string]string{"d1": slow.URL, "d2": slow.URL},
			prep: func(p *Proxy) {
				for _, d := range p.Cluster("c").Destinations {
					d.SetActiveHealth(upstream.Unhealthy)
				}
			}, want: 503, kind: "no_healthy"},
		{desc: "draining destinations take no new requests: 503", dests: map[string]string{"d1": slow.URL},
			prep: func(p *Proxy) {
				if _, err := p.SetDraining("c", "d1", true); err != nil {
					panic(err)
				}
			}, want: 503, kind: "no_healthy"},
		{desc: "body larger than MaxRequestBodySize is 413", dests: map[string]string{"d1": slow.URL},
			route: `"MaxRequestBodySize": 10`, method: "POST", body: strings.Repeat("x", 100), want: 413, kind: "body_too_large"},
		{desc: "no route is 404", dests: map[string]string{"d1": slow.URL}, route: `"Match": {"Path": "/only"}`, path: "/other", want: 404, kind: "no_route"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			js := simpleConfig(c.dests, c.cluster, "", "")
			if c.route != "" {
				if strings.Contains(c.route, "Match") {
					js = strings.Replace(js, `"Match": { "Path": "{**catch-all}" }`, c.route, 1)
				} else {
					js = strings.Replace(js, `"ClusterId"`, c.route+`, "ClusterId"`, 1)
				}
			}
			h := newHarness(t, mustParse(t, js), nil)
			if c.prep != nil {
				c.prep(h.p)
			}
			method := c.method
			if method == "" {
				method = "GET"
			}
			path := c.path
			if path == "" {
				path = "/x"
			}
			req, _ := http.NewRequest(method, h.front.URL+path, strings.NewReader(c.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, c.want, body)
			}
			if strings.Contains(string(body), "127.0.0.1") || strings.Contains(string(body), "dial") {
				t.Errorf("error body leaks internals: %q", body)
			}
			if !forwarded.ValidTraceID(resp.Header.Get(forwarded.TraceHeader)) {
				t.Errorf("error response without trace id")
			}
			cluster := "c"
			if c.kind == "no_route" {
				cluster = ""
			}
			if n := metricValue(t, h, "tether_proxy_errors_total", map[string]string{"cluster": cluster, "kind": c.kind}); n != 1 {
				t.Errorf("tether_proxy_errors_total{kind=%q} = %v, want 1", c.kind, n)
			}
		})
	}
}

func TestBodyLimitWithoutContentLength(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		_, _ = io.WriteString(w, "read all")
	})
	js := strings.Replace(simpleConfig(map[string]string{"d1": b.URL}, "", "", ""), `"ClusterId"`, `"MaxRequestBodySize": 10, "ClusterId"`, 1)
	h := newHarness(t, mustParse(t, js), nil)
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte(strings.Repeat("y", 1000)))
		_ = pw.Close()
	}()
	req, _ := http.NewRequest("POST", h.front.URL+"/", pr) // chunked: no Content-Length
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
}

// TestPassiveHealthExcludesFailingDestination: with YARP's
// TransportFailureRate defaults (at least 10 requests, more than 30 %
// failing) the proxied 5xx exclude the destination and the next request
// fails fast with 503.
func TestPassiveHealthExcludesFailingDestination(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, `"HealthCheck": {"Passive": {"Enabled": true}}`, "", "")), nil)
	for i := 0; i < health.DefaultMinRequests; i++ {
		if resp, _ := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != 500 {
			t.Fatalf("request %d: status %d, want the backend's 500", i, resp.StatusCode)
		}
	}
	if resp, _ := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != 503 {
		t.Fatalf("status %d, want 503 after the failure rate excluded the destination", resp.StatusCode)
	}
}

// TestWebSocketUpgrade does a minimal WebSocket-style handshake and echoes
// bytes both ways through the proxy.
func TestWebSocketUpgrade(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", 400)
			return
		}
		echoUpgrade(w)
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	conn, err := net.Dial("tcp", h.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	fmt.Fprintf(conn, "hello\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo:hello\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	conn.Close()
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return len(h.accessLines(t)) == 1 })
	if got := h.accessLines(t)[0]["status"]; got != float64(101) {
		t.Errorf("access log status %v, want 101", got)
	}
}

func TestServerSentEventsFlushImmediately(t *testing.T) {
	release := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		http.NewResponseController(w).Flush()
		<-release
		_, _ = io.WriteString(w, "data: two\n\n")
	})
	defer close(release)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	resp, err := http.Get(h.front.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	done := make(chan string, 1)
	go func() {
		line, _ := br.ReadString('\n')
		done <- line
	}()
	select {
	case line := <-done:
		if line != "data: one\n" {
			t.Fatalf("first event %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("first event not flushed while the backend holds the stream open")
	}
}

func TestTrailersForwarded(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	resp, err := http.Get(h.front.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
		t.Fatalf("trailer X-Checksum = %q, want abc", got)
	}
}

func TestMetricsAfterRequests(t *testing.T) {
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		`"SessionAffinity": {"Enabled": true, "Policy": "HashCookie", "AffinityKeyName": ".T"}`, "", "")), nil)
	for i := 0; i < 3; i++ {
		get(t, nil, h.front.URL+"/", nil)
	}
	cases := []struct {
		desc   string
		name   string
		labels map[string]string
		want   float64
	}{
		{desc: "requests counted by route, cluster, destination and code", name: "tether_requests_total",
			labels: map[string]string{"route": "r", "cluster": "c", "destination": "d1", "code": "200"}, want: 3},
		{desc: "latency observed per route, cluster, destination", name: "tether_request_duration_seconds",
			labels: map[string]string{"route": "r", "cluster": "c", "destination": "d1"}, want: 3},
		{desc: "affinity outcome no_session counted", name: "tether_affinity_requests_total",
			labels: map[string]string{"cluster": "c", "outcome": "no_session"}, want: 3},
		{desc: "affinity outcome routed zero", name: "tether_affinity_requests_total",
			labels: map[string]string{"cluster": "c", "outcome": "routed"}, want: 0},
		{desc: "cluster health unknown is -1", name: "tether_destination_health",
			labels: map[string]string{"cluster": "c", "destination": "d1", "source": "cluster"}, want: -1},
		{desc: "local health unknown is -1", name: "tether_destination_health",
			labels: map[string]string{"cluster": "c", "destination": "d1", "source": "local"}, want: -1},
		{desc: "passive health fine is 1", name: "tether_destination_health",
			labels: map[string]string{"cluster": "c", "destination": "d1", "source": "passive"}, want: 1},
		{desc: "draining gauge 0", name: "tether_destination_draining",
			labels: map[string]string{"cluster": "c", "destination": "d1"}, want: 0},
		{desc: "drained gauge 0", name: "tether_destination_drained",
			labels: map[string]string{"cluster": "c", "destination": "d1"}, want: 0},
		{desc: "in-flight gauge 0", name: "tether_destination_inflight",
			labels: map[string]string{"cluster": "c", "destination": "d1"}, want: 0},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			if got := metricValue(t, h, c.name, c.labels); got != c.want {
				t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
			}
		})
	}
}

// TestDrainGaugesFollowTheDeadline: a drain reads as draining until its
// deadline and as drained after it, on /metrics as on the admin API.
func TestDrainGaugesFollowTheDeadline(t *testing.T) {
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	labels := map[string]string{"cluster": "c", "destination": "d1"}
	d := h.p.Cluster("c").Destination("d1")
	for _, c := range []struct {
		desc              string
		deadline          time.Time
		draining, drained float64
	}{
		{"not draining", time.Time{}, 0, 0},
		{"before the deadline: draining", time.Now().Add(time.Hour), 1, 0},
		{"past the deadline: drained", time.Now().Add(-time.Second), 0, 1},
		{"undrained", time.Time{}, 0, 0},
	} {
		d.SetDraining(c.deadline)
		if got := metricValue(t, h, "tether_destination_draining", labels); got != c.draining {
			t.Errorf("%s: tether_destination_draining = %v, want %v", c.desc, got, c.draining)
		}
		if got := metricValue(t, h, "tether_destination_drained", labels); got != c.drained {
			t.Errorf("%s: tether_destination_drained = %v, want %v", c.desc, got, c.drained)
		}
	}
}

// metricValue gathers the registry and returns the value of the series
// with exactly these labels (a histogram's sample count); it fails the
// test when the series is absent.
func metricValue(t *testing.T, h *harness, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func TestAccessLogLine(t *testing.T) {
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	resp, _ := get(t, nil, h.front.URL+"/p?q=1", nil)
	lines := h.accessLines(t)
	if len(lines) != 1 {
		t.Fatalf("%d access lines, want 1", len(lines))
	}
	l := lines[0]
	want := map[string]any{"trace_id": resp.Header.Get(forwarded.TraceHeader), "remote": "127.0.0.1", "method": "GET",
		"path": "/p", "status": float64(200), "bytes": float64(2), "route": "r", "cluster": "c",
		"destination": "d1", "affinity": "disabled"}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("%s = %v, want %v", k, l[k], v)
		}
	}
	for _, k := range []string{"host", "duration_ms"} {
		if _, ok := l[k]; !ok {
			t.Errorf("field %s missing", k)
		}
	}
}

func TestAffinity(t *testing.T) {
	b1 := newBackend(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "d1") })
	b2 := newBackend(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "d2") })
	dests := map[string]string{"d1": b1.URL, "d2": b2.URL}
	cases := []struct {
		desc    string
		cluster string
		route   string
		cookie  string
		want    int
		outcome string
		attach  bool
	}{
		{desc: "no key: a destination is picked and its key attached", cluster: `"SessionAffinity": {"Enabled": true, "AffinityKeyName": ".T"}`,
			want: 200, outcome: "no_session", attach: true},
		{desc: "invalid key with Return503Error answers FailureStatusCode", cluster: `"SessionAffinity": {"Enabled": true, "AffinityKeyName": ".T", "FailurePolicy": "Return503Error", "FailureStatusCode": 418}`,
			cookie: "garbage", want: 418, outcome: "failed_closed"},
		{desc: "route override Enabled:false disables affinity", cluster: `"SessionAffinity": {"Enabled": true, "AffinityKeyName": ".T", "FailurePolicy": "Return503Error"}`,
			route: `"SessionAffinity": {"Enabled": false}`, cookie: "garbage", want: 200},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			h := newHarness(t, mustParse(t, simpleConfig(dests, c.cluster, c.route, "")), nil)
			hdr := http.Header{}
			if c.cookie != "" {
				hdr.Set("Cookie", ".T="+c.cookie)
			}
			resp, _ := get(t, nil, h.front.URL+"/", hdr)
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
			if got := resp.Header.Get("Set-Cookie") != ""; got != c.attach {
				t.Errorf("Set-Cookie present %v, want %v", got, c.attach)
			}
			if c.outcome != "" {
				if n := metricValue(t, h, "tether_affinity_requests_total", map[string]string{"cluster": "c", "outcome": c.outcome}); n != 1 {
					t.Errorf("outcome %s counted %v, want 1", c.outcome, n)
				}
			}
			if c.attach {
				// The key routes the next request back to the same destination.
				first := resp.Header.Get("Set-Cookie")
				_, body1 := get(t, nil, h.front.URL+"/", http.Header{"Cookie": {strings.Split(first, ";")[0]}})
				for i := 0; i < 5; i++ {
					_, body := get(t, nil, h.front.URL+"/", http.Header{"Cookie": {strings.Split(first, ";")[0]}})
					if body != body1 {
						t.Fatalf("affinitized request went to %s, then %s", body1, body)
					}
				}
			}
		})
	}
}

func TestUpdateKeepsDestinationState(t *testing.T) {
	b1 := newBackend(t, nil)
	b2 := newBackend(t, nil)
	cfg1 := mustParse(t, simpleConfig(map[string]string{"d1": b1.URL, "d2": b2.URL}, "", "", ""))
	h := newHarness(t, cfg1, nil)
	old1, old2 := h.p.Cluster("c").Destination("d1"), h.p.Cluster("c").Destination("d2")
	deadline, err := h.p.SetDraining("c", "d1", true)
	if err != nil || deadline.IsZero() {
		t.Fatalf("SetDraining: %v %v", deadline, err)
	}
	old1.SetActiveHealth(upstream.Healthy)

	b3 := newBackend(t, nil)
	cfg2 := mustParse(t, simpleConfig(map[string]string{"d1": b1.URL, "d2": b3.URL, "d3": b3.URL}, "", "", ""))
	if err := h.p.Update(cfg2); err != nil {
		t.Fatal(err)
	}
	cl := h.p.Cluster("c")
	cases := []struct {
		desc string
		ok   bool
	}{
		{desc: "unchanged destination is the same object", ok: cl.Destination("d1") == old1},
		{desc: "its drain state survives", ok: func() bool { on, _ := cl.Destination("d1").Draining(); return on }()},
		{desc: "its health survives", ok: cl.Destination("d1").ActiveHealth() == upstream.Healthy},
		{desc: "changed address gives a new destination", ok: cl.Destination("d2") != old2 && cl.Destination("d2") != nil},
		{desc: "new destination appears", ok: cl.Destination("d3") != nil},
	}
	for _, c := range cases {
		if !c.ok {
			t.Error(c.desc)
		}
	}
	if got := h.p.ClusterIDs(); len(got) != 1 || got[0] != "c" {
		t.Errorf("ClusterIDs = %v", got)
	}
	if _, err := h.p.SetDraining("nope", "d1", true); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown cluster: %v, want ErrNotFound", err)
	}
	if _, err := h.p.SetDraining("c", "nope", true); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown destination: %v, want ErrNotFound", err)
	}
	if _, err := h.p.SetDraining("c", "d1", false); err != nil {
		t.Fatal(err)
	}
	if on, _ := cl.Destination("d1").Draining(); on {
		t.Error("undrain did not stop draining")
	}
	if h.p.Cluster("nope") != nil {
		t.Error("Cluster(unknown) != nil")
	}
}

func TestUpdateRefusesInvalidConfig(t *testing.T) {
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	bad := mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", ""))
	bad.ReverseProxy.Clusters["c"].LoadBalancingPolicy = "Bogus"
	if err := h.p.Update(bad); err == nil {
		t.Fatal("Update accepted an invalid config")
	}
	if resp, _ := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != 200 {
		t.Fatalf("old config no longer serves: %d", resp.StatusCode)
	}
}

// TestUpdateDoesNotDropInFlight holds a request open across a reload.
func TestUpdateDoesNotDropInFlight(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "late")
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	var wg sync.WaitGroup
	var status int
	var body string
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.Get(h.front.URL + "/")
		if err != nil {
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status, body = resp.StatusCode, string(b)
	}()
	<-started
	d := h.p.Cluster("c").Destination("d1")
	if d.Inflight() != 1 {
		t.Fatalf("inflight %d, want 1", d.Inflight())
	}
	if err := h.p.Update(mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, `"LoadBalancingPolicy": "RoundRobin"`, "", ""))); err != nil {
		t.Fatal(err)
	}
	if h.p.Cluster("c").Destination("d1").Inflight() != 1 {
		t.Error("in-flight count lost across reload")
	}
	close(release)
	wg.Wait()
	if status != 200 || body != "late" {
		t.Fatalf("in-flight request got %d %q", status, body)
	}
	if d.Inflight() != 0 {
		t.Errorf("inflight %d after completion", d.Inflight())
	}
}

func TestCompileErrors(t *testing.T) {
	cfg := mustParse(t, simpleConfig(map[string]string{"d1": "http://127.0.0.1:1"}, "", "", ""))
	cfg.ReverseProxy.Clusters["c"].LoadBalancingPolicy = "Nope"
	cfg.ReverseProxy.Routes["r"].Transforms = []map[string]string{{"PathPrefix": "no-slash"}}
	cfg.ReverseProxy.Clusters["c"].SessionAffinity.Enabled = true
	cfg.ReverseProxy.Clusters["c"].SessionAffinity.AffinityKeyName = ""
	errs := Compile(cfg)
	want := []string{
		"ReverseProxy.Clusters.c.LoadBalancingPolicy",
		"ReverseProxy.Clusters.c.SessionAffinity.AffinityKeyName",
		"ReverseProxy.Routes.r.Transforms[0]",
	}
	for _, w := range want {
		found := false
		for _, e := range errs {
			found = found || e.Path == w
		}
		if !found {
			t.Errorf("no error at %s in %v", w, errs)
		}
	}
	if errs := Compile(mustParse(t, simpleConfig(map[string]string{"d1": "http://127.0.0.1:1"}, "", "", ""))); errs != nil {
		t.Errorf("valid config: %v", errs)
	}
}

// TestClientCancelIsQuiet: a client that leaves is logged as 499, not
// counted as a proxy error, and not held against the destination.
func TestClientCancelIsQuiet(t *testing.T) {
	started := make(chan struct{}, 1)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done()
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, `"HealthCheck": {"Passive": {"Enabled": true}}`, "", "")), nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", h.front.URL+"/", nil)
	go func() {
		<-started
		cancel()
	}()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("request not cancelled")
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return len(h.accessLines(t)) == 1 })
	if got := h.accessLines(t)[0]["status"]; got != float64(499) {
		t.Errorf("access log status %v, want 499", got)
	}
	if n := metricValue(t, h, "tether_proxy_errors_total", map[string]string{"cluster": "c", "kind": "bad_gateway"}); n != 0 {
		t.Errorf("bad_gateway counted %v", n)
	}
	if h.p.Cluster("c").Destination("d1").PassiveFailed(time.Now()) {
		t.Error("client cancel marked the destination failed")
	}
}

// TestActiveHealthStartsWithProxy: New starts the cluster's probes; a
// failing probe takes the destination out (503).
func TestActiveHealthStartsWithProxy(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(500)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		`"HealthCheck": {"Active": {"Enabled": true, "Interval": "00:00:00.05", "Timeout": "00:00:01", "Path": "/healthz", "ConsecutiveFailures": 1}}`, "", "")), nil)
	d := h.p.Cluster("c").Destination("d1")
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return d.ActiveHealth() == upstream.Unhealthy })
	if resp, _ := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != 503 {
		t.Fatalf("status %d, want 503", resp.StatusCode)
	}
}

// TestBackendConnectionsReused: the cluster's one shared transport keeps
// the backend connection alive between requests (never one per request),
// here with the default dnscache dialer.
func TestBackendConnectionsReused(t *testing.T) {
	var mu sync.Mutex
	remotes := map[string]bool{}
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr] = true
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), func(o *Options) { o.Dial = nil })
	for i := 0; i < 5; i++ {
		if resp, _ := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(remotes) != 1 {
		t.Fatalf("backend saw %d connections for 5 sequential requests, want 1", len(remotes))
	}
}

// TestUpdateForgetsRemovedDestinationSeries: /metrics does not keep series
// of a destination that a reload removed.
func TestUpdateForgetsRemovedDestinationSeries(t *testing.T) {
	b1, b2 := newBackend(t, nil), newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b1.URL, "d2": b2.URL}, `"LoadBalancingPolicy": "RoundRobin"`, "", "")), nil)
	for i := 0; i < 4; i++ {
		get(t, nil, h.front.URL+"/", nil)
	}
	if b2.hitCount() == 0 {
		t.Fatal("d2 never picked")
	}
	if err := h.p.Update(mustParse(t, simpleConfig(map[string]string{"d1": b1.URL}, "", "", ""))); err != nil {
		t.Fatal(err)
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "destination" && l.GetValue() == "d2" {
					t.Errorf("%s still has a d2 series", mf.GetName())
				}
			}
		}
	}
}

// TestHTTPSProxyEndToEnd: an HTTP/2 client through an HTTPS listener to an
// HTTP/1.1 backend; the affinity cookie is Secure because the client used
// TLS (SecurePolicy SameAsRequest) and X-Forwarded-Proto says https.
func TestHTTPSProxyEndToEnd(t *testing.T) {
	b := newBackend(t, nil)
	cert, key, pool := testutil.CertFiles(t)
	cfg := mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		`"SessionAffinity": {"Enabled": true, "AffinityKeyName": ".T"}`, "", ""))
	cfg.Listeners = []config.Listener{{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: cert, KeyPath: key}}}
	h := newHarness(t, cfg, nil)
	s := startServer(t, cfg, h.p)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, body := get(t, client, "https://"+s.Addrs()[0].String()+"/x", nil)
	if resp.StatusCode != 200 || body != "ok" || resp.ProtoMajor != 2 {
		t.Fatalf("got %s %d %q", resp.Proto, resp.StatusCode, body)
	}
	if sc := resp.Header.Get("Set-Cookie"); !strings.Contains(strings.ToLower(sc), "; secure") {
		t.Errorf("Set-Cookie %q lacks Secure", sc)
	}
	if p := b.lastRequest().Header.Get("X-Forwarded-Proto"); p != "https" {
		t.Errorf("X-Forwarded-Proto = %q", p)
	}
}

// Through the data path: the accesslog.Log's lines are the slog path's, in
// request order, and complete once the log is closed.
func TestAccessLogThroughProxy(t *testing.T) {
	be := newBackend(t, nil)
	cfg := simpleConfig(map[string]string{"d1": be.URL}, "", "", "")
	slow := newHarness(t, mustParse(t, cfg), nil)
	var w testutil.SyncBuffer
	al := accesslog.New(&w)
	fast := newHarness(t, mustParse(t, cfg), func(o *Options) { o.AccessLog = al.Logger() })
	if fast.p.fastAccess != al {
		t.Fatal("the accesslog.Log's logger did not select the fast path")
	}
	paths := []string{"/a", "/b?q=1", "/c%22d"}
	for _, p := range paths {
		get(t, nil, slow.front.URL+p, nil)
		get(t, nil, fast.front.URL+p, nil)
	}
	al.Close()
	fast.mu.Lock()
	fast.access.WriteString(w.String()) // decode with the harness's reader
	fast.mu.Unlock()
	sl, fl := slow.accessLines(t), fast.accessLines(t)
	if len(sl) != len(paths) || len(fl) != len(paths) {
		t.Fatalf("lines: slog %d, fast %d, want %d", len(sl), len(fl), len(paths))
	}
	for i := range sl {
		for _, k := range []string{"time", "duration_ms", "trace_id", "span_id", "host"} {
			if _, ok := fl[i][k]; !ok {
				t.Fatalf("fast line %d lacks %q: %v", i, k, fl[i])
			}
			delete(sl[i], k)
			delete(fl[i], k)
		}
		if len(sl[i]) != len(fl[i]) {
			t.Fatalf("line %d: slog %v, fast %v", i, sl[i], fl[i])
		}
		for k, v := range sl[i] {
			if fl[i][k] != v {
				t.Fatalf("line %d key %q: slog %v, fast %v", i, k, v, fl[i][k])
			}
		}
	}
}
