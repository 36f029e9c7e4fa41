package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

const fixedTrace = "0123456789abcdef0123456789abcdef"

func TestForwardedHeaders(t *testing.T) {
	spoof := http.Header{
		"X-Forwarded-For":   {"6.6.6.6"},
		"X-Forwarded-Proto": {"https"},
		"X-Forwarded-Host":  {"evil.example"},
		"X-Forwarded-Port":  {"9999"},
		"X-Original-Host":   {"evil.example"},
		"X-Original-Url":    {"/evil"},
		"X-Tether-Trace-Id": {fixedTrace},
	}
	cases := []struct {
		desc    string
		trusted string
		hdr     http.Header
		want    map[string]string // "*" means any valid trace id other than fixedTrace
	}{
		{desc: "untrusted peer: client forwarding headers are replaced", hdr: spoof, want: map[string]string{
			"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "front.example:8080",
			"X-Forwarded-Port": "listener", "X-Original-Host": "front.example:8080", "X-Original-Url": "/a/b?c=d", "X-Tether-Trace-Id": "*"}},
		{desc: "trusted peer: X-Forwarded-For appended, proto/host/port and trace id kept", trusted: `"TrustedProxies": ["10.0.0.1", "127.0.0.0/8"]`, hdr: spoof, want: map[string]string{
			"X-Forwarded-For": "6.6.6.6, 127.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example",
			"X-Forwarded-Port": "9999", "X-Original-Host": "front.example:8080", "X-Original-Url": "/a/b?c=d", "X-Tether-Trace-Id": fixedTrace}},
		{desc: "trusted peer with an invalid trace id gets a new one", trusted: `"TrustedProxies": ["127.0.0.1"]`,
			hdr: http.Header{"X-Tether-Trace-Id": {"NOT-HEX"}}, want: map[string]string{"X-Tether-Trace-Id": "*", "X-Forwarded-For": "127.0.0.1"}},
		{desc: "trusted peer: first X-Forwarded-Proto of a chain wins; junk is ignored", trusted: `"TrustedProxies": ["127.0.0.1"]`,
			hdr: http.Header{"X-Forwarded-Proto": {"HTTPS, http"}}, want: map[string]string{"X-Forwarded-Proto": "https"}},
		{desc: "trusted peer: an unknown X-Forwarded-Proto falls back to the listener's scheme", trusted: `"TrustedProxies": ["127.0.0.1"]`,
			hdr: http.Header{"X-Forwarded-Proto": {"gopher"}}, want: map[string]string{"X-Forwarded-Proto": "http"}},
		{desc: "trusted list not containing the peer is untrusted", trusted: `"TrustedProxies": ["10.0.0.0/8"]`, hdr: spoof, want: map[string]string{
			"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Tether-Trace-Id": "*"}},
		{desc: "hop-by-hop abuse: Connection naming our headers does not drop them",
			hdr: http.Header{"Connection": {"X-Forwarded-For, X-Tether-Trace-Id, X-Original-Host"}}, want: map[string]string{
				"X-Forwarded-For": "127.0.0.1", "X-Original-Host": "front.example:8080", "X-Tether-Trace-Id": "*"}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			b := newBackend(t, nil)
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", c.trusted)), nil)
			req, _ := http.NewRequest("GET", h.front.URL+"/a/b?c=d", nil)
			req.Host = "front.example:8080"
			for k, v := range c.hdr {
				req.Header[k] = v
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := b.lastRequest().Header
			for k, want := range c.want {
				v := got[k]
				if len(v) != 1 {
					t.Errorf("%s = %q, want exactly one value", k, v)
					continue
				}
				if want == "listener" {
					_, want, _ = net.SplitHostPort(h.front.Listener.Addr().String())
				}
				if want == "*" {
					if !validTraceID(v[0]) || v[0] == fixedTrace {
						t.Errorf("%s = %q, want a new trace id", k, v[0])
					}
					continue
				}
				if v[0] != want {
					t.Errorf("%s = %q, want %q", k, v[0], want)
				}
			}
		})
	}
}

func TestForwardedPortFromListener(t *testing.T) {
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	req, _ := http.NewRequest("GET", h.front.URL+"/", nil)
	req.Host = "noport.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, port, _ := net.SplitHostPort(h.front.Listener.Addr().String())
	if got := b.lastRequest().Header.Get("X-Forwarded-Port"); got != port {
		t.Errorf("X-Forwarded-Port = %q, want the listener's %q", got, port)
	}
}

// TestAbsoluteFormRequest sends "GET http://host/x HTTP/1.1": routed by the
// URI's host and forwarded in origin form.
func TestAbsoluteFormRequest(t *testing.T) {
	b := newBackend(t, nil)
	js := strings.Replace(simpleConfig(map[string]string{"d1": b.URL}, "", "", ""),
		`"Match": { "Path": "{**catch-all}" }`, `"Match": { "Hosts": ["abs.example"] }`, 1)
	h := newHarness(t, mustParse(t, js), nil)
	conn, err := net.Dial("tcp", h.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET http://abs.example/x?y=1 HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200 (routed by the URI's host)", resp.StatusCode)
	}
	got := b.lastRequest()
	if got.RequestURI != "/x?y=1" {
		t.Errorf("backend request target %q, want origin form /x?y=1", got.RequestURI)
	}
	if v := got.Header.Get("X-Original-Url"); v != "/x?y=1" {
		t.Errorf("X-Original-URL = %q", v)
	}
}

func TestTrustSet(t *testing.T) {
	ts, bad := parseTrusted([]string{"10.0.0.1", "192.168.0.0/16", "::1", "nonsense"})
	if len(bad) != 1 || bad[3] != "nonsense" {
		t.Fatalf("bad = %v", bad)
	}
	cases := []struct {
		desc string
		host string
		want bool
	}{
		{desc: "exact address", host: "10.0.0.1", want: true},
		{desc: "other address", host: "10.0.0.2"},
		{desc: "inside CIDR", host: "192.168.3.4", want: true},
		{desc: "IPv6 loopback", host: "::1", want: true},
		{desc: "IPv4-mapped IPv6 matches the IPv4 entry", host: "::ffff:10.0.0.1", want: true},
		{desc: "not an IP", host: "example.com"},
	}
	for _, c := range cases {
		if got := ts.trusts(c.host); got != c.want {
			t.Errorf("%s: trusts(%q) = %v", c.desc, c.host, got)
		}
	}
	if (&trustSet{}).contains(netip.Addr{}) {
		t.Error("invalid address trusted")
	}
}

func TestTraceIDFormat(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		id := newTraceID()
		if !validTraceID(id) || seen[id] {
			t.Fatalf("trace id %q invalid or repeated", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "0123456789ABCDEF0123456789ABCDEF", fixedTrace + "0", "g123456789abcdef0123456789abcdef"} {
		if validTraceID(bad) {
			t.Errorf("validTraceID(%q) = true", bad)
		}
	}
}

func FuzzTraceID(f *testing.F) {
	f.Add(fixedTrace)
	f.Add("")
	f.Add("\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		if validTraceID(s) && (len(s) != 32 || strings.ToLower(s) != s) {
			t.Fatalf("accepted %q", s)
		}
	})
}

func FuzzParseTrusted(f *testing.F) {
	f.Add("10.0.0.0/8", "127.0.0.1")
	f.Add("::1", "::ffff:1.2.3.4")
	f.Add("garbage", "")
	f.Fuzz(func(t *testing.T, entry, host string) {
		ts, _ := parseTrusted([]string{entry})
		_ = ts.trusts(host)
	})
}

// portString is strconv.Itoa, whatever the order of the ports it is asked.
func TestPortString(t *testing.T) {
	for _, p := range []int{8080, 8080, 443, 8080, 0, 65535, 443} {
		if got := portString(p); got != strconv.Itoa(p) {
			t.Fatalf("portString(%d) = %q", p, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { portString(8443) }); n != 0 {
		t.Errorf("portString of the same port allocates %.0f times", n)
	}
}

func FuzzClientPort(f *testing.F) {
	f.Add("example.com:8080")
	f.Add("[::1]")
	f.Add("[::1]:443")
	f.Fuzz(func(t *testing.T, host string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = host
		if p := clientPort(req, "http"); p == "" {
			t.Fatalf("empty port for %q", host)
		}
	})
}
