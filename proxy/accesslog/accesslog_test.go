package accesslog

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

	"github.com/tether-proxy/tether/test/testutil"
)

// slogLine is what the slog path of logAccess writes for l at t.
func slogLine(t *testing.T, at time.Time, l Line) string {
	t.Helper()
	var buf bytes.Buffer
	r := slog.NewRecord(at, slog.LevelInfo, "request", 0)
	r.AddAttrs(
		slog.String("trace_id", l.TraceID), slog.String("span_id", l.SpanID),
		slog.String("remote", l.Remote), slog.String("method", l.Method),
		slog.String("host", l.Host), slog.String("path", l.Path),
		slog.Int("status", l.Status), slog.Int64("bytes", l.Bytes),
		slog.Float64("duration_ms", l.DurationMs), slog.String("route", l.Route),
		slog.String("cluster", l.Cluster), slog.String("destination", l.Destination),
		slog.String("affinity", l.Affinity), slog.Bool("aborted", l.Aborted))
	if err := slog.NewJSONHandler(&buf, nil).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// The fast path's line is byte for byte slog's: a log pipeline cannot tell
// which one wrote it.
func TestAccessLineMatchesSlog(t *testing.T) {
	base := Line{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", Remote: "192.0.2.1",
		Method: "GET", Host: "example.com", Path: "/api/users/42", Status: 200, Bytes: 1024, DurationMs: 0.123,
		Route: "r", Cluster: "c", Destination: "d1", Affinity: "routed"}
	zone := time.FixedZone("x", 5*3600+30*60)
	cases := []struct {
		name string
		at   time.Time
		mod  func(*Line)
	}{
		{"plain", time.Date(2026, 12, 1, 11, 21, 21, 162687597, time.UTC), nil},
		{"whole second, offset zone", time.Date(2026, 1, 2, 3, 4, 5, 0, zone), nil},
		{"quotes, backslash, controls", time.Unix(1, 0), func(l *Line) { l.Path = "/a\"b\\c\n\r\t\x00\x1f\x7f" }},
		{"html stays", time.Unix(1, 0), func(l *Line) { l.Path = "/<script>&amp;" }},
		{"invalid utf-8", time.Unix(1, 0), func(l *Line) { l.Host = "bad\xff\xfehost\xc3" }},
		{"line separators", time.Unix(1, 0), func(l *Line) { l.Path = "/a\u2028b\u2029c/é/日本" }},
		{"empty ids, aborted", time.Unix(1, 0), func(l *Line) {
			l.Route, l.Cluster, l.Destination, l.SpanID, l.Affinity, l.Aborted, l.Status = "", "", "", "", "disabled", true, 499
		}},
		{"zero duration", time.Unix(1, 0), func(l *Line) { l.DurationMs = 0 }},
		{"long duration", time.Unix(1, 0), func(l *Line) { l.DurationMs = 123456789.001 }},
		{"negative duration", time.Unix(1, 0), func(l *Line) { l.DurationMs = -0.5 }},
		{"tiny duration", time.Unix(1, 0), func(l *Line) { l.DurationMs = 1e-7 }},
		{"huge bytes", time.Unix(1, 0), func(l *Line) { l.Bytes = 1 << 62 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := base
			if c.mod != nil {
				c.mod(&l)
			}
			got := string(AppendLine(nil, c.at, l))
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
	al := New(w)
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
	al := New(w)
	defer al.Close()
	line := []byte(strings.Repeat("y", 1023) + "\n")
	for range batchSize / len(line) {
		al.Write(line)
	}
	if got, _ := w.get(); len(got) < batchSize {
		t.Fatalf("a full batch (%d bytes) is still pending: %d written", batchSize, len(got))
	}
}

func TestAccessLogFlushesWithoutClose(t *testing.T) {
	w := &countingWriter{}
	al := New(w)
	defer al.Close()
	al.Write([]byte("one\n"))
	testutil.Eventually(t, 10*time.Second, "the pending line written", func() bool {
		got, _ := w.get()
		return got == "one\n"
	})
}

// Concurrent requests' lines stay whole and none is lost, across timer
// flushes, full-batch flushes and Close.
func TestAccessLogConcurrentWritersKeepLinesWhole(t *testing.T) {
	w := &countingWriter{}
	al := New(w)
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

// FuzzAppendJSONStringMatchesSlog holds the string encoder to slog's
// JSONHandler for any bytes, in every field (the word-at-a-time scan for
// what needs no escape included).
func FuzzAppendJSONStringMatchesSlog(f *testing.F) {
	for _, s := range []string{"", "/api/users/42", "4bf92f3577b34da6a3ce929d0e0e4736", "/a\"b\\c\n\r\t\x00\x1f\x7f",
		"12345678\"", "1234567\\", "abcdefgh\x80", "abcdefghijklmnop\x1f", "bad\xff\xfehost\xc3", "/a\u2028b\u2029c/é/日本"} {
		f.Add(s)
	}
	at := time.Unix(1, 0)
	f.Fuzz(func(t *testing.T, s string) {
		l := Line{TraceID: s, Path: s, Affinity: s}
		if got, want := string(AppendLine(nil, at, l)), slogLine(t, at, l); got != want {
			t.Fatalf("fast path:\n%s\nslog:\n%s", got, want)
		}
	})
}
