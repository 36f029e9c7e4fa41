// Package clustertime owns the cluster time: the median of the members'
// wall clocks (this node's own and those memberlist's probe acks carry),
// counted forward by this node's monotonic clock, so that no one node's
// clock, ahead or behind by any amount, moves what the leader commits
// (docs/OPERATIONS.md, "Clocks"). Reckoner is the rule over one series of
// readings; Clock is one node's reckoning over its store and gossip, the
// committed time's healing (SetClock), and the members' agreed time that
// key pruning goes by. Builds with -tags chaosclock let the fault test
// jump a node's wall clock (offset_chaos.go).
package clustertime
