package admin

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// eventRing is how many recent events a new subscriber is replayed.
	eventRing = 256
	// subscriberBuffer is how many events a subscriber may fall behind
	// before it is cut off (it reconnects with Last-Event-ID and is
	// replayed what it missed): a slow reader never stalls the node.
	subscriberBuffer = 64
	// sseHeartbeat keeps idle streams alive through proxies and lets the
	// server notice a reader that went away.
	sseHeartbeat = 15 * time.Second
	// sseRetry is the reconnection delay the stream suggests (ms).
	sseRetry = 2000
)

// Event is one server-sent event.
type Event struct {
	// ID is "<boot>-<seq>": boot tells a restarted node's ids from the
	// previous process's, so a stale Last-Event-ID replays everything.
	ID   string         `json:"id,omitempty"`
	Type string         `json:"type"`
	Time time.Time      `json:"time"`
	Node string         `json:"node"`
	Data map[string]any `json:"data,omitempty"`

	seq uint64
}

// Bus fans events out to subscribers without ever blocking the
// publisher, and keeps the last eventRing for replay.
type Bus struct {
	node string
	boot string

	mu   sync.Mutex
	seq  uint64
	ring []Event // oldest first, at most eventRing
	subs map[*Subscriber]struct{}
}

// Subscriber is one reader of the bus.
type Subscriber struct {
	ch chan Event
	// closed is set (under the bus lock) when the bus cut the subscriber
	// off or it unsubscribed; ch is closed then.
	closed bool
}

// NewBus is the bus of the node with this id; its boot id is random.
func NewBus(node string) *Bus {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &Bus{node: node, boot: hex.EncodeToString(b), subs: map[*Subscriber]struct{}{}}
}

// Publish records an event and hands it to every subscriber; a subscriber
// whose buffer is full is cut off (its channel closed) instead of waited
// for.
func (b *Bus) Publish(typ string, at time.Time, data map[string]any) Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	e := Event{ID: b.boot + "-" + strconv.FormatUint(b.seq, 10), Type: typ, Time: at.UTC(), Node: b.node, Data: data, seq: b.seq}
	if len(b.ring) == eventRing {
		copy(b.ring, b.ring[1:])
		b.ring = b.ring[:eventRing-1]
	}
	b.ring = append(b.ring, e)
	for s := range b.subs {
		select {
		case s.ch <- e:
		default:
			b.dropLocked(s)
		}
	}
	return e
}

// Sample hands a transient event (stats) to subscribers with room for it;
// it is not kept, and a full subscriber just misses it.
func (b *Bus) Sample(typ string, at time.Time, data map[string]any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := Event{Type: typ, Time: at.UTC(), Node: b.node, Data: data}
	for s := range b.subs {
		select {
		case s.ch <- e:
		default:
		}
	}
}

// Subscribe registers a subscriber and returns, atomically with it, the
// recorded events after lastID (all of them when lastID is empty, from
// another process, or older than the ring: gap is then true when lastID
// was given, so the reader knows it missed events and must reload).
func (b *Bus) Subscribe(lastID string) (s *Subscriber, replay []Event, gap bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s = &Subscriber{ch: make(chan Event, subscriberBuffer)}
	b.subs[s] = struct{}{}
	from := uint64(0)
	if lastID != "" {
		gap = true
		if boot, seq, ok := strings.Cut(lastID, "-"); ok && boot == b.boot {
			if n, err := strconv.ParseUint(seq, 10, 64); err == nil && n <= b.seq {
				from = n
				// No gap when the event after lastID is still in the ring.
				gap = len(b.ring) > 0 && b.ring[0].seq > n+1
			}
		}
	}
	for _, e := range b.ring {
		if e.seq > from {
			replay = append(replay, e)
		}
	}
	return s, replay, gap
}

// Unsubscribe removes a subscriber (closing its channel).
func (b *Bus) Unsubscribe(s *Subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked(s)
}

func (b *Bus) dropLocked(s *Subscriber) {
	if !s.closed {
		s.closed = true
		close(s.ch)
		delete(b.subs, s)
	}
}

// Subscribers is how many readers the bus has.
func (b *Bus) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// Recent is a copy of the recorded events (tests, dumps).
func (b *Bus) Recent() []Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Event(nil), b.ring...)
}

// Boot is the bus's boot id, the first part of every event id.
func (b *Bus) Boot() string { return b.boot }

// Serve serves GET /v1/events: a text/event-stream of the node's events,
// starting with the hello the node makes (told how many recorded events
// follow and whether the reader missed some), then the recorded events
// after the Last-Event-ID header (all of them without one), then live
// ones, until the reader goes, falls too far behind, or stop closes.
func (b *Bus) Serve(w http.ResponseWriter, r *http.Request, stop <-chan struct{}, hello func(replayed int, gap bool) Event) {
	rc := http.NewResponseController(w)
	// Streams outlive any write timeout the server may have.
	_ = rc.SetWriteDeadline(time.Time{})
	s, replay, gap := b.Subscribe(r.Header.Get("Last-Event-ID"))
	defer b.Unsubscribe(s)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	first := hello(len(replay), gap)
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", sseRetry); err != nil {
		return
	}
	if writeEvent(w, first) != nil {
		return
	}
	for _, e := range replay {
		if writeEvent(w, e) != nil {
			return
		}
	}
	if rc.Flush() != nil {
		return
	}
	beat := time.NewTicker(sseHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-stop:
			return // the node stops: the reader reconnects to its successor
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case e, ok := <-s.ch:
			if !ok {
				return // too slow: cut off; it reconnects with Last-Event-ID
			}
			if writeEvent(w, e) != nil {
				return
			}
			// Send what else is queued in the same flush.
			for drained := false; !drained; {
				select {
				case e, ok := <-s.ch:
					if !ok {
						_ = rc.Flush()
						return
					}
					if writeEvent(w, e) != nil {
						return
					}
				default:
					drained = true
				}
			}
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// writeEvent writes one event in the text/event-stream framing: the JSON
// never holds a raw newline, so it is one data line.
func writeEvent(w http.ResponseWriter, e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	var sb strings.Builder
	if e.ID != "" {
		sb.WriteString("id: " + e.ID + "\n")
	}
	sb.WriteString("event: " + e.Type + "\ndata: ")
	sb.Write(b)
	sb.WriteString("\n\n")
	_, err = fmt.Fprint(w, sb.String())
	return err
}
