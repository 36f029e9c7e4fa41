package routetimeout

import (
	"context"
	"errors"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/internal/cancelhook"
)

// Of is the timeout a route's config asks for; 0 means none
// (absent, or TimeoutPolicy "Disable").
func Of(r *config.Route) time.Duration {
	if r.Timeout.Set {
		return r.Timeout.Duration
	}
	return 0
}

// timeoutCtx is a context that ends when its parent does or when its timer
// fires (then with context.DeadlineExceeded, so the error path answers
// 504). Unlike context.WithTimeout, its timer can be stopped.
type timeoutCtx struct {
	context.Context // the parent, for values and its deadline
	done            chan struct{}
	timer           *time.Timer
	stopParent      func() bool
	// deadline is when the timer is due; stopped: an upgrade stopped it.
	deadline time.Time
	stopped  atomic.Bool

	mu  sync.Mutex
	err error
}

type timeoutKey struct{}

// With returns ctx bounded by d, and the function that releases
// it; d <= 0 returns ctx itself.
func With(ctx context.Context, d time.Duration) (context.Context, func()) {
	if d <= 0 {
		return ctx, func() {}
	}
	c := &timeoutCtx{Context: ctx, done: make(chan struct{}), deadline: time.Now().Add(d)}
	c.mu.Lock() // end waits until both are set
	c.stopParent = cancelhook.AfterParent(ctx, func() { c.end(ctx.Err()) })
	c.timer = time.AfterFunc(d, func() { c.end(context.DeadlineExceeded) })
	c.mu.Unlock()
	return c, func() { c.end(context.Canceled) }
}

func (c *timeoutCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	c.timer.Stop()
	c.stopParent()
	close(c.done)
}

func (c *timeoutCtx) Done() <-chan struct{} { return c.done }

func (c *timeoutCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *timeoutCtx) Value(key any) any {
	if key == (timeoutKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// Stop stops the route timeout of ctx, if any and if it has not
// fired: called once an upgrade is accepted.
func Stop(ctx context.Context) {
	if c, ok := ctx.Value(timeoutKey{}).(*timeoutCtx); ok {
		c.stopped.Store(true)
		c.timer.Stop()
	}
}

// TimedOut reports whether ctx's route timeout has run out, fired or not:
// a backend that gave up at the same deadline (a gRPC server resets the
// stream when its grpc-timeout passes) may be heard before the timer runs.
func TimedOut(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	c, ok := ctx.Value(timeoutKey{}).(*timeoutCtx)
	return ok && !c.stopped.Load() && !time.Now().Before(c.deadline)
}

// ForRequest bounds the route's timeout d by a gRPC request's
// grpc-timeout: past the client's deadline nobody waits for the answer, so
// the backend's connection is released then, and the client is told
// DEADLINE_EXCEEDED (as Envoy does with max_grpc_timeout). The header still
// reaches the backend unchanged. grpc is errpage.IsGRPC(r), known by then.
func ForRequest(d time.Duration, r *http.Request, grpc bool) time.Duration {
	if !grpc {
		return d
	}
	v := r.Header["Grpc-Timeout"]
	if len(v) != 1 {
		return d
	}
	g, ok := ParseGRPC(v[0])
	if !ok || (d > 0 && d <= g) {
		return d
	}
	return g
}

// ParseGRPC reads a grpc-timeout value: at most 8 digits and a unit
// (H, M, S, m, u, n), per the gRPC over HTTP/2 protocol.
func ParseGRPC(s string) (time.Duration, bool) {
	if len(s) < 2 || len(s) > 9 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s)-1; i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n == 0 {
		return 0, false
	}
	if n > int64(math.MaxInt64/unit) {
		return 0, false // 99999999H does not fit: no bound
	}
	return time.Duration(n) * unit, true
}
