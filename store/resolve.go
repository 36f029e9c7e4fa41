package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/internal/logging"
)

// errUnresolved: Config.Resolve does not know the server; raft dials the
// configuration's address (and logs that at debug, store/raftlog).
var errUnresolved = errors.New("store: no resolved address for this server")

// resolvedWarnEvery bounds the warning about a resolved address that
// another server holds: raft asks on every RPC.
const resolvedWarnEvery = 30 * time.Second

// addressProvider is the transport's raft.ServerAddressProvider over
// Config.Resolve: raft asks it before every RPC and dials the
// configuration's address when it returns an error.
type addressProvider struct {
	s       *Store
	resolve func(id string) (string, bool)
	warned  *logging.Repeats
}

func newAddressProvider(s *Store, resolve func(string) (string, bool)) *addressProvider {
	return &addressProvider{s: s, resolve: resolve, warned: logging.NewRepeats(resolvedWarnEvery, time.Now)}
}

func (p *addressProvider) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	s := p.s
	if string(id) == s.id {
		// Raft asks for its own id too, for the header of every RPC.
		return raft.ServerAddress(s.addr), nil
	}
	addr, ok := p.resolve(string(id))
	if !ok || addr == "" || !s.raftUp.Load() {
		return "", errUnresolved
	}
	// The handshake proves that the peer belongs to this cluster, not which
	// member it is, and raft counts a vote under the id it asked. An
	// address that is this node's or another server's in the configuration
	// (a resolver entry gone stale after the address was reused) is
	// therefore never dialled for id: that server would answer, and its
	// vote count twice.
	holder := ""
	if addr == s.addr {
		holder = s.id
	} else {
		for _, srv := range s.raft.GetConfiguration().Configuration().Servers {
			if srv.ID != id && string(srv.Address) == addr {
				holder = string(srv.ID)
				break
			}
		}
	}
	if holder != "" {
		if held, ok := p.warned.Allow(string(id)); ok {
			s.logger.Warn("raft: the address resolved for a server is another server's in the configuration; dialling the configured address instead",
				"server", id, "resolved", addr, "held_by", holder, "repeated", held)
		}
		return "", fmt.Errorf("store: resolved address %s of %s is %s's", addr, id, holder)
	}
	return raft.ServerAddress(addr), nil
}
