package test

import (
	"io"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tether-proxy/tether/test/testutil"
)

// olderMember joins gossip as a node of a release that does not gossip the
// Raft handshake version it speaks.
type olderMember struct{}

func (olderMember) NodeMeta(int) []byte             { return []byte(`{"id":"older","v":"0.9.0"}`) }
func (olderMember) NotifyMsg([]byte)                {}
func (olderMember) GetBroadcasts(int, int) [][]byte { return nil }
func (olderMember) LocalState(bool) []byte          { return nil }
func (olderMember) MergeRemoteState([]byte, bool)   {}

// TestRaftHandshakeV1RefusedOnceEveryMemberSpeaksV2: a peer offering no
// ALPN completes handshake version 1, which skips the cluster id check,
// only while a member does not gossip that it speaks version 2 (a rolling
// upgrade); with every member on version 2, or with --raft-handshake-v1
// refuse, it is refused and counted. Version 2 is answered throughout.
func TestRaftHandshakeV1RefusedOnceEveryMemberSpeaksV2(t *testing.T) {
	e := newClusterEnv(t, cookieConfig(testutil.NewBackend(t, "b1")))
	n1 := e.form(1)[0]
	secret, _ := os.ReadFile(e.Secret)
	secret = []byte(strings.TrimSpace(string(secret)))
	raft1 := e.RaftAddr("n1")
	if testutil.RaftV1Proves(t, raft1, secret) {
		t.Fatal("a version 1 peer completed the handshake although every member speaks version 2")
	}
	if !testutil.RaftProves(t, raft1, secret) {
		t.Fatal("a version 2 peer with the secret was refused")
	}
	testutil.Eventually(t, 10*time.Second, "the refusal counted", func() bool {
		n, _ := metricSum(t, n1, `tether_raft_connections_refused_total{reason="v1_handshake"}`)
		return n >= 1
	})

	// A member of an earlier release joins: version 1 is accepted again.
	c := memberlist.DefaultLocalConfig()
	c.Name, c.BindAddr, c.BindPort, c.AdvertisePort = "older", "127.0.0.1", 0, 0
	c.SecretKey = gossipKey(secret)
	c.Delegate = olderMember{}
	c.Logger = log.New(io.Discard, "", 0)
	older, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Shutdown()
	if _, err := older.Join([]string{n1.gossip}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "version 1 accepted while an older member is alive", func() bool { return testutil.RaftV1Proves(t, raft1, secret) })

	// A node started with --raft-handshake-v1 refuse refuses it anyway.
	n2 := e.startNode("n2", "", "--join", n1.gossip, "--raft-handshake-v1", "refuse")
	testutil.Eventually(t, 30*time.Second, "n2 in the cluster", func() bool {
		_, m := adminJSON(t, "GET", n2.adminURL+"/v1/status")
		return m["leader_id"] == "n1"
	})
	if testutil.RaftV1Proves(t, e.RaftAddr("n2"), secret) {
		t.Error("--raft-handshake-v1 refuse accepted a version 1 peer")
	}
	if !testutil.RaftV1Proves(t, raft1, secret) {
		t.Error("n1 (auto) refused version 1 while an older member is alive")
	}

	// The older member leaves: version 1 is refused again.
	older.Leave(time.Second)
	older.Shutdown()
	testutil.Eventually(t, 30*time.Second, "version 1 refused once the older member left", func() bool { return !testutil.RaftV1Proves(t, raft1, secret) })

	if code, out := runTether(t, "agent", "--config", e.Config, "--raft-handshake-v1", "sometimes"); code == 0 || !strings.Contains(out, "--raft-handshake-v1") {
		t.Errorf("an unknown --raft-handshake-v1: exit %d: %s", code, out)
	}
}
