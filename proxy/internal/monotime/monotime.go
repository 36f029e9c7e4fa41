package monotime

import "time"

// epoch is the reading the clock counts from: time.Since and Time.Sub of
// two readings of time.Now take only their monotonic parts, so Now and Of
// are the same clock, to the nanosecond, and Of(time.Now()) costs no
// second read.
var epoch = time.Now()

// Now starts at 1<<62, so that 0 (never, or reset) is always long ago.
// time.Since of a reading with a monotonic part is one vDSO read.
func Now() int64 { return 1<<62 + int64(time.Since(epoch)) }

// Of is Now at t, a reading of time.Now (a Time without a monotonic part
// is not one: Of is then off by the wall clock's steps).
func Of(t time.Time) int64 { return 1<<62 + int64(t.Sub(epoch)) }
