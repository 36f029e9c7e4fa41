// Package testutil holds the helpers tether's tests share across packages:
// polling a condition with a deadline (tests never sleep to wait for
// something), a goroutine-safe buffer for captured output, free loopback
// addresses, atomic file writes, self-signed certificates (in memory or
// as files), and raw TCP peers (a client without allocations, a backend
// that misbehaves on the wire). It imports nothing of tether, so any
// package's tests may use it without a cycle.
package testutil
