package cluster

import (
	"fmt"
	"sort"
	"strings"
)

// Formation is a two-phase vote carried in gossip meta, so that nodes whose
// views differ never bootstrap two clusters.
//
// Seeing `expect` state-less nodes is not enough when more than `expect`
// start at once: with five nodes and expect 3, one node may see {a,b,c,d}
// and choose {a,b,c} while another sees {b,c,d} and chooses {b,c,d}; both
// bootstrap, and b and c vote in two Raft clusters. So each fresh node
// votes, in Meta.FormSet/FormPhase:
//
//  1. propose: the set it would bootstrap: a set someone committed to and
//     that can still complete if any, else the `expect` lowest ids of the
//     uncommitted nodes it sees. Proposals change freely as views grow.
//  2. commit: a member of the proposed set that sees every fresh node
//     (but those committed elsewhere) propose that same set commits to it,
//     and never changes again.
//
// A node bootstraps only when every member of its committed set has
// committed to that set. A node commits to one set only, so two sets that
// share a node can never both bootstrap; any two sets of `expect` nodes
// share one when more than half the nodes starting at once are expected
// (2×expect > N), which the documented deployment (expect = N) satisfies.
// Membership runs the vote by itself on every change (formationVote); the
// node only calls BootstrapSet.

// Vote phases in Meta.FormPhase.
const (
	phaseNone      = 0
	phaseProposed  = 1
	phaseCommitted = 2
)

// BootstrapSet decides whether self should bootstrap a new Raft cluster now,
// and with which servers. It is pure: call it after every membership change.
//
// Rule: self has no Raft state and no cluster id; no alive member has state
// or a cluster id (then self waits to be added by that cluster's leader);
// self has committed its formation vote to a set of `expect` members, and
// every member of that set has no state, the same Expect, and committed to
// the same set. Without other votes the set is the `expect` lowest ids of
// the state-less alive members with the same Expect. Membership casts the
// votes itself; suspect members count as alive.
func BootstrapSet(self Member, members []Member, expect int) (servers []Member, ok bool) {
	servers, ok, _ = Formation(self, members, expect)
	return servers, ok
}

// Formation is BootstrapSet with the reason it says no (for logs and status).
func Formation(self Member, members []Member, expect int) (servers []Member, ok bool, why string) {
	v, why := newView(self, members, expect)
	if why != "" {
		return nil, false, why
	}
	switch {
	case self.FormSet == "":
		return nil, false, v.waiting()
	case !strings.Contains(","+self.FormSet+",", ","+self.ID+","):
		return nil, false, fmt.Sprintf("%s bootstrap without this node: waiting to be added", self.FormSet)
	case self.FormPhase != phaseCommitted:
		return nil, false, fmt.Sprintf("proposed %s, waiting for every node to agree", self.FormSet)
	}
	set := v.valid(self.FormSet, true)
	if set == nil {
		return nil, false, fmt.Sprintf("committed to %s, some of which now have state or another expect", self.FormSet)
	}
	for _, m := range set {
		if m.FormSet != self.FormSet || m.FormPhase != phaseCommitted {
			return nil, false, fmt.Sprintf("committed to %s, waiting for %s to commit", self.FormSet, m.ID)
		}
		if m.RaftAddr == "" {
			return nil, false, fmt.Sprintf("committed to %s, waiting for %s to gossip its raft address", self.FormSet, m.ID)
		}
	}
	return set, true, ""
}

// view is one node's formation view.
type view struct {
	self   Member
	expect int
	byID   map[string]Member // every member known, self alive
	fresh  []Member          // alive, no state, same Expect; sorted by id
	others int               // alive with another Expect
}

func newView(self Member, members []Member, expect int) (*view, string) {
	switch {
	case expect < 1:
		return nil, fmt.Sprintf("bootstrap-expect is %d", expect)
	case self.HasState || self.ClusterID != "":
		return nil, "this node already holds Raft state"
	case self.Expect != expect:
		return nil, fmt.Sprintf("this node's meta says expect %d, not %d", self.Expect, expect)
	}
	self.State = StateAlive // whatever gossip says, self is up
	v := &view{self: self, expect: expect, byID: map[string]Member{self.ID: self}}
	for _, m := range members {
		if m.ID != self.ID && m.ID != "" {
			v.byID[m.ID] = m
		}
	}
	for _, m := range v.byID {
		if !m.Alive() {
			continue
		}
		if m.HasState || m.ClusterID != "" {
			return nil, fmt.Sprintf("node %q already holds state of cluster %q: waiting to be added", m.ID, m.ClusterID)
		}
		if m.Expect != expect {
			v.others++
			continue
		}
		v.fresh = append(v.fresh, m)
	}
	sort.Slice(v.fresh, func(i, j int) bool { return v.fresh[i].ID < v.fresh[j].ID })
	return v, ""
}

func (v *view) waiting() string {
	if len(v.fresh) >= v.expect {
		return "no formation vote yet"
	}
	why := fmt.Sprintf("%d of %d nodes with bootstrap-expect %d seen", len(v.fresh), v.expect, v.expect)
	if v.others > 0 {
		why += fmt.Sprintf(" (%d alive nodes have another bootstrap-expect)", v.others)
	}
	return why
}

// valid returns the members a vote names when it is a usable set: expect
// distinct sorted ids of known state-less members with the same Expect,
// alive unless dead ones are allowed (a committed member that failed still
// committed: it rejoins the cluster its set forms).
func (v *view) valid(set string, allowDown bool) []Member {
	if set == "" {
		return nil
	}
	ids := strings.Split(set, ",")
	if len(ids) != v.expect || !sort.StringsAreSorted(ids) {
		return nil
	}
	out := make([]Member, 0, len(ids))
	for i, id := range ids {
		m, ok := v.byID[id]
		if !ok || (i > 0 && ids[i-1] == id) || m.HasState || m.ClusterID != "" || m.Expect != v.expect || (!allowDown && !m.Alive()) {
			return nil
		}
		out = append(out, m)
	}
	return out
}

// formationVote is self's next vote given its view: (set, phase). Once
// committed, or once any node has state, it never changes.
//
// A set is viable when none of its members committed to another set. Every
// fresh node proposes, member of the set or not: the viable set most
// committed to (the smallest on a tie), else the `expect` lowest ids among
// the fresh nodes not committed. A member commits when every fresh node it
// sees that is not committed elsewhere proposes (or committed to) that same
// set. Asking all, not just the set's members, keeps two nodes from
// committing to different sets (each would need a view where everyone
// agrees with it); when partial views still lead to that, the viable-set
// rule lets the others converge on one of them instead of waiting forever.
func formationVote(self Member, members []Member, expect int) (string, int) {
	switch {
	case self.HasState || self.ClusterID != "":
		return "", phaseNone // formed: the vote is over
	case self.FormPhase == phaseCommitted:
		return self.FormSet, self.FormPhase
	}
	v, why := newView(self, members, expect)
	if why != "" {
		return self.FormSet, self.FormPhase // frozen while others hold state
	}
	committedTo := map[string]string{}
	for _, m := range v.fresh {
		if m.ID != self.ID && m.FormPhase == phaseCommitted && v.valid(m.FormSet, true) != nil {
			committedTo[m.ID] = m.FormSet
		}
	}
	viable := func(set string) bool {
		ms := v.valid(set, false)
		for _, m := range ms {
			if c, ok := committedTo[m.ID]; ok && c != set {
				return false
			}
		}
		return ms != nil
	}
	counts := map[string]int{}
	for _, set := range committedTo {
		if viable(set) {
			counts[set]++
		}
	}
	target := best(counts)
	if target == "" {
		var ids []string
		for _, m := range v.fresh {
			if _, ok := committedTo[m.ID]; !ok && len(ids) < expect {
				ids = append(ids, m.ID)
			}
		}
		if len(ids) < expect {
			return "", phaseNone
		}
		target = strings.Join(ids, ",")
	}
	in := false
	for _, id := range strings.Split(target, ",") {
		in = in || id == self.ID
	}
	if !in {
		return target, phaseProposed // not ours to commit to; our agreement counts
	}
	for _, m := range v.fresh {
		if c, ok := committedTo[m.ID]; ok && c != target {
			continue // committed elsewhere: it never agrees, never blocks
		}
		if m.ID != self.ID && (m.FormSet != target || m.FormPhase < phaseProposed) {
			return target, phaseProposed
		}
	}
	return target, phaseCommitted
}

// best is the set with the highest count, the smallest on a tie.
func best(counts map[string]int) string {
	var out string
	n := 0
	for s, c := range counts {
		if c > n || (c == n && s < out) {
			out, n = s, c
		}
	}
	return out
}
