package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// configurationsSince decodes the configuration entries in l's log after
// index from.
func configurationsSince(t *testing.T, l *testNode, from uint64) []raft.Configuration {
	t.Helper()
	last, err := l.s.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var out []raft.Configuration
	for i := from + 1; i <= last; i++ {
		var e raft.Log
		if err := l.s.logs.GetLog(i, &e); err != nil || e.Type != raft.LogConfiguration {
			continue
		}
		out = append(out, raft.DecodeConfiguration(e.Data))
	}
	return out
}

// TestAddressChangesInPlaceAndNeverEvictsALiveVoter: a voter whose address
// changed is updated in place (the configuration never passes through one
// voter less), and a server whose address another id claims (pod IP reuse,
// every node on :7000) stays: the newcomer is refused, naming both.
func TestAddressChangesInPlaceAndNeverEvictsALiveVoter(t *testing.T) {
	skipUnderRaceForAddressChange(t)
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	c.apply(SetClusterID{ID: "c1"})
	n3 := c.nodes[2]
	cases := []struct {
		desc  string
		id    string
		addr  func() string
		check func(t *testing.T, err error, confs []raft.Configuration, now []Server)
	}{
		{"a voter at a new address is updated in place", "n3", func() string { return "127.0.0.1:1" },
			func(t *testing.T, err error, confs []raft.Configuration, now []Server) {
				if err != nil {
					t.Fatal(err)
				}
				for _, cf := range confs {
					voters := 0
					for _, s := range cf.Servers {
						if s.Suffrage == raft.Voter {
							voters++
						}
					}
					if voters != 3 {
						t.Errorf("configuration passed through %d voters: %+v", voters, cf.Servers)
					}
				}
				if len(now) != 3 || !hasServer(now, "n3", "127.0.0.1:1", true) {
					t.Errorf("configuration %+v, want n3 a voter at 127.0.0.1:1", now)
				}
			}},
		{"back at its own address, in place again", "n3", func() string { return n3.s.Addr() },
			func(t *testing.T, err error, _ []raft.Configuration, now []Server) {
				if err != nil || !hasServer(now, "n3", n3.s.Addr(), true) {
					t.Fatalf("err %v, configuration %+v", err, now)
				}
			}},
		{"a new id claiming a live voter's address is refused, naming both", "n4", func() string { return n3.s.Addr() },
			func(t *testing.T, err error, confs []raft.Configuration, now []Server) {
				if !errors.Is(err, ErrAddressTaken) || !strings.Contains(err.Error(), "n3") || !strings.Contains(err.Error(), "n4") {
					t.Errorf("err %v, want ErrAddressTaken naming n3 and n4", err)
				}
				if len(confs) != 0 || len(now) != 3 || !hasServer(now, "n3", n3.s.Addr(), true) {
					t.Errorf("configuration changed: %d entries, now %+v", len(confs), now)
				}
			}},
		{"a known id moving to another voter's address is refused", "n2", func() string { return n3.s.Addr() },
			func(t *testing.T, err error, confs []raft.Configuration, now []Server) {
				if !errors.Is(err, ErrAddressTaken) || len(confs) != 0 || !hasServer(now, "n3", n3.s.Addr(), true) {
					t.Errorf("err %v, %d configuration entries, now %+v", err, len(confs), now)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			var err error
			var confs []raft.Configuration
			c.retry(tc.desc, nil, func(l *testNode) error {
				from, _ := l.s.logs.LastIndex()
				err = l.s.AddVoter(tc.id, tc.addr())
				if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeadershipLost) {
					return err
				}
				confs = configurationsSince(t, l, from)
				return nil
			})
			now, serr := c.leader().s.Servers()
			if serr != nil {
				t.Fatal(serr)
			}
			tc.check(t, err, confs, now)
		})
	}
}

func hasServer(ss []Server, id, addr string, voter bool) bool {
	for _, s := range ss {
		if s.ID == id {
			return s.Address == addr && s.Voter == voter
		}
	}
	return false
}

// TestVoterBackOnANewAddressIsDialledWhereTheResolverSaysItIs: voters A
// (leader), B, C; C stops, A and B commit entries, B stops, and C starts
// again on a new address that nothing wrote into the configuration (no
// leader is left to write it). A holds the newer log, so only A can win,
// and only with C's vote; the configuration still has C's old address,
// where nothing listens. The resolver (gossip, in a node) knows C's new
// address, so A reaches C, is elected, and as leader can write C's
// address into the configuration.
func TestVoterBackOnANewAddressIsDialledWhereTheResolverSaysItIs(t *testing.T) {
	var mu sync.Mutex
	moved := map[string]string{} // id -> current address, once it moved
	resolve := func(id string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		a, ok := moved[id]
		return a, ok
	}
	c := &testCluster{t: t, net: newFaultNet(), resolve: resolve}
	for range 3 {
		c.addNode()
	}
	c.bootstrap()
	c.apply(SetClusterID{ID: "c1"})
	a := c.leader()
	var b, cn *testNode
	for _, nd := range c.nodes {
		switch {
		case nd == a:
		case b == nil:
			b = nd
		default:
			cn = nd
		}
	}
	oldAddr := cn.s.Addr()
	c.stop(cn)
	var last uint64
	for i := range 3 {
		last = c.apply(SetDrain{ReqID: fmt.Sprintf("d%d", i), Cluster: "app", Destination: "b1", Deadline: time.Unix(2e9, 0).UTC()}, a, b)
	}
	c.converged(last, a, b)
	c.stop(b)

	cn.bind = "127.0.0.1:0" // a new port; the old one stays in the configuration
	c.start(cn)
	newAddr := cn.s.Addr()
	if newAddr == oldAddr {
		t.Fatalf("restarted on its old address %s", oldAddr)
	}
	mu.Lock()
	moved[cn.id] = newAddr
	mu.Unlock()

	if l := c.leader(a, cn); l != a {
		t.Fatalf("%s leads with the older log", l.id)
	}
	c.converged(last, a, cn)
	if raceEnabled {
		return // the in-place update below: skipUnderRaceForAddressChange
	}
	c.retry("AddVoter "+cn.id+" at its new address", []*testNode{a, cn}, func(l *testNode) error {
		return l.s.AddVoter(cn.id, newAddr)
	})
	now, err := c.leader(a, cn).s.Servers()
	if err != nil {
		t.Fatal(err)
	}
	if !hasServer(now, cn.id, newAddr, true) {
		t.Errorf("configuration %+v, want %s a voter at %s", now, cn.id, newAddr)
	}
}

// TestResolvedAddressOfAnotherServerIsNotDialled: the handshake proves
// only that the peer is a member, and raft counts an answer under the id
// it asked; so an address the resolver gives for n3 that is n2's (or this
// node's) in the configuration is not used, and raft dials n3's configured
// address. An address no one else holds is used; an unknown id falls back.
func TestResolvedAddressOfAnotherServerIsNotDialled(t *testing.T) {
	var mu sync.Mutex
	claims := map[string]string{}
	c := &testCluster{t: t, net: newFaultNet(), resolve: func(id string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		a, ok := claims[id]
		return a, ok
	}}
	for range 3 {
		c.addNode()
	}
	c.bootstrap()
	c.leader()
	n1, n2 := c.nodes[0], c.nodes[1]
	cases := []struct {
		desc, claim string
		want        string // "": the configuration's address (an error)
	}{
		{"n2's address", n2.s.Addr(), ""},
		{"this node's address", n1.s.Addr(), ""},
		{"an address no server holds", "127.0.0.1:1", "127.0.0.1:1"},
		{"unknown", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			mu.Lock()
			claims["n3"] = tc.claim
			mu.Unlock()
			got, err := n1.s.resolver.ServerAddr("n3")
			if tc.want == "" {
				if err == nil {
					t.Fatalf("n3 resolved to %s, want the configured address (an error)", got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("n3 resolved to %q, %v; want %s", got, err, tc.want)
			}
		})
	}
	if got, err := n1.s.resolver.ServerAddr("n1"); err != nil || string(got) != n1.s.Addr() {
		t.Errorf("own id resolved to %q, %v; want %s", got, err, n1.s.Addr())
	}
}
