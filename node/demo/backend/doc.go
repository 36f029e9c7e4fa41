// Package backend is the demo's backend: an HTTP handler that names itself
// in every answer, so a user (or a test) sees which destination a request
// reached. It imports nothing of tether.
package backend
