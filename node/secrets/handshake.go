package secrets

import (
	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// RaftHandshakeVersion is the newest Raft handshake this binary speaks
// (gossiped in meta, cluster.Meta.RaftAuth).
const RaftHandshakeVersion = 2

// HandshakeV1Allowed is the policy for Raft handshake version 1 (peers of
// releases that predate the cluster id check): unless refused, it is
// accepted while a Raft server or an alive member does not gossip that it
// speaks version 2 (an older release, or one not seen yet). members is nil
// without gossip (Raft on loopback only, no peer).
func HandshakeV1Allowed(refuse bool, members func() []cluster.Member, servers func() ([]store.Server, error)) bool {
	if refuse {
		return false
	}
	if members == nil {
		return true
	}
	speaks := map[string]bool{}
	for _, m := range members() {
		speaks[m.ID] = m.RaftAuth >= RaftHandshakeVersion
		if m.Alive() && !speaks[m.ID] {
			return true
		}
	}
	list, err := servers()
	if err != nil {
		return true
	}
	for _, s := range list {
		if !speaks[s.ID] {
			return true
		}
	}
	return false
}
