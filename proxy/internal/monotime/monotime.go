package monotime

import (
	_ "unsafe" // go:linkname
)

// nanotime is the runtime's monotonic clock, one vDSO read: time.Since
// reads the same clock but looks for a synctest bubble first.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// Now starts at 1<<62, so that 0 (never, or reset) is always long ago.
func Now() int64 { return nanotime() + offset }

var offset = 1<<62 - nanotime()
