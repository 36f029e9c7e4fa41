//go:build !linux

package sockio

// sendFlags: none beyond the socket's own (SIGPIPE is the runtime's to
// ignore).
const sendFlags = 0
