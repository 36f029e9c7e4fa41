package node

import (
	"time"

	"github.com/tether-proxy/tether/node/keyshare"
)

// openKeyShare opens what moves keys and TLS ticket seeds between nodes
// (package keyshare): the key transfer over gossip, and the ticket seeds,
// whose keys go by the cluster time. It registers their gossip handlers
// before the store opens, which they read once the node runs (openStore).
func (n *Node) openKeyShare(secret []byte) error {
	var gossip keyshare.Gossip
	if n.members != nil {
		gossip = n.members
		kt, err := keyshare.OpenTransfer(keyshare.TransferConfig{
			NodeID: n.cfg.NodeID, Gossip: n.members, Store: openStore{n}, Ring: n.ring, Secrets: n.secrets,
			CaughtUp: func() bool { return n.lead.IsCaughtUp() }, Log: n.log,
		})
		if err != nil {
			return err
		}
		n.keys = kt
	}
	s, err := keyshare.OpenSeeder(keyshare.SeederConfig{
		NodeID: n.cfg.NodeID, Gossip: gossip, Store: openStore{n}, Ring: n.ring, Seeds: n.seeds,
		Secrets: n.secrets, Secret: secret, Legacy: n.legacyTickets,
		Record: &n.seedRecord, FetchOff: &n.seedFetchOff, Log: n.log,
		// The cluster time at the local instant now: the last reading
		// counted on by elapsed (monotonic) time; now itself before the
		// first reading.
		Time: func(now time.Time) time.Time {
			t := now
			if p := n.clock.Last(); p != nil {
				t = p.At.Add(now.Sub(p.Mono))
			}
			return t.Add(time.Duration(n.ticketShift.Load()))
		},
	})
	if err != nil {
		return err
	}
	n.seeder = s
	return nil
}

// openStore is the node's store once it is open, for keyshare, which is
// opened before it.
type openStore struct{ n *Node }

func (s openStore) IsLeader() bool            { return s.n.store.IsLeader() }
func (s openStore) Leader() (id, addr string) { return s.n.store.Leader() }
func (s openStore) Term() uint64              { return s.n.store.Term() }
func (s openStore) ClusterID() string         { return s.n.store.ClusterID() }
