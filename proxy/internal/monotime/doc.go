// Package monotime is a monotonic clock in nanoseconds for deadline
// bookkeeping on the data path: one clock read (time.Now reads two), and
// the same clock as a time.Now reading's monotonic part (Of), so that one
// time.Now serves both where the wall time is needed too.
package monotime
