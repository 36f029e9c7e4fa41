package node

import "time"

// wallNow is this node's wall clock, its vote in the cluster time
// (clustertime.go) and the clock it gossips. It is time.Now without its
// monotonic reading, plus an offset in builds made for the fault test
// (clock_chaos.go), which jumps one node's wall clock as an NTP step does.
// Nothing measures elapsed time with it: waits use time.Now and
// time.Since, whose monotonic reading no step moves, in every build.
func (n *Node) wallNow() time.Time {
	if c := n.metaClock.Load(); c != nil {
		return (*c)().Round(0)
	}
	return time.Now().Round(0).Add(clockOffset())
}
