package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf16"

	"github.com/cespare/xxhash/v2"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// TestConnectFailureIsRetriedOnAnotherDestination (DESIGN.md, "One retry"): a
// request whose connection failed before any byte was sent goes to another
// healthy destination once, whatever its method, with its body, path and
// query intact.
func TestConnectFailureIsRetriedOnAnotherDestination(t *testing.T) {
	var gotBody, gotURI string
	live := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody, gotURI = string(b), r.RequestURI
		_, _ = io.WriteString(w, "live")
	})
	dead := "http://" + deadAddr(t) + "/deadbase/?k=1"
	cases := []struct {
		desc, cluster, method, target, body, cookie, wantURI string
	}{
		{desc: "GET", method: "GET", target: "/x?y=1", wantURI: "/base/x?y=1"},
		{desc: "POST with a body", method: "POST", target: "/x", body: "payload", wantURI: "/base/x"},
		{desc: "an affinity session on the dead destination", method: "GET", target: "/s",
			cluster: `"SessionAffinity": {"Enabled": true, "Policy": "HashCookie", "AffinityKeyName": ".S"},`,
			cookie:  ".S=" + hashKeyOf("a-dead"), wantURI: "/base/s"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			gotBody, gotURI = "", ""
			js := simpleConfig(map[string]string{"a-dead": dead, "b-live": live.URL + "/base/"},
				c.cluster+`"LoadBalancingPolicy": "FirstAlphabetical"`, "", "")
			h := newHarness(t, mustParse(t, js), nil)
			req, _ := http.NewRequest(c.method, h.front.URL+c.target, strings.NewReader(c.body))
			if c.body == "" {
				req.Body = http.NoBody
			}
			if c.cookie != "" {
				req.Header.Set("Cookie", c.cookie)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "live" {
				t.Fatalf("status %d body %q, want 200 from the live destination", resp.StatusCode, b)
			}
			if gotBody != c.body || gotURI != c.wantURI {
				t.Errorf("live backend got %q %q, want %q %q", gotURI, gotBody, c.wantURI, c.body)
			}
			lines := h.accessLines(t)
			if d := lines[len(lines)-1]["destination"]; d != "b-live" {
				t.Errorf("access log destination %v, want b-live", d)
			}
			if n := h.p.Cluster("c").Destination("b-live").Inflight(); n != 0 {
				t.Errorf("in-flight count %d after the request", n)
			}
		})
	}
}

// hashKeyOf is the HashCookie value of a destination id (YARP's format:
// XxHash64 of the UTF-16LE upper-cased id, 16 lowercase hex digits).
func hashKeyOf(id string) string {
	var b []byte
	for _, u := range utf16.Encode([]rune(strings.ToUpper(id))) {
		b = append(b, byte(u), byte(u>>8))
	}
	return fmt.Sprintf("%016x", xxhash.Sum64(b))
}

// TestNoRetryOnceBytesWereSent: a destination that took the request and
// then failed may have acted on it: no retry, 502, unless the request is
// safe by its method and has no body (RFC 9110 §9.2.2): then it goes once
// to another destination, whether the connection was closed or reset.
func TestNoRetryOnceBytesWereSent(t *testing.T) {
	drop := func(reset bool) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = http.ReadRequest(bufio.NewReader(c)) // read it, then hang up
				if reset {
					_ = c.(*net.TCPConn).SetLinger(0) // RST, as a killed process's kernel sends
				}
				c.Close()
			}
		}()
		return "http://" + l.Addr().String()
	}
	closing, resetting := drop(false), drop(true)
	for _, c := range []struct {
		desc, dest, method, body string
		header                   string
		retried                  bool
	}{
		{"POST with a body, connection closed", closing, "POST", "payload", "", false},
		{"POST with a body, connection reset", resetting, "POST", "payload", "", false},
		{"PUT: idempotent, but not a safe method", closing, "PUT", "x", "", false},
		{"DELETE without a body: not a safe method", closing, "DELETE", "", "", false},
		{"GET with a body", closing, "GET", "x", "", false},
		{"GET asking for an upgrade", closing, "GET", "", "websocket", false},
		{"GET, connection closed: retried", closing, "GET", "", "", true},
		{"GET, connection reset: retried", resetting, "GET", "", "", true},
		{"HEAD, connection reset: retried", resetting, "HEAD", "", "", true},
		{"OPTIONS, connection closed: retried", closing, "OPTIONS", "", "", true},
	} {
		t.Run(c.desc, func(t *testing.T) {
			live := newBackend(t, nil)
			js := simpleConfig(map[string]string{"a-drop": c.dest, "b-live": live.URL},
				`"LoadBalancingPolicy": "FirstAlphabetical"`, "", "")
			h := newHarness(t, mustParse(t, js), nil)
			req, _ := http.NewRequest(c.method, h.front.URL+"/", strings.NewReader(c.body))
			if c.body == "" {
				req.Body = http.NoBody
			}
			if c.header != "" {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", c.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want, hits := http.StatusBadGateway, 0
			if c.retried {
				want, hits = http.StatusOK, 1
			}
			if resp.StatusCode != want || live.hitCount() != hits {
				t.Fatalf("status %d, live hits %d; want %d and %d", resp.StatusCode, live.hitCount(), want, hits)
			}
		})
	}
}

// TestRetryIsOnce: with every destination refusing, one retry and a 502.
func TestRetryIsOnce(t *testing.T) {
	js := simpleConfig(map[string]string{"a": "http://" + deadAddr(t), "b": "http://" + deadAddr(t), "c": "http://" + deadAddr(t)}, "", "", "")
	h := newHarness(t, mustParse(t, js), nil)
	if resp, _ := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
}

func TestRetargetMovesBasePathAndQuery(t *testing.T) {
	mk := func(addr, host string) *upstream.Destination {
		u, _ := parseBackendURL(addr)
		return upstream.NewDestination("x", u, nil, host, nil)
	}
	cases := []struct{ desc, from, fromHost, to, toHost, in, inQuery, inHost, want, wantHost string }{
		{"root to root", "http://a/", "", "http://b/", "", "/p", "q=1", "", "http://b/p?q=1", ""},
		{"base to root", "http://a/base/", "", "http://b", "", "/base/p", "", "", "http://b/p", ""},
		{"root to base", "http://a", "", "https://b/v2", "", "/p", "", "", "https://b/v2/p", ""},
		{"query of the address", "http://a/?k=1", "", "http://b/?j=2", "", "/p", "k=1&q=1", "", "http://b/p?j=2&q=1", ""},
		{"Host setting follows", "http://a/", "a.example", "http://b/", "b.example", "/", "", "a.example", "http://b/", "b.example"},
		{"a Host set otherwise stays", "http://a/", "a.example", "http://b/", "b.example", "/", "", "client.example", "http://b/", "client.example"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			from, to := mk(c.from, c.fromHost), mk(c.to, c.toHost)
			r, _ := http.NewRequest("GET", "http://"+from.Address.Host+c.in+"?"+c.inQuery, nil)
			r.URL.RawQuery, r.URL.ForceQuery = c.inQuery, false
			r.Host = c.inHost
			retarget(r, from, to, false)
			if got := r.URL.String(); got != c.want || r.Host != c.wantHost {
				t.Errorf("retarget = %s host %q, want %s host %q", got, r.Host, c.want, c.wantHost)
			}
		})
	}
}

// TestRetryOfADirectRequestForwardsInformationalResponses: a body-less
// request starts on the direct path; its connect failure is retried on an
// https destination, which goes through http.Transport. The 103 that
// destination sends reaches the client before the final response, as it
// does when the direct path or ReverseProxy answers.
func TestRetryOfADirectRequestForwardsInformationalResponses(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		_, _ = io.WriteString(w, "tls ok")
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	js := simpleConfig(map[string]string{"a-dead": "http://" + deadAddr(t), "b-tls": srv.URL},
		`"LoadBalancingPolicy": "FirstAlphabetical", "HttpClient": {"DangerousAcceptAnyServerCertificate": true}`, "", "")
	var direct atomic.Int32
	h := newHarness(t, mustParse(t, js), withHooks(&testHooks{onDirect: func() { direct.Add(1) }}))

	var got []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, hdr textproto.MIMEHeader) error {
		got = append(got, fmt.Sprintf("%d %s", code, hdr.Get("Link")))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", h.front.URL+"/x", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "tls ok" {
		t.Fatalf("got %d %q, want 200 from the https destination", resp.StatusCode, b)
	}
	if direct.Load() != 1 {
		t.Fatalf("direct path taken %d times, want 1 (the request must start there)", direct.Load())
	}
	if want := "103 </app.css>; rel=preload"; len(got) != 1 || got[0] != want {
		t.Fatalf("informational responses at the client: %q, want [%q]", got, want)
	}
}
