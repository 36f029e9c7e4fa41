package upstream

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestWithConnectTimeout: the bound cuts a dial that gets no answer with
// an error naming it (a net.Error timeout, which the data path treats as
// a connect failure), leaves the caller's own cancellation and a dial's
// own errors as they are, and a bound of 0 leaves the dialer alone.
func TestWithConnectTimeout(t *testing.T) {
	errRefused := errors.New("connection refused")
	silent := func(ctx context.Context, _, _ string) (net.Conn, error) { <-ctx.Done(); return nil, ctx.Err() }
	refusing := func(context.Context, string, string) (net.Conn, error) { return nil, errRefused }
	cases := []struct {
		desc        string
		dial        DialFunc
		bound       time.Duration
		cancelFirst bool // the caller gives up before the bound
		wantBound   bool // the error is the bound's
		wantErr     error
	}{
		{desc: "a silent address is cut at the bound", dial: silent, bound: 50 * time.Millisecond, wantBound: true, wantErr: context.DeadlineExceeded},
		{desc: "the caller's cancellation stays its own", dial: silent, bound: time.Hour, cancelFirst: true, wantErr: context.Canceled},
		{desc: "a refusal stays a refusal", dial: refusing, bound: time.Hour, wantErr: errRefused},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.cancelFirst {
				cancel()
			}
			_, err := WithConnectTimeout(c.dial, c.bound)(ctx, "tcp", "192.0.2.1:80")
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			var ce *connectTimeoutError
			if got := errors.As(err, &ce); got != c.wantBound {
				t.Fatalf("error %v is the connect timeout's: %v, want %v", err, got, c.wantBound)
			}
			if c.wantBound {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Errorf("error %v is not a net.Error timeout", err)
				}
				if !strings.Contains(err.Error(), "192.0.2.1:80") || !strings.Contains(err.Error(), "connect timeout (50ms)") {
					t.Errorf("error %q does not name the address and the bound", err)
				}
			}
		})
	}
	t.Run("a bound of 0 leaves the dialer alone", func(t *testing.T) {
		called := false
		d := WithConnectTimeout(func(ctx context.Context, _, _ string) (net.Conn, error) {
			if _, ok := ctx.Deadline(); ok {
				t.Error("the dial got a deadline")
			}
			called = true
			return nil, errRefused
		}, 0)
		if _, err := d(context.Background(), "tcp", "x:1"); !errors.Is(err, errRefused) || !called {
			t.Fatalf("error %v, called %v", err, called)
		}
	})
}
