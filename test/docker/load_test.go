package docker

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// session is one client's affinity cookie and the backend it stuck to.
type session struct {
	cookie  string
	backend string
	first   string // the backend it started on
	moves   int    // times it went to another backend
}

// load sends requests with Cookie-affinity sessions to random live nodes
// until stopped or until max requests were sent. A request counts as failed
// only when its node was live when it was sent and still is when it ended:
// a test removes a node from the live set (and waits for its requests in
// flight) before it kills it.
type load struct {
	e        *env
	mu       sync.Mutex
	live     []*container
	inflight map[string]*atomic.Int64

	sent, failed, broken, newSessions atomic.Int64
	slowest                           atomic.Int64 // the longest answered request, in ns
	errMu                             sync.Mutex
	errs                              []string  // failed requests (the first few)
	failures                          []failure // every failed request (up to maxFailures)
	moveLog                           []string  // sessions that changed backend (the first few)

	sessions [][]session // each worker's, read once the load finished
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func newLoad(e *env, nodes ...*container) *load {
	l := &load{e: e, live: append([]*container(nil), nodes...), inflight: map[string]*atomic.Int64{}, stop: make(chan struct{})}
	for _, c := range nodes {
		l.inflight[c.host] = &atomic.Int64{}
	}
	return l
}

func (l *load) pick() (*container, *atomic.Int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.live) == 0 {
		return nil, nil
	}
	c := l.live[rand.IntN(len(l.live))]
	n := l.inflight[c.host]
	n.Add(1)
	return c, n
}

func (l *load) isLive(c *container) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.live {
		if x == c {
			return true
		}
	}
	return false
}

// remove takes c out of the live set and waits (bounded) for its requests
// in flight to end.
func (l *load) remove(t *testing.T, c *container) {
	t.Helper()
	l.mu.Lock()
	for i, x := range l.live {
		if x == c {
			l.live = append(l.live[:i:i], l.live[i+1:]...)
			break
		}
	}
	n := l.inflight[c.host]
	l.mu.Unlock()
	testutil.Eventually(t, 10*time.Second, "requests in flight to "+c.host, func() bool { return n.Load() == 0 })
}

func (l *load) add(c *container) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight[c.host] == nil {
		l.inflight[c.host] = &atomic.Int64{}
	}
	l.live = append(l.live, c)
}

// failure is one failed request: the node it went to and, when tether
// answered it with an error, the trace id of that answer (which tether's
// "proxy error" log line carries).
type failure struct {
	node, traceID string
	status        int
}

const maxFailures = 1000

func (l *load) fail(f failure, format string, args ...any) {
	l.failed.Add(1)
	l.errMu.Lock()
	defer l.errMu.Unlock()
	if len(l.errs) < 10 {
		l.errs = append(l.errs, fmt.Sprintf(format, args...))
	}
	if len(l.failures) < maxFailures {
		l.failures = append(l.failures, f)
	}
}

// do sends one request of s to a random live node; it returns false when
// no node is live.
func (l *load) do(client *http.Client, s *session) bool {
	c, n := l.pick()
	if c == nil {
		return false
	}
	defer n.Add(-1)
	l.sent.Add(1)
	req, _ := http.NewRequest(http.MethodGet, c.proxy()+"/", nil)
	if s.cookie != "" {
		req.Header.Set("Cookie", s.cookie)
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		if l.isLive(c) {
			l.fail(failure{node: c.host}, "%s: %v", c.host, err)
		}
		return true
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if l.isLive(c) {
			tid := resp.Header.Get("X-Tether-Trace-Id")
			l.fail(failure{node: c.host, traceID: tid, status: resp.StatusCode}, "%s: status %d (trace %s)", c.host, resp.StatusCode, tid)
		}
		return true
	}
	for d := int64(time.Since(t0)); ; {
		if cur := l.slowest.Load(); d <= cur || l.slowest.CompareAndSwap(cur, d) {
			break
		}
	}
	backend := resp.Header.Get("X-Demo-Backend")
	for _, sc := range resp.Cookies() {
		if sc.Name == ".Tether.Affinity" {
			if s.cookie == "" {
				l.newSessions.Add(1)
			}
			s.cookie = sc.Name + "=" + sc.Value
		}
	}
	switch {
	case s.backend == "":
		s.backend, s.first = backend, backend
	case s.backend != backend:
		l.broken.Add(1)
		l.errMu.Lock()
		if len(l.moveLog) < 10 {
			l.moveLog = append(l.moveLog, fmt.Sprintf("%s: session of %s went to %s", c.host, s.backend, backend))
		}
		l.errMu.Unlock()
		s.backend = backend
		s.moves++
	}
	return true
}

func newClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 5 * time.Second}}
}

// run starts workers, each with its own sessions, sending until stopped or
// for at most d.
func (l *load) run(workers, sessionsPerWorker int, d time.Duration) {
	deadline := time.Now().Add(d)
	for w := 0; w < workers; w++ {
		sessions := make([]session, sessionsPerWorker)
		l.sessions = append(l.sessions, sessions)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			client := newClient()
			defer client.CloseIdleConnections()
			for time.Now().Before(deadline) {
				select {
				case <-l.stop:
					return
				default:
				}
				if !l.do(client, &sessions[rand.IntN(len(sessions))]) {
					return
				}
			}
		}()
	}
}

func (l *load) finish() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// sweep sends one more request for every session, once the load finished,
// so a check over all sessions does not depend on which ones the random
// picks happened to reach after a fault.
func (l *load) sweep() {
	client := newClient()
	defer client.CloseIdleConnections()
	for _, ws := range l.sessions {
		for i := range ws {
			if ws[i].first != "" && !l.do(client, &ws[i]) {
				return
			}
		}
	}
}

func (l *load) summary() string {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	s := fmt.Sprintf("requests=%d failed=%d broken_sessions=%d sessions=%d", l.sent.Load(), l.failed.Load(), l.broken.Load(), l.newSessions.Load())
	if len(l.errs) > 0 {
		s += " first errors: " + strings.Join(l.errs, "; ")
	}
	if len(l.moveLog) > 0 {
		s += " first moves: " + strings.Join(l.moveLog, "; ")
	}
	return s
}
