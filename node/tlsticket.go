package node

import (
	"time"

	"github.com/tether-proxy/tether/proxy"
)

// ticketKeySource gives the listeners the TLS session ticket keys of the
// replicated keyring, by the cluster time: ticket keys change with the UTC
// day, and the members' median clock is one every node reads within
// seconds of the others (keyring.TicketKeyGrace covers that), which no
// single node's clock moves.
type ticketKeySource struct{ n *Node }

var _ proxy.TicketKeySource = ticketKeySource{}

func (s ticketKeySource) TicketKeys(now time.Time) [][32]byte {
	return s.n.ring.TicketKeys(s.n.ticketTime(now))
}

// ticketTime is the cluster time at the local instant now: the last
// reading counted on by elapsed (monotonic) time; now itself before the
// first reading.
func (n *Node) ticketTime(now time.Time) time.Time {
	t := now
	if p := n.clusterAt.Load(); p != nil {
		t = p.at.Add(now.Sub(p.mono))
	}
	return t.Add(time.Duration(n.ticketShift.Load()))
}
