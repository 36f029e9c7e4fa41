// Package lb owns the load-balancing policies that choose one destination of
// a cluster for a request (proxy/DESIGN.md, "Routes and load balancing"):
// PowerOfTwoChoices (the default),
// RoundRobin, LeastRequests, Random and FirstAlphabetical, under YARP's
// names.
//
// A policy only chooses among the candidates it is handed; filtering out
// unhealthy or draining destinations, and affinity, happen before Pick.
// Pick never allocates and never takes a lock: the randomised policies use
// math/rand/v2's per-thread source and RoundRobin one atomic counter.
package lb
