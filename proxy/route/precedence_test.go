package route

import (
	"net/http"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
)

// TestPrecedenceYARPDocumentedExamples checks the examples of YARP's
// documentation: header routing's "Precedence" section (path, then method,
// then host, then headers, then query; "a route which specifies methods and
// no headers will match before a route which specifies headers and no
// methods. This can be overridden by setting the Order property") and the
// sample config's "Order: Lower numbers have higher precedence".
func TestPrecedenceYARPDocumentedExamples(t *testing.T) {
	type m = config.RouteMatch
	hdr := []config.RouteHeader{{Name: "header1", Values: []string{"value1"}, Mode: "ExactHeader"}}
	type route struct {
		match m
		order int
	}
	cases := []struct {
		desc   string
		routes map[string]route
		r      *http.Request
		want   string
	}{
		{"methods and no headers match before headers and no methods",
			map[string]route{"headers": {match: m{Path: "{**catch-all}", Headers: hdr}}, "methods": {match: m{Path: "{**catch-all}", Methods: []string{"GET"}}}},
			req("GET", "/x", "header1", "value1"), "methods"},
		{"Order overrides it",
			map[string]route{"headers": {match: m{Path: "{**catch-all}", Headers: hdr}, order: -1}, "methods": {match: m{Path: "{**catch-all}", Methods: []string{"GET"}}}},
			req("GET", "/x", "header1", "value1"), "headers"},
		{"path comes first among equal orders",
			map[string]route{"catch": {match: m{Path: "{**catch-all}", Methods: []string{"GET"}, Hosts: []string{"localhost"}}}, "download": {match: m{Path: "/download/{**remainder}"}}},
			req("GET", "http://localhost/download/a"), "download"},
		{"method before host",
			map[string]route{"host": {match: m{Path: "{**catch-all}", Hosts: []string{"localhost"}}}, "method": {match: m{Path: "{**catch-all}", Methods: []string{"GET"}}}},
			req("GET", "http://localhost/"), "method"},
		{"host before headers",
			map[string]route{"headers": {match: m{Path: "{**catch-all}", Headers: hdr}}, "host": {match: m{Path: "{**catch-all}", Hosts: []string{"localhost"}}}},
			req("GET", "http://localhost/", "header1", "value1"), "host"},
		{"headers before query parameters",
			map[string]route{"query": {match: m{Path: "{**catch-all}", QueryParameters: []config.RouteQueryParameter{{Name: "q", Mode: "Exists"}}}}, "headers": {match: m{Path: "{**catch-all}", Headers: hdr}}},
			req("GET", "/?q=1", "header1", "value1"), "headers"},
		{"lower numbers have higher precedence, whatever the path",
			map[string]route{"minimalRoute": {match: m{Path: "{**catch-all}"}, order: -1}, "allRouteProps": {match: m{Path: "/download/{**remainder}", Methods: []string{"GET", "PUT"}}}},
			req("GET", "/download/a"), "minimalRoute"},
		{"a lower Order that does not match passes the request on",
			map[string]route{"first": {match: m{Path: "/api/{**rest}"}, order: -5}, "second": {match: m{Path: "{**catch-all}"}}},
			req("GET", "/web"), "second"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			routes := map[string]*config.Route{}
			for id, r := range tc.routes {
				routes[id] = &config.Route{RouteId: id, Order: r.order, Match: r.match}
			}
			if got := mustTable(t, routes).Match(tc.r); got == nil || got.RouteId != tc.want {
				t.Fatalf("Match = %v, want %s", got, tc.want)
			}
		})
	}
}
