package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/forwarded"
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
			_, got, port := forwardOnce(t, "", c.trusted, "/a/b?c=d", c.hdr)
			for k, want := range c.want {
				v := got[k]
				if len(v) != 1 {
					t.Errorf("%s = %q, want exactly one value", k, v)
					continue
				}
				if want == "listener" {
					want = port
				}
				if want == "*" {
					if !forwarded.ValidTraceID(v[0]) || v[0] == fixedTrace {
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

const fwdTrusted = `"TrustedProxies": ["127.0.0.0/8"]`

// fwdCase sends one request with hdr through a route with the given
// Transforms and checks the headers the backend saw. In want, "" means
// absent, "$port" the listener's port, and "~re" a regular expression.
type fwdCase struct {
	desc    string
	tf      string
	trusted bool
	hdr     http.Header
	want    map[string]string
}

func runFwdCases(t *testing.T, cases []fwdCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			top := ""
			if c.trusted {
				top = fwdTrusted
			}
			status, got, port := forwardOnce(t, `"Transforms": [`+c.tf+`]`, top, "/a", c.hdr)
			if status != 200 {
				t.Fatalf("status %d", status)
			}
			for k, want := range c.want {
				v := strings.Join(got.Values(k), " | ")
				want = strings.ReplaceAll(want, "$port", port)
				switch {
				case strings.HasPrefix(want, "~"):
					if !regexp.MustCompile("^" + want[1:] + "$").MatchString(v) {
						t.Errorf("%s = %q, want match %s", k, v, want[1:])
					}
				case v != want:
					t.Errorf("%s = %q, want %q", k, v, want)
				}
			}
		})
	}
}

var clientFwd = http.Header{
	"X-Forwarded-For":    {"6.6.6.6"},
	"X-Forwarded-Proto":  {"https"},
	"X-Forwarded-Host":   {"evil.example"},
	"X-Forwarded-Prefix": {"/p"},
	"X-Forwarded-Port":   {"9999"},
	"Forwarded":          {"for=6.6.6.6"},
}

// TestXForwardedTransform: YARP's X-Forwarded transform, with its actions
// per header and its HeaderPrefix; incoming values count only from trusted
// peers.
func TestXForwardedTransform(t *testing.T) {
	runFwdCases(t, []fwdCase{
		{desc: "Set replaces the client's values with this hop's (the scheme is the client's, as a trusted peer said)", tf: `{"X-Forwarded": "Set"}`, trusted: true, hdr: clientFwd, want: map[string]string{
			"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "front.example:8080",
			"X-Forwarded-Port": "$port", "X-Forwarded-Prefix": "", "Forwarded": "", "X-Original-Host": "front.example:8080"}},
		{desc: "Append from a trusted peer appends this hop", tf: `{"X-Forwarded": "Append"}`, trusted: true, hdr: clientFwd, want: map[string]string{
			"X-Forwarded-For": "6.6.6.6, 127.0.0.1", "X-Forwarded-Proto": "https, https", "X-Forwarded-Host": "evil.example, front.example:8080",
			"X-Forwarded-Port": "9999, $port", "X-Forwarded-Prefix": "/p", "Forwarded": ""}},
		{desc: "Append from an untrusted peer is Set", tf: `{"X-Forwarded": "Append"}`, hdr: clientFwd, want: map[string]string{
			"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "front.example:8080",
			"X-Forwarded-Port": "$port", "X-Forwarded-Prefix": ""}},
		{desc: "Remove sends none", tf: `{"X-Forwarded": "Remove"}`, trusted: true, hdr: clientFwd, want: map[string]string{
			"X-Forwarded-For": "", "X-Forwarded-Proto": "", "X-Forwarded-Host": "", "X-Forwarded-Port": "", "X-Forwarded-Prefix": "",
			"X-Original-Host": "front.example:8080", "X-Tether-Trace-Id": "~[0-9a-f]{32}"}},
		{desc: "Off passes a trusted peer's headers as they came", tf: `{"X-Forwarded": "Off"}`, trusted: true, hdr: clientFwd, want: map[string]string{
			"X-Forwarded-For": "6.6.6.6", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example", "X-Forwarded-Port": "9999", "X-Forwarded-Prefix": "/p"}},
		{desc: "Off from an untrusted peer sends none", tf: `{"X-Forwarded": "Off"}`, hdr: clientFwd, want: map[string]string{
			"X-Forwarded-For": "", "X-Forwarded-Proto": "", "X-Forwarded-Host": "", "X-Forwarded-Port": "", "X-Forwarded-Prefix": ""}},
		{desc: "per-header actions override the default one", tf: `{"X-Forwarded": "Set", "For": "Remove", "Proto": "Append", "prefix": "Off"}`, trusted: true, hdr: clientFwd,
			want: map[string]string{"X-Forwarded-For": "", "X-Forwarded-Proto": "https, https", "X-Forwarded-Host": "front.example:8080", "X-Forwarded-Prefix": "/p"}},
		{desc: "HeaderPrefix renames every header; the client's own are not trusted", tf: `{"X-Forwarded": "Set", "HeaderPrefix": "X-Fwd-"}`,
			hdr: http.Header{"X-Fwd-For": {"6.6.6.6"}, "X-Forwarded-For": {"6.6.6.6"}, "X-Forwarded-Port": {"9999"}}, want: map[string]string{
				"X-Fwd-For": "127.0.0.1", "X-Fwd-Proto": "http", "X-Fwd-Host": "front.example:8080", "X-Fwd-Port": "$port",
				"X-Forwarded-For": "", "X-Forwarded-Port": ""}},
		{desc: "HeaderPrefix with Append: a trusted peer's prefixed values are kept", tf: `{"X-Forwarded": "Append", "HeaderPrefix": "X-Fwd-"}`, trusted: true,
			hdr: http.Header{"X-Fwd-For": {"10.1.1.1"}}, want: map[string]string{"X-Fwd-For": "10.1.1.1, 127.0.0.1"}},
	})
}

// TestForwardedTransform: YARP's Forwarded transform (RFC 7239) with
// ForFormat and ByFormat; enabling it drops the default X-Forwarded headers
// unless the route also configures X-Forwarded.
func TestForwardedTransform(t *testing.T) {
	runFwdCases(t, []fwdCase{
		{desc: "for, proto, host: obfuscated for by default; no X-Forwarded headers", tf: `{"Forwarded": "for,proto,host"}`, hdr: clientFwd, want: map[string]string{
			"Forwarded": `~proto=http;host="front.example:8080";for=_[A-Za-z0-9._-]{9}`, "X-Forwarded-For": "", "X-Forwarded-Proto": "",
			"X-Forwarded-Host": "", "X-Forwarded-Port": "", "X-Forwarded-Prefix": "", "X-Original-Host": "front.example:8080",
			"X-Tether-Trace-Id": "~[0-9a-f]{32}"}},
		{desc: "ForFormat Ip", tf: `{"Forwarded": "for", "ForFormat": "Ip"}`, want: map[string]string{"Forwarded": "for=127.0.0.1"}},
		{desc: "ForFormat IpAndPort is quoted", tf: `{"Forwarded": "for", "ForFormat": "IpAndPort"}`, want: map[string]string{"Forwarded": `~for="127\.0\.0\.1:[0-9]+"`}},
		{desc: "ForFormat RandomAndPort", tf: `{"Forwarded": "for", "ForFormat": "RandomAndPort"}`, want: map[string]string{"Forwarded": `~for="_[A-Za-z0-9._-]{9}:[0-9]+"`}},
		{desc: "ForFormat UnknownAndRandomPort", tf: `{"Forwarded": "for", "ForFormat": "unknownandrandomport"}`, want: map[string]string{"Forwarded": `~for="unknown:_[A-Za-z0-9._-]{9}"`}},
		{desc: "ForFormat Unknown", tf: `{"Forwarded": "for", "ForFormat": "Unknown"}`, want: map[string]string{"Forwarded": "for=unknown"}},
		{desc: "by is the listener's address", tf: `{"Forwarded": "by", "ByFormat": "IpAndPort"}`, want: map[string]string{"Forwarded": `by="127.0.0.1:$port"`}},
		{desc: "YARP's order is proto, host, for, by", tf: `{"Forwarded": "by, for, host, proto", "ForFormat": "Ip", "ByFormat": "Unknown"}`,
			want: map[string]string{"Forwarded": `proto=http;host="front.example:8080";for=127.0.0.1;by=unknown`}},
		{desc: "Append from a trusted peer keeps its element", tf: `{"Forwarded": "for", "ForFormat": "Ip", "Action": "Append"}`, trusted: true, hdr: clientFwd,
			want: map[string]string{"Forwarded": "for=6.6.6.6, for=127.0.0.1"}},
		{desc: "Append from an untrusted peer is Set", tf: `{"Forwarded": "for", "ForFormat": "Ip", "Action": "Append"}`, hdr: clientFwd,
			want: map[string]string{"Forwarded": "for=127.0.0.1"}},
		{desc: "Set replaces a trusted peer's element", tf: `{"Forwarded": "proto"}`, trusted: true, hdr: clientFwd,
			want: map[string]string{"Forwarded": "proto=https"}},
		{desc: "Remove sends no Forwarded and still drops the X-Forwarded defaults", tf: `{"Forwarded": "for", "Action": "Remove"}`, trusted: true, hdr: clientFwd,
			want: map[string]string{"Forwarded": "", "X-Forwarded-For": ""}},
		{desc: "Off passes a trusted peer's Forwarded and drops the X-Forwarded defaults", tf: `{"Forwarded": "for", "Action": "Off"}`, trusted: true, hdr: clientFwd,
			want: map[string]string{"Forwarded": "for=6.6.6.6", "X-Forwarded-For": ""}},
		{desc: "with X-Forwarded configured too, both are sent", tf: `{"Forwarded": "for", "ForFormat": "Ip"}, {"X-Forwarded": "Set"}`, hdr: clientFwd,
			want: map[string]string{"Forwarded": "for=127.0.0.1", "X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http"}},
	})
}

// TestForwardedTransformErrors: bad values are refused with their path,
// through config.Parse and Compile as `config validate` runs them.
func TestForwardedTransformErrors(t *testing.T) {
	cases := []struct{ desc, tf, wantPath, wantMsg string }{
		{"unknown X-Forwarded action", `{"X-Forwarded": "Sometimes"}`, "Transforms[0].X-Forwarded", "unknown action"},
		{"unknown per-header action", `{"X-Forwarded": "Set", "Proto": "Maybe"}`, "Transforms[0].Proto", "unknown action"},
		{"bad HeaderPrefix", `{"X-Forwarded": "Set", "HeaderPrefix": "X Bad"}`, "Transforms[0].HeaderPrefix", "not a header name prefix"},
		{"unknown Forwarded token", `{"Forwarded": "for,server"}`, "Transforms[0].Forwarded", `unexpected "server"`},
		{"unknown Forwarded action", `{"Forwarded": "for", "Action": "Sometimes"}`, "Transforms[0].Action", "unknown action"},
		{"unknown node format", `{"Forwarded": "for", "ForFormat": "Hostname"}`, "Transforms[0].ForFormat", "unknown format"},
		{"ByFormat without by", `{"Forwarded": "for", "ByFormat": "Ip"}`, "Transforms[0].ByFormat", "does not include by"},
		{"two X-Forwarded transforms", `{"X-Forwarded": "Set"}, {"X-Forwarded": "Append"}`, "Transforms[1]", "second X-Forwarded"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			js := simpleConfig(map[string]string{"d1": "http://127.0.0.1:1"}, "", `"Transforms": [`+c.tf+`]`, "")
			cfg, _, err := config.Parse([]byte(js), "json")
			var errs config.Errors
			if err == nil {
				errs = Compile(cfg)
			} else {
				errs = err.(config.Errors)
			}
			for _, e := range errs {
				if strings.HasSuffix(e.Path, c.wantPath) && strings.Contains(e.Message, c.wantMsg) {
					return
				}
			}
			t.Fatalf("errors %v, want %s: %s", errs, c.wantPath, c.wantMsg)
		})
	}
}

// forwardOnce sends one GET for path, with hdr and the Host
// front.example:8080, through a proxy in front of one backend (route
// fields rf, top-level fields top), and returns the response's status, the
// header the backend saw and the listener's port.
func forwardOnce(t *testing.T, rf, top, path string, hdr http.Header) (int, http.Header, string) {
	t.Helper()
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", rf, top)), nil)
	req, _ := http.NewRequest("GET", h.front.URL+path, nil)
	req.Host = "front.example:8080"
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, port, _ := net.SplitHostPort(h.front.Listener.Addr().String())
	return resp.StatusCode, b.lastRequest().Header, port
}
