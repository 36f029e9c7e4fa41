package gate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

type fakeListeners struct {
	started, reserved atomic.Int32
	startErr          error
}

func (f *fakeListeners) Start() error      { f.started.Add(1); return f.startErr }
func (f *fakeListeners) Reserve() error    { f.reserved.Add(1); return nil }
func (f *fakeListeners) Addrs() []net.Addr { return nil }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestUngatedListenersStartAtOnce(t *testing.T) {
	var g Gate
	l := &fakeListeners{}
	if err := g.Open(l, false, func() string { return "never asked" }); err != nil || l.started.Load() != 1 || l.reserved.Load() != 0 || g.Reason() != "" {
		t.Fatalf("ungated: %v, started %d, reserved %d, reason %q", err, l.started.Load(), l.reserved.Load(), g.Reason())
	}
	l.startErr = errors.New("port in use")
	if err := g.Open(l, false, nil); err == nil || err.Error() != "listeners: port in use" {
		t.Fatalf("a failed start: %v", err)
	}
}

// Gated listeners are bound without accepting, say what they wait for,
// and open once nothing is left to wait for.
func TestGatedListenersOpenOnceJoined(t *testing.T) {
	var g Gate
	l := &fakeListeners{}
	var why atomic.Pointer[string]
	wait := "not in the cluster yet"
	why.Store(&wait)
	waitFor := func() string { return *why.Load() }
	if err := g.Open(l, true, waitFor); err != nil || l.reserved.Load() != 1 || l.started.Load() != 0 || g.Reason() != wait {
		t.Fatalf("gated: %v, started %d, reserved %d, reason %q", err, l.started.Load(), l.reserved.Load(), g.Reason())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Serve(context.Background(), l, waitFor, quiet, func(err error) { t.Errorf("fail: %v", err) })
	}()
	key := "in the cluster, waiting for its active key"
	why.Store(&key)
	testutil.Eventually(t, 5*time.Second, "the reason to follow what the node waits for", func() bool { return g.Reason() == key })
	if l.started.Load() != 0 {
		t.Fatal("listeners opened while the node still waits")
	}
	none := ""
	why.Store(&none)
	<-done
	if l.started.Load() != 1 || g.Reason() != "" {
		t.Fatalf("joined: started %d, reason %q", l.started.Load(), g.Reason())
	}
}
