package node

import (
	adminapi "github.com/tether-proxy/tether/node/admin"
)

// Event is one server-sent event of GET /v1/events (package admin keeps
// the bus, watches the node's view and serves the stream).
type Event = adminapi.Event

// Event types the node's own tests look for (admin lists them all).
const (
	EventHello  = adminapi.EventHello
	EventKey    = adminapi.EventKey
	EventHealth = adminapi.EventHealth
	EventDrain  = adminapi.EventDrain
	EventStats  = adminapi.EventStats
)

// eventState is the node's share of the event machinery: the bus the
// node's parts publish to, and the change watcher's wake-up.
type eventState struct {
	bus  *adminapi.Bus
	wake chan struct{}
}

// noteChange wakes the change watcher (never blocks: hooks call it from
// gossip's and the FSM's goroutines).
func (e *eventState) noteChange() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}
