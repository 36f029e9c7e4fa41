// Package atomicfile owns replacing a file on disk so that a reader, and
// the disk after a crash, see either the old contents or the new, never a
// part: the keyring file, the node's secrets file, the formation vote, the
// known gossip peers and the snapshots the CLI saves all go through
// [WriteFile].
package atomicfile
