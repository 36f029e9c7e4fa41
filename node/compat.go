package node

import (
	"fmt"
	"strings"

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
