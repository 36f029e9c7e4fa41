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
		if rec.Header().Get(hdrTraceID) != fixedTrace || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%d: headers %v", status, rec.Header())
		}
	}
}
