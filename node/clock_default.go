//go:build !chaosclock

package node

import "time"

// clockOffset is zero: only the fault test's build moves the clock.
func clockOffset() time.Duration { return 0 }
