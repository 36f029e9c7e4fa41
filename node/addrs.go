package node

import (
	"net"
	"strconv"
)

// advertised is what this node tells other nodes to dial: its Raft and
// admin addresses, from --advertise, the bound address, or the host
// gossip advertises (memberlist finds a private IP).
type advertised struct {
	flag       string       // --advertise
	raftBind   string       // --raft-addr
	adminBound *net.TCPAddr // the admin listener's bound address
	// gossip is members.Addr() read once gossip is open ("" before, and
	// without gossip): memberlist changes its local node under its own
	// lock.
	gossip string
}

// raft is the address peers dial for Raft: --advertise with the Raft
// port, or, when Raft binds an unspecified address, the host gossip
// advertises.
func (a *advertised) raft() string {
	host, port, _ := net.SplitHostPort(a.raftBind)
	if a.flag != "" {
		h := a.flag
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		return net.JoinHostPort(h, port)
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return ""
	}
	if host != "" && net.ParseIP(host) == nil {
		return "" // a host name: the store resolves it on every dial
	}
	if a.gossip != "" {
		if h, _, err := net.SplitHostPort(a.gossip); err == nil {
			return net.JoinHostPort(h, port)
		}
	}
	return ""
}

// admin is the admin address other nodes forward writes to.
func (a *advertised) admin() string {
	addr := a.adminBound
	if !addr.IP.IsUnspecified() {
		return addr.String()
	}
	host := ""
	if a.flag != "" {
		host = a.flag
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	} else if a.gossip != "" {
		host, _, _ = net.SplitHostPort(a.gossip)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(addr.Port))
}
