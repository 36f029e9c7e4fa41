// Package logging builds the node's structured logger: readable text on a
// terminal and JSON lines otherwise (what log pipelines parse), or either
// by choice, with every key at most once on a line (parsers keep the last
// of duplicate keys, so a library's "time" field would otherwise misdate
// the line) and durations written as durations ("30s", not nanoseconds).
// Repeats and Refusals hold back lines that repeat within a window; a
// Refusals also counts every refusal by reason, for a metric: the Raft
// transport and the gossip guard count what they refuse with one.
package logging
