package httpdate

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/monotime"
)

// value is one second's Date value, as bytes and as a string.
type value struct {
	until int64 // monotime.Now when its second ends
	b     []byte
	s     string
}

var (
	cur atomic.Pointer[value]
	// clock is the value's clocks (a test's own: SetClock).
	clock atomic.Pointer[clocks]
)

type clocks struct {
	mono func() int64
	wall func() time.Time
}

func init() { clock.Store(&clocks{monotime.Now, time.Now}) }

// Bytes is the Date field's value now, not to be written to.
func Bytes() []byte { return get().b }

// String is the Date field's value now.
func String() string { return get().s }

func get() *value {
	c := clock.Load()
	now := c.mono()
	if v := cur.Load(); v != nil && now < v.until {
		return v
	}
	wall := c.wall().UTC()
	b := wall.AppendFormat(make([]byte, 0, len(http.TimeFormat)), http.TimeFormat)
	v := &value{until: now + int64(time.Second) - int64(wall.Nanosecond()), b: b, s: string(b)}
	cur.Store(v)
	return v
}

// SetClock (tests) makes mono and wall the value's clocks, with no value
// kept from before, until restore is called. No test that reads the Date
// value may run in parallel meanwhile.
func SetClock(mono func() int64, wall func() time.Time) (restore func()) {
	old := clock.Swap(&clocks{mono, wall})
	cur.Store(nil)
	return func() {
		clock.Store(old)
		cur.Store(nil)
	}
}
