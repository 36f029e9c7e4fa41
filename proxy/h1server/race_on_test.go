//go:build race

package h1server

// raceEnabled: the race detector is on (sync.Pool then drops items at
// random, so allocation counts are not the real ones).
const raceEnabled = true
