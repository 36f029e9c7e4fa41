package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The data path's guarantees, each checked through a real listener in
// every server mode (parity_helpers_test.go): a guarantee kept on one path
// only is a regression. Where a mode differs on purpose, differs says why
// and the case asserts that mode's own behaviour.
type parityCase struct {
	name string
	// differs maps a mode name to the reason it behaves otherwise.
	differs map[string]string
	run     func(t *testing.T, m serverMode)
}

func TestParity(t *testing.T) {
	for _, c := range parityCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			forEachMode(t, func(t *testing.T, m serverMode) {
				t.Parallel()
				c.run(t, m)
			})
		})
	}
}

var parityCases = []parityCase{
	{name: "route timeout answers 504 for every method and version", run: parityRouteTimeout},
}

// slowBackend answers after delay, or gives up when its request is
// cancelled (then cancelled receives one value).
func slowBackend(t *testing.T, delay time.Duration, cancelled chan<- struct{}) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		// net/http hears of a closed connection only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-time.After(delay):
			_, _ = w.Write([]byte("late"))
		case <-r.Context().Done():
			if cancelled != nil {
				select {
				case cancelled <- struct{}{}:
				default:
				}
			}
		}
	})
}

func parityRouteTimeout(t *testing.T, m serverMode) {
	cancelled := make(chan struct{}, 8)
	b := slowBackend(t, 4*time.Second, cancelled)
	e := startMode(t, m, backendCfg(b.URL, "", `"Timeout": "00:00:00.5"`, ""), nil)
	type req struct {
		desc, method string
		body         string
		raw          string // an HTTP/1.x request written as is (h1 modes only)
	}
	reqs := []req{
		{desc: "GET", method: http.MethodGet},
		{desc: "HEAD", method: http.MethodHead},
		{desc: "POST with a body", method: http.MethodPost, body: "x"},
	}
	if m.h1() {
		reqs = append(reqs, req{desc: "HTTP/1.0 GET", raw: "GET /a HTTP/1.0\r\nHost: x\r\n\r\n"},
			req{desc: "HTTP/1.1 GET, raw", raw: "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"})
	}
	for _, rq := range reqs {
		start := time.Now()
		var status int
		if rq.raw != "" {
			resp, _, err := e.raw(rq.raw)
			if err != nil {
				t.Fatalf("%s: %v", rq.desc, err)
			}
			status = resp.StatusCode
		} else {
			var body *strings.Reader
			if rq.body != "" {
				body = strings.NewReader(rq.body)
			}
			var resp *http.Response
			if body != nil {
				resp, _ = e.mustDo(rq.method, "/a", body, nil)
			} else {
				resp, _ = e.mustDo(rq.method, "/a", nil, nil)
			}
			status = resp.StatusCode
		}
		if took := time.Since(start); status != http.StatusGatewayTimeout || took > 3*time.Second {
			t.Errorf("%s: %d after %v, want 504 after about 0.5 s", rq.desc, status, took.Round(time.Millisecond))
		}
		select { // the backend's request ends with the route's
		case <-cancelled:
		case <-time.After(3 * time.Second):
			t.Errorf("%s: the backend's request was not cancelled", rq.desc)
		}
	}
}
