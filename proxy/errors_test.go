package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/errpage"
	"github.com/tether-proxy/tether/proxy/forwarded"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "net/http: timeout awaiting response headers" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func TestClassify(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		desc string
		ctx  context.Context
		err  error
		want int
		kind errKind
	}{
		{desc: "connection refused is 502", ctx: context.Background(), err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}, want: 502, kind: kindBadGateway},
		{desc: "response header timeout is 504", ctx: context.Background(), err: timeoutErr{}, want: 504, kind: kindGatewayTimeout},
		{desc: "deadline exceeded is 504", ctx: context.Background(), err: fmt.Errorf("x: %w", context.DeadlineExceeded), want: 504, kind: kindGatewayTimeout},
		{desc: "client gone is 499, not a proxy error", ctx: cancelled, err: context.Canceled, want: 499, kind: kindClientGone},
		{desc: "oversized body is 413", ctx: context.Background(), err: fmt.Errorf("w: %w", &http.MaxBytesError{Limit: 1}), want: 413, kind: kindBodyTooLarge},
	}
	for _, c := range cases {
		status, kind := classify(c.ctx, c.err)
		if status != c.want || kind != c.kind {
			t.Errorf("%s: got %d %v, want %d %v", c.desc, status, kind, c.want, c.kind)
		}
	}
}

func TestErrorBodiesAreFixedTexts(t *testing.T) {
	for _, status := range []int{404, 413, 418, 502, 503, 504} {
		rec := httptest.NewRecorder()
		writeError(rec, status, fixedTrace)
		body := rec.Body.String()
		if rec.Code != status || body == "" || strings.ContainsAny(body, ":/") {
			t.Errorf("%d: code %d body %q", status, rec.Code, body)
		}
		if rec.Header().Get(forwarded.TraceHeader) != fixedTrace || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%d: headers %v", status, rec.Header())
		}
	}
}

func TestReturn503ErrorHasItsOwnBody(t *testing.T) {
	b := newBackend(t, nil)
	for _, c := range []struct {
		desc    string
		cluster string
		status  int
	}{
		{"default status 503", `"SessionAffinity": {"Enabled": true, "AffinityKeyName": ".T", "FailurePolicy": "Return503Error"}`, 503},
		{"FailureStatusCode", `"SessionAffinity": {"Enabled": true, "AffinityKeyName": ".T", "FailurePolicy": "Return503Error", "FailureStatusCode": 409}`, 409},
	} {
		t.Run(c.desc, func(t *testing.T) {
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, c.cluster, "", "")), nil)
			resp, body := get(t, nil, h.front.URL+"/", http.Header{"Cookie": {".T=garbage"}})
			if resp.StatusCode != c.status || body != affinity.RefusalBody {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, body, c.status, affinity.RefusalBody)
			}
			if resp.Header.Get("X-Tether-Trace-Id") == "" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Errorf("headers %v", resp.Header)
			}
		})
	}
	// A cluster with no healthy destination keeps the 503 body of its own.
	if errpage.Body(503) == affinity.RefusalBody {
		t.Fatal("the refusal body is the no-healthy-destination body")
	}
}
