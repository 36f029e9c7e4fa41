// Command tether runs a tether node, the demo cluster, and the client
// commands that talk to a node's admin API. It only wires flags to package
// node; the behaviour lives there.
package main
