package node

import "time"

// wallNow is the wall clock this node writes into the cluster: the times of
// rotations, activations, prunes and drain deadlines it commits as leader,
// and the clock it gossips. It is time.Now, plus an offset in builds made
// for the fault test (clock_chaos.go), which jumps one node's clock.
func (n *Node) wallNow() time.Time {
	if c := n.metaClock.Load(); c != nil {
		return (*c)()
	}
	return time.Now().Add(clockOffset())
}
