// Package upstream holds the runtime state of clusters and destinations that
// the data path's parts share: a destination's configuration plus small
// atomic state (in-flight count, probe health, passive exclusion, drain
// deadline) written by the health checkers and the admin API and read by
// load balancing and affinity on every request.
//
// Two questions decide where a request may go: AcceptsNew (healthy and not
// draining: new sessions and requests without affinity) and AcceptsExisting
// (healthy and before any drain deadline: requests of an existing
// affinitized session). Cluster.Available caches the AcceptsNew list so a
// request costs one atomic load, not a scan of the cluster.
package upstream
