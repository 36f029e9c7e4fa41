package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tether-proxy/tether/proxy/config"
)

func TestParseGRPCTimeout(t *testing.T) {
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
		got, ok := parseGRPCTimeout(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseGRPCTimeout(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func FuzzParseGRPCTimeout(f *testing.F) {
	for _, s := range []string{"1H", "300m", "99999999H", "0n", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseGRPCTimeout(s)
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
		if got := requestTimeout(c.route, c.r, isGRPC(c.r)); got != c.want {
			t.Errorf("%s: %v, want %v", c.desc, got, c.want)
		}
	}
}

func TestGRPCStatusOfTethersErrors(t *testing.T) {
	for status, want := range map[int]int{
		400: grpcInternal, 401: grpcUnauthenticated, 403: grpcPermissionDenied, 404: grpcUnimplemented,
		408: grpcDeadlineExceeded, 413: grpcResourceExhausted, 429: grpcUnavailable, 502: grpcUnavailable,
		503: grpcUnavailable, 504: grpcDeadlineExceeded, 500: grpcUnknown,
	} {
		if got := grpcStatusOf(status); got != want {
			t.Errorf("HTTP %d: gRPC %d, want %d", status, got, want)
		}
	}
	if got := grpcMessage("100% bad\n"); got != "100%25 bad%0A" {
		t.Errorf("grpcMessage: %q", got)
	}
}

// TestGRPCErrorsAreGRPCStatuses: a gRPC client that tether cannot serve
// reads a gRPC status (not "unexpected content-type"), and the access log
// keeps the HTTP status.
func TestGRPCErrorsAreGRPCStatuses(t *testing.T) {
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": "http://" + deadAddr(t)}, "", "", "")), nil)
	conn, err := grpc.NewClient(h2cFront(t, h), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodecV2{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, out := []byte("x"), []byte(nil)
	err = conn.Invoke(ctx, "/tether.test.Echo/Unary", &in, &out)
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "bad gateway" {
		t.Fatalf("status %v, want UNAVAILABLE \"bad gateway\"", st)
	}
	if lines := h.accessLines(t); len(lines) != 1 || lines[0]["status"] != 502.0 {
		t.Fatalf("access log %v, want status 502", lines)
	}
}

// TestGRPCTimeoutBoundsTheCall: a backend that ignores its deadline is cut
// at the call's grpc-timeout; the client reads DEADLINE_EXCEEDED from
// tether and the backend's request is released. (A raw HTTP/2 client sends
// the header, so no client-side timer answers in tether's place.)
func TestGRPCTimeoutBoundsTheCall(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	released := make(chan struct{}, 1)
	stuck := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		// net/http sees the connection close (and ends the context) only
		// once the body was read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-hang:
		case <-r.Context().Done():
			released <- struct{}{}
		}
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": stuck.URL}, "", "", "")), nil)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest("POST", "http://"+h2cFront(t, h)+"/tether.test.Echo/Unary", strings.NewReader("\x00\x00\x00\x00\x01x"))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Timeout", "300m")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/grpc" ||
		resp.Header.Get("Grpc-Status") != "4" || resp.Header.Get("Grpc-Message") != "gateway timeout" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("answered after %v, before the call's deadline", el)
	}
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's request was not released at the deadline")
	}
	if lines := h.accessLines(t); len(lines) != 1 || lines[0]["status"] != 504.0 {
		t.Fatalf("access log %v, want status 504", lines)
	}
}

// h2cFront serves h's proxy on an h2c listener (Kestrel's Protocols Http2).
func h2cFront(t *testing.T, h *harness) string {
	t.Helper()
	l := config.Listener{Address: "127.0.0.1:0"}
	l.Protocols = config.ProtocolsHttp2
	return startServer(t, &config.Config{Listeners: []config.Listener{l}}, h.p).Addrs()[0].String()
}
