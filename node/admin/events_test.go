package admin

import (
	"testing"
	"time"
)

func TestEventBusReplaysTheRingAfterLastEventID(t *testing.T) {
	b := NewBus("n1")
	var ids []string
	for i := 1; i <= eventRing+44; i++ {
		ids = append(ids, b.Publish("key", time.Now(), map[string]any{"i": i}).ID)
	}
	cases := []struct {
		name      string
		lastID    string
		wantFirst int // the "i" of the first replayed event
		wantLen   int
		wantGap   bool
	}{
		{"no Last-Event-ID: the whole ring", "", 45, eventRing, false},
		{"an id inside the ring: what came after", ids[eventRing+40-1], eventRing + 41, 4, false},
		{"the newest id: nothing", ids[len(ids)-1], 0, 0, false},
		{"the event just before the ring's first: no gap", ids[43], 45, eventRing, false},
		{"an id older than the ring: everything, with a gap", ids[10], 45, eventRing, true},
		{"an id of a previous process: everything, with a gap", "0123456789ab-300", 45, eventRing, true},
		{"garbage: everything, with a gap", "garbage", 45, eventRing, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, replay, gap := b.Subscribe(c.lastID)
			defer b.Unsubscribe(s)
			if len(replay) != c.wantLen || gap != c.wantGap {
				t.Fatalf("replayed %d events (gap %v), want %d (gap %v)", len(replay), gap, c.wantLen, c.wantGap)
			}
			if c.wantLen > 0 && replay[0].Data["i"] != c.wantFirst {
				t.Fatalf("first replayed event i=%v, want %d", replay[0].Data["i"], c.wantFirst)
			}
			for i := 1; i < len(replay); i++ {
				if replay[i].seq != replay[i-1].seq+1 {
					t.Fatalf("replay out of order at %d", i)
				}
			}
		})
	}
}

func TestEventBusSlowSubscriberDoesNotBlockPublisher(t *testing.T) {
	b := NewBus("n1")
	slow, _, _ := b.Subscribe("")
	fast, _, _ := b.Subscribe("")
	got := make(chan int)
	go func() {
		n := 0
		for range fast.ch {
			n++
		}
		got <- n
	}()
	const events = subscriberBuffer * 20
	done := make(chan struct{})
	go func() {
		for i := 0; i < events; i++ {
			b.Publish("health", time.Now(), nil)
			// Paced so the fast reader keeps up; the slow one never reads.
			if i%(subscriberBuffer/2) == 0 {
				waitDrained(t, fast)
			}
		}
		b.Sample("stats", time.Now(), nil) // never blocks either
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("publish blocked on a subscriber that does not read")
	}
	// The slow subscriber was cut off (its channel closed after the
	// buffered events), the fast one was not.
	n := 0
	for range slow.ch {
		n++
	}
	if n != subscriberBuffer {
		t.Fatalf("slow subscriber got %d events before being cut off, want its buffer (%d)", n, subscriberBuffer)
	}
	if b.Subscribers() != 1 {
		t.Fatalf("%d subscribers left, want the fast one", b.Subscribers())
	}
	b.Unsubscribe(fast)
	if n := <-got; n != events+1 {
		t.Fatalf("fast subscriber got %d events, want %d (every event and the sample)", n, events+1)
	}
}

func waitDrained(t *testing.T, s *Subscriber) {
	deadline := time.Now().Add(20 * time.Second)
	for len(s.ch) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}
