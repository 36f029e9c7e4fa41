package cancelhook

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestCancelHook: OnCancel's registrations behave as context.AfterFunc's
// (f runs once after the cancellation, Stop says whether it kept f from
// running), through the hook only for a context the loop alone cancels.
func TestCancelHook(t *testing.T) {
	type env struct {
		h      *Hook
		ctx    context.Context
		cancel func() // the loop's: cancel, then fire
		runs   *atomic.Int32
		f      func()
	}
	setup := func() env {
		h := &Hook{}
		ctx := NewCtx(context.Background(), h)
		h.Begin(ctx)
		runs := &atomic.Int32{}
		return env{h: h, ctx: ctx, cancel: func() { ctx.Cancel(context.Canceled); h.Fire() }, runs: runs, f: func() { runs.Add(1) }}
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
		reg := OnCancel(context.WithValue(e.ctx, valueKey{}, 1), e.f)
		if reg.hook == nil {
			t.Fatal("a value context over the loop's took an AfterFunc")
		}
		e.cancel()
		e.h.Fire()
		waitRuns(t, e, 1)
		if reg.Stop() {
			t.Error("Stop after the cancellation = true")
		}
	})
	t.Run("Stop first keeps f from running", func(t *testing.T) {
		e := setup()
		reg := OnCancel(e.ctx, e.f)
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
		reg := OnCancel(child, e.f)
		if reg.hook != nil {
			t.Fatal("a timeout's context took the hook")
		}
		e.cancel() // the parent's cancellation reaches it
		waitRuns(t, e, 1)
	})
	t.Run("after a child was made, a value context over the loop's takes an AfterFunc", func(t *testing.T) {
		e := setup()
		child, stop := context.WithCancel(e.ctx)
		stop() // gone, but a context between could still be one of its kind
		_ = child
		reg := OnCancel(context.WithValue(e.ctx, valueKey{}, 1), e.f)
		if reg.hook != nil {
			t.Fatal("took the hook after a child registered")
		}
		e.cancel()
		waitRuns(t, e, 1)
	})
	t.Run("already cancelled: f runs", func(t *testing.T) {
		e := setup()
		e.cancel()
		reg := OnCancel(e.ctx, e.f)
		if reg.hook != nil {
			t.Fatal("a cancelled request took the hook")
		}
		waitRuns(t, e, 1)
	})
	t.Run("one registration at a time", func(t *testing.T) {
		e := setup()
		r1 := OnCancel(e.ctx, e.f)
		r2 := OnCancel(e.ctx, e.f)
		if r1.hook == nil || r2.hook != nil {
			t.Fatalf("hooks: first %v, second %v", r1.hook != nil, r2.hook != nil)
		}
		e.cancel()
		waitRuns(t, e, 2)
	})
	t.Run("a stale registration is not fired by the next request", func(t *testing.T) {
		e := setup()
		reg := OnCancel(e.ctx, e.f)
		ctx2 := NewCtx(context.Background(), e.h)
		e.h.Begin(ctx2)
		ctx2.Cancel(context.Canceled)
		e.h.Fire()
		if e.runs.Load() != 0 {
			t.Error("the next request's cancellation ran the last one's f")
		}
		if !reg.Stop() {
			t.Error("Stop of the earlier registration = false")
		}
	})
}

// TestLoopCtx: the own loop's request context behaves as a
// context.WithCancel's for its users and the context package.
func TestLoopCtx(t *testing.T) {
	type key struct{}
	values := context.WithValue(context.Background(), key{}, "v")
	t.Run("values, no deadline, not done", func(t *testing.T) {
		c := NewCtx(values, nil)
		if c.Value(key{}) != "v" || c.Value(loopCtxKey{}) != c {
			t.Error("values do not pass")
		}
		if _, ok := c.Deadline(); ok {
			t.Error("a deadline")
		}
		if c.Err() != nil {
			t.Error("Err before cancel")
		}
		select {
		case <-c.Done():
			t.Error("done before cancel")
		default:
		}
	})
	t.Run("cancel closes Done once, Err stays the first", func(t *testing.T) {
		c := NewCtx(values, nil)
		d := c.Done()
		c.Cancel(context.Canceled)
		c.Cancel(context.DeadlineExceeded)
		<-d
		<-c.Done()
		if c.Err() != context.Canceled || context.Cause(c) != context.Canceled {
			t.Errorf("Err %v, Cause %v", c.Err(), context.Cause(c))
		}
	})
	t.Run("Done first asked after cancel is closed", func(t *testing.T) {
		c := NewCtx(values, nil)
		c.Cancel(context.Canceled)
		<-c.Done()
	})
	t.Run("children end with it and leave when they end first", func(t *testing.T) {
		c := NewCtx(values, nil)
		child, stop := context.WithCancel(c)
		tctx, tstop := context.WithTimeout(c, time.Hour)
		defer tstop()
		stop() // leaves c
		c.mu.Lock()
		n := len(c.afters)
		c.mu.Unlock()
		if n != 1 {
			t.Fatalf("%d registrations after one child ended, want 1 (the timeout's)", n)
		}
		c.Cancel(context.Canceled)
		<-tctx.Done()
		if tctx.Err() != context.Canceled || context.Cause(tctx) != context.Canceled {
			t.Errorf("the timeout child: Err %v, Cause %v", tctx.Err(), context.Cause(tctx))
		}
		if child.Err() != context.Canceled {
			t.Errorf("the stopped child: %v", child.Err())
		}
		if tctx.Value(key{}) != "v" {
			t.Error("a child lost the values")
		}
	})
	t.Run("context.AfterFunc runs after cancel, not after stop", func(t *testing.T) {
		c := NewCtx(values, nil)
		ran := make(chan struct{})
		context.AfterFunc(c, func() { close(ran) })
		var late atomic.Bool
		stop := context.AfterFunc(c, func() { late.Store(true) })
		if !stop() {
			t.Error("stop before cancel = false")
		}
		c.Cancel(context.Canceled)
		<-ran
		after := make(chan struct{})
		if context.AfterFunc(c, func() { close(after) })() {
			t.Error("stop of an AfterFunc made after cancel = true")
		}
		<-after
		if late.Load() {
			t.Error("a stopped AfterFunc ran")
		}
	})
}

// valueKey is a context value key of the test's own.
type valueKey struct{}
