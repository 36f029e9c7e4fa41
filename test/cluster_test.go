package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/node/apiclient"
	"github.com/tether-proxy/tether/test/testutil"
)

// clusterAgent is one `tether agent` of a multi-process cluster.
type clusterAgent struct {
	*agent
	id      string
	gossip  string
	extra   []string
	dataDir string
}

// clusterEnv is a test cluster: what its agents share, and the agents
// started, by id.
type clusterEnv struct {
	*testutil.Cluster
	t      *testing.T
	agents map[string]*clusterAgent
	mu     sync.Mutex
}

func newClusterEnv(t *testing.T, config string) *clusterEnv {
	c := testutil.NewCluster(t, tetherBin, config, "an-e2e-cluster-secret-0123456789abcdef")
	return &clusterEnv{Cluster: c, t: t, agents: map[string]*clusterAgent{}}
}

// startNode runs `tether agent` as node id with the cluster's flags plus
// extra, in dataDir ("" for a new one).
func (e *clusterEnv) startNode(id, dataDir string, extra ...string) *clusterAgent {
	e.t.Helper()
	ta := e.StartNode(id, dataDir, extra...)
	a := &clusterAgent{agent: &agent{proc: ta.Proc, proxyURL: ta.ProxyURL, adminURL: ta.AdminURL},
		id: id, gossip: ta.Gossip, extra: extra, dataDir: ta.DataDir}
	e.mu.Lock()
	e.agents[id] = a
	e.mu.Unlock()
	return a
}

// form starts n nodes with --bootstrap-expect n, each joining those before.
func (e *clusterEnv) form(n int) []*clusterAgent {
	var out []*clusterAgent
	var join []string
	for i := 1; i <= n; i++ {
		extra := []string{"--bootstrap-expect", fmt.Sprint(n)}
		if len(join) > 0 {
			extra = append(extra, "--join", strings.Join(join, ","))
		}
		a := e.startNode(fmt.Sprintf("n%d", i), "", extra...)
		join = append(join, a.gossip)
		out = append(out, a)
	}
	for _, a := range out {
		testutil.Eventually(e.t, 30*time.Second, a.id+" ready", func() bool {
			st, _, _ := testutil.Get(e.t, http.DefaultClient, a.adminURL+"/readyz", nil)
			return st == 200
		})
	}
	return out
}

// adminJSON calls an agent's admin API through the API client and decodes
// the answer (0, nil: the agent did not answer).
func adminJSON(t *testing.T, method, url string) (int, map[string]any) {
	t.Helper()
	c := apiclient.Client{Base: url, HTTP: http.DefaultClient}
	resp, err := c.Send(context.Background(), method, "", nil, nil)
	if err != nil {
		return 0, nil
	}
	var m map[string]any
	json.Unmarshal(resp.Body, &m)
	return resp.StatusCode, m
}

func cookieConfig(backends ...*testutil.Backend) string {
	return strings.Replace(configFor(catchAll, backends...), `"Policy": "HashCookie"`, `"Policy": "Cookie"`, 1)
}

// TestClusterRotatesKeysUnderLoadWithoutRedistributing: three agents, a
// key rotation every 250 ms through random nodes while sessions send
// requests to random nodes: no request fails, none is redistributed (a
// redistributed session would get a new cookie or another backend).
func TestClusterRotatesKeysUnderLoadWithoutRedistributing(t *testing.T) {
	b1, b2, b3 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2"), testutil.NewBackend(t, "b3")
	e := newClusterEnv(t, cookieConfig(b1, b2, b3))
	nodes := e.form(3)

	type session struct {
		cookie, backend string
	}
	sessions := make([]session, 24)
	for i := range sessions {
		st, hdr, _ := testutil.Get(t, http.DefaultClient, nodes[i%3].proxyURL+"/", nil)
		if st != 200 || hdr.Get("Set-Cookie") == "" {
			t.Fatalf("first request of session %d: %d", i, st)
		}
		sessions[i] = session{strings.Split(hdr.Get("Set-Cookie"), ";")[0], hdr.Get("X-Demo-Backend")}
	}

	stop := make(chan struct{})
	var rotations atomic.Int64
	var rotErr atomic.Value
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			st, body := adminJSON(t, "POST", nodes[rand.IntN(3)].adminURL+"/v1/keyring/rotate")
			if st != 200 {
				rotErr.Store(fmt.Sprintf("rotate: %d %v", st, body))
				continue
			}
			rotations.Add(1)
		}
	}()

	var sent, failed, redistributed atomic.Int64
	deadline := time.Now().Add(5 * time.Second)
	client := &http.Client{Timeout: 5 * time.Second}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline) && i < 5000; i++ {
				s := sessions[(w+i*4)%len(sessions)]
				req, _ := http.NewRequest("GET", nodes[rand.IntN(3)].proxyURL+"/", nil)
				req.Header.Set("Cookie", s.cookie)
				resp, err := client.Do(req)
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				} else if resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("X-Demo-Backend") != s.backend {
					redistributed.Add(1)
				}
			}
		}()
	}
	time.Sleep(5 * time.Second) // the load's duration, bounded by its deadline
	close(stop)
	wg.Wait()
	// New sessions after the rotations seal with the last key, and every
	// node opens them.
	_, hdr, _ := testutil.Get(t, http.DefaultClient, nodes[0].proxyURL+"/", nil)
	fresh := strings.Split(hdr.Get("Set-Cookie"), ";")[0]
	for _, n := range nodes {
		st, h, _ := testutil.Get(t, http.DefaultClient, n.proxyURL+"/", map[string]string{"Cookie": fresh})
		if st != 200 || h.Get("Set-Cookie") != "" {
			t.Fatalf("%s did not open a cookie sealed after the rotations: %d", n.id, st)
		}
	}
	t.Logf("requests sent %d, failed %d, redistributed %d, rotations %d", sent.Load(), failed.Load(), redistributed.Load(), rotations.Load())
	if v := rotErr.Load(); v != nil {
		t.Errorf("a rotation failed: %v", v)
	}
	if rotations.Load() < 10 || sent.Load() < 100 {
		t.Fatalf("too little happened: %d rotations, %d requests", rotations.Load(), sent.Load())
	}
	if failed.Load() != 0 || redistributed.Load() != 0 {
		t.Fatalf("%d requests failed and %d were redistributed during rotations", failed.Load(), redistributed.Load())
	}
}

// TestClusteredAgentRefusesToStartWithoutSecret: --join without a secret
// is a one-line error and a non-zero exit.
func TestClusteredAgentRefusesToStartWithoutSecret(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tether.json")
	testutil.WriteFile(t, cfg, configFor(catchAll, testutil.NewBackend(t, "b1")))
	p := start(t, nil, "agent", "--config", cfg, "--data-dir", dir, "--join", "127.0.0.1:1", "--admin-addr", "127.0.0.1:0")
	if code := p.Wait(30 * time.Second); code == 0 {
		t.Fatal("agent with --join and no secret started")
	}
	out := strings.TrimSpace(p.Stderr.String())
	if !strings.Contains(out, "--cluster-secret-file") || strings.Count(out, "\n") > 1 {
		t.Fatalf("want a one-line error naming --cluster-secret-file, got:\n%s", out)
	}
}

// TestClientCommandsAgainstACluster: members, status, destinations and
// drain through the CLI, with tables and JSON.
func TestClientCommandsAgainstACluster(t *testing.T) {
	e := newClusterEnv(t, cookieConfig(testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2")))
	nodes := e.form(3)
	run := func(args ...string) (int, string) {
		p := start(t, nil, append(args, "--admin", nodes[1].adminURL)...)
		code := p.Wait(30 * time.Second)
		return code, p.Stdout.String() + p.Stderr.String()
	}
	if code, out := run("members"); code != 0 || strings.Count(out, "voter") != 3 || !strings.Contains(out, "alive") {
		t.Fatalf("tether members: %d\n%s", code, out)
	}
	if code, out := run("status", "--json"); code != 0 || !strings.Contains(out, `"leader_id"`) {
		t.Fatalf("tether status --json: %d\n%s", code, out)
	}
	if code, out := run("drain", "app", "b1"); code != 0 {
		t.Fatalf("tether drain: %d\n%s", code, out)
	}
	testutil.Eventually(t, 10*time.Second, "b1 draining as seen from n3", func() bool {
		p := start(t, nil, "destinations", "--admin", nodes[2].adminURL)
		p.Wait(30 * time.Second)
		for _, l := range strings.Split(p.Stdout.String(), "\n") {
			if strings.Contains(l, " b1 ") && strings.Contains(l, " draining ") {
				return true
			}
		}
		return false
	})
	t.Run("keyring list never says a key waits for the leader", func(t *testing.T) {
		// A follower sees the leader's durable index a gossip round
		// late; the leader committed the key, so it is no wait to name.
		_, st := adminJSON(t, "GET", nodes[0].adminURL+"/v1/status")
		leader, _ := st["leader_id"].(string)
		var leaderURL string
		for _, a := range nodes {
			if a.id == leader {
				leaderURL = a.adminURL
			}
		}
		if leaderURL == "" {
			t.Fatalf("no leader in %v", st)
		}
		seen := 0
		for round := 0; round < 10 && seen < 4; round++ {
			// The API, not the CLI: a -race binary takes a second to
			// exit, and the key would be active by then.
			if code, m := adminJSON(t, "POST", leaderURL+"/v1/keyring/rotate"); code != 200 {
				t.Fatalf("rotate: %d %v", code, m)
			}
			var lists []*proc
			for _, a := range nodes {
				lists = append(lists, start(t, nil, "keyring", "list", "--admin", a.adminURL))
			}
			for i, p := range lists {
				if code := p.Wait(30 * time.Second); code != 0 {
					t.Fatalf("keyring list on %s: %d %s", nodes[i].id, code, p.Stderr.String())
				}
				for _, l := range strings.Split(p.Stdout.String(), "\n") {
					if !strings.Contains(l, " installed ") {
						continue
					}
					seen++
					if _, waits, ok := strings.Cut(l, "waiting for"); ok && strings.Contains(waits, leader) {
						t.Errorf("%s says a key waits for the leader %s:\n%s", nodes[i].id, leader, p.Stdout.String())
					}
				}
			}
		}
		if seen == 0 {
			t.Fatal("no listing showed an installed key: the check proved nothing")
		}
	})
	if code, out := run("keyring", "revoke", "no-such-key", "--yes"); code == 0 || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("revoke of an unknown key: exit %d, want non-zero with one line:\n%s", code, out)
	}
	p := start(t, nil, "--version")
	if code := p.Wait(30 * time.Second); code != 0 || !strings.Contains(p.Stdout.String(), "tether version") {
		t.Fatalf("--version: %d %s", code, p.Stdout.String())
	}
}
