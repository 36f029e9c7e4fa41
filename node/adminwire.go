package node

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/tether-proxy/tether/keyring"
	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/node/clustertime"
	"github.com/tether-proxy/tether/node/leader"
	"github.com/tether-proxy/tether/store"
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
func setCommitted(w http.ResponseWriter, i uint64) { adminapi.SetCommitted(w, i) }
func setIndex(w http.ResponseWriter, i uint64)     { adminapi.SetIndex(w, i) }

// newWrites is the node's write path: writes run on the leader.
func newWrites(n *Node) *adminapi.Writes {
	w := &adminapi.Writes{
		NodeID:  n.cfg.NodeID,
		Store:   n.store,
		Applied: func() { n.applyDrains(); n.applyClusterConfig() },
		Unavailable: func(err error) bool {
			return errors.Is(err, leader.ErrBehind) || errors.Is(err, clustertime.ErrNotReady) || errors.As(err, new(*leader.KeysNotHeldError))
		},
		Log: n.log,
	}
	if n.members != nil {
		w.Gossip = n.members
	}
	return w
}

// adminNode is the node as the admin API sees it (admin.Node).
type adminNode struct{ n *Node }

func (a adminNode) NotReady() string                 { return a.n.NotReady() }
func (a adminNode) Warnings() []string               { return a.n.storeWarnings() }
func (a adminNode) Members() []adminapi.Member       { return a.n.table.views() }
func (a adminNode) ActiveKeyID(now time.Time) string { return a.n.ring.ActiveKeyID(now) }
func (a adminNode) ClusterNow() (time.Time, error)   { return a.n.clock.Known() }
func (a adminNode) ApplyDrains()                     { a.n.applyDrains() }
func (a adminNode) Acme() any                        { return a.n.lead.AcmeView().Statuses() }
func (a adminNode) ConfirmApplied(ctx context.Context, index uint64, within time.Duration) (applied, pending []string) {
	if a.n.confirms == nil {
		return []string{a.n.cfg.NodeID}, nil
	}
	return a.n.confirms.Applied(ctx, index, within)
}

func (a adminNode) Keys(now time.Time) (index uint64, active string, keys any) {
	n := a.n
	var mds []keyring.Metadata
	n.store.ReadState(func(i uint64, _ []store.Drain) {
		index = i
		mds, active = n.ring.List(now), n.ring.ActiveKeyID(now)
	})
	return index, active, n.lead.KeyViews(mds, now)
}

func (a adminNode) Rotate(reqID, bind string) (keyring.Metadata, uint64, error) {
	return a.n.lead.RotateNow(reqID, bind)
}

func (a adminNode) Revoke(ctx context.Context, id, reqID, bind string) (adminapi.Revoked, error) {
	res, err := a.n.lead.Revoke(ctx, id, reqID, bind)
	return adminapi.Revoked{Index: res.Index, Active: res.Active, Replacement: res.Replacement, PassedOver: res.PassedOver}, err
}

func (a adminNode) Join(addrs []string) (int, error) {
	if a.n.members == nil {
		return 0, adminapi.Conflict{Err: errors.New("this node runs alone without --cluster-secret-file and cannot join a cluster: restart it with the cluster's secret")}
	}
	return a.n.members.Join(addrs)
}

func (a adminNode) Leave(ctx context.Context, force bool, auth string) (func(), error) {
	n := a.n
	if err := n.leaver.leave(ctx, force, auth); err != nil {
		if errors.As(err, new(*leaveRefused)) {
			err = adminapi.Conflict{Err: err}
		}
		return nil, err
	}
	return func() { n.failOnce.Do(func() { close(n.failed) }) }, nil
}

func (a adminNode) Probers(clusterID string) func(destID string) ([]string, []adminapi.ProberVerdict) {
	n := a.n
	n.reloadMu.Lock()
	c := n.current.ReverseProxy.Clusters[clusterID]
	n.reloadMu.Unlock()
	if c == nil || !c.HealthCheck.Active.Enabled {
		return nil
	}
	sh := n.health
	if sh == nil {
		return func(string) ([]string, []adminapi.ProberVerdict) { return []string{n.cfg.NodeID}, nil }
	}
	fanout := sh.fanoutOf(clusterID)
	return func(destID string) ([]string, []adminapi.ProberVerdict) {
		var vs []adminapi.ProberVerdict
		for _, pv := range sh.gossip.Verdicts(clusterID, destID) {
			vs = append(vs, adminapi.ProberVerdict{Node: pv.Node, Verdict: fromVerdict(pv.Verdict).String(), At: pv.At})
		}
		return sh.gossip.Probers(clusterID, destID, fanout), vs
	}
}
