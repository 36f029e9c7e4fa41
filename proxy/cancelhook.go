package proxy

import (
	"context"
	"sync"
)

// cancelHook stands in for the lean path's context.AfterFunc on requests
// of the own HTTP/1.1 loop (h1.go). Registering an AfterFunc on a request
// context allocates a child context, a map of children in the request's
// context and the stop func, and takes two more locks, all per request, to
// hear of a cancellation that almost never comes. The loop cancels its
// request contexts itself (the client went away), so it runs the one
// registered func itself too: one per connection, reused request after
// request. For a context that can be cancelled by anything else (a route
// timeout's, which registers on the request's loopCtx, or net/http's,
// which has none) the lean path registers an AfterFunc as before.
type cancelHook struct {
	mu    sync.Mutex
	ctx   *loopCtx // the current request's
	gen   uint64   // the current request
	f     func()   // registered for request fgen (0: none)
	fgen  uint64
	fired uint64 // the last request whose cancellation ran
}

// begin starts request ctx, cancelled by the loop before fire.
func (h *cancelHook) begin(ctx *loopCtx) {
	h.mu.Lock()
	h.gen++
	h.ctx = ctx
	h.mu.Unlock()
}

// end lets go of the last request's context while the connection is
// parked; the next begin starts another.
func (h *cancelHook) end() {
	h.mu.Lock()
	h.ctx = nil
	h.mu.Unlock()
}

// fire runs the current request's registered func, after its context was
// cancelled (so the func's caller sees ctx.Err, as with an AfterFunc).
func (h *cancelHook) fire() {
	h.mu.Lock()
	h.fired = h.gen
	var f func()
	if h.fgen == h.gen {
		f, h.f, h.fgen = h.f, nil, 0
	}
	h.mu.Unlock()
	if f != nil {
		f()
	}
}

// cancelReg is a registration of onCancel: a hook's or an AfterFunc's.
type cancelReg struct {
	hook *cancelHook
	gen  uint64
	stop func() bool
}

// onCancel runs f once ctx is cancelled, as context.AfterFunc.
// ctx takes the hook when it is the loop's request context (lc) or a value
// context over it and nothing was registered on lc: every cancellable
// context made from a loopCtx registers (see loopCtx.AfterFunc). Asking
// ctx for its Done channel instead would make one per request.
func onCancel(ctx context.Context, f func()) cancelReg {
	if lc, ok := ctx.Value(loopCtxKey{}).(*loopCtx); ok && lc.hook != nil {
		if gen, ok := lc.hook.set(lc, f); ok {
			return cancelReg{hook: lc.hook, gen: gen}
		}
	}
	return cancelReg{stop: context.AfterFunc(ctx, f)}
}

// set registers f for the current request when lc is its context, it was
// not cancelled yet, nothing cancellable was made from it and no other
// func is registered.
func (h *cancelHook) set(lc *loopCtx, f func()) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil || lc != h.ctx || h.fgen != 0 || h.fired == h.gen || lc.hasChildren() {
		return 0, false
	}
	h.f, h.fgen = f, h.gen
	return h.gen, true
}

// Stop is AfterFunc's stop: true when it kept f from running.
func (r cancelReg) Stop() bool {
	if r.hook == nil {
		return r.stop()
	}
	h := r.hook
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fgen != r.gen {
		return false // it ran
	}
	h.f, h.fgen = nil, 0
	return true
}

// loopCtx is the context of a request of the own HTTP/1.1 loop: the
// connection's values, cancelled by the loop (the client went away, the
// handler returned). context.WithCancel costs three allocations per
// request (the context, its cancel func and, at the first Done, the
// channel) and the hook's test of the channel makes that first Done every
// time; a loopCtx is one allocation, with a channel only when something
// waits on it. Cancellable contexts made from it (WithCancel, WithTimeout,
// the route timeout's AfterFunc) register through AfterFunc, as with a
// cancelCtx: no goroutine each.
type loopCtx struct {
	context.Context             // the connection's values; never cancelled
	hook            *cancelHook // the connection's (nil: none)
	mu              sync.Mutex
	done            chan struct{} // made at the first Done, closed by cancel
	err             error
	afters          []loopAfter
	nextID          uint64 // of afters; nextID > 0: one was ever registered
}

type loopAfter struct {
	id uint64
	f  func()
}

type loopCtxKey struct{}

func newLoopCtx(values context.Context, hook *cancelHook) *loopCtx {
	return &loopCtx{Context: values, hook: hook}
}

// closedDone is the Done of a loopCtx first asked after its cancellation.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *loopCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.err != nil {
			return closedDone
		}
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *loopCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *loopCtx) Value(key any) any {
	if key == (loopCtxKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// AfterFunc runs f in its own goroutine after c is cancelled (at once when
// it is already); stop keeps it from running, as context.AfterFunc's. The
// context package calls it for the children of c (the afterFuncer its
// propagateCancel looks for).
func (c *loopCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.nextID++
	id := c.nextID
	c.afters = append(c.afters, loopAfter{id: id, f: f})
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, a := range c.afters {
			if a.id == id {
				c.afters = append(c.afters[:i], c.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// hasChildren: something was registered on c (the caller holds no lock
// of c's).
func (c *loopCtx) hasChildren() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nextID > 0
}

// cancel ends c with err (once) and runs what was registered on it.
func (c *loopCtx) cancel(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	afters := c.afters
	c.afters = nil
	c.mu.Unlock()
	for _, a := range afters {
		go a.f()
	}
}
