// Package logging builds the node's structured logger: JSON lines by
// default (what log pipelines parse) or readable text for a terminal, with
// every key at most once on a line (parsers keep the last of duplicate
// keys, so a library's "time" field would otherwise misdate the line).
package logging
