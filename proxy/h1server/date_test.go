package h1server

import (
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/httpdate"
)

// setDateClock makes mono and wall the Date field's clocks for t's
// duration (no parallel test may then run), with no value kept from before.
func setDateClock(t *testing.T, mono func() int64, wall func() time.Time) {
	t.Cleanup(httpdate.SetClock(mono, wall))
}
