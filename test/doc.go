// Package test holds tether's end-to-end tests: they build the tether
// binary and drive it as a user would (agent, demo, config validate and the
// client commands) against real backends on loopback. Multi-process
// clusters are here too; the container scenarios are in test/docker.
// Under -short the package runs nothing (every test runs processes).
package test
