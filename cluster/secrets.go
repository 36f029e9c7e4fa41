package cluster

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"

	"github.com/hashicorp/memberlist"
)

// guardStreams puts the guard (guard.go) between memberlist's transport and
// memberlist, creating the transport as memberlist would when a test gave
// none.
func guardStreams(mc *memberlist.Config, kr *memberlist.Keyring, lg *slog.Logger) (*guardedTransport, error) {
	if mc.Transport == nil {
		nc := &memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger}
		tries := 1
		if mc.BindPort == 0 {
			tries = 10 // a port picked for TCP may be taken for UDP: pick again
		}
		var nt *memberlist.NetTransport
		var err error
		for range tries {
			if nt, err = memberlist.NewNetTransport(nc); err == nil || !strings.Contains(err.Error(), "address already in use") {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("cluster: start gossip on %s:%d: %w", mc.BindAddr, mc.BindPort, err)
		}
		if mc.BindPort == 0 {
			if mc.AdvertisePort == 0 {
				mc.AdvertisePort = nt.GetAutoBindPort()
			}
			mc.BindPort = nt.GetAutoBindPort()
		}
		mc.Transport = nt
	}
	inner, ok := mc.Transport.(memberlist.NodeAwareTransport)
	if !ok {
		return nil, nil // a test's transport: it sees raw streams itself
	}
	g := newGuardedTransport(inner, kr, mc.TCPTimeout, lg)
	mc.Transport = g
	return g, nil
}

// SetSecrets makes gossip encrypt with primary's key and accept the keys
// of accepted (primary among them or not): memberlist's keyring takes the
// new keys first, then the primary, then drops the keys of secrets no
// longer accepted. Messages under a dropped key are refused from then on.
func (m *Membership) SetSecrets(primary []byte, accepted [][]byte) error {
	pk, err := GossipKey(primary)
	if err != nil {
		return err
	}
	want := [][]byte{pk}
	for _, s := range accepted {
		k, err := GossipKey(s)
		if err != nil {
			return err
		}
		want = append(want, k)
	}
	for _, k := range want {
		if err := m.keyring.AddKey(k); err != nil {
			return fmt.Errorf("cluster: gossip keyring: %w", err)
		}
	}
	if err := m.keyring.UseKey(pk); err != nil {
		return fmt.Errorf("cluster: gossip keyring: %w", err)
	}
	for _, k := range m.keyring.GetKeys() {
		keep := false
		for _, w := range want {
			keep = keep || bytes.Equal(k, w)
		}
		if !keep {
			if err := m.keyring.RemoveKey(k); err != nil {
				return fmt.Errorf("cluster: gossip keyring: %w", err)
			}
		}
	}
	return nil
}

// StreamsRefused is how many gossip streams were refused before they
// proved the secret, by reason (Stream* constants).
func (m *Membership) StreamsRefused() map[string]uint64 {
	if m.guard == nil {
		return nil
	}
	return m.guard.refusedCounts()
}
