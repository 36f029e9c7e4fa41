package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// slogLine is what the slog path of logAccess writes for l at t.
func slogLine(t *testing.T, at time.Time, l accessLine) string {
	t.Helper()
	var buf bytes.Buffer
	r := slog.NewRecord(at, slog.LevelInfo, "request", 0)
	r.AddAttrs(
		slog.String("trace_id", l.traceID), slog.String("span_id", l.spanID),
		slog.String("remote", l.remote), slog.String("method", l.method),
		slog.String("host", l.host), slog.String("path", l.path),
		slog.Int("status", l.status), slog.Int64("bytes", l.bytes),
		slog.Float64("duration_ms", l.durationMs), slog.String("route", l.route),
		slog.String("cluster", l.cluster), slog.String("destination", l.destination),
		slog.String("affinity", l.affinity), slog.Bool("aborted", l.aborted))
	if err := slog.NewJSONHandler(&buf, nil).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// The fast path's line is byte for byte slog's: a log pipeline cannot tell
// which one wrote it.
func TestAccessLineMatchesSlog(t *testing.T) {
	base := accessLine{traceID: "4bf92f3577b34da6a3ce929d0e0e4736", spanID: "00f067aa0ba902b7", remote: "192.0.2.1",
		method: "GET", host: "example.com", path: "/api/users/42", status: 200, bytes: 1024, durationMs: 0.123,
		route: "r", cluster: "c", destination: "d1", affinity: "routed"}
	zone := time.FixedZone("x", 5*3600+30*60)
	cases := []struct {
		name string
		at   time.Time
		mod  func(*accessLine)
	}{
		{"plain", time.Date(2026, 12, 1, 11, 21, 21, 162687597, time.UTC), nil},
		{"whole second, offset zone", time.Date(2026, 1, 2, 3, 4, 5, 0, zone), nil},
		{"quotes, backslash, controls", time.Unix(1, 0), func(l *accessLine) { l.path = "/a\"b\\c\n\r\t\x00\x1f\x7f" }},
		{"html stays", time.Unix(1, 0), func(l *accessLine) { l.path = "/<script>&amp;" }},
		{"invalid utf-8", time.Unix(1, 0), func(l *accessLine) { l.host = "bad\xff\xfehost\xc3" }},
		{"line separators", time.Unix(1, 0), func(l *accessLine) { l.path = "/a\u2028b\u2029c/é/日本" }},
		{"empty ids, aborted", time.Unix(1, 0), func(l *accessLine) {
			l.route, l.cluster, l.destination, l.spanID, l.affinity, l.aborted, l.status = "", "", "", "", "disabled", true, 499
		}},
		{"zero duration", time.Unix(1, 0), func(l *accessLine) { l.durationMs = 0 }},
		{"long duration", time.Unix(1, 0), func(l *accessLine) { l.durationMs = 123456789.001 }},
		{"negative duration", time.Unix(1, 0), func(l *accessLine) { l.durationMs = -0.5 }},
		{"tiny duration", time.Unix(1, 0), func(l *accessLine) { l.durationMs = 1e-7 }},
		{"huge bytes", time.Unix(1, 0), func(l *accessLine) { l.bytes = 1 << 62 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := base
			if c.mod != nil {
				c.mod(&l)
			}
			got := string(appendAccessLine(nil, c.at, l))
			if want := slogLine(t, c.at, l); got != want {
				t.Fatalf("fast path:\n%s\nslog:\n%s", got, want)
			}
		})
	}
}

// countingWriter counts the writes it gets.
type countingWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.buf.Write(p)
}

func (w *countingWriter) get() (string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String(), w.writes
}

func TestAccessLogBatchesAndCloseLosesNothing(t *testing.T) {
	w := &countingWriter{}
	al := NewAccessLog(w)
	var want strings.Builder
	for i := range 1000 {
		line := strings.Repeat("x", i%50) + "\n"
		want.WriteString(line)
		al.Write([]byte(line))
	}
	al.Close()
	got, writes := w.get()
	if got != want.String() {
		t.Fatalf("after Close the writer has %d bytes, want %d (lines lost or reordered)", len(got), want.Len())
	}
	if writes >= 100 {
		t.Fatalf("%d writes for 1,000 lines: not batched", writes)
	}
	al.Write([]byte("late\n")) // after Close: written at once
	if got, _ := w.get(); !strings.HasSuffix(got, "late\n") {
		t.Fatal("a line after Close was not written")
	}
}

func TestAccessLogFlushesAFullBatchAtOnce(t *testing.T) {
	w := &countingWriter{}
	al := NewAccessLog(w)
	defer al.Close()
	line := []byte(strings.Repeat("y", 1023) + "\n")
	for range accessBatchSize / len(line) {
		al.Write(line)
	}
	if got, _ := w.get(); len(got) < accessBatchSize {
		t.Fatalf("a full batch (%d bytes) is still pending: %d written", accessBatchSize, len(got))
	}
}

func TestAccessLogFlushesWithoutClose(t *testing.T) {
	w := &countingWriter{}
	al := NewAccessLog(w)
	defer al.Close()
	al.Write([]byte("one\n"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got, _ := w.get(); got == "one\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a pending line was not written within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Through the data path: the AccessLog's lines are the slog path's, in
// request order, and complete once the log is closed.
func TestAccessLogThroughProxy(t *testing.T) {
	be := newBackend(t, nil)
	cfg := simpleConfig(map[string]string{"d1": be.URL}, "", "", "")
	slow := newHarness(t, mustParse(t, cfg), nil)
	w := &countingWriter{}
	al := NewAccessLog(w)
	fast := newHarness(t, mustParse(t, cfg), func(o *Options) { o.AccessLog = al.Logger() })
	if fast.p.fastAccess != al {
		t.Fatal("the AccessLog's logger did not select the fast path")
	}
	paths := []string{"/a", "/b?q=1", "/c%22d"}
	for _, p := range paths {
		get(t, nil, slow.front.URL+p, nil)
		get(t, nil, fast.front.URL+p, nil)
	}
	al.Close()
	fast.mu.Lock()
	got, _ := w.get()
	fast.access.WriteString(got) // decode with the harness's reader
	fast.mu.Unlock()
	sl, fl := slow.accessLines(t), fast.accessLines(t)
	if len(sl) != len(paths) || len(fl) != len(paths) {
		t.Fatalf("lines: slog %d, fast %d, want %d", len(sl), len(fl), len(paths))
	}
	for i := range sl {
		for _, k := range []string{"time", "duration_ms", "trace_id", "span_id", "host"} {
			if _, ok := fl[i][k]; !ok {
				t.Fatalf("fast line %d lacks %q: %v", i, k, fl[i])
			}
			delete(sl[i], k)
			delete(fl[i], k)
		}
		if len(sl[i]) != len(fl[i]) {
			t.Fatalf("line %d: slog %v, fast %v", i, sl[i], fl[i])
		}
		for k, v := range sl[i] {
			if fl[i][k] != v {
				t.Fatalf("line %d key %q: slog %v, fast %v", i, k, v, fl[i][k])
			}
		}
	}
}

// Concurrent requests' lines stay whole and none is lost, across timer
// flushes, full-batch flushes and Close.
func TestAccessLogConcurrentWritersKeepLinesWhole(t *testing.T) {
	w := &countingWriter{}
	al := NewAccessLog(w)
	const writers, lines = 8, 2000
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range lines {
				al.Write(fmt.Appendf(nil, "{\"g\":%d,\"i\":%d,\"pad\":%q}\n", g, i, strings.Repeat("p", i%300)))
			}
		}()
	}
	wg.Wait()
	al.Close()
	got, _ := w.get()
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		var m struct{ G, I int }
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a torn line: %q: %v", l, err)
		}
		seen[fmt.Sprint(m.G, m.I)] = true
	}
	if len(seen) != writers*lines {
		t.Fatalf("%d distinct lines, want %d", len(seen), writers*lines)
	}
}

// appendJSONFloat writes what encoding/json writes, on its decimal fast
// path for whole microseconds and off it.
func TestAppendJSONFloatMatchesJSON(t *testing.T) {
	check := func(f float64) {
		t.Helper()
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONFloat(nil, f); string(got) != string(want) {
			t.Fatalf("appendJSONFloat(%v) = %s, json.Marshal = %s", f, got, want)
		}
	}
	for us := int64(0); us < 200000; us++ {
		check(float64(us) / 1000)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		check(float64(rng.Int64N(1e15)) / 1000)
		check(rng.Float64() * 1e6)
		check(rng.Float64())
	}
	for _, f := range []float64{0.0001, 1e-7, 0.1, 0.3, 999999999999.999, 1e12, 1e12 + 0.5, 4.5e12 + 0.001, 123456789.001} {
		check(f)
	}
}

// appendLogTime is t.AppendFormat(b, time.RFC3339Nano), second after
// second and zone after zone.
func TestAppendLogTime(t *testing.T) {
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -3600)}
	rng := rand.New(rand.NewPCG(3, 4))
	at := time.Date(2026, 12, 1, 11, 21, 21, 0, time.UTC)
	for i := range 20000 {
		tm := at.Add(time.Duration(rng.Int64N(int64(3 * time.Second)))).In(zones[i%len(zones)])
		switch i % 5 {
		case 0:
			tm = tm.Truncate(time.Second)
		case 1:
			tm = tm.Truncate(time.Millisecond)
		}
		if got, want := string(appendLogTime(nil, tm)), tm.Format(time.RFC3339Nano); got != want {
			t.Fatalf("appendLogTime = %s, want %s", got, want)
		}
	}
}
