package leader

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// CommandGate is the store's check before the leader writes a command: a
// command some server of the Raft configuration, or some alive or suspect
// member, does not advertise (an older binary in a rolling upgrade) is
// refused, since that node would stop applying at it until upgraded
// (store/DESIGN.md, "Mixed versions"). A server that is down counts by the
// command set gossip last saw from it: it replays the entry once it is
// started again. A server gossip holds no record of (down since before
// this node's gossip met it) may run any release: it refuses every command
// beyond store.BaselineCommands. A member that advertises no set runs a
// binary from before sets were gossiped: store.BaselineCommands.
func (l *Leader) CommandGate(cmd store.Command) error {
	if l.cfg.Members == nil {
		return nil
	}
	servers, err := l.cfg.Store.Servers()
	if err != nil {
		return fmt.Errorf("%w: command %s: the Raft configuration, whose every server must apply it, is unknown: %v",
			store.ErrUnsupported, store.Requirement(cmd), err)
	}
	return gateCheck(cmd, l.cfg.Self, servers, l.cfg.Members.Members())
}

// gateCheck is CommandGate's rule over one view of the Raft configuration
// and the gossip members.
func gateCheck(cmd store.Command, self string, servers []store.Server, members []cluster.Member) error {
	byID := make(map[string]cluster.Member, len(members))
	for _, m := range members {
		byID[m.ID] = m
	}
	var behind []string
	inRaft := map[string]bool{}
	for _, s := range servers {
		inRaft[s.ID] = true
		if s.ID == self { // the store checks its own set
			continue
		}
		m, known := byID[s.ID]
		switch {
		case !known:
			if !store.BaselineCommands.Supports(cmd) {
				behind = append(behind, fmt.Sprintf("%s (a Raft server that is down and whose command set is unknown: start it, upgraded, or remove it with tether remove %s)", s.ID, s.ID))
			}
		case !store.CommandSet(m.Commands).Supports(cmd):
			state := ""
			if !m.Alive() {
				state = fmt.Sprintf("%s, a Raft server that would stop at it once started, ", m.State)
			}
			behind = append(behind, fmt.Sprintf("%s (%sversion %s, %s)", m.ID, state, m.Version, store.CommandSet(m.Commands).Describe()))
		}
	}
	for _, m := range members {
		if inRaft[m.ID] || m.ID == self || !m.Alive() {
			continue
		}
		if set := store.CommandSet(m.Commands); !set.Supports(cmd) {
			behind = append(behind, fmt.Sprintf("%s (version %s, %s)", m.ID, m.Version, set.Describe()))
		}
	}
	if len(behind) == 0 {
		return nil
	}
	return fmt.Errorf("%w: command %s is not applied yet by %s: upgrade them first",
		store.ErrUnsupported, store.Requirement(cmd), strings.Join(behind, ", "))
}

// AddressConflicts finds Raft addresses claimed by more than one node: the
// Raft server that holds one and any alive member that advertises it, or
// two alive members. The leader never evicts the holder for it
// (store.ErrAddressTaken); /v1/members shows the conflict on every node
// involved, keyed by id.
func (l *Leader) AddressConflicts(servers []store.Server, members []cluster.Member) map[string]string {
	return addressConflicts(servers, members)
}

func addressConflicts(servers []store.Server, members []cluster.Member) map[string]string {
	holder := map[string]string{}
	claims := map[string][]string{}
	add := func(addr, id string) {
		if addr != "" && !slices.Contains(claims[addr], id) {
			claims[addr] = append(claims[addr], id)
		}
	}
	for _, s := range servers {
		holder[s.Address] = s.ID
		add(s.Address, s.ID)
	}
	for _, m := range members {
		if m.Alive() {
			add(m.RaftAddr, m.ID)
		}
	}
	out := map[string]string{}
	for addr, ids := range claims {
		if len(ids) < 2 {
			continue
		}
		slices.Sort(ids)
		msg := fmt.Sprintf("raft address %s claimed by %s", addr, strings.Join(ids, ", "))
		if h := holder[addr]; h != "" {
			msg += fmt.Sprintf("; the Raft configuration holds it for %s, the others are refused", h)
		}
		for _, id := range ids {
			out[id] = msg
		}
	}
	return out
}

// SettingsMismatch names the cluster settings in which member m differs
// from this node ("" when they agree or m does not gossip them):
// --raft-voters, --bootstrap-expect and ProbeFanout come from whichever
// node leads (or probes), so they must be the same everywhere.
func (l *Leader) SettingsMismatch(m cluster.Meta) string {
	if l.cfg.Members == nil || m.ID == l.cfg.Self {
		return ""
	}
	p := l.cfg.Policy
	var diffs []string
	if m.Voters != 0 && m.Voters != p.MaxVoters {
		diffs = append(diffs, fmt.Sprintf("--raft-voters %d (this node %d)", m.Voters, p.MaxVoters))
	}
	if m.Voters != 0 && m.Expect != p.Expect {
		diffs = append(diffs, fmt.Sprintf("--bootstrap-expect %d (this node %d)", m.Expect, p.Expect))
	}
	if own := l.cfg.Fanout(); m.Fanout != "" && own != "" && m.Fanout != own {
		diffs = append(diffs, fmt.Sprintf("ProbeFanout %s (this node %s)", m.Fanout, own))
	}
	return strings.Join(diffs, ", ")
}

// checkSettings runs on the leader each round: it logs the members whose
// cluster settings differ from its own, and Raft addresses claimed by two
// nodes, once per change of either list.
func (l *Leader) checkSettings() {
	if l.cfg.Members == nil {
		return
	}
	members := l.cfg.Members.Members()
	if servers, err := l.cfg.Store.Servers(); err == nil {
		seen := map[string]bool{}
		var conflicts []string
		for _, c := range addressConflicts(servers, members) {
			if !seen[c] {
				seen[c] = true
				conflicts = append(conflicts, c)
			}
		}
		slices.Sort(conflicts)
		now := strings.Join(conflicts, "; ")
		if last := l.conflictsLogged.Swap(&now); (last == nil && now != "") || (last != nil && *last != now) {
			if now != "" {
				l.log.Warn("raft address conflict: a live member keeps its address and the other is not added; give each node its own address",
					"conflicts", now)
			} else {
				l.log.Info("no raft address conflict any more")
			}
		}
	}
	var lines []string
	for _, m := range members {
		if !m.Alive() {
			continue
		}
		if d := l.SettingsMismatch(m.Meta); d != "" {
			lines = append(lines, m.ID+": "+d)
		}
	}
	slices.Sort(lines)
	now := strings.Join(lines, "; ")
	last := l.settingsLogged.Load()
	if last != nil && *last == now || last == nil && now == "" {
		return
	}
	l.settingsLogged.Store(&now)
	if now == "" {
		l.log.Info("every member's cluster settings agree with the leader's again")
		return
	}
	l.log.Warn("members run with cluster settings other than the leader's: the voter count and probing change with each leader; start every node with the same flags and configuration",
		"mismatches", now)
}
