//go:build !linux

package sockio

import "net"

// ListenConfig elsewhere is Go's default: keep-alive set on each accepted
// connection (keepalive_linux.go sets it once on the listener).
var ListenConfig = net.ListenConfig{}
