// Package monotime is a monotonic clock in nanoseconds for deadline
// bookkeeping on the data path: one clock read (time.Now reads two).
package monotime
