package store

import (
	"errors"
	"strings"
	"testing"

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
