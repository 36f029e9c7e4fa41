package node

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/store"
)

// Version is the build's version, set by the linker (-X).
var Version = "dev"

func (n *Node) listenAdmin() error {
	ln, err := net.Listen("tcp", n.cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin listener %s: %w", n.cfg.AdminAddr, err)
	}
	n.adminLn = ln
	n.addrs = advertised{flag: n.cfg.Advertise, raftBind: n.cfg.RaftAddr, adminBound: ln.Addr().(*net.TCPAddr)}
	if len(n.token) == 0 && !isLoopback(ln.Addr()) {
		n.log.Warn("the admin API listens beyond loopback without --admin-token-file: anyone who reaches " +
			ln.Addr().String() + " can rotate and revoke keys and drain destinations")
	}
	return nil
}

// serveAdmin serves the admin API (node/admin) over the node's parts.
func (n *Node) serveAdmin() {
	n.api = n.newAPI()
	n.admin = &http.Server{
		Handler:           n.api.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          nil,
	}
	go func() {
		if err := n.admin.Serve(n.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("admin listener stopped", "error", err)
		}
	}()
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

func (n *Node) newAPI() *adminapi.API {
	names := []string{n.cfg.NodeID}
	if hn, err := os.Hostname(); err == nil {
		names = append(names, hn)
	}
	if adv := n.cfg.Advertise; adv != "" {
		if h, _, err := net.SplitHostPort(adv); err == nil {
			adv = h
		}
		names = append(names, adv)
	}
	secret := n.secretRotation()
	return &adminapi.API{
		NodeID:    n.cfg.NodeID,
		Version:   Version,
		Started:   n.started,
		Token:     n.token,
		Names:     names,
		ReadWait:  func() time.Duration { return n.readWait },
		AdminAddr: n.addrs.admin,
		Store:     n.store,
		Proxy:     n.proxy,
		Node:      adminNode{n},
		Config:    clusterConfigRules{n},
		Writes:    n.writes,
		Ring:      n.ring,
		Registry:  n.registry,
		Secrets: adminapi.SecretHandlers{
			List:    secret.List,
			Install: secret.Write(store.SecretInstall),
			Use:     secret.Write(store.SecretUse),
			Remove:  secret.Write(store.SecretRemove),
		},
		Log:  n.log,
		Bus:  n.ev.bus,
		Wake: n.ev.wake,
		Stop: n.stop,
	}
}
