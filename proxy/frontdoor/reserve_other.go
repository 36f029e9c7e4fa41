//go:build !unix

package frontdoor

import (
	"errors"
	"net"
)

// canReserve: sockets cannot be bound without listening here; Reserve
// holds nothing and Start binds.
const canReserve = false

type reservation struct {
	addr *net.TCPAddr
}

var errNoReserve = errors.New("binding a port without listening is not supported on this system")

func reserve(string) (*reservation, error)           { return nil, errNoReserve }
func (r *reservation) listen() (net.Listener, error) { return nil, errNoReserve }
func (r *reservation) close()                        {}
