package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/tether-proxy/tether/cluster"
	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/store"
)

// leaver takes this node out of the cluster (tether leave).
type leaver struct {
	self    string
	store   *store.Store
	members *cluster.Membership // nil without gossip: no cluster to leave
	writes  *adminapi.Writes
	// expect is --bootstrap-expect: the leader keeps that many voters.
	expect int
	log    *slog.Logger
}

// leave takes this node out of the cluster: leadership moves first, then
// gossip says "left", and the leader, asked directly, drops it from the
// Raft configuration. It succeeds only once the node is out of Raft. A
// leave that would not take the node out (the leader keeps
// --bootstrap-expect voters) or would stall the cluster (below quorum) is
// refused before anything changes, unless force. auth is the caller's
// Authorization header, passed on to the leader.
func (l *leaver) leave(ctx context.Context, force bool, auth string) error {
	if l.members == nil {
		return &leaveRefused{"this node runs alone (no --cluster-secret-file): there is no cluster to leave"}
	}
	servers, err := l.store.Servers()
	if err != nil {
		return fmt.Errorf("reading the Raft configuration: %w", err)
	}
	up := map[string]bool{}
	for _, m := range l.members.Members() {
		up[m.ID] = m.State == cluster.StateAlive
	}
	leader, _ := l.store.Leader()
	if err := leavePlan(l.self, leader, servers, up, l.expect, force); err != nil {
		return err
	}
	inRaft := slices.ContainsFunc(servers, func(s store.Server) bool { return s.ID == l.self })
	// servers is raft's latest configuration: a removal of this node (an
	// earlier leave) may be in it uncommitted, and only the leader can
	// tell whether it committed.
	inRaft = inRaft || l.store.InCommittedConfiguration(l.self)
	if inRaft && l.store.IsLeader() {
		if err := l.store.TransferLeadership(); err != nil {
			return fmt.Errorf("moving leadership off this node before it leaves failed (nothing changed; retry): %w", err)
		}
	}
	if err := l.members.Leave(5 * time.Second); err != nil {
		return fmt.Errorf("gossip leave: %w", err)
	}
	if !inRaft {
		l.log.Info("left the cluster (this node was not in the Raft configuration)")
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, leaveWait)
	defer cancel()
	var last error
	for attempt := 0; ; attempt++ {
		out, err := l.askRemoval(ctx, auth, attempt)
		if out {
			l.log.Info("left the cluster")
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("this node left gossip, but its removal from the Raft configuration is not committed after %s", leaveWait)
			if last != nil {
				msg += " (" + last.Error() + ")"
			}
			l.log.Warn(msg)
			return fmt.Errorf("%s: stop it and run `tether remove %s` on another node", msg, l.self)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// leaveRefused is a leave refused before anything changed.
type leaveRefused struct{ msg string }

func (e *leaveRefused) Error() string { return e.msg }

// leavePlan refuses a leave that cannot or should not take self out of
// Raft: no leader to commit it; the only voter; a voter whose leave would
// go below --bootstrap-expect (the leader never removes voters below it,
// see cluster/DESIGN.md) or leave fewer alive voters than a quorum, unless
// force. up says which members gossip sees alive.
func leavePlan(self, leader string, servers []store.Server, up map[string]bool, expect int, force bool) error {
	var me *store.Server
	voters, aliveOthers := 0, 0
	for i, s := range servers {
		if s.ID == self {
			me = &servers[i]
		}
		if s.Voter {
			voters++
			if s.ID != self && up[s.ID] {
				aliveOthers++
			}
		}
	}
	if me == nil {
		return nil // not in Raft: leaving gossip is all there is
	}
	if leader == "" {
		return &leaveRefused{"refused: no Raft leader, so nothing can take this node out of the Raft configuration; " +
			"bring a majority of the voters back first, or stop this node and run `tether remove " + self + "` once the cluster has a leader"}
	}
	if !me.Voter {
		return nil // non-voters leave without limit
	}
	if voters == 1 {
		return &leaveRefused{"refused: this node is the cluster's only voter; leaving would end the cluster. Stop it instead"}
	}
	if force {
		return nil
	}
	if len(servers)-1 < expect {
		return &leaveRefused{fmt.Sprintf("refused: the cluster was started with --bootstrap-expect %d and has %d servers; the leader keeps at least %d, "+
			"so it would never take this node out of Raft. To shrink the cluster anyway run `tether leave --force` "+
			"(the cluster then runs with %d voters), or stop this node and run `tether remove %s` on another node",
			expect, len(servers), expect, voters-1, self)}
	}
	if need := (voters-1)/2 + 1; aliveOthers < need {
		return &leaveRefused{fmt.Sprintf("refused: after this node leaves, %d of the %d other voters are alive, below the quorum of %d: "+
			"the cluster would stop taking writes. Bring the failed voters back or `tether remove` them first, or run `tether leave --force`",
			aliveOthers, voters-1, need)}
	}
	return nil
}

// askRemoval asks the leader to remove this node from the Raft
// configuration (DELETE /v1/members/{id}, as a forwarded write) and says
// whether the node is out: only once the removal is committed. Raft's
// view on this node (Servers) drops it as soon as the removal is in its
// log, committed or not, and a removed node seldom learns the commit (the
// leader stops replicating to it), so the leader's answer decides: 200
// once the removal committed. A 404 is not taken for "out": a leader
// of an earlier version gave it for a removal still pending.
func (l *leaver) askRemoval(ctx context.Context, auth string, attempt int) (bool, error) {
	if _, ok := l.store.RemovedAt(l.self); ok {
		return true, nil // this node applied its own removal: committed
	}
	// The leader this node knows, else another alive member, a different
	// one each attempt, which forwards to the leader it knows: a node
	// whose removal is in its log hears from no leader elected after it.
	to, direct := "", false
	if leader, _ := l.store.Leader(); leader != "" && leader != l.self {
		to, direct = l.writes.LeaderAdmin(leader), true
	}
	if to == "" {
		var others []string
		for _, m := range l.members.Members() {
			if m.ID != l.self && m.State == cluster.StateAlive && m.AdminAddr != "" {
				others = append(others, m.AdminAddr)
			}
		}
		if len(others) == 0 {
			return false, errors.New("no leader known and no other member alive")
		}
		to = others[attempt%len(others)]
	}
	u := url.URL{Scheme: "http", Host: to, Path: "/v1/members/" + url.PathEscape(l.self)}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, u.String(), nil)
	if err != nil {
		return false, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if direct {
		req.Header.Set(hdrForwardedBy, l.self) // should it no longer lead, it answers 503 rather than forward
	}
	req.Header.Set(hdrRequestID, "leave-"+l.self)
	resp, err := forwardClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var body struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&body)
	if resp.StatusCode == http.StatusOK {
		return true, nil // the removal is committed
	}
	return false, fmt.Errorf("the admin API at %s answered %d: %s", to, resp.StatusCode, body.Error)
}
