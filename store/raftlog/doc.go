// Package raftlog turns hashicorp/raft's hclog output into tether's slog
// lines: typed values, raft's keys that clash with the line's own renamed
// raft_KEY, and each line's level set by what it means to an operator (a
// snapshot's routine lines debug, a down peer's errors a warning at most
// once per 30 s per peer, a quorum loss one warning per 30 s with the
// count of rounds held back). It knows raft's messages, not the store.
package raftlog
