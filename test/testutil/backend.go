package testutil

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Backend is a destination for tests that names itself: every answer
// carries X-Demo-Backend: NAME and the body "NAME PATH", as the demo's
// backends do. GET /healthz is its health probe (counted in Probes; 503
// while Sick), and ?sleep=DURATION holds a request that long (a request in
// flight). It closes when the test ends.
type Backend struct {
	Name   string
	Server *httptest.Server
	Probes atomic.Int64
	Sick   atomic.Bool

	mu   sync.Mutex
	last http.Header
}

// NewBackend starts a Backend called name.
func NewBackend(t testing.TB, name string) *Backend {
	b := &Backend{Name: name}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			b.Probes.Add(1)
			if b.Sick.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		b.mu.Lock()
		b.last = r.Header.Clone()
		b.mu.Unlock()
		if d := r.URL.Query().Get("sleep"); d != "" {
			dur, _ := time.ParseDuration(d)
			time.Sleep(dur) // slow on purpose: a request in flight
		}
		w.Header().Set("X-Demo-Backend", name)
		fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	}))
	t.Cleanup(b.Server.Close)
	return b
}

// URL is the backend's base URL (http://127.0.0.1:PORT).
func (b *Backend) URL() string { return b.Server.URL }

// LastHeader is the header of the last request it answered (probes aside).
func (b *Backend) LastHeader() http.Header {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}
