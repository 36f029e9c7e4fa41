// Package gcfloor owns the process's garbage-collector tuning: a heap-goal
// floor that follows the allocation rate (Tune), raising GOGC while the live
// heap is small and giving memory back once a load has gone. It is
// process-wide, so the binary starts it once (cmd/tether agent and demo,
// tools/benchrace), never a node. proxy/DESIGN.md, "The runtime", says why.
package gcfloor
