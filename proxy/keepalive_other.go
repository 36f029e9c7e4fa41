//go:build !linux

package proxy

import "net"

// listenConfig elsewhere is Go's default: keep-alive set on each accepted
// connection (keepalive_linux.go sets it once on the listener).
var listenConfig = net.ListenConfig{}
