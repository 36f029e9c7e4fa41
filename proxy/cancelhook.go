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
// request. A context that can be cancelled by anything else (a route
// timeout's, net/http's) has a Done channel of its own, and then the
// lean path registers an AfterFunc as before.
type cancelHook struct {
	mu    sync.Mutex
	ctx   context.Context // the current request's
	gen   uint64          // the current request
	f     func()          // registered for request fgen (0: none)
	fgen  uint64
	fired uint64 // the last request whose cancellation ran
}

type cancelHookKey struct{}

// begin starts request ctx, cancellable only by the loop's cancel before
// fire.
func (h *cancelHook) begin(ctx context.Context) {
	h.mu.Lock()
	h.gen++
	h.ctx = ctx
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
func onCancel(ctx context.Context, f func()) cancelReg {
	if h, ok := ctx.Value(cancelHookKey{}).(*cancelHook); ok {
		if gen, ok := h.set(ctx, f); ok {
			return cancelReg{hook: h, gen: gen}
		}
	}
	return cancelReg{stop: context.AfterFunc(ctx, f)}
}

// set registers f for the current request when ctx is cancelled only
// with it (the same Done channel), it was not cancelled yet and no other
// func is registered.
func (h *cancelHook) set(ctx context.Context, f func()) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil || h.fgen != 0 || h.fired == h.gen || ctx.Done() != h.ctx.Done() {
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
