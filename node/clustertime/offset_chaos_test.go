//go:build chaosclock

package clustertime

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestChaosClockOffsetMovesTheWallClockAlone: the fault test's build adds
// the duration written in TETHER_CHAOS_CLOCK_FILE to Wall, read again at
// most every 100 ms; an unreadable file or duration is no offset.
func TestChaosClockOffsetMovesTheWallClockAlone(t *testing.T) {
	file := filepath.Join(t.TempDir(), "clock")
	t.Setenv("TETHER_CHAOS_CLOCK_FILE", file)
	c := New("n1", nil)
	off := func() time.Duration { return time.Until(c.Wall()) }
	for _, step := range []struct {
		content string
		want    time.Duration
	}{
		{"2500h", 2500 * time.Hour},
		{"-3h\n", -3 * time.Hour},
		{"not a duration", 0},
		{"0", 0},
	} {
		if err := os.WriteFile(file, []byte(step.content), 0o600); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 2*time.Second, "the wall clock "+step.want.String()+" off", func() bool {
			d := off() - step.want
			return d < time.Second && d > -time.Second
		})
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Second, "no offset without the file", func() bool {
		d := off()
		return d < time.Second && d > -time.Second
	})
}
