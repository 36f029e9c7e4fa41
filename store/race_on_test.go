//go:build race

package store

// raceEnabled: the race detector is on.
const raceEnabled = true
