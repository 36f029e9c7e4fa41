//go:build !race

package h1server

const raceEnabled = false
