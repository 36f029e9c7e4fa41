package node

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/node/leader"
	"github.com/tether-proxy/tether/node/secrets"
)

// The cluster secrets (package node/secrets): the files that keep them,
// their rotation through the admin API, the Raft handshake policy.

// Values of --raft-handshake-v1.
const (
	// HandshakeV1Auto accepts handshake version 1 (peers of releases that
	// predate the cluster id check) until every member speaks version 2.
	HandshakeV1Auto = "auto"
	// HandshakeV1Refuse never accepts it.
	HandshakeV1Refuse = "refuse"
)

// checkHandshakeV1 validates --raft-handshake-v1 and fills its default.
func (c *Config) checkHandshakeV1() error {
	switch c.RaftHandshakeV1 {
	case "":
		c.RaftHandshakeV1 = HandshakeV1Auto
	case HandshakeV1Auto, HandshakeV1Refuse:
	default:
		return fmt.Errorf("--raft-handshake-v1 %q: want auto (accept it until every member speaks version 2) or refuse", c.RaftHandshakeV1)
	}
	return nil
}

// membersOf is m's member list, nil without gossip.
func membersOf(m *cluster.Membership) func() []cluster.Member {
	if m == nil {
		return nil
	}
	return m.Members
}

// raftV1Allowed is the Raft handshake version 1 policy of node n.
func raftV1Allowed(n *Node) func() bool {
	return func() bool {
		return secrets.HandshakeV1Allowed(n.cfg.RaftHandshakeV1 == HandshakeV1Refuse, membersOf(n.members), n.store.Servers)
	}
}

// secretCollector exposes node n's refused connections and held secrets.
func secretCollector(n *Node) prometheus.Collector {
	var streams func() map[string]uint64
	if n.members != nil {
		streams = n.members.StreamsRefused
	}
	return secrets.NewCollector(n.secrets, n.store.Refused, streams)
}

// secretRotation is the secret endpoints of GET /v1/secrets and the
// secret writes, on this node's write path.
func (n *Node) secretRotation() *secrets.Rotation {
	return &secrets.Rotation{
		NodeID: n.cfg.NodeID, Secrets: n.secrets, Store: n.store, Members: membersOf(n.members),
		SecretFile: n.cfg.ClusterSecretFile, Log: n.log,
		Writes: secrets.Writes{
			OnLeader:     n.writes.OnLeader,
			Forwarded:    func(r *http.Request) bool { return r.Header.Get(hdrForwardedBy) != "" },
			CaughtUp:     func() bool { return n.lead.CaughtUp() },
			ErrBehind:    leader.ErrBehind,
			ApplyError:   n.writes.WriteApplyError,
			RequestID:    requestID,
			SetIndex:     setIndex,
			SetCommitted: setCommitted,
		},
	}
}
