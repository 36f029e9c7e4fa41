// Package unidiff compares two texts line by line and writes the
// difference as diff -u does (`tether config diff`): hunks with three
// lines of context, ranges as GNU diff writes them, a shortest edit script
// (Myers) while the texts differ in at most a few thousand lines, past
// which the differing middle is shown removed and added whole.
package unidiff
