package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
)

// TestCancelHook: onCancel's registrations behave as context.AfterFunc's
// (f runs once after the cancellation, Stop says whether it kept f from
// running), through the hook only for a context the loop alone cancels.
func TestCancelHook(t *testing.T) {
	type env struct {
		h      *cancelHook
		ctx    context.Context
		cancel func() // the loop's: cancel, then fire
		runs   *atomic.Int32
		f      func()
	}
	setup := func() env {
		h := &cancelHook{}
		base := context.WithValue(context.Background(), cancelHookKey{}, h)
		ctx, cancel := context.WithCancel(base)
		h.begin(ctx)
		runs := &atomic.Int32{}
		return env{h: h, ctx: ctx, cancel: func() { cancel(); h.fire() }, runs: runs, f: func() { runs.Add(1) }}
	}
	waitRuns := func(t *testing.T, e env, want int32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for e.runs.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("f ran %d times, want %d", e.runs.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Run("cancel runs f once, Stop then says it ran", func(t *testing.T) {
		e := setup()
		reg := onCancel(context.WithValue(e.ctx, stateKey{}, 1), e.f)
		if reg.hook == nil {
			t.Fatal("a value context over the loop's took an AfterFunc")
		}
		e.cancel()
		e.h.fire()
		waitRuns(t, e, 1)
		if reg.Stop() {
			t.Error("Stop after the cancellation = true")
		}
	})
	t.Run("Stop first keeps f from running", func(t *testing.T) {
		e := setup()
		reg := onCancel(e.ctx, e.f)
		if !reg.Stop() {
			t.Error("Stop = false")
		}
		e.cancel()
		if e.runs.Load() != 0 {
			t.Error("f ran after Stop")
		}
	})
	t.Run("a context with a cancellation of its own takes an AfterFunc", func(t *testing.T) {
		e := setup()
		child, stop := context.WithTimeout(e.ctx, time.Hour)
		defer stop()
		reg := onCancel(child, e.f)
		if reg.hook != nil {
			t.Fatal("a timeout's context took the hook")
		}
		e.cancel() // the parent's cancellation reaches it
		waitRuns(t, e, 1)
	})
	t.Run("already cancelled: f runs", func(t *testing.T) {
		e := setup()
		e.cancel()
		reg := onCancel(e.ctx, e.f)
		if reg.hook != nil {
			t.Fatal("a cancelled request took the hook")
		}
		waitRuns(t, e, 1)
	})
	t.Run("one registration at a time", func(t *testing.T) {
		e := setup()
		r1 := onCancel(e.ctx, e.f)
		r2 := onCancel(e.ctx, e.f)
		if r1.hook == nil || r2.hook != nil {
			t.Fatalf("hooks: first %v, second %v", r1.hook != nil, r2.hook != nil)
		}
		e.cancel()
		waitRuns(t, e, 2)
	})
	t.Run("a stale registration is not fired by the next request", func(t *testing.T) {
		e := setup()
		reg := onCancel(e.ctx, e.f)
		ctx2, cancel2 := context.WithCancel(context.WithValue(context.Background(), cancelHookKey{}, e.h))
		e.h.begin(ctx2)
		cancel2()
		e.h.fire()
		if e.runs.Load() != 0 {
			t.Error("the next request's cancellation ran the last one's f")
		}
		if !reg.Stop() {
			t.Error("Stop of the earlier registration = false")
		}
	})
}

// TestOwnLoopClientGoneEndsTheBackendRequest: behind the own HTTP/1.1
// loop, a client that goes away while the backend is slow gets the
// backend's request cancelled (its connection closed) and a 499 logged.
func TestOwnLoopClientGoneEndsTheBackendRequest(t *testing.T) {
	started, gone := make(chan struct{}), make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			close(gone)
		case <-time.After(10 * time.Second):
		}
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	s := startServer(t, &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0"}}}, h.p)
	c, err := net.Dial("tcp", s.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: front\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-started
	c.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's request went on after the client left")
	}
	eventually(t, func() bool { return len(h.accessLines(t)) == 1 })
	if got := h.accessLines(t)[0]["status"]; got != float64(499) {
		t.Errorf("access log status %v, want 499", got)
	}
}
