package node

import (
	"errors"
	"net/http"

	adminapi "github.com/tether-proxy/tether/node/admin"
)

// The write path (forwarding to the leader, request ids, the answers'
// index) lives in node/admin; these name it for the node's own callers.
const (
	hdrForwardedBy = adminapi.HeaderForwardedBy
	hdrRequestID   = adminapi.HeaderRequestID
	hdrIndex       = adminapi.HeaderIndex
)

var forwardClient = adminapi.ForwardClient

func requestID(r *http.Request) string             { return adminapi.RequestID(r) }
func requestBinding(r *http.Request) string        { return adminapi.RequestBinding(r) }
func setCommitted(w http.ResponseWriter, i uint64) { adminapi.SetCommitted(w, i) }
func setIndex(w http.ResponseWriter, i uint64)     { adminapi.SetIndex(w, i) }

// newWrites is the node's write path: writes run on the leader.
func newWrites(n *Node) *adminapi.Writes {
	w := &adminapi.Writes{
		NodeID:  n.cfg.NodeID,
		Store:   n.store,
		Applied: n.applyDrains,
		Unavailable: func(err error) bool {
			return errors.Is(err, errBehind) || errors.As(err, new(*keysNotHeldError))
		},
		Log: n.log,
	}
	if n.members != nil {
		w.Gossip = n.members
	}
	return w
}

func (n *Node) onLeader(h http.HandlerFunc) http.HandlerFunc { return n.writes.OnLeader(h) }
func (n *Node) leaderAdmin(id string) string                 { return n.writes.LeaderAdmin(id) }
func (n *Node) writeApplyError(w http.ResponseWriter, what string, err error) {
	n.writes.WriteApplyError(w, what, err)
}
