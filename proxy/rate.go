package proxy

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/internal/monotime"
)

// Kestrel's minimum data rates (Limits.MinRequestBodyDataRate and
// MinResponseDataRate), kept as Kestrel keeps them: a heartbeat looks at
// every request in flight once a second (rateTick) and ends the ones too
// slow. A read or a write only notes the time and the bytes in its
// request's state, so the check costs no allocation and no timer per read
// or write; a write takes the time from the heartbeat, as Kestrel's does:
// its last tick plus a tick, no earlier than the write began, so a write
// has its whole grace period and at most a tick more, and reads no clock.
//
//   - A request body is too slow when, its grace period spent, fewer bytes
//     came than the rate over the time the proxy spent waiting in reads of
//     it (the time the backend made it wait is not counted). The heartbeat
//     marks it and sets a read deadline in the past: the read returns, and
//     the request is answered 408 when its response has not started (the
//     connection, or in HTTP/2 and HTTP/3 the stream, is cut otherwise).
//     gRPC requests over HTTP/2 and HTTP/3 are exempt, as YARP exempts
//     its streaming calls: a stream may rightly stay quiet.
//   - A response write is too slow when it is still in progress after the
//     larger of the grace period and its size at the rate (a write queued
//     behind a slow one gets its own size's time on top, never a second
//     grace period). The heartbeat sets a write deadline in the past: the
//     connection is cut, in HTTP/2 the stream (RST_STREAM), in HTTP/3
//     the stream (RESET_STREAM).
//
// Either is counted in tether_requests_too_slow_total{direction}.

// rateTick is the heartbeat's period (Kestrel's).
const rateTick = time.Second

// aLongTimeAgo is a deadline in the past: it ends a read or write now.
var aLongTimeAgo = time.Unix(1, 0)

// dataRate is a minimum data rate in force; the zero value is none.
type dataRate struct {
	bps   float64 // bytes per second; 0: no minimum
	grace int64   // nanoseconds
}

func newDataRate(r config.MinDataRate) dataRate {
	bps, grace, on := r.Effective()
	if !on {
		return dataRate{}
	}
	return dataRate{bps: bps, grace: int64(grace)}
}

func (r dataRate) on() bool { return r.bps > 0 }

// nanosFor is how long n bytes may take at the rate.
func (r dataRate) nanosFor(n int) int64 { return int64(float64(n) / r.bps * 1e9) }

// rateWatch is the heartbeat over the requests in flight that have a rate
// to keep: an intrusive list of their states (no allocation to join it)
// and a goroutine that runs while the list has members (and a while
// after).
type rateWatch struct {
	mu      sync.Mutex
	head    *reqState
	running bool
	// now is the heartbeat's last tick (monotime.Now), or its start.
	now     atomic.Int64
	stop    chan struct{} // closed by Proxy.Close
	stopped bool
	// slow counts requests ended as too slow, by direction.
	slowRequest, slowResponse prometheus.Counter
}

func newRateWatch(m *metrics) *rateWatch {
	return &rateWatch{stop: make(chan struct{}),
		slowRequest: m.tooSlow.WithLabelValues("request"), slowResponse: m.tooSlow.WithLabelValues("response")}
}

// add puts st under watch until remove.
func (w *rateWatch) add(st *reqState) {
	w.mu.Lock()
	st.wnext, st.wprev = w.head, nil
	if w.head != nil {
		w.head.wprev = st
	}
	w.head = st
	st.watched = true
	if !w.running && !w.stopped {
		w.running = true
		w.now.Store(monotime.Now())
		go w.loop()
	}
	w.mu.Unlock()
}

// setBody gives st its request body wrapper, under the watch's lock (the
// heartbeat reads it), and puts st under watch for the body's rate.
func (w *rateWatch) setBody(st *reqState, b *clientBody) {
	if !st.watched && !b.rate.on() {
		st.body = b
		return
	}
	if !st.watched {
		w.add(st)
	}
	w.mu.Lock()
	st.body = b
	w.mu.Unlock()
}

// remove takes st off the watch: once it returns, the heartbeat no longer
// touches st or its response writer.
func (w *rateWatch) remove(st *reqState) {
	if !st.watched {
		return
	}
	w.mu.Lock()
	if st.wprev != nil {
		st.wprev.wnext = st.wnext
	} else {
		w.head = st.wnext
	}
	if st.wnext != nil {
		st.wnext.wprev = st.wprev
	}
	st.wnext, st.wprev, st.watched = nil, nil, false
	w.mu.Unlock()
}

// close ends the heartbeat (Proxy.Close).
func (w *rateWatch) close() {
	w.mu.Lock()
	if !w.stopped {
		w.stopped = true
		close(w.stop)
	}
	w.mu.Unlock()
}

// idleTicks is how many empty ticks the heartbeat waits before it ends
// (the next request under watch starts it again).
const idleTicks = 30

func (w *rateWatch) loop() {
	t := time.NewTicker(rateTick)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-w.stop:
			w.mu.Lock()
			w.running = false
			w.mu.Unlock()
			return
		case <-t.C:
		}
		w.mu.Lock()
		if w.head == nil {
			if idle++; idle >= idleTicks {
				w.running = false
				w.mu.Unlock()
				return
			}
		} else {
			idle = 0
		}
		now := monotime.Now()
		w.now.Store(now)
		for st := w.head; st != nil; st = st.wnext {
			w.check(st, now)
		}
		w.mu.Unlock()
	}
}

// check ends st's body read or response write when it is too slow. It
// runs under w.mu, so st's handler has not returned.
func (w *rateWatch) check(st *reqState, now int64) {
	if b := st.body; b != nil && b.rate.on() && b.tooSlow(now) {
		w.slowRequest.Inc()
	}
	rw := &st.rw
	if !rw.rate.on() {
		return
	}
	if due := rw.wdue.Load(); due != 0 && now > due && rw.slow.CompareAndSwap(false, true) {
		w.slowResponse.Inc()
		_ = http.NewResponseController(rw.w).SetWriteDeadline(aLongTimeAgo)
	}
}

// tooSlow reports, once, that the body is being read too slowly, and ends
// the read in progress.
func (b *clientBody) tooSlow(now int64) bool {
	// Loaded in the order Read stores them (readStart is cleared before
	// readNanos grows), so a read that just ended is never counted twice.
	acc := b.readNanos.Load()
	start := b.readStart.Load()
	if start == 0 {
		return false // not waiting for the client now: its rate cannot drop
	}
	elapsed := acc + now - start
	if elapsed <= b.rate.grace || float64(b.bytes.Load()) >= b.rate.bps*float64(elapsed)/1e9 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done || !b.state.CompareAndSwap(bodyOK, bodyTooSlow) {
		return false // the handler has returned: the connection is not its to end
	}
	_ = b.ctl.SetReadDeadline(aLongTimeAgo)
	return true
}

// beginWrite notes a write of n bytes to the client starting now: when it
// must be done by.
func (rw *respWriter) beginWrite(n int) {
	now := rw.heartbeat.now.Load() + int64(rateTick)
	need := rw.rate.nanosFor(n)
	due := now + max(rw.rate.grace, need)
	if acc := rw.wlast + need; acc > due {
		due = acc
	}
	rw.wlast = due
	rw.wdue.Store(due)
}
