package cancelhook

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Hook stands in for the lean transport's context.AfterFunc on requests
// of the own HTTP/1.1 server loop and on the own HTTP/2 server's streams.
// Registering an AfterFunc on a request context allocates a child context,
// a map of children in the request's context and the stop func, and takes
// two more locks, all per request, to hear of a cancellation that almost
// never comes. The loop cancels its request contexts itself (the client
// went away), so it runs the one registered func itself too: one per
// connection (per stream in HTTP/2), reused request after request. For a context that can be cancelled by anything else (a route
// timeout's, which registers on the request's Ctx, or net/http's,
// which has none) the lean path registers an AfterFunc as before.
type Hook struct {
	mu    sync.Mutex
	ctx   *Ctx   // the current request's
	gen   uint64 // the current request
	f     func() // registered for request fgen (0: none)
	fgen  uint64
	fired uint64 // the last request whose cancellation ran
}

// Begin starts request ctx, cancelled by the loop before Fire.
func (h *Hook) Begin(ctx *Ctx) {
	h.mu.Lock()
	h.gen++
	h.ctx = ctx
	h.mu.Unlock()
}

// End lets go of the last request's context while the connection is
// parked; the next Begin starts another.
func (h *Hook) End() {
	h.mu.Lock()
	h.ctx = nil
	h.mu.Unlock()
}

// Fire runs the current request's registered func, after its context was
// cancelled (so the func's caller sees ctx.Err, as with an AfterFunc).
func (h *Hook) Fire() {
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

// Reg is a registration of OnCancel: a hook's or an AfterFunc's.
type Reg struct {
	hook *Hook
	gen  uint64
	stop func() bool
}

// OnCancel runs f once ctx is cancelled, as context.AfterFunc.
// ctx takes the hook when it is the loop's request context (lc) or a value
// context over it and nothing was registered on lc: every cancellable
// context made from a Ctx registers (see Ctx.AfterFunc). Asking
// ctx for its Done channel instead would make one per request.
func OnCancel(ctx context.Context, f func()) Reg {
	if lc, ok := ctx.Value(loopCtxKey{}).(*Ctx); ok && lc.hook != nil {
		if gen, ok := lc.hook.set(lc, f); ok {
			return Reg{hook: lc.hook, gen: gen}
		}
	}
	return Reg{stop: context.AfterFunc(ctx, f)}
}

// set registers f for the current request when lc is its context, it was
// not cancelled yet, nothing cancellable was made from it and no other
// func is registered.
func (h *Hook) set(lc *Ctx, f func()) (uint64, bool) {
	h.mu.Lock()
	if h.ctx == nil || lc != h.ctx || h.fgen != 0 || h.fired == h.gen || lc.hasChildren() {
		h.mu.Unlock()
		return 0, false
	}
	h.f, h.fgen = f, h.gen
	gen := h.gen
	h.mu.Unlock()
	return gen, true
}

// Stop is AfterFunc's stop: true when it kept f from running.
func (r Reg) Stop() bool {
	if r.hook == nil {
		return r.stop()
	}
	h := r.hook
	h.mu.Lock()
	ok := h.fgen == r.gen // else it ran
	if ok {
		h.f, h.fgen = nil, 0
	}
	h.mu.Unlock()
	return ok
}

// Ctx is the context of a request of the own HTTP/1.1 loop (or of an own
// HTTP/2 stream): the connection's values, cancelled by the loop (the
// client went away, the handler returned). context.WithCancel costs three allocations per
// request (the context, its cancel func and, at the first Done, the
// channel) and the hook's test of the channel makes that first Done every
// time; a Ctx is one allocation, with a channel only when something
// waits on it. Cancellable contexts made from it (WithCancel, WithTimeout,
// the route timeout's AfterFunc) register through AfterFunc, as with a
// cancelCtx: no goroutine each.
type Ctx struct {
	context.Context       // the connection's values; never cancelled
	hook            *Hook // the connection's (nil: none)
	mu              sync.Mutex
	done            chan struct{} // made at the first Done, closed by cancel
	err             error
	afters          []loopAfter
	nextID          atomic.Uint64 // of afters, added to under mu; > 0: one was ever registered
	parsed          string        // SetParsed's
	start           time.Time     // SetStart's
}

type loopAfter struct {
	id uint64
	f  func()
}

type loopCtxKey struct{}

func NewCtx(values context.Context, hook *Hook) *Ctx {
	return &Ctx{Context: values, hook: hook}
}

// Init makes the zero Ctx c what NewCtx(values, hook) returns, for a Ctx
// held in a larger allocation (an HTTP/2 stream's).
func (c *Ctx) Init(values context.Context, hook *Hook) {
	c.Context, c.hook = values, hook
}

// SetParsed records, before the request's handler runs, the string the
// loop parsed the request's head from: the target, the host and each
// field value the loop's parser handed out are slices of it, and the
// parser held each to its rule (no byte but visible ASCII, space and
// tab). The string is never changed.
func (c *Ctx) SetParsed(head string) { c.parsed = head }

// Parsed is what SetParsed recorded on ctx, when ctx is a request's
// Ctx itself; "" for any other context (a request of net/http's server,
// an HTTP/2 stream's), whose fields no parser vouches for.
func Parsed(ctx context.Context) string {
	if c, ok := ctx.(*Ctx); ok {
		return c.parsed
	}
	return ""
}

// SetStart records when the loop began the request (a time.Now reading),
// read once there for what needs the time at the request's start.
func (c *Ctx) SetStart(now time.Time) { c.start = now }

// Loop is what SetParsed and SetStart recorded on ctx, when ctx is a
// request's Ctx itself; "" and the zero Time for any other context.
func Loop(ctx context.Context) (parsed string, start time.Time) {
	if c, ok := ctx.(*Ctx); ok {
		return c.parsed, c.start
	}
	return "", time.Time{}
}

// closedDone is the Done of a Ctx first asked after its cancellation.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *Ctx) Done() <-chan struct{} {
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

func (c *Ctx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Ctx) Value(key any) any {
	if key == (loopCtxKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// AfterFunc runs f in its own goroutine after c is cancelled (at once when
// it is already); stop keeps it from running, as context.AfterFunc's. The
// context package calls it for the children of c (the afterFuncer its
// propagateCancel looks for).
func (c *Ctx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	id := c.nextID.Add(1)
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

// hasChildren: something was registered on c.
func (c *Ctx) hasChildren() bool {
	return c.nextID.Load() > 0
}

// Cancel ends c with err (once) and runs what was registered on it.
func (c *Ctx) Cancel(err error) {
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

// AfterParent is context.AfterFunc(ctx, f) that also registers f on the
// loop's request context under ctx. context.AfterFunc does that itself
// only when that context is ctx's direct parent; through a value context
// it starts a goroutine instead, the Ctx sees nothing registered, and
// OnCancel then takes the loop's hook, which a cancellation of ctx's own
// never fires (a route timeout's: a GET ran past its route's Timeout). A
// value context adds no cancellation of its own, so the Ctx's is ctx's
// when their Done channels are the same.
func AfterParent(ctx context.Context, f func()) func() bool {
	if lc, ok := ctx.Value(loopCtxKey{}).(*Ctx); ok && ctx.Done() == lc.Done() {
		return lc.AfterFunc(f)
	}
	return context.AfterFunc(ctx, f)
}
