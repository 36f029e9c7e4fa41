package node

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// commandGate is the store's check before the leader writes a command: a
// command some alive or suspect member does not advertise (an older binary
// in a rolling upgrade) is refused, since that member would stop applying
// at it until upgraded (store/DESIGN.md, "Mixed versions"). A member that
// advertises no set runs a binary from before sets were gossiped:
// store.BaselineCommands.
func (n *Node) commandGate(cmd store.Command) error {
	if n.members == nil {
		return nil
	}
	var behind []string
	for _, m := range n.members.Members() {
		if !m.Alive() {
			continue
		}
		set := store.CommandSet(m.Commands)
		if !set.Supports(cmd) {
			behind = append(behind, fmt.Sprintf("%s (version %s, %s)", m.ID, m.Version, set.Describe()))
		}
	}
	if len(behind) == 0 {
		return nil
	}
	return fmt.Errorf("%w: command %s is not applied yet by %s: upgrade them first",
		store.ErrUnsupported, store.Requirement(cmd), strings.Join(behind, ", "))
}

// addressConflicts finds Raft addresses claimed by more than one node: the
// Raft server that holds one and any alive member that advertises it, or
// two alive members. The leader never evicts the holder for it
// (store.ErrAddressTaken); /v1/members shows the conflict on every node
// involved, keyed by id.
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
