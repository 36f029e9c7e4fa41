package leader

import (
	"testing"
	"time"
)

func TestAcmeRenewsWithAThirdOfTheLifetimeLeftAndBacksOffOnFailures(t *testing.T) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		desc     string
		lifetime time.Duration
		want     time.Duration // after nb
	}{
		{"Let's Encrypt's 90 days: renewed at day 60", 90 * 24 * time.Hour, 60 * 24 * time.Hour},
		{"six days: renewed at day 4", 6 * 24 * time.Hour, 4 * 24 * time.Hour},
		{"45 s: renewed at 30 s", 45 * time.Second, 30 * time.Second},
	} {
		if got := renewAt(nb, nb.Add(tc.lifetime)); !got.Equal(nb.Add(tc.want)) {
			t.Errorf("%s: renews at %s, want %s", tc.desc, got.Sub(nb), tc.want)
		}
	}
	for _, tc := range []struct {
		desc     string
		failures int
		want     time.Duration
	}{
		{"the first failure waits the minimum", 1, time.Minute},
		{"each failure in a row doubles it", 3, 4 * time.Minute},
		{"up to the maximum", 30, acmeBackoffMax},
	} {
		if got := acmeBackoff(tc.failures, time.Minute); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.desc, got, tc.want)
		}
	}
}
