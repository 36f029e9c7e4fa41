// Package health owns one node's view of destination health (proxy/DESIGN.md,
// "Health").
//
// Active probes the destinations of one cluster over HTTP (one goroutine per
// destination, first round at Start) and turns consecutive failures and
// successes into a verdict. The verdict is this node's LocalHealth; what the
// destination's effective ActiveHealth becomes is decided by an Observer, so
// the cluster-wide view (gossip, majority of probers) can replace the default
// local one without touching the probing. ShouldProbe decides which
// destinations this node probes at all (probe fan-out). Probes go over the
// checker's own small transport (ProbeTransport: a copy of the cluster's,
// with its TLS settings and its own pool), never the data path's, so a
// cluster whose MaxConnectionsPerServer is full still probes at once.
//
// The verdict itself lives in the destination (LocalHealth), not in the
// checker: a reload builds a new checker while the old one still probes the
// same Destination until it is stopped, and every round compares with the
// destination's current verdict so no flip made meanwhile is lost.
//
// Passive is YARP's TransportFailureRate policy. Per destination it counts
// proxied requests and failures (transport errors and 5xx; a client's
// cancellation counts as neither) over a sliding detection window (60s, in
// 10 buckets of 6s). Once the window holds at least 10 requests and
// failures/requests exceeds the rate limit (0.3, or the cluster metadata
// "TransportFailureRateHealthPolicy.RateLimit" in (0,1]), the destination is
// excluded on this node for the reactivation period and its window starts
// afresh. A single failure therefore never excludes anything. Beside the
// window, DefaultConsecutiveConnectFailures (3) connect failures in a row
// (the connection failed before any byte was sent: refused, reset on
// connect, dial timeout; IsConnectFailure) exclude the destination the
// same way, so a dead destination with little traffic is not kept until
// 10 requests reached it; any other result breaks the run. The window
// belongs to the *upstream.Destination (held weakly, freed with it), so it
// survives a reload that keeps the Destination object; a reload that builds
// a new Destination, or changes the window size, starts it afresh.
package health
