// Package cluster will own memberlist gossip: membership, health
// observations and Raft voter reconciliation. It is empty until the cluster
// issue; nothing imports it yet.
package cluster
