package test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// The cluster figures of docs/BENCHMARKS.md: `make bench-cluster` runs
// TestClusterFigures with TETHER_BENCH_CLUSTER=1 (it takes a few minutes,
// so `make test` leaves it out). Each figure is measured over `trials`
// trials on three agents under a light request load.

const trials = 20

func percentiles(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("n=%d p50=%s p99=%s max=%s", len(s), at(0.5).Round(time.Millisecond), at(0.99).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// backgroundLoad sends requests to random nodes until stop closes.
func backgroundLoad(nodes func() []*clusterAgent, stop chan struct{}, wg *sync.WaitGroup) {
	client := &http.Client{Timeout: 2 * time.Second}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1_000_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ns := nodes()
				if len(ns) == 0 {
					continue
				}
				resp, err := client.Get(ns[rand.IntN(len(ns))].proxyURL + "/")
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				time.Sleep(2 * time.Millisecond) // pacing of the load, not a wait for a condition
			}
		}()
	}
}

func (e *clusterEnv) live() []*clusterAgent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*clusterAgent
	for _, a := range e.agents {
		select {
		case <-a.Done():
		default:
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *clusterAgent) int { return strings.Compare(a.id, b.id) })
	return out
}

func leaderOf(t *testing.T, a *clusterAgent) string {
	_, st := adminJSON(t, "GET", a.adminURL+"/v1/status")
	id, _ := st["leader_id"].(string)
	return id
}

func TestClusterFigures(t *testing.T) {
	if os.Getenv("TETHER_BENCH_CLUSTER") == "" {
		t.Skip("set TETHER_BENCH_CLUSTER=1 (make bench-cluster) to measure the cluster figures")
	}
	e := newClusterEnv(t, cookieConfig(testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2")))
	e.form(3)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	backgroundLoad(e.live, stop, &wg)
	defer func() { close(stop); wg.Wait() }()

	// 1. From `rotate` returning to the key being active on every node.
	var rot []time.Duration
	for range trials {
		nodes := e.live()
		st, body := adminJSON(t, "POST", nodes[rand.IntN(len(nodes))].adminURL+"/v1/keyring/rotate")
		t0 := time.Now()
		if st != 200 {
			t.Fatalf("rotate: %d %v", st, body)
		}
		id := body["id"].(string)
		testutil.Eventually(t, 30*time.Second, "rotated key active everywhere", func() bool {
			for _, n := range nodes {
				if _, kr := adminJSON(t, "GET", n.adminURL+"/v1/keyring"); kr["active_key_id"] != id {
					return false
				}
			}
			return true
		})
		rot = append(rot, time.Since(t0))
	}
	t.Logf("FIGURE rotate-to-active-everywhere %s", percentiles(rot))

	// 2. Leader failover after kill -9: until both survivors name the
	// same new leader. The killed node restarts from its data dir.
	var fail []time.Duration
	spurious, elected := 0, ""
	for range trials {
		nodes := e.live()
		old := leaderOf(t, nodes[0])
		if elected != "" && old != elected {
			spurious++ // the leader changed with no kill (the restart disturbed it)
		}
		var victim *clusterAgent
		for _, n := range nodes {
			if n.id == old {
				victim = n
			}
		}
		if victim == nil {
			t.Fatalf("no leader among %d nodes", len(nodes))
		}
		victim.Cmd.Process.Signal(syscall.SIGKILL)
		t0 := time.Now()
		<-victim.Done()
		survivors := slices.DeleteFunc(slices.Clone(nodes), func(a *clusterAgent) bool { return a == victim })
		testutil.Eventually(t, 30*time.Second, "a new leader", func() bool {
			l := ""
			for _, s := range survivors {
				id := leaderOf(t, s)
				if id == "" || id == old || (l != "" && id != l) {
					return false
				}
				l = id
			}
			return true
		})
		fail = append(fail, time.Since(t0))
		elected = leaderOf(t, survivors[0])
		e.mu.Lock()
		delete(e.agents, victim.id)
		e.mu.Unlock()
		var join []string
		for _, s := range survivors {
			join = append(join, s.gossip)
		}
		// The same flags as a deployment's: --join names the others.
		back := e.startNode(victim.id, victim.dataDir, "--bootstrap-expect", "3", "--join", strings.Join(join, ","))
		testutil.Eventually(t, 30*time.Second, victim.id+" back", func() bool {
			st, _, _ := testutil.Get(t, http.DefaultClient, back.adminURL+"/readyz", nil)
			return st == 200
		})
	}
	t.Logf("FIGURE failover-after-kill-9 %s", percentiles(fail))
	t.Logf("FIGURE elections without a kill (restarted node or load): %d over %d kills", spurious, trials)

	// 3. Join to voter: two nodes started with --join (voters stay odd, so
	// a fourth alone stays a non-voter) until each votes, then they leave.
	var join []time.Duration
	isVoter := func(admin, id string) bool {
		_, m := adminJSON(t, "GET", admin+"/v1/members")
		rows, _ := m["members"].([]any)
		for _, r := range rows {
			if r := r.(map[string]any); r["id"] == id {
				return r["raft"] == "voter"
			}
		}
		return false
	}
	for i := range trials / 2 {
		nodes := e.live()
		var wgj sync.WaitGroup
		var mu sync.Mutex
		var joined []*clusterAgent
		for k := range 2 {
			wgj.Add(1)
			go func() {
				defer wgj.Done()
				id := fmt.Sprintf("j%d-%d", i, k)
				t0 := time.Now()
				a := e.startNode(id, "", "--join", nodes[k].gossip)
				for deadline := time.Now().Add(60 * time.Second); !isVoter(nodes[0].adminURL, id); {
					if time.Now().After(deadline) {
						t.Errorf("%s not a voter after 60 s", id)
						return
					}
					time.Sleep(20 * time.Millisecond) // polling interval
				}
				mu.Lock()
				join = append(join, time.Since(t0))
				joined = append(joined, a)
				mu.Unlock()
			}()
		}
		wgj.Wait()
		for _, a := range joined {
			if st, body := adminJSON(t, "POST", a.adminURL+"/v1/leave"); st != 200 {
				t.Fatalf("leave: %d %v", st, body)
			}
			a.Wait(30 * time.Second)
			e.mu.Lock()
			delete(e.agents, a.id)
			e.mu.Unlock()
		}
		testutil.Eventually(t, 30*time.Second, "joined nodes removed", func() bool {
			_, m := adminJSON(t, "GET", nodes[0].adminURL+"/v1/members")
			rows, _ := m["members"].([]any)
			for _, r := range rows {
				if r := r.(map[string]any); strings.HasPrefix(r["id"].(string), "j") && r["raft"] != "none" {
					return false
				}
			}
			return true
		})
	}
	t.Logf("FIGURE join-to-voter %s", percentiles(join))
}
