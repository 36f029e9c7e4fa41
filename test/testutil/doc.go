// Package testutil holds the helpers tether's tests share across packages:
// polling a condition with a deadline (Eventually, Until: tests never sleep
// to wait for something), a goroutine-safe buffer for captured output, free
// loopback addresses, atomic file writes, certificates (self-signed, in
// memory or as files, or a CA with a certificate it signs), raw TCP peers (a
// client without allocations, a backend that misbehaves on the wire), a
// named backend that counts its health probes, a collector's counter values
// by series, a Raft peer's handshake of either version (written from the
// wire format, not the transport's code), and running the tether binary:
// one process, or the agents of a multi-process cluster. It imports nothing
// of tether, so any package's tests may use it without a cycle.
package testutil
