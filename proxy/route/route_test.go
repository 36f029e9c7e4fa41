package route

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
)

// req builds a request; target may carry a host ("http://h:1/p?q").
func req(method, target string, header ...string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

func mustTable(t testing.TB, routes map[string]*config.Route) *Table {
	t.Helper()
	tbl, errs := NewTable(routes)
	if len(errs) > 0 {
		t.Fatalf("NewTable: %v", errs)
	}
	return tbl
}

// TestRouteCriteria has one case per matching rule: each case builds a table
// with the single route "r" and checks requests that must and must not match.
func TestRouteCriteria(t *testing.T) {
	type hd = config.RouteHeader
	type qp = config.RouteQueryParameter
	cases := []struct {
		desc    string
		match   config.RouteMatch
		match_  []*http.Request
		noMatch []*http.Request
	}{
		{"exact host is case-insensitive, any port", config.RouteMatch{Hosts: []string{"Example.COM"}},
			[]*http.Request{req("GET", "http://example.com/"), req("GET", "http://EXAMPLE.com:8080/")},
			[]*http.Request{req("GET", "http://www.example.com/"), req("GET", "http://example.org/")}},
		{"wildcard host matches sub-domains, not the apex", config.RouteMatch{Hosts: []string{"*.example.com"}},
			[]*http.Request{req("GET", "http://a.example.com/"), req("GET", "http://a.b.EXAMPLE.com/")},
			[]*http.Request{req("GET", "http://example.com/"), req("GET", "http://aexample.com/")}},
		{"host with port must match the port", config.RouteMatch{Hosts: []string{"example.com:8080"}},
			[]*http.Request{req("GET", "http://example.com:8080/")},
			[]*http.Request{req("GET", "http://example.com:8081/"), req("GET", "http://example.com/")}},
		{"host port 80 matches a request without port", config.RouteMatch{Hosts: []string{"example.com:80"}},
			[]*http.Request{req("GET", "http://example.com/")}, []*http.Request{req("GET", "https://example.com/")}},
		{"host port 443 matches https without port", config.RouteMatch{Hosts: []string{"example.com:443"}},
			[]*http.Request{req("GET", "https://example.com/")}, []*http.Request{req("GET", "http://example.com/")}},
		{"IPv6 host literal with port", config.RouteMatch{Hosts: []string{"[::1]:8080"}},
			[]*http.Request{req("GET", "http://[::1]:8080/")}, []*http.Request{req("GET", "http://[::1]:9090/")}},
		{"star host with port matches any host on that port", config.RouteMatch{Hosts: []string{"*:9000"}},
			[]*http.Request{req("GET", "http://anything:9000/")}, []*http.Request{req("GET", "http://anything:9001/")}},
		{"methods are case-insensitive", config.RouteMatch{Methods: []string{"get", "POST"}},
			[]*http.Request{req("GET", "/"), req("POST", "/")}, []*http.Request{req("PUT", "/"), req("HEAD", "/")}},
		{"path is matched percent-decoded", config.RouteMatch{Path: "/caf\u00e9/{id}"},
			[]*http.Request{req("GET", "/caf%C3%A9/1"), req("GET", "/CAF%c3%a9/1")}, []*http.Request{req("GET", "/cafe/1")}},
		{"percent-encoded slash does not split a segment", config.RouteMatch{Path: "/a/{id}"},
			[]*http.Request{req("GET", "/a/x%2Fy")}, []*http.Request{req("GET", "/a/x/y")}},
		{"first literal segment is case-insensitive", config.RouteMatch{Path: "/API/{**x}"},
			[]*http.Request{req("GET", "/api/x"), req("GET", "/Api")}, []*http.Request{req("GET", "/apix")}},
		{"non-ASCII literals compare with Unicode case folding", config.RouteMatch{Path: "/caf\u00e9/k"},
			[]*http.Request{req("GET", "/CAF%C3%89/k"), req("GET", "/caf%C3%A9/%E2%84%AA")}, []*http.Request{req("GET", "/cafe/k")}},
		{"a non-ASCII first segment still reaches ASCII literals", config.RouteMatch{Path: "/k"},
			[]*http.Request{req("GET", "/%E2%84%AA")}, []*http.Request{req("GET", "/x")}},
		{"Host header match uses the request host", config.RouteMatch{Headers: []config.RouteHeader{{Name: "host", Values: []string{"a.test"}, Mode: "HeaderPrefix"}}},
			[]*http.Request{req("GET", "http://a.test:81/")}, []*http.Request{req("GET", "http://b.test/")}},
		{"ExactHeader matches a whole value, any of Values", config.RouteMatch{Headers: []hd{{Name: "x-env", Values: []string{"blue", "green"}}}},
			[]*http.Request{req("GET", "/", "X-Env", "GREEN"), req("GET", "/", "X-Env", "red, \"blue\"")},
			[]*http.Request{req("GET", "/", "X-Env", "greenish"), req("GET", "/"), req("GET", "/", "X-Env", "")}},
		{"ExactHeader IsCaseSensitive", config.RouteMatch{Headers: []hd{{Name: "X-Env", Values: []string{"blue"}, Mode: "exactheader", IsCaseSensitive: true}}},
			[]*http.Request{req("GET", "/", "X-Env", "blue")}, []*http.Request{req("GET", "/", "X-Env", "Blue")}},
		{"ExactHeader splits comma lists outside quotes", config.RouteMatch{Headers: []hd{{Name: "X-L", Values: []string{"a,b"}}}},
			[]*http.Request{req("GET", "/", "X-L", "z, \"a,b\"")}, []*http.Request{req("GET", "/", "X-L", "a,b")}},
		{"ExactHeader splits Cookie on semicolons", config.RouteMatch{Headers: []hd{{Name: "Cookie", Values: []string{"ab=1"}}}},
			[]*http.Request{req("GET", "/", "Cookie", "x=2; ab=1")}, []*http.Request{req("GET", "/", "Cookie", "x=2; ab=12")}},
		{"HeaderPrefix", config.RouteMatch{Headers: []hd{{Name: "X-V", Values: []string{"v1"}, Mode: "HeaderPrefix"}}},
			[]*http.Request{req("GET", "/", "X-V", "V1.2"), req("GET", "/", "X-V", "x, v1")}, []*http.Request{req("GET", "/", "X-V", "xv1")}},
		{"Contains looks inside whole values", config.RouteMatch{Headers: []hd{{Name: "User-Agent", Values: []string{"bot"}, Mode: "Contains"}}},
			[]*http.Request{req("GET", "/", "User-Agent", "GoogleBot/2.1")}, []*http.Request{req("GET", "/", "User-Agent", "curl"), req("GET", "/")}},
		{"NotContains needs the header and none of Values", config.RouteMatch{Headers: []hd{{Name: "User-Agent", Values: []string{"bot", "spider"}, Mode: "NotContains"}}},
			[]*http.Request{req("GET", "/", "User-Agent", "curl")},
			[]*http.Request{req("GET", "/", "User-Agent", "a Spider"), req("GET", "/"), req("GET", "/", "User-Agent", "x", "User-Agent", "bot")}},
		{"Exists needs a non-empty value", config.RouteMatch{Headers: []hd{{Name: "X-A", Mode: "Exists"}}},
			[]*http.Request{req("GET", "/", "X-A", "1"), req("GET", "/", "X-A", "", "X-A", "")}, []*http.Request{req("GET", "/"), req("GET", "/", "X-A", "")}},
		{"NotExists needs the header absent", config.RouteMatch{Headers: []hd{{Name: "X-A", Mode: "NotExists"}}},
			[]*http.Request{req("GET", "/")}, []*http.Request{req("GET", "/", "X-A", "1"), req("GET", "/", "X-A", "")}},
		{"all headers must match", config.RouteMatch{Headers: []hd{{Name: "X-A", Mode: "Exists"}, {Name: "X-B", Mode: "Exists"}}},
			[]*http.Request{req("GET", "/", "X-A", "1", "X-B", "1")}, []*http.Request{req("GET", "/", "X-A", "1")}},
		{"query Exact, any of Values, name case-insensitive", config.RouteMatch{QueryParameters: []qp{{Name: "v", Values: []string{"1", "2"}}}},
			[]*http.Request{req("GET", "/?v=2"), req("GET", "/?V=1"), req("GET", "/?v=9&v=1")}, []*http.Request{req("GET", "/?v=12"), req("GET", "/"), req("GET", "/?w=1")}},
		{"query values are decoded", config.RouteMatch{QueryParameters: []qp{{Name: "q", Values: []string{"a b"}, Mode: "Exact"}}},
			[]*http.Request{req("GET", "/?q=a+b"), req("GET", "/?q=a%20B")}, []*http.Request{req("GET", "/?q=ab")}},
		{"query Exact IsCaseSensitive", config.RouteMatch{QueryParameters: []qp{{Name: "v", Values: []string{"a"}, IsCaseSensitive: true}}},
			[]*http.Request{req("GET", "/?v=a")}, []*http.Request{req("GET", "/?v=A")}},
		{"query Prefix", config.RouteMatch{QueryParameters: []qp{{Name: "v", Values: []string{"ab"}, Mode: "prefix"}}},
			[]*http.Request{req("GET", "/?v=ABc")}, []*http.Request{req("GET", "/?v=cab")}},
		{"query Contains", config.RouteMatch{QueryParameters: []qp{{Name: "v", Values: []string{"ab"}, Mode: "Contains"}}},
			[]*http.Request{req("GET", "/?v=cabd")}, []*http.Request{req("GET", "/?v=a"), req("GET", "/")}},
		{"query NotContains also matches when absent", config.RouteMatch{QueryParameters: []qp{{Name: "v", Values: []string{"ab"}, Mode: "NotContains"}}},
			[]*http.Request{req("GET", "/?v=x"), req("GET", "/"), req("GET", "/?v=")}, []*http.Request{req("GET", "/?v=xaby"), req("GET", "/?v=x&v=ab")}},
		{"query Exists needs a non-empty value", config.RouteMatch{QueryParameters: []qp{{Name: "debug", Mode: "Exists"}}},
			[]*http.Request{req("GET", "/?debug=1"), req("GET", "/?debug&debug")}, []*http.Request{req("GET", "/?debug"), req("GET", "/?debug="), req("GET", "/")}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			tbl := mustTable(t, map[string]*config.Route{"r": {RouteId: "r", Match: tc.match}})
			for _, r := range tc.match_ {
				if tbl.Match(r) == nil {
					t.Errorf("%s %s %v should match", r.Method, r.URL, r.Header)
				}
			}
			for _, r := range tc.noMatch {
				if tbl.Match(r) != nil {
					t.Errorf("%s %s %v should not match", r.Method, r.URL, r.Header)
				}
			}
		})
	}
}

func TestPrecedence(t *testing.T) {
	type m = config.RouteMatch
	cases := []struct {
		desc   string
		routes map[string]m
		order  map[string]int
		r      *http.Request
		want   string
	}{
		{"literal beats parameter", map[string]m{"lit": {Path: "/a/b"}, "param": {Path: "/a/{x}"}}, nil, req("GET", "/a/b"), "lit"},
		{"parameter beats catch-all", map[string]m{"param": {Path: "/a/{x}"}, "all": {Path: "/a/{**x}"}}, nil, req("GET", "/a/b"), "param"},
		{"constrained parameter beats parameter", map[string]m{"z-int": {Path: "/a/{x:int}"}, "param": {Path: "/a/{x}"}}, nil, req("GET", "/a/1"), "z-int"},
		{"constraint with argument still ranks as constrained", map[string]m{"z-min": {Path: "/a/{x:min(1)}"}, "param": {Path: "/a/{x}"}}, nil, req("GET", "/a/1"), "z-min"},
		{"a constraint that rejects the value passes the request on", map[string]m{"z-min": {Path: "/a/{x:min(10)}"}, "param": {Path: "/a/{x}"}}, nil, req("GET", "/a/1"), "param"},
		{"longer literal prefix beats shorter", map[string]m{"short": {Path: "/a/{**x}"}, "long": {Path: "/a/b/{**x}"}}, nil, req("GET", "/a/b/c"), "long"},
		{"first segment decides before later ones", map[string]m{"p": {Path: "/{x}/b"}, "l": {Path: "/a/{**x}"}}, nil, req("GET", "/a/b"), "l"},
		{"exact path beats empty catch-all", map[string]m{"exact": {Path: "/a"}, "all": {Path: "/a/{**x}"}}, nil, req("GET", "/a"), "exact"},
		{"any path beats empty Path only by route id", map[string]m{"b": {Path: ""}, "a": {Path: "/{**x}"}}, nil, req("GET", "/z"), "a"},
		{"methods beat hosts", map[string]m{"host": {Hosts: []string{"h"}}, "meth": {Methods: []string{"GET"}}}, nil, req("GET", "http://h/"), "meth"},
		{"hosts beat none", map[string]m{"none": {}, "host": {Hosts: []string{"*.h"}}}, nil, req("GET", "http://x.h/"), "host"},
		{"more headers beat fewer", map[string]m{
			"one": {Headers: []config.RouteHeader{{Name: "A", Mode: "Exists"}}},
			"two": {Headers: []config.RouteHeader{{Name: "A", Mode: "Exists"}, {Name: "B", Mode: "Exists"}}}},
			nil, req("GET", "/", "A", "1", "B", "1"), "two"},
		{"more query parameters beat fewer", map[string]m{
			"none": {}, "one": {QueryParameters: []config.RouteQueryParameter{{Name: "a", Mode: "Exists"}}}},
			nil, req("GET", "/?a=1"), "one"},
		{"lower Order beats path precedence", map[string]m{"lit": {Path: "/a"}, "param": {Path: "/{x}"}}, map[string]int{"param": -10}, req("GET", "/a"), "param"},
		{"lower Order beats a method", map[string]m{"meth": {Methods: []string{"GET"}}, "none": {}}, map[string]int{"none": -1}, req("GET", "/"), "none"},
		{"higher Order loses to a less specific route", map[string]m{"lit": {Path: "/a/b"}, "all": {Path: "/{**x}"}}, map[string]int{"lit": 1}, req("GET", "/a/b"), "all"},
		{"lower Order breaks a tie", map[string]m{"a": {Path: "/x"}, "b": {Path: "/X"}}, map[string]int{"a": 2, "b": 1}, req("GET", "/x"), "b"},
		{"route id breaks an Order tie", map[string]m{"b": {Path: "/x"}, "a": {Path: "/x"}}, nil, req("GET", "/x"), "a"},
		{"a more specific route that does not match is skipped", map[string]m{"lit": {Path: "/a", Methods: []string{"POST"}}, "all": {}}, nil, req("GET", "/a"), "all"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			routes := map[string]*config.Route{}
			for id, match := range tc.routes {
				routes[id] = &config.Route{RouteId: id, Order: tc.order[id], Match: match}
			}
			got := mustTable(t, routes).Match(tc.r)
			if got == nil || got.RouteId != tc.want {
				t.Fatalf("Match = %v, want %s", got, tc.want)
			}
		})
	}
}

func TestNoRouteMatches(t *testing.T) {
	tbl := mustTable(t, map[string]*config.Route{"r": {Match: config.RouteMatch{Path: "/a"}}})
	if got := tbl.Match(req("GET", "/b")); got != nil {
		t.Fatalf("Match = %v, want nil", got)
	}
	empty := mustTable(t, nil)
	if got := empty.Match(req("GET", "/")); got != nil {
		t.Fatalf("empty table Match = %v, want nil", got)
	}
}

func TestNewTableErrors(t *testing.T) {
	cases := []struct {
		desc  string
		match config.RouteMatch
		path  string
	}{
		{"invalid template names Match.Path", config.RouteMatch{Path: "/{a"}, "ReverseProxy.Routes.r.Match.Path"},
		{"unknown constraint names Match.Path", config.RouteMatch{Path: "/{a:nope}"}, "ReverseProxy.Routes.r.Match.Path"},
		{"invalid constraint argument names Match.Path", config.RouteMatch{Path: "/{a:min(x)}"}, "ReverseProxy.Routes.r.Match.Path"},
		{"invalid regex names Match.Path", config.RouteMatch{Path: "/{a:regex(()}"}, "ReverseProxy.Routes.r.Match.Path"},
		{"bad host port", config.RouteMatch{Hosts: []string{"h:99999"}}, "ReverseProxy.Routes.r.Match.Hosts[0]"},
		{"wildcard in the middle of a host", config.RouteMatch{Hosts: []string{"a.*.com"}}, "ReverseProxy.Routes.r.Match.Hosts[0]"},
		{"empty host", config.RouteMatch{Hosts: []string{""}}, "ReverseProxy.Routes.r.Match.Hosts[0]"},
		{"duplicate method", config.RouteMatch{Methods: []string{"GET", "get"}}, "ReverseProxy.Routes.r.Match.Methods[1]"},
		{"unknown header mode", config.RouteMatch{Headers: []config.RouteHeader{{Name: "A", Values: []string{"1"}, Mode: "Regex"}}}, "ReverseProxy.Routes.r.Match.Headers[0].Mode"},
		{"header without name", config.RouteMatch{Headers: []config.RouteHeader{{Values: []string{"1"}}}}, "ReverseProxy.Routes.r.Match.Headers[0].Name"},
		{"header without values", config.RouteMatch{Headers: []config.RouteHeader{{Name: "A"}}}, "ReverseProxy.Routes.r.Match.Headers[0].Values"},
		{"Exists header with values", config.RouteMatch{Headers: []config.RouteHeader{{Name: "A", Mode: "Exists", Values: []string{"x"}}}}, "ReverseProxy.Routes.r.Match.Headers[0].Values"},
		{"NotExists is not a query mode", config.RouteMatch{QueryParameters: []config.RouteQueryParameter{{Name: "a", Mode: "NotExists"}}}, "ReverseProxy.Routes.r.Match.QueryParameters[0].Mode"},
		{"empty query value", config.RouteMatch{QueryParameters: []config.RouteQueryParameter{{Name: "a", Values: []string{""}}}}, "ReverseProxy.Routes.r.Match.QueryParameters[0].Values"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			tbl, errs := NewTable(map[string]*config.Route{"r": {Match: tc.match}})
			if tbl != nil || len(errs) != 1 || errs[0].Path != tc.path {
				t.Fatalf("NewTable = %v, %v; want one error at %s", tbl, errs, tc.path)
			}
		})
	}
}

// TestRegexAndIntOnOnePath is the review finding: a regex-constrained and
// an int-constrained route on the same path rank equally (then by route
// id), and each must win only for the values its constraint accepts.
func TestRegexAndIntOnOnePath(t *testing.T) {
	tbl := mustTable(t, map[string]*config.Route{
		"a-regex": {RouteId: "a-regex", Match: config.RouteMatch{Path: `/num/{id:regex(^\d+$)}`}},
		"b-int":   {RouteId: "b-int", Match: config.RouteMatch{Path: "/num/{id:int}"}},
	})
	cases := []struct{ desc, path, want string }{
		{"both accept: route id decides", "/num/5", "a-regex"},
		{"only the regex accepts", "/num/99999999999", "a-regex"},
		{"only int accepts", "/num/-5", "b-int"},
		{"neither accepts", "/num/abc", ""},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			got := ""
			if r := tbl.Match(req("GET", tc.path)); r != nil {
				got = r.RouteId
			}
			if got != tc.want {
				t.Fatalf("Match(%s) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

// TestConstraintsDoNotAllocate: the common constraints are checked without
// allocating, whether they accept the value or not.
func TestConstraintsDoNotAllocate(t *testing.T) {
	tbl := mustTable(t, map[string]*config.Route{
		"int":   {RouteId: "int", Match: config.RouteMatch{Path: "/i/{x:int:min(1)}"}},
		"long":  {RouteId: "long", Match: config.RouteMatch{Path: "/l/{x:long:range(1,9)}"}},
		"bool":  {RouteId: "bool", Match: config.RouteMatch{Path: "/b/{x:bool}"}},
		"guid":  {RouteId: "guid", Match: config.RouteMatch{Path: "/g/{x:guid}"}},
		"alpha": {RouteId: "alpha", Match: config.RouteMatch{Path: "/a/{x:alpha:length(1,9)}"}},
	})
	for _, target := range []string{"/i/5", "/i/x", "/i/99999999999", "/l/5", "/l/-1", "/b/true", "/b/no",
		"/g/0f8fad5b-d9cb-469f-a165-70867728950e", "/g/x", "/a/abc", "/a/a1"} {
		r := req("GET", target)
		if n := testing.AllocsPerRun(100, func() { tbl.Match(r) }); n != 0 {
			t.Errorf("Match(%s) allocates %v times", target, n)
		}
	}
}

// commonRoutes is n routes of the usual shapes: literal prefixes with
// catch-alls, parameters, hosts and methods, plus a catch-all fallback.
func commonRoutes(n int) map[string]*config.Route {
	routes := map[string]*config.Route{"fallback": {RouteId: "fallback", Match: config.RouteMatch{Path: "{**catch-all}"}}}
	for i := 0; len(routes) < n; i++ {
		id := fmt.Sprintf("r%03d", i)
		m := config.RouteMatch{Path: fmt.Sprintf("/svc%d/{**rest}", i)}
		switch i % 4 {
		case 1:
			m.Path = fmt.Sprintf("/api/v%d/items/{id}", i)
		case 2:
			m.Hosts = []string{fmt.Sprintf("app%d.example.com", i), "*.example.org"}
		case 3:
			m.Methods = []string{"GET", "HEAD"}
			m.Hosts = []string{fmt.Sprintf("h%d.example.com:8443", i)}
		}
		routes[id] = &config.Route{RouteId: id, Match: m}
	}
	return routes
}

func TestMatchDoesNotAllocate(t *testing.T) {
	tbl := mustTable(t, commonRoutes(100))
	for _, target := range []string{"http://x/svc96/a/b", "http://app98.example.com/x", "http://nowhere/zzz"} {
		r := req("GET", target)
		if n := testing.AllocsPerRun(100, func() { tbl.Match(r) }); n != 0 {
			t.Errorf("Match(%s) allocates %v times", target, n)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{10, 100} {
		tbl := mustTable(b, commonRoutes(n))
		// The last-but-one literal route and the fallback: a long walk.
		r := req("GET", fmt.Sprintf("http://h.example.com/svc%d/a/b", (n-2)/4*4))
		if tbl.Match(r) == nil || tbl.Match(r).RouteId == "fallback" {
			b.Fatalf("benchmark request does not hit its route")
		}
		miss := req("GET", "http://nowhere/"+strings.Repeat("z/", 3))
		miss.TLS = &tls.ConnectionState{}
		b.Run(fmt.Sprintf("routes=%d/hit", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tbl.Match(r)
			}
		})
		b.Run(fmt.Sprintf("routes=%d/fallback", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tbl.Match(miss)
			}
		})
	}
}
