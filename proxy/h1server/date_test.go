package h1server

import (
	"testing"
	"time"
)

// setDateClock makes mono and wall the Date field's clocks for t's
// duration (no parallel test may then run), with no value kept from before.
func setDateClock(t *testing.T, mono func() int64, wall func() time.Time) {
	oldMono, oldWall := dateClock.mono, dateClock.wall
	dateClock.mono, dateClock.wall = mono, wall
	dates.Store(nil)
	t.Cleanup(func() {
		dateClock.mono, dateClock.wall = oldMono, oldWall
		dates.Store(nil)
	})
}
