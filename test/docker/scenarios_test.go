package docker

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// cluster3 starts three backends and three nodes (in random order, up to
// 1.5 s apart) and waits for them to form; it returns the nodes and the
// leader's id.
func cluster3(t *testing.T, e *env) ([]*container, string, time.Duration) {
	t.Helper()
	e.backends(3)
	hosts := []string{"n1", "n2", "n3"}
	rand.Shuffle(len(hosts), func(i, j int) { hosts[i], hosts[j] = hosts[j], hosts[i] })
	t0 := time.Now()
	var nodes []*container
	for i, h := range hosts {
		if i > 0 {
			time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond) // a random start order and spacing, not a wait
		}
		nodes = append(nodes, e.startNode(h))
	}
	leader := e.waitFormed(120*time.Second, 3, nodes...)
	e.waitServing(60*time.Second, nodes...)
	took := time.Since(t0)
	e.waitHealthy(60*time.Second, nodes...)
	return nodes, leader, took
}

// waitHealthy waits until every node holds every destination healthy
// cluster-wide. A backend's name may not resolve yet when a node's first
// probe runs; until the next probe that node sends the destination's
// sessions elsewhere, which a scenario would count as broken.
func (e *env) waitHealthy(timeout time.Duration, nodes ...*container) {
	e.t.Helper()
	testutil.Eventually(e.t, timeout, "every destination healthy on every node", func() bool {
		for _, c := range nodes {
			var dest struct {
				Destinations []struct {
					Health struct {
						Cluster string `json:"cluster"`
					} `json:"health"`
				} `json:"destinations"`
			}
			if err := e.adminGet(c, "/v1/clusters/app/destinations", &dest); err != nil || len(dest.Destinations) == 0 {
				return false
			}
			for _, d := range dest.Destinations {
				if d.Health.Cluster != "healthy" {
					return false
				}
			}
		}
		return true
	})
}

// waitServing waits until every node proxies a request.
func (e *env) waitServing(timeout time.Duration, nodes ...*container) {
	e.t.Helper()
	testutil.Eventually(e.t, timeout, "every node proxies", func() bool {
		for _, c := range nodes {
			resp, err := e.http.Get(c.proxy() + "/")
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false
			}
		}
		return true
	})
}

func byHost(nodes []*container, host string) *container {
	for _, c := range nodes {
		if c.host == host {
			return c
		}
	}
	return nil
}

// (a) Three containers with identical flags, started in random order, find
// each other through the network alias `tether` and form one cluster.
func TestFormationThroughDNSRandomOrder(t *testing.T) {
	e := newEnv(t)
	nodes, leader, took := cluster3(t, e)
	order := ""
	for _, c := range nodes {
		order += c.host + " "
	}
	figure(t, "start order %s-> one cluster of 3 voters, leader %s, %.1f s from the first docker run to every node ready and serving", order, leader, took.Seconds())
}

// (b) 1,000 Cookie-policy sessions, each request to a random node: every
// session stays on its destination.
func TestSessionContinuity1000Sessions(t *testing.T) {
	e := newEnv(t)
	nodes, _, _ := cluster3(t, e)
	l := newLoad(e, nodes...)
	const sessions, perSession, workers = 1000, 5, 20
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := newClient()
			defer client.CloseIdleConnections()
			for i := 0; i < sessions/workers; i++ {
				var s session
				for k := 0; k < perSession; k++ {
					l.do(client, &s)
				}
			}
		}()
	}
	wg.Wait()
	figure(t, "%s in %.1f s", l.summary(), time.Since(t0).Seconds())
	if l.failed.Load() != 0 || l.broken.Load() != 0 || l.newSessions.Load() != sessions {
		t.Fatalf("want %d sessions, no failure, none broken: %s", sessions, l.summary())
	}
}

// (c) docker kill a follower under load (then start it again: it rejoins
// from its volume), then kill the leader: no request to a live node fails,
// no session breaks, and the survivors elect a leader within 2 s.
func TestKillFollowerThenLeaderUnderLoad(t *testing.T) {
	e := newEnv(t)
	nodes, leader, _ := cluster3(t, e)
	l := newLoad(e, nodes...)
	l.run(8, 25, 3*time.Minute)
	defer l.finish()
	progress := func(n int64) {
		want := l.sent.Load() + n
		testutil.Eventually(t, 60*time.Second, "load progress", func() bool { return l.sent.Load() >= want })
	}
	progress(300)

	var follower *container
	for _, c := range nodes {
		if c.host != leader {
			follower = c
			break
		}
	}
	l.remove(t, follower)
	must(t, 60*time.Second, "docker", "kill", follower.name)
	progress(500)
	s, err := e.status(byHost(nodes, leader))
	if err != nil || s.LeaderID != leader {
		t.Fatalf("killing follower %s changed the leader: %+v %v", follower.host, s, err)
	}
	figure(t, "killed follower %s: %s", follower.host, l.summary())

	must(t, 60*time.Second, "docker", "start", follower.name)
	follower.ip = e.ipOf(follower)
	leader = e.waitFormed(120*time.Second, 3, nodes...)
	e.waitServing(60*time.Second, follower)
	l.add(follower)
	progress(300)

	old := byHost(nodes, leader)
	var survivors []*container
	for _, c := range nodes {
		if c != old {
			survivors = append(survivors, c)
		}
	}
	l.remove(t, old)
	must(t, 60*time.Second, "docker", "kill", old.name)
	killed := time.Now()
	var elected time.Duration
	var newLeader string
	testutil.Eventually(t, 30*time.Second, "a new leader among the survivors", func() bool {
		for _, c := range survivors {
			s, err := e.status(c)
			if err == nil && s.LeaderID != "" && s.LeaderID != old.host {
				elected, newLeader = time.Since(killed), s.LeaderID
				return true
			}
		}
		return false
	})
	progress(500)
	l.finish()
	figure(t, "killed leader %s: %s elected in %d ms (after docker kill returned); %s", old.host, newLeader, elected.Milliseconds(), l.summary())
	if l.failed.Load() != 0 || l.broken.Load() != 0 {
		t.Errorf("requests to live nodes failed or sessions broke: %s", l.summary())
	}
	// The failover target (p99 ≤ 2 s) is a figure over 20 trials
	// (make bench-cluster, docs/BENCHMARKS.md), not one run's timing: a
	// busy CI machine may take one election past it. Far beyond it means
	// LAN timings are not in force.
	if elected > 5*time.Second {
		t.Errorf("survivors elected a leader after %v, want well within 5 s (target p99 2 s)", elected)
	}
}
