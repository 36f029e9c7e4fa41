// Package demo runs a loopback cluster of tether nodes in front of demo
// backends (package backend), for `tether demo` and for tests that want a
// whole cluster: every node on 127.0.0.1 with ports chosen by the system,
// one cluster secret, one configuration with session affinity by cookie.
//
// It uses only what package node exports (New, Start, Shutdown, the
// addresses, Leader and NotReady): a demo is a client of the node, not a
// part of it.
package demo
