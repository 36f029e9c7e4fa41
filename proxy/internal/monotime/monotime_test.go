package monotime

import (
	"testing"
	"time"
)

// The contract the callers rely on: never 0 (nor near it), never going
// back, and advancing with the process's monotonic clock.
func TestNowContract(t *testing.T) {
	start, wall := Now(), time.Now()
	if start < 1<<62 {
		t.Fatalf("Now() = %d, want at least 1<<62", start)
	}
	prev := start
	for range 1000 {
		n := Now()
		if n < prev {
			t.Fatalf("Now went back: %d after %d", n, prev)
		}
		prev = n
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Since(wall) < 20*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("the clock did not advance")
		}
	}
	got, want := Now()-start, int64(time.Since(wall))
	if got < int64(20*time.Millisecond) || got > want+int64(time.Millisecond) {
		t.Fatalf("Now advanced %v while time.Since says %v", time.Duration(got), time.Duration(want))
	}
}

// Of a time.Now reading is Now at that reading: the two are one clock, so
// that one reading can serve a deadline and a time of day.
func TestOfIsNow(t *testing.T) {
	for range 1000 {
		a := Now()
		tm := time.Now()
		b := Now()
		if o := Of(tm); o < a || o > b {
			t.Fatalf("Of(time.Now()) = %d, not between the Now before (%d) and after (%d)", o, a, b)
		}
	}
}
