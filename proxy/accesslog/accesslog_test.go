package accesslog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tether-proxy/tether/proxy/internal/swar"
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
		{"negative bytes and status", time.Unix(1, 0), func(l *Line) { l.Bytes, l.Status = -1<<63, -1<<63 }},
		{"odd status", time.Unix(1, 0), func(l *Line) { l.Status = 99 }},
		{"four-digit status", time.Unix(1, 0), func(l *Line) { l.Status = 1000 }},
		{"long plain strings", time.Unix(1, 0), func(l *Line) {
			l.Path, l.Host, l.Remote = "/"+strings.Repeat("abcdefgh", 200), strings.Repeat("h", 300), strings.Repeat("r", 301)
		}},
		{"long strings to escape", time.Unix(1, 0), func(l *Line) {
			l.Path, l.Affinity = strings.Repeat("\x00\"", 500), strings.Repeat("\xff", 700)
		}},
		{"every string empty", time.Unix(1, 0), func(l *Line) { *l = Line{} }},
		{"over 10 ms", time.Unix(1, 0), func(l *Line) { l.DurationMs = 12.5 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := base
			if c.mod != nil {
				c.mod(&l)
			}
			want := slogLine(t, c.at, l)
			// After what b holds, whatever its spare room; with the
			// route, cluster, destination and affinity as strings and as
			// a Target.
			for _, l := range []Line{l, withTarget(l)} {
				for _, b := range [][]byte{nil, make([]byte, 3, 4), make([]byte, 3, 4096)} {
					copy(b, "pre")
					if got := string(AppendLine(b, c.at, l)); got != string(b)+want {
						t.Fatalf("fast path (target %v):\n%s\nslog:\n%s%s", l.Target != nil, got, b, want)
					}
				}
			}
		})
	}
}

// withTarget is l with its route, cluster, destination and affinity
// encoded as a Target, and those strings no longer set.
func withTarget(l Line) Line {
	l.Target = NewTarget(l.Route, l.Cluster, l.Destination, l.Affinity)
	l.Route, l.Cluster, l.Destination, l.Affinity = "", "", "", ""
	return l
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

// putJSONFloat writes what encoding/json writes, on its decimal fast
// path for whole microseconds and off it.
func TestAppendJSONFloatMatchesJSON(t *testing.T) {
	check := func(f float64) {
		t.Helper()
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		b, j := putJSONFloat(make([]byte, 64), 0, f)
		if got := b[:j]; string(got) != string(want) {
			t.Fatalf("putJSONFloat(%v) = %s, json.Marshal = %s", f, got, want)
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
	for _, f := range []float64{0.0001, 1e-7, 0.1, 0.3, 999999999999.999, 1e12, 1e12 + 0.5, 4.5e12 + 0.001, 123456789.001,
		1e-6, 0.000999, -0.5, -1e-7, 1e21, 1e300, math.SmallestNonzeroFloat64, math.MaxFloat64} {
		check(f)
	}
}

// logTime is the time putLogTime writes for tm, checking the text around
// it.
func logTime(t *testing.T, tm time.Time) string {
	t.Helper()
	b := make([]byte, 256)
	s := string(b[:putLogTime(b, 0, tm)])
	const head, tail = `{"time":"`, `","level":"INFO","msg":"request","trace_id":"`
	if !strings.HasPrefix(s, head) || !strings.HasSuffix(s, tail) {
		t.Fatalf("putLogTime(%v) wrote %q", tm, s)
	}
	return s[len(head) : len(s)-len(tail)]
}

// putLogTime's time is t.AppendFormat(b, time.RFC3339Nano), second after
// second and zone after zone.
func TestPutLogTime(t *testing.T) {
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
		if got, want := logTime(t, tm), tm.Format(time.RFC3339Nano); got != want {
			t.Fatalf("putLogTime = %s, want %s", got, want)
		}
	}
}

// The cached second is reused only for the same second in the same zone:
// each time in this sequence, one after another, is written as
// RFC3339Nano, whatever the time before it was.
func TestPutLogTimeSecondChanges(t *testing.T) {
	x, y := time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -3600)
	y2 := time.FixedZone("y", -3600) // equal to y, another *Location
	at := time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC)
	for i, tm := range []time.Time{
		at,
		at.Add(1),           // same second, a nanosecond on
		at.Add(999999999),   // the second's last nanosecond
		at.Add(time.Second), // a new second, a new year
		at.Add(time.Second + 120*time.Millisecond),
		at.Add(time.Second + 120*time.Millisecond).In(x), // the same instant in another zone
		at.Add(time.Second + 121*time.Millisecond).In(y),
		at.Add(time.Second + 122*time.Millisecond).In(y2),
		at.Add(time.Second + 123*time.Millisecond).In(y2),
		at.Add(time.Second + 124*time.Millisecond),
		at.Add(time.Second + 123*time.Millisecond), // back within the second
		at, // back a second
		at.Add(-time.Hour * 24 * 365),
		time.Unix(0, 0).UTC(),
		time.Unix(0, 10).UTC(),
		time.Unix(-1, 100000000).UTC(), // before 1970
		time.Date(-12345, 1, 2, 3, 4, 5, 6, time.UTC),                    // a negative year
		time.Date(292277026596, 12, 4, 15, 30, 7, 1, x),                  // the largest year there is
		time.Date(2026, 6, 1, 0, 0, 0, 500, time.FixedZone("s", 3600+1)), // seconds in the offset
	} {
		if got, want := logTime(t, tm), tm.Format(time.RFC3339Nano); got != want {
			t.Fatalf("time %d: putLogTime = %s, want %s", i, got, want)
		}
	}
}

// oldAppendJSONString is the string encoder before the word-at-a-time
// copy, as it was: the reference the new one is held to.
func oldAppendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start, i := 0, 0
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// checkPlainAndEscaped holds appendJSONContent, within quotes, to the
// old encoder for s, and putPlain to passing s exactly when the old
// encoder writes it as it is and it is ASCII, to copying it then, and to
// writing nothing outside s's bytes in any case.
func checkPlainAndEscaped(t *testing.T, s string) {
	t.Helper()
	want := string(oldAppendJSONString([]byte("pre"), s))
	if got := string(appendJSONContent([]byte(`pre"`), s)) + `"`; got != want {
		t.Fatalf("appendJSONContent(%q) = %s, want %s", s, got, want)
	}
	const sentinel = 0xA5
	p := bytes.Repeat([]byte{sentinel}, len(s)+16)
	k, esc := putPlain(p, 8, s)
	if plain := want == `pre"`+s+`"` && !hasNonASCII(s); (esc == 0) != plain {
		t.Fatalf("putPlain(%q) escape bits %#x, want plain %v", s, esc, plain)
	}
	if k != 8+len(s) || esc == 0 && string(p[8:k]) != s {
		t.Fatalf("putPlain(%q) wrote %q, to %d", s, p[8:k], k)
	}
	for i, c := range p {
		if (i < 8 || i >= 8+len(s)) && c != sentinel {
			t.Fatalf("putPlain(%q) wrote byte %d, outside the string", s, i)
		}
	}
}

func hasNonASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// Every length through the word, half-word and byte branches, with each
// kind of byte that needs an escape (or is not ASCII) at every position.
func TestPlainAndEscapedMatchOldEncoder(t *testing.T) {
	bad := []string{"\x00", "\x1f", "\n", "\"", "\\", "\x7f", "\x80", "\xff", "\xc3", "é", "\u2028", "\u2029", "<", "&", " ", "~"}
	for n := 0; n <= 25; n++ {
		plain := strings.Repeat("a", n)
		checkPlainAndEscaped(t, plain)
		for i := 0; i < n; i++ {
			for _, c := range bad {
				checkPlainAndEscaped(t, plain[:i]+c+plain[i+1:])
			}
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

// FuzzPlainAndEscapedMatchOldEncoder holds the escaping and the word
// copy's test of what needs none to the old byte-by-byte encoder on
// arbitrary bytes, and the word copy to writing nothing outside the
// string.
func FuzzPlainAndEscapedMatchOldEncoder(f *testing.F) {
	for _, s := range []string{"", "GET", "abcd", "abcdefg", "abcdefgh", "abcdefghi", "/api/users/42", "4bf92f3577b34da6a3ce929d0e0e4736",
		"1234567\"", "12345678\\", "abc\x1f", "abcdefg\x80", "bad\xff\xfehost\xc3", "/a\u2028b\u2029c/é/日本", "<&>"} {
		f.Add(s)
	}
	f.Fuzz(checkPlainAndEscaped)
}

// jsonEscape is exact as to whether a word has a byte to escape: every
// byte value at every position of words whose other bytes vary too, the
// ones either side of each bound among them.
func TestJSONEscapeIsExact(t *testing.T) {
	for _, fill := range []byte{0x00, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xff} {
		for pos := 0; pos < 8; pos++ {
			for v := 0; v < 256; v++ {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(v)
				want := false
				for _, c := range w {
					want = want || jsonEscapes[c] != 0
				}
				if got := jsonEscape(swar.WordBytes(w[:]))&0x8080808080808080 != 0; got != want {
					t.Fatalf("jsonEscape(%x) = %v, want %v", w, got, want)
				}
			}
		}
	}
}

// WriteLine's lines are slog's: a short line after a long one and a
// plain one after one to escape, in the batch's room that the one before
// left.
func TestWriteLineMatchesSlog(t *testing.T) {
	w := &countingWriter{}
	al := New(w)
	at := time.Date(2026, 12, 1, 11, 21, 21, 162687597, time.UTC)
	var want strings.Builder
	for i, path := range []string{"/a", "/" + strings.Repeat("p", 3000), "/b", "/\x00\"\\\xff\u2028", "/c", strings.Repeat("\x01", 2000), "/d"} {
		l := Line{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Remote: "192.0.2.1", Method: "GET", Host: "example.com",
			Path: path, Status: 200, Bytes: int64(i), DurationMs: 0.5, Affinity: "disabled"}
		tm := at.Add(time.Duration(i) * 700 * time.Millisecond)
		al.WriteLine(tm, l)
		want.WriteString(slogLine(t, tm, l))
	}
	al.Close()
	if got, _ := w.get(); got != want.String() {
		t.Fatalf("written:\n%s\nslog:\n%s", got, want.String())
	}
}

// WriteLine's lines are slog's whichever way they go into the batch: in
// place while the batch has room, through a pooled buffer when the next
// line does not fit (the batch then flushes full), and at once after
// Close.
func TestWriteLineInAndOutOfTheBatch(t *testing.T) {
	w := &countingWriter{}
	al := New(w)
	at := time.Date(2026, 12, 1, 11, 21, 21, 162687597, time.UTC)
	line := func(i int) Line {
		return Line{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", Remote: "192.0.2.1", Method: "GET",
			Host: "example.com", Path: "/" + strings.Repeat("p", 900+i%7), Status: 200, Bytes: int64(i), DurationMs: 0.5,
			Route: "r", Cluster: "c", Destination: "d", Affinity: "disabled"}
	}
	lineOrTarget := func(i int) Line { // every other line with a Target
		if i%2 == 1 {
			return withTarget(line(i))
		}
		return line(i)
	}
	var want strings.Builder
	n := 0
	for ; want.Len() < 3*batchSize; n++ {
		al.WriteLine(at, lineOrTarget(n))
		want.WriteString(slogLine(t, at, line(n)))
	}
	if got, writes := w.get(); writes < 2 || got != want.String()[:len(got)] {
		t.Fatalf("%d writes of %d bytes for %d bytes of lines: full batches not flushed, or not slog's lines", writes, len(got), want.Len())
	}
	al.Close()
	if got, _ := w.get(); got != want.String() {
		t.Fatalf("after Close the writer has %d bytes, want %d (lines lost, reordered or not slog's)", len(got), want.Len())
	}
	al.WriteLine(at, lineOrTarget(n)) // after Close: written at once
	want.WriteString(slogLine(t, at, line(n)))
	if got, _ := w.get(); got != want.String() {
		t.Fatal("a line after Close was not written at once, or not as slog's")
	}
}

// Concurrent requests' lines, in the batch or (the lock taken) through a
// pooled buffer, are each slog's, whole and once.
func TestWriteLineConcurrentLinesWhole(t *testing.T) {
	w := &countingWriter{}
	al := New(w)
	at := time.Date(2026, 12, 1, 11, 21, 21, 162687597, time.UTC)
	const writers, lines = 8, 1000
	line := func(g, i int) Line {
		return Line{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Remote: "192.0.2.1", Method: "GET", Host: "example.com",
			Path: "/" + strings.Repeat("p", i%300), Status: 200, Bytes: int64(g*lines + i), DurationMs: 0.5, Affinity: "disabled"}
	}
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range lines {
				al.WriteLine(at, line(g, i))
			}
		}()
	}
	wg.Wait()
	al.Close()
	got, _ := w.get()
	seen := map[int64]bool{}
	for _, l := range strings.SplitAfter(strings.TrimSuffix(got, "\n"), "\n") {
		var m struct{ Bytes int64 }
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a torn line: %q: %v", l, err)
		}
		if want := slogLine(t, at, line(int(m.Bytes)/lines, int(m.Bytes)%lines)); l != want && l+"\n" != want {
			t.Fatalf("line %q, want %q", l, want)
		}
		seen[m.Bytes] = true
	}
	if len(seen) != writers*lines {
		t.Fatalf("%d distinct lines, want %d", len(seen), writers*lines)
	}
}

// FuzzAppendLineMatchesSlog holds every field of the line to slog's
// JSONHandler: any strings, numbers, time and zone. Left out are what no
// request's line has and the encoder has always written its own way: a
// year outside 0 to 9999 (slog writes an error there) and a duration of
// minus zero (written 0).
func FuzzAppendLineMatchesSlog(f *testing.F) {
	f.Add("4bf92f3577b34da6a3ce929d0e0e4736", "/api/users/42", "example.com", 200, int64(1024), 0.123, int64(1796124081), int64(162687597), 0, false)
	f.Add("", "/a\"b\\c\n\r\t\x00\x1f\x7f", "bad\xff\xfehost\xc3", -1, int64(-1), 123456789.001, int64(0), int64(0), 5*3600+30*60, true)
	f.Add("x", "/a\u2028b\u2029c/é/日本", "h", 99999, int64(1)<<62, 1e-7, int64(-62135596800), int64(999999999), -3600, false)
	f.Fuzz(func(t *testing.T, trace, path, host string, status int, n int64, dur float64, sec, nsec int64, offset int, aborted bool) {
		at := time.Unix(sec, nsec).In(time.FixedZone("z", offset%(48*3600)))
		if y := at.Year(); y < 0 || y > 9999 || dur == 0 && math.Signbit(dur) {
			t.Skip()
		}
		l := Line{TraceID: trace, SpanID: trace, Remote: host, Method: path, Host: host, Path: path, Status: status, Bytes: n,
			DurationMs: dur, Route: trace, Cluster: host, Destination: path, Affinity: trace, Aborted: aborted}
		want := slogLine(t, at, l)
		if got := string(AppendLine(nil, at, l)); got != want {
			t.Fatalf("fast path:\n%s\nslog:\n%s", got, want)
		}
		if got := string(AppendLine(nil, at, withTarget(l))); got != want {
			t.Fatalf("fast path with a Target:\n%s\nslog:\n%s", got, want)
		}
	})
}

// A Targets' Target is NewTarget's for the affinity asked, also when a
// caller asks one number for two affinity values, and none out of range.
func TestTargetsGet(t *testing.T) {
	ts := NewTargets("r\"", "c", "d\xff")
	at := time.Unix(1, 0)
	base := Line{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Route: "r\"", Cluster: "c", Destination: "d\xff"}
	for _, aff := range []string{"routed", "routed", "no_session", "disabled"} {
		l := base
		l.Affinity = aff
		want := slogLine(t, at, l)
		l.Route, l.Cluster, l.Destination, l.Affinity, l.Target = "", "", "", "", ts.Get(1, aff)
		if got := string(AppendLine(nil, at, l)); got != want {
			t.Fatalf("affinity %q:\n%s\nslog:\n%s", aff, got, want)
		}
	}
	if first := ts.Get(1, "routed"); ts.Get(1, "routed") != first {
		t.Error("a Target is made again for the same affinity")
	}
	if ts.Get(-1, "x") != nil || ts.Get(8, "x") != nil {
		t.Error("a Target for a number out of range")
	}
}
