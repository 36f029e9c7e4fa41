package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/node/apiclient"
	demobackend "github.com/tether-proxy/tether/node/demo/backend"
	"github.com/tether-proxy/tether/proxy/upstream"
	"github.com/tether-proxy/tether/test/testutil"
)

// testCluster is a set of in-process nodes sharing one secret and config.
type testCluster struct {
	t       *testing.T
	dir     string
	cfgPath string
	secret  string
	nodes   map[string]*Node
	cfgs    map[string]Config
	mu      sync.Mutex
	// logs, once captureLogs is called, holds each node's log by node id.
	logs map[string]*logBuffer
}

// captureLogs makes the nodes started from now on log (Info and up) into
// tc.logs as well as the quiet logger.
func (tc *testCluster) captureLogs() {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.logs == nil {
		tc.logs = map[string]*logBuffer{}
	}
}

// nodeLog is the captured log of node id ("" before captureLogs).
func (tc *testCluster) nodeLog(id string) string {
	tc.mu.Lock()
	b := tc.logs[id]
	tc.mu.Unlock()
	if b == nil {
		return ""
	}
	return b.String()
}

// logBuffer is a log sink safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newTestCluster(t *testing.T, backends int) *testCluster {
	t.Helper()
	dir := t.TempDir()
	dests := []string{}
	for i := 1; i <= backends; i++ {
		b := httptest.NewServer(demobackend.Handler(fmt.Sprintf("b%d", i)))
		t.Cleanup(b.Close)
		dests = append(dests, fmt.Sprintf(`"d%d": { "Address": "%s/" }`, i, b.URL))
	}
	cfg := fmt.Sprintf(`{
	  "Listeners": [ { "Address": "127.0.0.1:0" } ],
	  "ReverseProxy": {
	    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
	    "Clusters": { "app": {
	      "LoadBalancingPolicy": "RoundRobin", "DrainTimeout": "00:10:00",
	      "SessionAffinity": { "Enabled": true, "Policy": "Cookie", "AffinityKeyName": "aff", "FailurePolicy": "Return503Error" },
	      "Destinations": { %s } } }
	  }
	}`, strings.Join(dests, ", "))
	tc := &testCluster{t: t, dir: dir, cfgPath: filepath.Join(dir, "tether.json"), secret: filepath.Join(dir, "secret"),
		nodes: map[string]*Node{}, cfgs: map[string]Config{}}
	os.WriteFile(tc.cfgPath, []byte(cfg), 0o600)
	os.WriteFile(tc.secret, []byte("the-test-cluster-secret-0123456789"), 0o600)
	t.Cleanup(tc.stopAll)
	return tc
}

// config is the Config of node id (the same flags on every node).
func (tc *testCluster) config(id string, expect int, join []string) Config {
	log := quietLogger()
	tc.mu.Lock()
	if tc.logs != nil {
		b := &logBuffer{}
		tc.logs[id] = b
		log = slog.New(slog.NewTextHandler(io.MultiWriter(b, quietWriter()), nil))
	}
	tc.mu.Unlock()
	return Config{
		ConfigPath: tc.cfgPath, NodeID: id, DataDir: filepath.Join(tc.dir, id), AdminAddr: "127.0.0.1:0",
		RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", ClusterSecretFile: tc.secret,
		BootstrapExpect: expect, Join: join, FastTimings: true, Logger: log,
	}
}

// start starts a node with cfg, after prep (if any) set it up.
func (tc *testCluster) start(cfg Config, prep ...func(*Node)) *Node {
	tc.t.Helper()
	n, err := New(cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	for _, p := range prep {
		p(n)
	}
	if err := n.Start(); err != nil {
		tc.t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	tc.mu.Lock()
	tc.nodes[cfg.NodeID], tc.cfgs[cfg.NodeID] = n, cfg
	tc.mu.Unlock()
	return n
}

// startThree starts n1, n2 and n3, each joining those before it, after
// prep (if not nil) set each up by its place (0, 1, 2).
func (tc *testCluster) startThree(prep func(i int, n *Node)) []*Node {
	tc.t.Helper()
	tc.skipShort()
	var join []string
	var nodes []*Node
	for i, id := range []string{"n1", "n2", "n3"} {
		n := tc.start(tc.config(id, 3, join), func(n *Node) {
			if prep != nil {
				prep(i, n)
			}
		})
		nodes = append(nodes, n)
		join = append(join, n.GossipAddr())
	}
	return nodes
}

// manual makes a node run no leader loop: the test runs its leader's
// rounds (lead.Round) with its own clock.
func manual(n *Node) { n.manualLeader = true }

// startSolo starts a node of its own whose leader rounds the test drives,
// and waits for its first key at now.
func startSolo(t *testing.T, tc *testCluster, now time.Time) *Node {
	t.Helper()
	cfg := tc.config("solo", 0, nil)
	cfg.ClusterSecretFile = ""
	n := tc.start(cfg, manual)
	testutil.Eventually(t, 10*time.Second, "the first key", func() bool {
		if n.store.IsLeader() {
			n.lead.Round(now)
		}
		return n.ring.ActiveKeyID(now) != ""
	})
	return n
}

func (tc *testCluster) stop(id string) {
	tc.mu.Lock()
	n := tc.nodes[id]
	delete(tc.nodes, id)
	tc.mu.Unlock()
	if n != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	}
}

func (tc *testCluster) stopAll() {
	tc.mu.Lock()
	ids := make([]string, 0, len(tc.nodes))
	for id := range tc.nodes {
		ids = append(ids, id)
	}
	tc.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); tc.stop(id) }()
	}
	wg.Wait()
}

func (tc *testCluster) live() []*Node {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	out := make([]*Node, 0, len(tc.nodes))
	for _, n := range tc.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *Node) int { return strings.Compare(a.ID(), b.ID()) })
	return out
}

// form starts n nodes with --bootstrap-expect n, each joining the ones
// started before it, and waits for one leader and an active key everywhere.
// skipShort skips a multi-node cluster test under -short, as store's
// do: go test -short stays a quick loop; make test runs them all.
func (tc *testCluster) skipShort() {
	if testing.Short() {
		tc.t.Skip("a multi-node cluster test (make test runs it)")
	}
}

func (tc *testCluster) form(n int) []*Node {
	tc.t.Helper()
	tc.skipShort()
	var join []string
	for i := 1; i <= n; i++ {
		nd := tc.start(tc.config(fmt.Sprintf("n%d", i), n, slices.Clone(join)))
		join = append(join, nd.GossipAddr())
	}
	tc.waitSettled()
	return tc.live()
}

// waitSettled waits until every live node knows the same leader, holds
// an active key and serves.
func (tc *testCluster) waitSettled() {
	tc.t.Helper()
	testutil.Eventually(tc.t, 30*time.Second, "one leader, an active key and open listeners on every node", func() bool {
		leader := ""
		for _, n := range tc.live() {
			l := n.Leader()
			if l == "" || (leader != "" && l != leader) || n.ring.ActiveKeyID(time.Now()) == "" || n.gate.Reason() != "" {
				return false
			}
			leader = l
		}
		return true
	})
}

func (tc *testCluster) leader() *Node {
	for _, n := range tc.live() {
		if n.store.IsLeader() {
			return n
		}
	}
	return nil
}

// waitLeader waits for a live node to lead and returns it.
func (tc *testCluster) waitLeader() *Node {
	tc.t.Helper()
	var l *Node
	testutil.Eventually(tc.t, 20*time.Second, "a leader", func() bool { l = tc.leader(); return l != nil })
	return l
}

func (tc *testCluster) follower() *Node {
	for _, n := range tc.live() {
		if !n.store.IsLeader() {
			return n
		}
	}
	return nil
}

// fsmDump is a node's replicated state in a comparable form.
type fsmDump struct {
	ClusterID string
	Keys      []keyring.Metadata
	Drains    string
}

func dump(n *Node) fsmDump {
	at := time.Unix(0, 0)
	d := fmt.Sprint(n.store.Drains())
	return fsmDump{ClusterID: n.store.ClusterID(), Keys: n.ring.List(at), Drains: d}
}

// waitIdentical waits until every live node holds the same replicated state.
func (tc *testCluster) waitIdentical() {
	tc.t.Helper()
	testutil.Eventually(tc.t, 15*time.Second, "identical replicated state on every node", func() bool {
		nodes := tc.live()
		for _, n := range nodes[1:] {
			if !reflect.DeepEqual(dump(n), dump(nodes[0])) {
				return false
			}
		}
		return true
	})
}

// admin calls a node's admin API.
func admin(t *testing.T, n *Node, method, path string, body any) (int, map[string]any) {
	t.Helper()
	resp := adminSend(t, n, method, path, nil, body)
	return resp.StatusCode, jsonMap(resp)
}

// adminSend calls a node's admin API through the API client with extra
// headers, failing the test when the node does not answer.
func adminSend(t *testing.T, n *Node, method, path string, hdr map[string]string, body any) *apiclient.Response {
	t.Helper()
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	c := apiclient.Client{Base: n.AdminAddr().String(), HTTP: http.DefaultClient}
	resp, err := c.Send(context.Background(), method, path, body, h)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// jsonMap is an answer's JSON object (nil when it is not one).
func jsonMap(resp *apiclient.Response) map[string]any {
	var m map[string]any
	json.Unmarshal(resp.Body, &m)
	return m
}

// adminWrite is admin for a write, retried while the answer is a 503 (an
// election under way: the API says to retry), as a client would.
func adminWrite(t *testing.T, n *Node, method, path string, body any) (status int, m map[string]any) {
	t.Helper()
	answered := false
	defer func() {
		if !answered {
			t.Logf("%s %s last answered %d %v", method, path, status, m)
		}
	}()
	testutil.Eventually(t, 15*time.Second, method+" "+path+" answered other than 503", func() bool {
		status, m = admin(t, n, method, path, body)
		return status != http.StatusServiceUnavailable
	})
	answered = true
	return status, m
}

// proxyGet sends GET / to a node's proxy with an optional cookie and
// returns the status, the backend that answered and any new cookie.
func proxyGet(t *testing.T, n *Node, cookie string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+n.ProxyAddrs()[0].String()+"/", nil)
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	set := ""
	if c := resp.Header.Get("Set-Cookie"); c != "" {
		set = strings.Split(c, ";")[0]
	}
	return resp.StatusCode, resp.Header.Get("X-Demo-Backend"), set
}

func TestClusterAnyNodeOpensAnyNodesCookie(t *testing.T) {
	tc := newTestCluster(t, 3)
	nodes := tc.form(3)
	tc.waitIdentical()
	for _, issuer := range nodes {
		status, backend, cookie := proxyGet(t, issuer, "")
		if status != 200 || cookie == "" {
			t.Fatalf("%s: first request %d, cookie %q", issuer.ID(), status, cookie)
		}
		for _, n := range nodes {
			// Return503Error: a cookie any node failed to open would be a 503.
			st, got, again := proxyGet(t, n, cookie)
			if st != 200 || got != backend || again != "" {
				t.Fatalf("cookie from %s on %s: status %d backend %q (want %q) new cookie %q", issuer.ID(), n.ID(), st, got, backend, again)
			}
		}
	}
	var body map[string]any
	testutil.Eventually(t, 10*time.Second, "status naming a leader and three members", func() bool {
		status, b := admin(t, nodes[0], "GET", "/v1/status", nil)
		body = b
		return status == 200 && b["leader_id"] != "" && b["raft_state"] != "" && b["members"].(float64) == 3
	})
	_, body = admin(t, nodes[0], "GET", "/v1/members", nil)
	voters := 0
	for _, m := range body["members"].([]any) {
		m := m.(map[string]any)
		if m["state"] != "alive" {
			t.Errorf("member %v state %v", m["id"], m["state"])
		}
		if m["raft"] == "voter" {
			voters++
		}
	}
	if voters != 3 {
		t.Fatalf("members: %d voters, want 3: %v", voters, body)
	}
}

func TestClusterRotationOnFollowerActivatesEverywhereWithoutFailedDecrypt(t *testing.T) {
	tc := newTestCluster(t, 2)
	nodes := tc.form(3)
	_, _, oldCookie := proxyGet(t, nodes[0], "")
	f := tc.follower()
	status, body := adminWrite(t, f, "POST", "/v1/keyring/rotate", nil)
	if status != 200 || body["id"] == "" {
		t.Fatalf("rotate on follower %s: %d %v", f.ID(), status, body)
	}
	id := body["id"].(string)
	// Installed everywhere before it encrypts anywhere: while it is not
	// active on every node, every node already knows it.
	testutil.Eventually(t, 10*time.Second, "the rotated key active on every node", func() bool {
		all := true
		for _, n := range nodes {
			active := n.ring.ActiveKeyID(time.Now())
			if active == id {
				for _, m := range nodes {
					if !slices.ContainsFunc(m.ring.List(time.Now()), func(md keyring.Metadata) bool { return md.ID == id }) {
						t.Fatalf("%s encrypts with %s before %s holds it", n.ID(), id, m.ID())
					}
				}
			}
			all = all && active == id
		}
		return all
	})
	_, _, newCookie := proxyGet(t, nodes[1], "")
	for _, n := range nodes {
		for _, c := range []string{oldCookie, newCookie} {
			if st, _, again := proxyGet(t, n, c); st != 200 || again != "" {
				t.Fatalf("after rotation %s answered %d (new cookie %q) for %q", n.ID(), st, again, c)
			}
		}
	}
	tc.waitIdentical()
	// Revoking the active key on a follower: a replacement encrypts at once
	// and values under the revoked key stop opening on every node.
	status, body = adminWrite(t, f, "POST", "/v1/keyring/"+id+"/revoke", nil)
	if status != 200 {
		t.Fatalf("revoke: %d %v", status, body)
	}
	testutil.Eventually(t, 5*time.Second, "revocation on every node", func() bool {
		for _, n := range nodes {
			if a := n.ring.ActiveKeyID(time.Now()); a == "" || a == id {
				return false
			}
			if st, _, _ := proxyGet(t, n, newCookie); st != 503 {
				return false
			}
		}
		return true
	})
	tc.waitIdentical()
}

func TestClusterDrainIsClusterWideAndSurvivesRestart(t *testing.T) {
	tc := newTestCluster(t, 2)
	nodes := tc.form(3)
	f := tc.follower()
	status, body := adminWrite(t, f, "POST", "/v1/clusters/app/destinations/d1/drain", nil)
	if status != 200 || body["draining"] != true {
		t.Fatalf("drain on follower: %d %v", status, body)
	}
	var deadline time.Time
	testutil.Eventually(t, 5*time.Second, "d1 draining on every node with one deadline", func() bool {
		for i, n := range nodes {
			on, dl := n.proxy.Cluster("app").Destination("d1").Draining()
			if !on || (i > 0 && !dl.Equal(deadline)) {
				return false
			}
			deadline = dl
		}
		return true
	})
	// New sessions never go to d1, on any node.
	for _, n := range nodes {
		for range 4 {
			if _, b, _ := proxyGet(t, n, ""); b == "b1" {
				t.Fatalf("%s sent a new session to draining d1", n.ID())
			}
		}
	}
	// A restarted node still drains d1 (state from its data dir and the log).
	id := nodes[2].ID()
	cfg := tc.cfgs[id]
	tc.stop(id)
	n := tc.start(cfg)
	testutil.Eventually(t, 15*time.Second, "d1 draining after restart", func() bool {
		on, dl := n.proxy.Cluster("app").Destination("d1").Draining()
		return on && dl.Equal(deadline)
	})
	tc.waitIdentical()
	if status, _ := adminWrite(t, nodes[0], "DELETE", "/v1/clusters/app/destinations/d1/drain", nil); status != 200 {
		t.Fatalf("undo drain: %d", status)
	}
	testutil.Eventually(t, 5*time.Second, "d1 no longer draining anywhere", func() bool {
		for _, n := range tc.live() {
			if on, _ := n.proxy.Cluster("app").Destination("d1").Draining(); on {
				return false
			}
		}
		return true
	})
}

func TestClusterMinorityRefusesWritesNamingUnreachableNodes(t *testing.T) {
	tc := newTestCluster(t, 1)
	nodes := tc.form(3)
	survivor := nodes[0]
	_, _, cookie := proxyGet(t, survivor, "")
	tc.stop(nodes[1].ID())
	tc.stop(nodes[2].ID())
	testutil.Eventually(t, 20*time.Second, "the survivor losing its leader", func() bool { return survivor.Leader() == "" })
	status, body := admin(t, survivor, "POST", "/v1/keyring/rotate", nil)
	msg, _ := body["error"].(string)
	if status != 503 || !strings.Contains(msg, "no Raft leader") || !strings.Contains(msg, "n2") || !strings.Contains(msg, "n3") {
		t.Fatalf("write on the minority: %d %q, want 503 naming n2 and n3", status, msg)
	}
	// The data path goes on: the session still opens.
	if st, b, again := proxyGet(t, survivor, cookie); st != 200 || b != "b1" || again != "" {
		t.Fatalf("minority data path: %d %q %q", st, b, again)
	}
}

func TestClusterNodeRestartedAloneOpensValuesUnderEveryCommittedKey(t *testing.T) {
	tc := newTestCluster(t, 1)
	nodes := tc.form(3)
	var cookies []string
	for range 3 {
		_, body := adminWrite(t, tc.waitLeader(), "POST", "/v1/keyring/rotate", nil)
		id := body["id"].(string)
		testutil.Eventually(t, 10*time.Second, "rotation active everywhere", func() bool {
			for _, n := range nodes {
				if n.ring.ActiveKeyID(time.Now()) != id {
					return false
				}
			}
			return true
		})
		_, _, c := proxyGet(t, nodes[0], "")
		cookies = append(cookies, c)
	}
	cfg := tc.cfgs["n3"]
	tc.stopAll()
	n := tc.start(cfg) // alone: no peer answers
	for _, c := range cookies {
		if st, _, again := proxyGet(t, n, c); st != 200 || again != "" {
			t.Fatalf("node restarted alone: %d (new cookie %q) for a value sealed before it stopped", st, again)
		}
	}
}

func TestClusterFormsExactlyOnceInRandomStartOrder(t *testing.T) {
	for round := range 2 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			tc := newTestCluster(t, 1)
			// Pre-bind gossip so every node can be told every address up front,
			// as a DNS name behind which all nodes stand would.
			ids := []string{"n1", "n2", "n3"}
			rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			var join []string
			for _, id := range ids {
				time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond) // a random start delay, not a wait for a condition
				n := tc.start(tc.config(id, 3, slices.Clone(join)))
				join = append(join, n.GossipAddr())
			}
			tc.waitSettled()
			tc.waitIdentical()
			cid := ""
			for _, n := range tc.live() {
				servers, err := n.store.Servers()
				if err != nil || len(servers) != 3 {
					t.Fatalf("%s sees servers %v (%v), want all three", n.ID(), servers, err)
				}
				if cid != "" && n.store.ClusterID() != cid {
					t.Fatalf("two clusters formed: %s and %s", cid, n.store.ClusterID())
				}
				cid = n.store.ClusterID()
			}
		})
	}
}

func TestClusterJoinPromoteLeaveAndRemove(t *testing.T) {
	tc := newTestCluster(t, 1)
	nodes := tc.form(3)
	// A fourth node started with --join only is added by the leader as a
	// non-voter and stays one while a promotion would make the voters even;
	// with a fifth, both become voters once caught up.
	n4 := tc.start(tc.config("n4", 0, []string{nodes[0].GossipAddr()}))
	testutil.Eventually(t, 20*time.Second, "n4 a non-voter", func() bool { return raftRole(tc.leader(), "n4") == "nonvoter" })
	tc.start(tc.config("n5", 0, []string{nodes[1].GossipAddr()}))
	testutil.Eventually(t, 45*time.Second, "n4 and n5 voters", func() bool {
		return raftRole(tc.leader(), "n4") == "voter" && raftRole(tc.leader(), "n5") == "voter"
	})
	tc.waitIdentical()
	// tether leave: n4 leaves and the leader drops it (and demotes one
	// voter to keep the count odd).
	if status, body := admin(t, n4, "POST", "/v1/leave", nil); status != 200 {
		t.Fatalf("leave: %d %v", status, body)
	}
	select {
	case <-n4.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("n4 did not ask to stop after leaving")
	}
	tc.stop("n4")
	testutil.Eventually(t, 20*time.Second, "n4 out of the Raft configuration", func() bool { return raftRole(tc.leader(), "n4") == "" })
	// DELETE /v1/members/{id} refuses a live node, and removes a failed one.
	victim := tc.follower()
	if status, body := adminWrite(t, tc.waitLeader(), "DELETE", "/v1/members/"+victim.ID(), nil); status != 409 {
		t.Fatalf("remove of live %s: %d %v, want 409", victim.ID(), status, body)
	}
	tc.stop(victim.ID())
	other := tc.follower()
	testutil.Eventually(t, 20*time.Second, "the stopped node seen failed", func() bool {
		for _, m := range tc.waitLeader().members.Members() {
			if m.ID == victim.ID() {
				return m.State != "alive"
			}
		}
		return true
	})
	status, body := adminWrite(t, other, "DELETE", "/v1/members/"+victim.ID(), nil)
	if status != 200 {
		t.Fatalf("remove %s through %s: %d %v", victim.ID(), other.ID(), status, body)
	}
	testutil.Eventually(t, 10*time.Second, "victim removed", func() bool { return raftRole(tc.leader(), victim.ID()) == "" })
	if status, _ := admin(t, other, "DELETE", "/v1/members/nobody", nil); status != 404 {
		t.Fatalf("remove unknown member: %d, want 404", status)
	}
}

// raftRole is "voter", "nonvoter" or "" for id in n's Raft configuration.
func raftRole(n *Node, id string) string {
	if n == nil {
		return "?"
	}
	servers, err := n.store.Servers()
	if err != nil {
		return "?"
	}
	for _, s := range servers {
		if s.ID == id {
			if s.Voter {
				return "voter"
			}
			return "nonvoter"
		}
	}
	return ""
}

func TestClusterSevenNodesKeepFiveVotersWhenOneFails(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow in-process cluster test (over 5 s); make test runs it")
	}
	tc := newTestCluster(t, 1)
	nodes := tc.form(3)
	for i := 4; i <= 7; i++ {
		tc.start(tc.config(fmt.Sprintf("n%d", i), 3, []string{nodes[0].GossipAddr()}))
	}
	count := func() (voters, non int) {
		l := tc.leader()
		if l == nil {
			return 0, 0
		}
		servers, err := l.store.Servers()
		if err != nil {
			return 0, 0
		}
		for _, s := range servers {
			if s.Voter {
				voters++
			} else {
				non++
			}
		}
		return
	}
	testutil.Eventually(t, 30*time.Second, "5 voters and 2 non-voters", func() bool {
		v, nv := count()
		return v == 5 && nv == 2
	})
	tc.waitIdentical()
	// A voter (not the leader) fails: a caught-up non-voter takes its place.
	var victim string
	for _, n := range tc.live() {
		if !n.store.IsLeader() && raftRole(tc.leader(), n.ID()) == "voter" {
			victim = n.ID()
			break
		}
	}
	tc.stop(victim)
	testutil.Eventually(t, 30*time.Second, "five live voters again", func() bool {
		l := tc.leader()
		if l == nil {
			return false
		}
		servers, _ := l.store.Servers()
		live := 0
		for _, s := range servers {
			if s.Voter && s.ID != victim {
				live++
			}
		}
		return live == 5
	})
	// Non-voters replicate the state too.
	_, body := adminWrite(t, tc.waitLeader(), "POST", "/v1/keyring/rotate", nil)
	id, _ := body["id"].(string)
	defer func() {
		if t.Failed() {
			for _, n := range tc.live() {
				t.Logf("%s: leader %q active %q durable %d applied %d", n.ID(), n.Leader(), n.ring.ActiveKeyID(time.Now()), n.store.DurableIndex(), n.store.AppliedIndex())
			}
		}
	}()
	tc.activeOnEvery(id, 60*time.Second)
	tc.waitIdentical()
}

func TestAdminRefusesCrossSiteWrites(t *testing.T) {
	n, _ := startNode(t, "")
	addr := n.AdminAddr().String()
	cases := []struct {
		desc   string
		host   string
		origin string
		site   string
		want   int
	}{
		{desc: "same origin by IP", host: addr, origin: "http://" + addr, want: 200},
		{desc: "no origin (CLI, curl)", host: addr, want: 200},
		{desc: "localhost", host: "localhost:9901", want: 200},
		{desc: "foreign origin", host: addr, origin: "https://evil.example", want: 403},
		{desc: "null origin", host: addr, origin: "null", want: 403},
		{desc: "DNS rebinding: a foreign host name", host: "evil.example:9901", want: 403},
		{desc: "cross-site fetch metadata", host: addr, site: "cross-site", want: 403},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			req, _ := http.NewRequest("POST", "http://"+addr+"/v1/keyring/rotate", nil)
			req.Host = c.host
			if c.origin != "" {
				req.Header.Set("Origin", c.origin)
			}
			if c.site != "" {
				req.Header.Set("Sec-Fetch-Site", c.site)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
		})
	}
}

// TestLeaderRotatesBeforeExpiryAndPrunesAfterRetention drives the
// leader's round with a clock moved ahead: no real time passes.
func TestLeaderRotatesBeforeExpiryAndPrunesAfterRetention(t *testing.T) {
	tc := newTestCluster(t, 1)
	now := time.Now()
	n := startSolo(t, tc, now)
	first := n.ring.ActiveKeyID(now)
	var firstMD keyring.Metadata
	for _, md := range n.ring.List(now) {
		if md.ID == first {
			firstMD = md
		}
	}
	cases := []struct {
		desc string
		at   time.Time
		want func() bool
	}{
		{desc: "well before expiry: nothing changes", at: now.Add(24 * time.Hour), want: func() bool { return n.ring.Len() == 1 }},
		{desc: "within a tenth of the lifetime of expiry: a new key is installed, then activated",
			at: firstMD.Expires.Add(-time.Hour),
			want: func() bool {
				a := n.ring.ActiveKeyID(firstMD.Expires.Add(-time.Hour))
				return n.ring.Len() == 2 && a != "" && a != first
			}},
		{desc: "past expiry plus retention: the old key is pruned",
			at: firstMD.Expires.Add(n.ring.Retention() + time.Hour),
			want: func() bool {
				return n.ring.Len() == 1 && !slices.ContainsFunc(n.ring.List(now), func(md keyring.Metadata) bool { return md.ID == first })
			}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("keys at %s: %+v", c.at, n.ring.List(c.at))
				}
			}()
			testutil.Eventually(t, 5*time.Second, "the leader's round to get there", func() bool {
				n.lead.Round(c.at)
				return c.want()
			})
		})
	}
}

// TestClusterHealthViewSurvivesReloadThatRebuildsDestinations: with one
// prober per destination, a non-prober learns a destination is unhealthy by
// gossip, and a reload that rebuilds that destination re-applies the view
// at once (it does not probe it itself).
func TestClusterHealthViewSurvivesReloadThatRebuildsDestinations(t *testing.T) {
	var sick atomic.Bool
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && sick.Load() {
			w.WriteHeader(503)
		}
	}))
	t.Cleanup(b.Close)
	tc := newTestCluster(t, 1)
	cfgFor := func(path string) string {
		return fmt.Sprintf(`{
	  "Listeners": [ { "Address": "127.0.0.1:0" } ],
	  "ReverseProxy": {
	    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
	    "Clusters": { "app": {
	      "HealthCheck": { "Active": { "Enabled": true, "Interval": "00:00:00.100", "Timeout": "00:00:00.500", "Path": "/healthz",
	                                   "ConsecutiveFailures": 1, "ProbeFanout": 1 } },
	      "Destinations": { "d1": { "Address": "%s%s" } } } }
	  }
	}`, b.URL, path)
	}
	os.WriteFile(tc.cfgPath, []byte(cfgFor("/")), 0o600)
	nodes := tc.form(3)
	sick.Store(true)
	var prober string
	testutil.Eventually(t, 15*time.Second, "d1 unhealthy in every node's view", func() bool {
		for _, n := range nodes {
			if n.proxy.Cluster("app").Destination("d1").ActiveHealth() != upstream.Unhealthy {
				return false
			}
			if ps := n.health.gossip.Probers("app", "d1", 1); len(ps) == 1 {
				prober = ps[0]
			}
		}
		return true
	})
	var other *Node
	for _, n := range nodes {
		if n.ID() != prober {
			other = n
		}
	}
	if got := other.proxy.Cluster("app").Destination("d1").LocalHealth(); got != upstream.Unknown {
		t.Fatalf("non-prober %s has a local verdict %v: it probed", other.ID(), got)
	}
	// A new address rebuilds d1 on reload; the view applies to it at once.
	os.WriteFile(tc.cfgPath, []byte(cfgFor("/v2/")), 0o600)
	if err := other.Reload(); err != nil {
		t.Fatal(err)
	}
	d := other.proxy.Cluster("app").Destination("d1")
	if d.Address.Path != "/v2/" {
		t.Fatalf("reload did not rebuild d1: %v", d.Address)
	}
	if h := d.ActiveHealth(); h != upstream.Unhealthy {
		t.Fatalf("after the reload %s sees d1 %v, want the cluster's unhealthy", other.ID(), h)
	}
}

// TestNodeOfAnotherClusterRefusesToJoin: two single-node clusters with the
// same secret; asking one to join the other fails naming both cluster ids.
func TestNodeOfAnotherClusterRefusesToJoin(t *testing.T) {
	tc := newTestCluster(t, 1)
	a := tc.start(tc.config("a", 0, nil))
	b := tc.start(tc.config("b", 0, nil))
	testutil.Eventually(t, 15*time.Second, "both clusters have ids", func() bool {
		return a.store.ClusterID() != "" && b.store.ClusterID() != "" && a.GossipAddr() != ""
	})
	testutil.Eventually(t, 10*time.Second, "cluster ids gossiped", func() bool {
		return a.members.Local().ClusterID != "" && b.members.Local().ClusterID != ""
	})
	status, body := admin(t, b, "POST", "/v1/join", map[string]any{"addresses": []string{a.GossipAddr()}})
	msg, _ := body["error"].(string)
	if status != 409 || !strings.Contains(msg, a.store.ClusterID()) || !strings.Contains(msg, b.store.ClusterID()) {
		t.Fatalf("join across clusters: %d %q, want 409 naming %s and %s", status, msg, a.store.ClusterID(), b.store.ClusterID())
	}
}
