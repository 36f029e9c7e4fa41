package routetimeout

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/errpage"
)

func TestParseGRPC(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1H", time.Hour, true},
		{"2M", 2 * time.Minute, true},
		{"3S", 3 * time.Second, true},
		{"300m", 300 * time.Millisecond, true},
		{"299999u", 299999 * time.Microsecond, true},
		{"12345678n", 12345678, true},
		{"99999999H", 0, false},  // does not fit in a Duration: no bound
		{"0m", 0, false},         // no time at all: not a bound
		{"123456789m", 0, false}, // nine digits
		{"m", 0, false},          // no digits
		{"10", 0, false},         // no unit
		{"10s", 0, false},        // units are case-sensitive: s is not S
		{"-1S", 0, false},        // no sign
		{"1 S", 0, false},        // no space
		{"", 0, false},
	} {
		got, ok := ParseGRPC(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseGRPC(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func FuzzParseGRPC(f *testing.F) {
	for _, s := range []string{"1H", "300m", "99999999H", "0n", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseGRPC(s)
		if ok && d <= 0 {
			t.Fatalf("%q: bound %v", s, d)
		}
		if !ok && d != 0 {
			t.Fatalf("%q: refused but %v", s, d)
		}
	})
}

func TestRequestTimeoutTakesTheShorterOfRouteAndGRPCDeadline(t *testing.T) {
	req := func(ct, gt string) *http.Request {
		r := httptest.NewRequest("POST", "/x", nil)
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		if gt != "" {
			r.Header.Set("Grpc-Timeout", gt)
		}
		return r
	}
	for _, c := range []struct {
		desc  string
		route time.Duration
		r     *http.Request
		want  time.Duration
	}{
		{"no route timeout: the gRPC deadline bounds the call", 0, req("application/grpc", "200m"), 200 * time.Millisecond},
		{"a shorter route timeout wins", time.Second / 10, req("application/grpc+proto", "2S"), time.Second / 10},
		{"a shorter gRPC deadline wins", time.Minute, req("application/grpc;charset=utf-8", "2S"), 2 * time.Second},
		{"not gRPC: grpc-timeout is only a header", time.Minute, req("application/json", "2S"), time.Minute},
		{"gRPC-Web keeps the route timeout", 0, req("application/grpc-web", "2S"), 0},
		{"a malformed grpc-timeout is ignored", 0, req("application/grpc", "2s"), 0},
	} {
		if got := ForRequest(c.route, c.r, errpage.IsGRPC(c.r)); got != c.want {
			t.Errorf("%s: %v, want %v", c.desc, got, c.want)
		}
	}
}
