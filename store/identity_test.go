package store

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestClustersSharingASecretNeverExchangeRaftRPCs: cluster B shares cluster
// A's secret (and could reach A's nodes through a reused address); its Raft
// transport asks A's nodes for votes with a huge term and appends entries:
// every RPC is refused and A's term never moves.
func TestClustersSharingASecretNeverExchangeRaftRPCs(t *testing.T) {
	a := newTestCluster(t, 3, knobs{})
	a.bootstrap()
	a.converged(a.apply(SetClusterID{ID: "cluster-a"}))
	b := newTestCluster(t, 1, knobs{})
	b.bootstrap()
	b.converged(b.apply(SetClusterID{ID: "cluster-b"}))
	term := a.leader().s.raft.CurrentTerm()
	from := b.nodes[0].s
	for _, nd := range a.nodes {
		var vr raft.RequestVoteResponse
		err := from.transport.RequestVote(raft.ServerID(b.nodes[0].id), raft.ServerAddress(nd.s.Addr()), &raft.RequestVoteRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("b1"), Addr: []byte(from.Addr())}, Term: term + 100, LastLogIndex: 1 << 40, LastLogTerm: term + 100,
		}, &vr)
		if err == nil {
			t.Errorf("RequestVote from cluster B to %s went through", nd.id)
		}
		var ar raft.AppendEntriesResponse
		err = from.transport.AppendEntries(raft.ServerID(b.nodes[0].id), raft.ServerAddress(nd.s.Addr()), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("b1"), Addr: []byte(from.Addr())}, Term: term + 100,
		}, &ar)
		if err == nil {
			t.Errorf("AppendEntries from cluster B to %s went through", nd.id)
		}
	}
	for _, nd := range a.nodes {
		if got := nd.s.raft.CurrentTerm(); got >= term+100 {
			t.Errorf("%s adopted cluster B's term %d", nd.id, got)
		}
	}
	a.converged(a.apply(InstallKey{Key: testKey("k1", 0)}))
}

// TestStreamBindsTheClusterID: the handshake proves the cluster id with the
// secret; peers of two clusters are refused, and a peer without an id yet
// (forming, or waiting to be added) is accepted.
func TestStreamBindsTheClusterID(t *testing.T) {
	cases := []struct {
		desc                 string
		server, client       string
		oldServer, oldClient bool // an earlier release: no ALPN, handshake version 1
		ok                   bool
	}{
		{desc: "same cluster", server: "c1", client: "c1", ok: true},
		{desc: "client not in a cluster yet", server: "c1", client: "", ok: true},
		{desc: "server not in a cluster yet", server: "", client: "c1", ok: true},
		{desc: "neither has an id (formation)", server: "", client: "", ok: true},
		{desc: "two clusters sharing a secret", server: "c1", client: "c2", ok: false},
		{desc: "rolling upgrade: a server of an earlier release", server: "c1", client: "c1", oldServer: true, ok: true},
		{desc: "rolling upgrade: a client of an earlier release", server: "c1", client: "c1", oldClient: true, ok: true},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			srv, accepted := testLayer(t, testSecret, nil, nil)
			cli, _ := testLayer(t, testSecret, nil, nil)
			setID := func(l *streamLayer, id string) { f := func() string { return id }; l.clusterID.Store(&f) }
			setID(srv, c.server)
			setID(cli, c.client)
			if c.oldServer {
				srv.serverTLS.NextProtos = nil
			}
			if c.oldClient {
				cli.clientTLS.NextProtos = nil
			}
			conn, err := cli.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
			if !c.ok {
				if err == nil {
					conn.Close()
					t.Fatal("connected across clusters")
				}
				if !strings.Contains(err.Error(), "c1") || !strings.Contains(err.Error(), "c2") {
					t.Errorf("error %q does not name both clusters", err)
				}
				select {
				case <-accepted:
					t.Error("a peer of another cluster reached Accept")
				case <-time.After(100 * time.Millisecond):
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			echoCheck(t, conn, accepted)
		})
	}
}
