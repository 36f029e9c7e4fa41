package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// sseStream is a reader of GET /v1/events.
type sseStream struct {
	resp *http.Response
	sc   *bufio.Scanner
	ch   chan sseEvent
}

type sseEvent struct {
	id, typ string
	ev      Event
}

func openEvents(t *testing.T, n *Node, token, lastID string) (*sseStream, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.AdminAddr().String()+"/v1/events", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != 200 {
		return nil, resp.StatusCode
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	s := &sseStream{resp: resp, sc: bufio.NewScanner(resp.Body), ch: make(chan sseEvent, 1024)}
	s.sc.Buffer(make([]byte, 1<<20), 1<<20)
	go func() {
		defer close(s.ch)
		var cur sseEvent
		for s.sc.Scan() {
			line := s.sc.Text()
			switch {
			case line == "":
				if cur.typ != "" {
					s.ch <- cur
				}
				cur = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				cur.typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.ev); err != nil {
					t.Errorf("event data is not JSON: %v: %s", err, line)
				}
			}
		}
	}()
	return s, 200
}

// next returns the next event matching match, within the deadline.
func (s *sseStream) next(t *testing.T, what string, match func(sseEvent) bool) sseEvent {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e, ok := <-s.ch:
			if !ok {
				t.Fatalf("stream ended waiting for %s", what)
			}
			if match(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event within 20 s", what)
		}
	}
}

func TestEventsStreamNeedsTheTokenAndDeliversChanges(t *testing.T) {
	n, call := startNode(t, "tok")
	if _, status := openEvents(t, n, "", ""); status != 401 {
		t.Fatalf("GET /v1/events without the token = %d, want 401", status)
	}
	if _, status := openEvents(t, n, "wrong", ""); status != 401 {
		t.Fatalf("GET /v1/events with a wrong token = %d, want 401", status)
	}
	s, status := openEvents(t, n, "tok", "")
	if status != 200 {
		t.Fatalf("GET /v1/events = %d", status)
	}
	hello := s.next(t, "hello", func(e sseEvent) bool { return true })
	if hello.typ != EventHello || hello.ev.Node != "t1" || hello.ev.Data["boot"] == "" || hello.id != "" {
		t.Fatalf("first event %+v, want a hello from t1 without an id", hello)
	}

	if st, _ := call("POST", "/v1/clusters/app/destinations/d1/drain"); st != 200 {
		t.Fatalf("drain: %d", st)
	}
	drain := s.next(t, "drain", func(e sseEvent) bool { return e.typ == EventDrain })
	if drain.ev.Data["destination"] != "d1" || drain.ev.Data["draining"] != true || drain.ev.Data["deadline"] == nil || drain.ev.Node != "t1" || drain.ev.Time.IsZero() || drain.id == "" {
		t.Fatalf("drain event %+v", drain)
	}
	st, rotated := call("POST", "/v1/keyring/rotate")
	if st != 200 {
		t.Fatalf("rotate: %d", st)
	}
	s.next(t, "key installed", func(e sseEvent) bool {
		return e.typ == EventKey && e.ev.Data["id"] == rotated["id"] && e.ev.Data["state"] == "installed"
	})
	s.next(t, "key active", func(e sseEvent) bool {
		return e.typ == EventKey && e.ev.Data["id"] == rotated["id"] && e.ev.Data["state"] == "active"
	})
	stats := s.next(t, "stats", func(e sseEvent) bool { return e.typ == EventStats && e.id == "" && e.ev.Data["clusters"] != nil })
	if durable, _ := stats.ev.Data["durable_index"].(map[string]any); stats.ev.Data["applied_index"] == nil || durable["t1"] == nil {
		t.Fatalf("stats event without the applied and durable indexes: %v", stats.ev.Data)
	}

	// A new stream is replayed the recorded events; with the drain's id
	// as Last-Event-ID, only what came after it.
	all, _ := openEvents(t, n, "tok", "")
	all.next(t, "replayed drain", func(e sseEvent) bool { return e.id == drain.id })
	after, _ := openEvents(t, n, "tok", drain.id)
	first := after.next(t, "first replayed after the drain", func(e sseEvent) bool { return e.typ != EventHello })
	if first.typ != EventKey || first.ev.Data["state"] != "installed" {
		t.Fatalf("first event replayed after Last-Event-ID %s: %+v, want the key installed", drain.id, first)
	}
}

func TestEventsStalledReaderDoesNotStallTheNode(t *testing.T) {
	n, call := startNode(t, "")
	// A reader that sends the request and never reads a byte.
	c, err := net.Dial("tcp", n.AdminAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/events HTTP/1.1\r\nHost: %s\r\n\r\n", n.AdminAddr())
	testutil.Eventually(t, 10*time.Second, "the stalled reader subscribed", func() bool { return n.ev.bus.Subscribers() == 1 })

	big := strings.Repeat("x", 4096)
	done := make(chan struct{})
	go func() {
		// Far more than a socket buffer and the subscriber buffer.
		for i := 0; i < 4000; i++ {
			n.ev.bus.Publish(EventHealth, time.Now(), map[string]any{"pad": big})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("publishing blocked on a stalled reader")
	}
	testutil.Eventually(t, 10*time.Second, "the stalled reader cut off", func() bool { return n.ev.bus.Subscribers() == 0 })
	// The node still serves, and a new reader gets the next change.
	if st, _ := call("GET", "/v1/status"); st != 200 {
		t.Fatalf("status after a stalled reader: %d", st)
	}
	s, _ := openEvents(t, n, "", "")
	if st, _ := call("POST", "/v1/clusters/app/destinations/d2/drain"); st != 200 {
		t.Fatalf("drain: %d", st)
	}
	s.next(t, "drain after the stall", func(e sseEvent) bool { return e.typ == EventDrain && e.ev.Data["destination"] == "d2" })
}

func TestEventsStreamEndsWhenTheNodeStops(t *testing.T) {
	n, _ := startNode(t, "")
	s, _ := openEvents(t, n, "", "")
	s.next(t, "hello", func(e sseEvent) bool { return e.typ == EventHello })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	n.Shutdown(ctx)
	// The admin server's shutdown does not wait out its 2 s grace for an
	// open stream: the stream ends as the node stops.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("shutdown took %v with a stream open", d)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-s.ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the stream stayed open after the node stopped")
		}
	}
}
