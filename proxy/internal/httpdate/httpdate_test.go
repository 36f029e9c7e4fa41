package httpdate

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The value is the wall clock's second, the same within it and the next
// one's once it is over, as bytes and as a string; the monotonic clock
// decides when the second is over.
func TestDateChangesEachSecond(t *testing.T) {
	var mono, wall atomic.Int64
	mono.Store(1 << 62)
	wall.Store(time.Date(2026, 12, 6, 10, 0, 0, 300e6, time.UTC).UnixNano())
	t.Cleanup(SetClock(mono.Load, func() time.Time { return time.Unix(0, wall.Load()) }))
	for _, step := range []struct {
		by   time.Duration
		want string
	}{
		{0, "Sun, 06 Dec 2026 10:00:00 GMT"},
		{600 * time.Millisecond, "Sun, 06 Dec 2026 10:00:00 GMT"}, // 10:00:00.9
		{100 * time.Millisecond, "Sun, 06 Dec 2026 10:00:01 GMT"}, // 10:00:01.0
		{999 * time.Millisecond, "Sun, 06 Dec 2026 10:00:01 GMT"}, // 10:00:01.999
		{3 * time.Second, "Sun, 06 Dec 2026 10:00:04 GMT"},
	} {
		mono.Add(int64(step.by))
		wall.Add(int64(step.by))
		if b, s := string(Bytes()), String(); b != step.want || s != step.want {
			t.Fatalf("at %v: %q / %q, want %q", time.Unix(0, wall.Load()).UTC().Format(time.StampMilli), b, s, step.want)
		}
	}
}

// With the real clocks the value parses as an HTTP date within a second of now.
func TestDateIsNow(t *testing.T) {
	got, err := http.ParseTime(String())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(got); d < 0 || d > 2*time.Second {
		t.Fatalf("Date %s is %s from now", String(), d)
	}
}
