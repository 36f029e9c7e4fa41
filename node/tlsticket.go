package node

import (
	"time"

	"github.com/tether-proxy/tether/proxy"
)

// ticketKeySource gives the listeners the TLS session ticket keys of the
// replicated keyring.
type ticketKeySource struct{ n *Node }

var _ proxy.TicketKeySource = ticketKeySource{}

func (s ticketKeySource) TicketKeys(now time.Time) [][32]byte {
	return s.n.ring.TicketKeys(s.n.ticketTime(now))
}

// ticketTime is the time session tickets go by at the local instant now.
func (n *Node) ticketTime(now time.Time) time.Time {
	return now.Add(time.Duration(n.ticketShift.Load()))
}
