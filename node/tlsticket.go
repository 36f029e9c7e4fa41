package node

import (
	"time"

	"github.com/tether-proxy/tether/proxy"
)

// ticketKeySource gives the listeners the TLS session ticket keys derived
// from the replicated keyring and the day's seed, by the cluster time:
// ticket keys change with the UTC day, and the members' median clock is
// one every node reads within seconds of the others (keyring.TicketKeyGrace
// covers that), which no single node's clock moves. Without keys (no seed
// yet, no active key) the listeners issue no ticket.
type ticketKeySource struct{ n *Node }

var _ proxy.TicketPauser = ticketKeySource{}

func (s ticketKeySource) TicketKeys(now time.Time) [][32]byte {
	n := s.n
	keys := n.ring.TicketKeysWith(n.ticketTime(now), n.seeds, n.ticketScheme(now))
	if len(keys) == 0 {
		n.seeder.wakeUp()
	}
	return keys
}

func (ticketKeySource) PausesTickets() bool { return true }

// keyringTicketSource (tests) is the ticket source of a release before
// ticket seeds: keys from the keyring alone, local tickets without them.
type keyringTicketSource struct{ n *Node }

func (s keyringTicketSource) TicketKeys(now time.Time) [][32]byte {
	return s.n.ring.TicketKeys(s.n.ticketTime(now))
}

// ticketSchemeAdvertised is what this node gossips in Meta.Tickets.
func (n *Node) ticketSchemeAdvertised() int {
	if n.legacyTickets {
		return 0
	}
	return ticketSeedScheme
}

// ticketTime is the cluster time at the local instant now: the last
// reading counted on by elapsed (monotonic) time; now itself before the
// first reading.
func (n *Node) ticketTime(now time.Time) time.Time {
	t := now
	if p := n.clock.Last(); p != nil {
		t = p.At.Add(now.Sub(p.Mono))
	}
	return t.Add(time.Duration(n.ticketShift.Load()))
}
