// Package leader owns the leader's duties: the rounds that run on
// whichever node leads (the cluster id, the first key, rotation,
// activation once every member holds a key durably, pruning, voter
// reconciliation through cluster.Autopilot, the members' settings and
// Raft address conflicts), revocation, the command-set gate the store
// checks before the leader writes, and ACME: the leader orders
// certificates with mholt/acmez into the replicated ACME state, which
// every node serves (AcmeView) and reports.
//
// It sees the node only through the small interfaces it declares: the
// store (Store, Voters, AcmeStore), gossip (Members), the cluster time
// (Clock, node/clustertime) and the members' durable-index reports
// (Reports). Package node builds it (node/leader.go) and runs Loop and
// AcmeLoop; node/DESIGN.md draws the rules.
package leader
