package hygiene

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
)

func TestCheckRequestRules(t *testing.T) {
	cases := []struct {
		desc   string
		method string
		host   string
		hdr    http.Header
		want   int
	}{
		{desc: "ordinary request passes", method: "GET", host: "example.com:8080", want: 0},
		{desc: "bracketed IPv6 host passes", method: "GET", host: "[::1]:80", want: 0},
		{desc: "websocket upgrade passes", method: "GET", host: "h", hdr: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}, want: 0},
		{desc: "versioned upgrade list passes", method: "GET", host: "h", hdr: http.Header{"Connection": {"upgrade"}, "Upgrade": {"h2c, foo/1.1"}}, want: 0},
		{desc: "HTTP/2 authority with a space is refused", method: "GET", host: "a b", want: 400},
		{desc: "HTTP/2 authority with angle brackets is refused", method: "GET", host: "<x>", want: 400},
		{desc: "upgrade with a non-ASCII byte is refused", method: "GET", host: "h",
			hdr: http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"web\x80socket"}}, want: 400},
		{desc: "an odd Upgrade without Connection: upgrade is only a hop-by-hop header to drop", method: "GET", host: "h",
			hdr: http.Header{"Upgrade": {"web\x80socket"}}, want: 0},
		{desc: "CONNECT is refused", method: "CONNECT", host: "h:443", want: 405},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			r := &http.Request{Method: c.method, Host: c.host, Header: c.hdr, URL: &url.URL{Path: "/"}}
			if got := Check(r); got != c.want {
				t.Fatalf("Check = %d, want %d", got, c.want)
			}
		})
	}
}

func TestCleanPathRemovesDotSegments(t *testing.T) {
	cases := []struct {
		desc, in, wantPath, wantEscaped string
	}{
		{"plain path unchanged", "/a/b", "/a/b", "/a/b"},
		{"dot segment removed", "/a/./b", "/a/b", "/a/b"},
		{"dot-dot removes its parent", "/public/../admin", "/admin", "/admin"},
		{"encoded dot-dot too", "/public/%2e%2E/admin", "/admin", "/admin"},
		{"dot-dot above the root stays at the root", "/../x", "/x", "/x"},
		{"trailing dot-dot keeps a trailing slash", "/a/b/..", "/a/", "/a/"},
		{"encoded slash stays encoded", "/a%2Fb/../c%2Fd", "/c/d", "/c%2Fd"},
		{"empty segment after dot-dot is a path, not a host", "/a/..//x", "//x", "//x"},
		{"names starting with dots are not dot segments", "/a/.well-known/...", "/a/.well-known/...", "/a/.well-known/..."},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			u, err := url.Parse("http://h" + c.in)
			if err != nil {
				t.Fatal(err)
			}
			r := &http.Request{URL: u}
			CleanPath(r)
			if r.URL.Path != c.wantPath || r.URL.EscapedPath() != c.wantEscaped || r.URL.Host != "h" {
				t.Fatalf("got path %q escaped %q host %q, want %q %q h", r.URL.Path, r.URL.EscapedPath(), r.URL.Host, c.wantPath, c.wantEscaped)
			}
		})
	}
}

func TestDropH2CKeepsOtherProtocols(t *testing.T) {
	cases := []struct {
		desc string
		in   []string
		want []string // nil: no Upgrade header left
	}{
		{"only h2c: header removed", []string{"h2c"}, nil},
		{"h2c among others: only h2c removed", []string{"h2c, websocket"}, []string{"websocket"}},
		{"several values", []string{"H2C/2", "foo/1, h2c"}, []string{"foo/1"}},
		{"no h2c: unchanged", []string{"websocket"}, []string{"websocket"}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			h := http.Header{"Upgrade": c.in, "Http2-Settings": {"x"}}
			dropH2C(h, c.in)
			if fmt.Sprint(h["Upgrade"]) != fmt.Sprint(c.want) {
				t.Errorf("Upgrade = %q, want %q", h["Upgrade"], c.want)
			}
		})
	}
}
