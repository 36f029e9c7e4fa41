package test

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/test/testutil"
)

// secretID is a secret's id as the admin API shows it: 16 hex digits of
// HKDF-SHA256(secret, info "tether cluster secret id v1").
func secretID(secret []byte) string {
	k, _ := hkdf.Key(sha256.New, secret, nil, "tether cluster secret id v1", 8)
	return hex.EncodeToString(k)
}

// gossipKey is memberlist's key for secret: HKDF-SHA256(secret, info
// "tether gossip key v1").
func gossipKey(secret []byte) []byte {
	k, _ := hkdf.Key(sha256.New, secret, nil, "tether gossip key v1", 32)
	return k
}

// probe is a bare memberlist node holding one cluster secret's gossip key:
// it asks a tether node for keys as a member would.
type probe struct {
	ml      *memberlist.Memberlist
	replies chan []byte
}

func (p *probe) NodeMeta(int) []byte { return []byte(`{"id":"probe","v":"probe"}`) }
func (p *probe) NotifyMsg(b []byte) {
	if len(b) > 0 && b[0] == 'K' {
		select {
		case p.replies <- append([]byte(nil), b[1:]...):
		default:
		}
	}
}
func (p *probe) GetBroadcasts(int, int) [][]byte { return nil }
func (p *probe) LocalState(bool) []byte          { return nil }
func (p *probe) MergeRemoteState([]byte, bool)   {}

func newProbe(t *testing.T, secret []byte) *probe {
	t.Helper()
	p := &probe{replies: make(chan []byte, 4)}
	c := memberlist.DefaultLocalConfig()
	c.Name, c.BindAddr, c.BindPort, c.AdvertisePort = "probe", "127.0.0.1", 0, 0
	c.SecretKey = gossipKey(secret)
	c.Delegate = p
	c.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	p.ml = ml
	t.Cleanup(func() { ml.Shutdown() })
	return p
}

// askKeys sends a key request (what a member that lacks keys sends the
// leader) to the node at gossip address addr and waits for the answer.
func (p *probe) askKeys(t *testing.T, id, addr string, wait time.Duration) (map[string]any, bool) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	pn, _ := strconv.Atoi(port)
	req, _ := json.Marshal(map[string]any{"f": "probe", "id": "0000000000000000", "n": "probe-nonce", "v": 2})
	to := &memberlist.Node{Name: id, Addr: net.ParseIP(host), Port: uint16(pn)}
	if err := p.ml.SendReliable(to, append([]byte{'k'}, req...)); err != nil {
		t.Logf("sending the key request: %v", err)
	}
	select {
	case b := <-p.replies:
		var rep map[string]any
		json.Unmarshal(b, &rep)
		return rep, true
	case <-time.After(wait):
		return nil, false
	}
}

func secretsOf(t *testing.T, a *clusterAgent) map[string]any {
	t.Helper()
	st, body := adminJSON(t, "GET", a.adminURL+"/v1/secrets")
	if st != 200 {
		t.Fatalf("%s: GET /v1/secrets: %d %v", a.id, st, body)
	}
	return body
}

// TestClusterSecretRotatesUnderLoadWithoutAFailedRequest: three agents
// serve sessions on every node while keys rotate every 300 ms; `tether
// secret install`, `use` and `remove` run through three different nodes.
// No request fails and no session moves. Afterwards every node uses the new
// secret and keeps it (mode 0600) in its data dir, and a peer with the old
// secret gets nothing: the Raft handshake refuses it, gossip refuses it,
// and its key requests go unanswered, while the same requests with the new
// secret are answered with keys that open only under the new one.
func TestClusterSecretRotatesUnderLoadWithoutAFailedRequest(t *testing.T) {
	b1, b2, b3 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2"), testutil.NewBackend(t, "b3")
	e := newClusterEnv(t, cookieConfig(b1, b2, b3))
	nodes := e.form(3)
	oldSecret, _ := os.ReadFile(e.Secret)
	newSecret := []byte("the-rotated-e2e-cluster-secret-fedcba9876543210")
	newFile := filepath.Join(t.TempDir(), "new-secret")
	testutil.WriteFile(t, newFile, string(newSecret)+"\n")
	oldID, newID := secretID([]byte(strings.TrimSpace(string(oldSecret)))), secretID(newSecret)

	type session struct{ cookie, backend string }
	sessions := make([]session, 24)
	for i := range sessions {
		st, hdr, _ := testutil.Get(t, http.DefaultClient, nodes[i%3].proxyURL+"/", nil)
		if st != 200 || hdr.Get("Set-Cookie") == "" {
			t.Fatalf("first request of session %d: %d", i, st)
		}
		sessions[i] = session{strings.Split(hdr.Get("Set-Cookie"), ";")[0], hdr.Get("X-Demo-Backend")}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rotations, sent, failed, moved atomic.Int64
	var firstFailure atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			if st, _ := adminJSON(t, "POST", nodes[rand.IntN(3)].adminURL+"/v1/keyring/rotate"); st == 200 {
				rotations.Add(1)
			}
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s := sessions[(w+i*4)%len(sessions)]
				req, _ := http.NewRequest("GET", nodes[rand.IntN(3)].proxyURL+"/", nil)
				req.Header.Set("Cookie", s.cookie)
				resp, err := client.Do(req)
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, resp.Status)
				} else if resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("X-Demo-Backend") != s.backend {
					moved.Add(1)
				}
			}
		}()
	}
	for i, step := range []struct{ op, file string }{{"install", newFile}, {"use", newFile}, {"remove", e.Secret}} {
		start := time.Now()
		code, out := runTether(t, "secret", step.op, step.file, "--admin", nodes[i].adminURL)
		t.Logf("tether secret %s via %s: exit %d in %s: %s", step.op, nodes[i].id, code, time.Since(start).Round(time.Millisecond), strings.SplitN(out, "\n", 2)[0])
		if code != 0 {
			close(stop)
			wg.Wait()
			t.Fatalf("tether secret %s: exit %d:\n%s", step.op, code, out)
		}
	}
	// Requests and rotations under the new secret alone.
	after := sent.Load()
	testutil.Eventually(t, 30*time.Second, "500 more requests and 2 more rotations", func() bool { return sent.Load() > after+500 })
	r := rotations.Load()
	testutil.Eventually(t, 30*time.Second, "2 more rotations", func() bool { return rotations.Load() >= r+2 })
	close(stop)
	wg.Wait()
	t.Logf("%d requests, %d key rotations during the secret rotation: %d failed, %d sessions moved", sent.Load(), rotations.Load(), failed.Load(), moved.Load())
	if failed.Load() > 0 || moved.Load() > 0 {
		t.Fatalf("%d requests failed (first: %v), %d sessions moved", failed.Load(), firstFailure.Load(), moved.Load())
	}

	for _, a := range nodes {
		testutil.Eventually(t, 10*time.Second, a.id+" uses the new secret alone", func() bool {
			s := secretsOf(t, a)
			rows, _ := s["secrets"].([]any)
			if s["primary"] != newID || len(rows) != 1 {
				return false
			}
			row := rows[0].(map[string]any)
			return fmt.Sprint(row["used_by"]) == "[n1 n2 n3]" && strings.Contains(fmt.Sprint(s["removed"]), oldID)
		})
		fi, err := os.Stat(filepath.Join(a.dataDir, "cluster-secrets.json"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: the secrets it keeps: %v, mode %v", a.id, err, fi)
		}
		testutil.Eventually(t, 10*time.Second, a.id+" forgets the old secret's bytes", func() bool {
			b, _ := os.ReadFile(filepath.Join(a.dataDir, "cluster-secrets.json"))
			var d struct {
				Secrets []struct {
					ID     string `json:"id"`
					Secret []byte `json:"secret"`
				} `json:"secrets"`
			}
			json.Unmarshal(b, &d)
			for _, s := range d.Secrets {
				if s.ID == oldID && len(s.Secret) > 0 {
					return false
				}
			}
			return len(d.Secrets) == 2
		})
	}

	// Raft: the old secret's proof is refused on every node, the new one's answered.
	for _, a := range nodes {
		raftAddr := e.RaftAddr(a.id)
		if testutil.RaftProves(t, raftAddr, oldSecret) {
			t.Errorf("%s's Raft port accepted the old secret", a.id)
		}
		if !testutil.RaftProves(t, raftAddr, newSecret) {
			t.Errorf("%s's Raft port refused the new secret", a.id)
		}
	}
	// Gossip: a node with the old secret cannot join.
	old := newProbe(t, oldSecret)
	if _, err := old.ml.Join([]string{nodes[0].gossip}); err == nil {
		t.Error("a gossip node with the old secret joined")
	}
	// Key fetch: the leader answers a member with the new secret with keys
	// wrapped under it; the same request under the old secret goes
	// unanswered.
	leader := leaderOf(t, nodes[0])
	var leaderAgent *clusterAgent
	for _, a := range nodes {
		if a.id == leader {
			leaderAgent = a
		}
	}
	refusedBefore, _ := metricSum(t, leaderAgent, "tether_gossip_streams_refused_total")
	if rep, ok := old.askKeys(t, leader, leaderAgent.gossip, 3*time.Second); ok {
		t.Fatalf("a key request under the old secret was answered: %v", rep)
	}
	testutil.Eventually(t, 5*time.Second, "the old secret's key request refused by the leader's gossip", func() bool {
		n, _ := metricSum(t, leaderAgent, "tether_gossip_streams_refused_total")
		return n > refusedBefore
	})
	fresh := newProbe(t, newSecret)
	if _, err := fresh.ml.Join([]string{leaderAgent.gossip}); err != nil {
		t.Fatalf("a gossip node with the new secret: %v", err)
	}
	defer fresh.ml.Leave(time.Second)
	var rep map[string]any
	testutil.Eventually(t, 20*time.Second, "the leader answers a key request under the new secret", func() bool {
		var ok bool
		rep, ok = fresh.askKeys(t, leader, leaderAgent.gossip, 2*time.Second)
		return ok && rep["l"] != nil
	})
	wrapped, _ := json.Marshal(rep["l"])
	var lacking []byte
	json.Unmarshal(wrapped, &lacking)
	newKEK, _ := keyring.DeriveKEK(newSecret, keyring.InfoTransfer)
	oldKEK, _ := keyring.DeriveKEK([]byte(strings.TrimSpace(string(oldSecret))), keyring.InfoTransfer)
	if keys, err := keyring.UnwrapKeys(newKEK, lacking); err != nil || len(keys) == 0 {
		t.Fatalf("the keys the leader sent do not open under the new secret: %v", err)
	}
	if _, err := keyring.UnwrapKeys(oldKEK, lacking); err == nil {
		t.Fatal("the keys the leader sent open under the old secret")
	}
}

// TestSecretRotationWaitsForADownNodeAndItCatchesUp: with n3 stopped, the
// new secret is installed and used; its removal is refused naming n3 (it
// would come back unable to talk). n3 restarted with the old secret file
// learns the new one from the log and switches to it; then the removal
// goes through, and n3, restarted again with the old file, still rejoins on
// the secrets it kept, saying its file holds a removed secret. A node down
// during a forced removal is refused on its return until it is given the
// new secret, with which it catches up.
func TestSecretRotationWaitsForADownNodeAndItCatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts nodes of a three-node cluster several times")
	}
	e := newClusterEnv(t, cookieConfig(testutil.NewBackend(t, "b1")))
	nodes := e.form(3)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	dir := t.TempDir()
	secretB, secretC := filepath.Join(dir, "b"), filepath.Join(dir, "c")
	testutil.WriteFile(t, secretB, "second-cluster-secret-0123456789abcdef")
	testutil.WriteFile(t, secretC, "third-cluster-secret-0123456789abcdef")
	idB, idC := secretID([]byte("second-cluster-secret-0123456789abcdef")), secretID([]byte("third-cluster-secret-0123456789abcdef"))

	// stopNode stops a and waits until the others agree on a leader (it
	// may have led).
	stopNode := func(a *clusterAgent, others ...*clusterAgent) {
		a.Signal(syscall.SIGTERM)
		if code := a.Wait(30 * time.Second); code != 0 {
			t.Fatalf("%s exit %d", a.id, code)
		}
		testutil.Eventually(t, 30*time.Second, "a leader after "+a.id+" stopped", func() bool {
			for _, o := range others {
				if l := leaderOf(t, o); l == "" || l == a.id {
					return false
				}
			}
			return true
		})
	}
	restart := func(a *clusterAgent, secretFile string) *clusterAgent {
		saved := e.Secret
		e.Secret = secretFile
		defer func() { e.Secret = saved }()
		b := e.startNode(a.id, a.dataDir, a.extra...)
		return b
	}
	ready := func(a *clusterAgent) {
		testutil.Eventually(t, 60*time.Second, a.id+" ready and in step", func() bool {
			st, _, _ := testutil.Get(t, http.DefaultClient, a.adminURL+"/readyz", nil)
			return st == 200
		})
	}
	// tether runs the CLI; an answer that says to retry (503: an election
	// under way, with one node down the two others must both keep up) is
	// retried, as an operator would.
	tether := func(want int, args ...string) string {
		t.Helper()
		var code int
		var out string
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("tether %v answers other than 503", args), func() bool {
			code, out = runTether(t, args...)
			return !strings.Contains(out, "(HTTP 503)")
		})
		if code != want {
			t.Fatalf("tether %v: exit %d, want %d:\n%s", args, code, want, out)
		}
		return out
	}

	stopNode(n3, n1, n2)
	tether(0, "secret", "install", secretB, "--admin", n1.adminURL)
	tether(0, "secret", "use", secretB, "--admin", n2.adminURL)
	if out := tether(1, "secret", "remove", e.Secret, "--admin", n1.adminURL); !strings.Contains(out, "n3") || !strings.Contains(out, "down") {
		t.Fatalf("removal while n3 is down: %s", out)
	}
	n3 = restart(n3, e.Secret) // the old file: it catches up from the log
	ready(n3)
	testutil.Eventually(t, 30*time.Second, "n3 uses the new secret", func() bool {
		rows, _ := secretsOf(t, n1)["secrets"].([]any)
		for _, r := range rows {
			if m := r.(map[string]any); m["id"] == idB {
				return strings.Contains(fmt.Sprint(m["used_by"]), "n3")
			}
		}
		return false
	})
	tether(0, "secret", "remove", e.Secret, "--admin", n3.adminURL)
	stopNode(n3, n1, n2)
	n3 = restart(n3, e.Secret)
	ready(n3)
	if !strings.Contains(n3.Stderr.String(), "--cluster-secret-file holds a secret the cluster removed") {
		t.Error("n3 restarted with a removed secret in its file did not say so")
	}
	testutil.Eventually(t, 30*time.Second, "n3 alive to n1 again", func() bool {
		_, m := adminJSON(t, "GET", n1.adminURL+"/v1/members")
		return strings.Count(fmt.Sprint(m["members"]), "state:alive") == 3
	})

	// A forced removal while n2 is down: n2 returns with what it had and
	// is refused until it is given the cluster's secret.
	stopNode(n2, n1, n3)
	tether(0, "secret", "install", secretC, "--admin", n1.adminURL)
	tether(0, "secret", "use", secretC, "--admin", n1.adminURL)
	tether(1, "secret", "remove", secretB, "--admin", n1.adminURL)
	tether(0, "secret", "remove", secretB, "--force", "--admin", n3.adminURL)
	if !testutil.RaftProves(t, e.RaftAddr("n1"), []byte("third-cluster-secret-0123456789abcdef")) || testutil.RaftProves(t, e.RaftAddr("n1"), []byte("second-cluster-secret-0123456789abcdef")) {
		t.Fatal("after the forced removal n1 should accept only the third secret")
	}
	n2 = restart(n2, secretC)
	ready(n2)
	testutil.Eventually(t, 30*time.Second, "n2 uses the third secret", func() bool {
		s := secretsOf(t, n2)
		return s["primary"] == idC && strings.Contains(fmt.Sprint(s["removed"]), idB)
	})

	// Once its file holds the secret in use, a node keeps no secret in its
	// data dir.
	kept := filepath.Join(n1.dataDir, "cluster-secrets.json")
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("n1 keeps no secrets while its file holds a removed one: %v", err)
	}
	stopNode(n1, n2, n3)
	n1 = restart(n1, secretC)
	ready(n1)
	testutil.Eventually(t, 30*time.Second, "n1 drops cluster-secrets.json", func() bool {
		_, err := os.Stat(kept)
		return os.IsNotExist(err)
	})
}
