// Package health owns one node's view of destination health (SPEC §2.3).
//
// Active probes the destinations of one cluster over HTTP (one goroutine per
// destination, first round at Start) and turns consecutive failures and
// successes into a verdict. The verdict is this node's LocalHealth; what the
// destination's effective ActiveHealth becomes is decided by an Observer, so
// the cluster-wide view (gossip, majority of probers) can replace the default
// local one without touching the probing. ShouldProbe decides which
// destinations this node probes at all (probe fan-out).
//
// Passive turns failures of proxied requests (transport errors, 5xx) into a
// local exclusion of the destination for a reactivation period.
package health
