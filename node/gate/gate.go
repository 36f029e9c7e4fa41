package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Listeners are the proxy listeners (*proxy.Server).
type Listeners interface {
	// Start binds the listeners (unless reserved) and accepts.
	Start() error
	// Reserve binds them without accepting.
	Reserve() error
	Addrs() []net.Addr
}

// Gate is what the proxy listeners wait for.
type Gate struct {
	// waiting is why the listeners are still closed; nil once open (or
	// never gated).
	waiting atomic.Pointer[string]
}

// interval is how often a gated node looks at its state.
const interval = 50 * time.Millisecond

// reminder is how often a gated node repeats what it waits for.
const reminder = 30 * time.Second

// Reason is why the listeners are closed ("" when they are open).
func (g *Gate) Reason() string {
	if p := g.waiting.Load(); p != nil {
		return *p
	}
	return ""
}

// Open starts the listeners, or, when gated, binds them without accepting
// (Serve opens them); waitFor says what the node still waits for ("" for
// nothing).
func (g *Gate) Open(l Listeners, gated bool, waitFor func() string) error {
	if !gated {
		if err := l.Start(); err != nil {
			return fmt.Errorf("listeners: %w", err)
		}
		return nil
	}
	if err := l.Reserve(); err != nil {
		return fmt.Errorf("listeners: %w", err)
	}
	why := waitFor()
	if why == "" {
		why = "starting"
	}
	g.waiting.Store(&why)
	return nil
}

// Serve opens gated listeners once waitFor has nothing left, saying what
// it waits for at start and every reminder. fail hears an error opening
// them; Serve returns when they are open or ctx ends.
func (g *Gate) Serve(ctx context.Context, l Listeners, waitFor func() string, log *slog.Logger, fail func(error)) {
	if g.Reason() == "" {
		return
	}
	since := time.Now()
	log.Info("proxy listeners closed until this node is in the cluster and holds the active key (--serve-before-join serves earlier)",
		"waiting_for", g.Reason(), "proxy", addrList(l))
	t := time.NewTicker(interval)
	defer t.Stop()
	reminded := since
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			why := waitFor()
			if why != "" {
				g.waiting.Store(&why)
				if now.Sub(reminded) >= reminder {
					reminded = now
					log.Info("proxy listeners still closed", "waiting_for", why, "waited", now.Sub(since).Round(time.Second))
				}
				continue
			}
			if err := l.Start(); err != nil {
				if !errors.Is(err, http.ErrServerClosed) { // else the node is stopping
					fail(fmt.Errorf("opening the proxy listeners: %w", err))
				}
				return
			}
			g.waiting.Store(nil)
			log.Info("proxy listeners open: this node is in the cluster and holds the active key", "proxy", addrList(l), "waited", time.Since(since).Round(time.Millisecond))
			return
		}
	}
}

func addrList(l Listeners) string {
	var addrs []string
	for _, a := range l.Addrs() {
		addrs = append(addrs, a.String())
	}
	return strings.Join(addrs, ",")
}
