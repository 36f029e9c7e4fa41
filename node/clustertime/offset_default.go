//go:build !chaosclock

package clustertime

import "time"

// wallOffset is zero: only the fault test's build moves the clock.
func wallOffset() time.Duration { return 0 }
