// Package acme tests tether's ACME certificates end to end against
// Let's Encrypt's test CA, pebble, built from the Go module proxy inside
// the test, with its validation on and its DNS pointed at a server of the
// test's that resolves the test name to the nodes' loopback addresses.
package acme
