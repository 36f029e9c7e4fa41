package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// progress waits until the load sent n more requests.
func (l *load) progress(t *testing.T, n int64) {
	t.Helper()
	want := l.sent.Load() + n
	testutil.Eventually(t, 60*time.Second, "load progress", func() bool { return l.sent.Load() >= want })
}

func (l *load) check(t *testing.T) {
	t.Helper()
	if l.failed.Load() != 0 || l.broken.Load() != 0 {
		t.Errorf("requests to live nodes failed or sessions broke: %s", l.summary())
	}
}

func others(nodes []*container, not *container) []*container {
	var out []*container
	for _, c := range nodes {
		if c != not {
			out = append(out, c)
		}
	}
	return out
}

// waitLeader waits until one of nodes names a leader other than not, and
// returns it with the time it took.
func (e *env) waitLeader(timeout time.Duration, not string, nodes ...*container) (string, time.Duration) {
	e.t.Helper()
	t0 := time.Now()
	var leader string
	testutil.Eventually(e.t, timeout, "a new leader", func() bool {
		for _, c := range nodes {
			if s, err := e.status(c); err == nil && s.LeaderID != "" && s.LeaderID != not {
				leader = s.LeaderID
				return true
			}
		}
		return false
	})
	return leader, time.Since(t0)
}

func (e *env) keyIDs(c *container) (active string, ids map[string]bool, err error) {
	var kr struct {
		Active string `json:"active_key_id"`
		Keys   []struct {
			ID string `json:"id"`
		} `json:"keys"`
	}
	if err := e.adminGet(c, "/v1/keyring", &kr); err != nil {
		return "", nil, err
	}
	ids = map[string]bool{}
	for _, k := range kr.Keys {
		ids[k.ID] = true
	}
	return kr.Active, ids, nil
}

// (e) docker pause the leader for 10 s under load: the others elect a new
// leader; after unpause the stale leader steps down, follows, and the
// cluster still writes (a rotation commits and reaches it).
func TestPauseLeaderTenSeconds(t *testing.T) {
	e := newEnv(t)
	nodes, leader, _ := cluster3(t, e)
	l := newLoad(e, nodes...)
	l.run(8, 25, 3*time.Minute)
	defer l.finish()
	l.progress(t, 300)
	old := byHost(nodes, leader)
	l.remove(t, old)
	must(t, 60*time.Second, "docker", "pause", old.name)
	paused := time.Now()
	newLeader, elected := e.waitLeader(30*time.Second, old.host, others(nodes, old)...)
	for time.Since(paused) < 10*time.Second {
		l.progress(t, 50) // keep the load going while paused, bounded by the loop's 10 s
	}
	must(t, 60*time.Second, "docker", "unpause", old.name)
	unpaused := time.Now()
	testutil.Eventually(t, 30*time.Second, "the stale leader follows "+newLeader, func() bool {
		s, err := e.status(old)
		return err == nil && s.RaftState == "Follower" && s.LeaderID == newLeader
	})
	stepDown := time.Since(unpaused)
	l.add(old)
	l.progress(t, 300)
	code, body, err := e.adminPost(old, "/v1/keyring/rotate")
	if err != nil || code != http.StatusOK {
		t.Fatalf("rotate through the former leader: %d %s %v", code, body, err)
	}
	l.progress(t, 300)
	l.finish()
	figure(t, "paused leader %s for 10 s: %s elected %d ms after docker pause returned; after unpause the stale leader followed within %d ms; %s",
		old.host, newLeader, elected.Milliseconds(), stepDown.Milliseconds(), l.summary())
	l.check(t)
}

// (f) Restart every node in turn (docker restart: SIGTERM, then start)
// under load: no request to a live node fails, no session breaks.
func TestRollingRestartUnderLoad(t *testing.T) {
	e := newEnv(t)
	nodes, _, _ := cluster3(t, e)
	l := newLoad(e, nodes...)
	l.run(8, 25, 5*time.Minute)
	defer l.finish()
	l.progress(t, 300)
	t0 := time.Now()
	for _, c := range nodes {
		l.remove(t, c)
		must(t, 120*time.Second, "docker", "restart", "-t", "30", c.name)
		c.ip = e.ipOf(c)
		e.waitFormed(120*time.Second, 3, nodes...)
		e.waitServing(60*time.Second, c)
		l.add(c)
		l.progress(t, 200)
	}
	l.finish()
	figure(t, "restarted %d nodes one at a time in %.1f s; %s", len(nodes), time.Since(t0).Seconds(), l.summary())
	l.check(t)
}

// (g) Scale out: two more containers with the same flags join through DNS
// and become voters (five; a fourth alone stays a non-voter: the leader never
// promotes to an even count); scale back in with `tether leave` in each: each
// leaves the Raft configuration, and the three that remain are the voters.
func TestScaleOutAndLeave(t *testing.T) {
	e := newEnv(t)
	nodes, _, _ := cluster3(t, e)
	t0 := time.Now()
	n4, n5 := e.startNode("n4"), e.startNode("n5")
	all := append(append([]*container(nil), nodes...), n4, n5)
	e.waitFormed(120*time.Second, 5, all...)
	joined := time.Since(t0)
	e.waitServing(60*time.Second, n4, n5)
	var left []time.Duration
	for _, c := range []*container{n5, n4} {
		t1 := time.Now()
		must(t, 60*time.Second, "docker", "exec", "-e", "TETHER_ADMIN_TOKEN="+e.token, c.name, "/tether", "leave")
		must(t, 60*time.Second, "docker", "wait", c.name) // it stops once it left
		all = others(all, c)
		testutil.Eventually(t, 60*time.Second, c.host+" gone from the voters", func() bool {
			ms, err := e.members(nodes[0])
			if err != nil {
				return false
			}
			for _, m := range ms {
				if m.ID == c.host && m.Raft != "none" {
					return false
				}
			}
			return true
		})
		left = append(left, time.Since(t1))
	}
	e.waitFormed(60*time.Second, 3, nodes...)
	figure(t, "two nodes joined through DNS and all 5 were voters %.1f s after their docker run; tether leave to out of the voters: %d ms, %d ms",
		joined.Seconds(), left[0].Milliseconds(), left[1].Milliseconds())
}

// (h) Rotate the key every 2 s for 30 s under load, each time through a
// random node: no request is redistributed because of a rotation (no
// session breaks), none fails, and every node ends with every key.
func TestKeyRotationEveryTwoSecondsUnderLoad(t *testing.T) {
	e := newEnv(t)
	nodes, _, _ := cluster3(t, e)
	l := newLoad(e, nodes...)
	l.run(8, 25, 3*time.Minute)
	defer l.finish()
	l.progress(t, 300)
	rotations := 0
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); <-tick.C {
		c := nodes[rand.IntN(len(nodes))]
		code, body, err := e.adminPost(c, "/v1/keyring/rotate")
		if err != nil || code != http.StatusOK {
			t.Fatalf("rotate on %s: %d %s %v", c.host, code, body, err)
		}
		rotations++
	}
	l.progress(t, 300)
	l.finish()
	testutil.Eventually(t, 30*time.Second, "every node has the same keys and active key", func() bool {
		var first string
		var n int
		for i, c := range nodes {
			active, keys, err := e.keyIDs(c)
			if err != nil {
				return false
			}
			if i == 0 {
				first, n = active, len(keys)
			} else if active != first || len(keys) != n {
				return false
			}
		}
		return true
	})
	figure(t, "%d rotations in 30 s through random nodes; %s", rotations, l.summary())
	l.check(t)
}

// (i) docker kill a backend under load: each of its sessions moves once, to
// one replacement that it then keeps on every node; no other session moves,
// and no client request fails. A request that reaches the dead backend
// after the kill (its address drops SYNs: the dial is cut after the 2 s
// connect timeout; or it refuses) is retried on that replacement; so is a
// GET the backend had taken when SIGKILL landed (its connection is reset
// before any answer; a body-less GET is safe to send again). A failure is
// described from the answering node's log (same trace id).
func TestBackendKilledUnderLoad(t *testing.T) {
	e := newEnv(t)
	nodes, _, _ := cluster3(t, e)
	l := newLoad(e, nodes...)
	l.run(8, 25, 3*time.Minute)
	defer l.finish()
	l.progress(t, 1000)
	victim := e.prefix + "-b1"
	killing := time.Now()
	must(t, 60*time.Second, "docker", "kill", victim)
	killed := time.Now()
	var dest struct {
		Destinations []struct {
			ID     string `json:"id"`
			Health struct {
				Cluster string `json:"cluster"`
			} `json:"health"`
		} `json:"destinations"`
	}
	unhealthyOn := func(c *container) bool {
		if err := e.adminGet(c, "/v1/clusters/app/destinations", &dest); err != nil {
			return false
		}
		for _, d := range dest.Destinations {
			if d.ID == "b1" {
				return d.Health.Cluster == "unhealthy"
			}
		}
		return false
	}
	testutil.Eventually(t, 60*time.Second, "b1 unhealthy cluster-wide on every node", func() bool {
		for _, c := range nodes {
			if !unhealthyOn(c) {
				return false
			}
		}
		return true
	})
	unhealthy := time.Since(killed)
	l.progress(t, 2000)
	l.finish()
	l.sweep()
	var onVictim, moved, movedTwice, others int
	for _, ws := range l.sessions {
		for _, s := range ws {
			switch {
			case s.first == "b1":
				onVictim++
				if s.moves > 0 {
					moved++
				}
				if s.moves > 1 {
					movedTwice++
				}
			case s.moves > 0:
				others++
			}
		}
	}
	cut, unexplained := e.cutByKill(l.failures, nodes, "b1", killing, killed)
	figure(t, "killed backend b1: unhealthy cluster-wide on every node after %d ms; requests sent=%d failed=%d, of which taken by b1 when it was killed=%d; slowest answered request %d ms; b1's sessions=%d moved=%d moved_twice=%d; other sessions moved=%d",
		unhealthy.Milliseconds(), l.sent.Load(), l.failed.Load(), cut, l.slowest.Load()/1e6, onVictim, moved, movedTwice, others)
	if l.failed.Load() != 0 || movedTwice != 0 || others != 0 || moved != onVictim || onVictim == 0 {
		t.Errorf("want no failed request and each of b1's sessions moved exactly once, no other; %d failed requests b1 had taken when killed, others: %v; %s", cut, unexplained, l.summary())
	}
}

// proxyError is a node's "proxy error" log line.
type proxyError struct {
	Time        time.Time `json:"time"`
	Msg         string    `json:"msg"`
	TraceID     string    `json:"trace_id"`
	Destination string    `json:"destination"`
	Err         string    `json:"err"`
}

// cutByKill splits failures into those the kill of backend dest cut (a
// 502 that its node logged as a failure of a request already written to
// dest, within 2 s of the kill) and the rest, described.
func (e *env) cutByKill(failures []failure, nodes []*container, dest string, killing, killed time.Time) (int, []string) {
	e.t.Helper()
	logged := map[string]proxyError{}
	for _, c := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, "docker", "logs", c.name).CombinedOutput()
		cancel()
		if err != nil {
			e.t.Fatalf("docker logs %s: %v", c.name, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			var pe proxyError
			if json.Unmarshal([]byte(line), &pe) == nil && pe.Msg == "proxy error" && pe.TraceID != "" {
				logged[pe.TraceID] = pe
			}
		}
	}
	cut := 0
	var rest []string
	for _, f := range failures {
		pe, ok := logged[f.traceID]
		if ok && f.status == http.StatusBadGateway && pe.Destination == dest && afterWrite(pe.Err) &&
			pe.Time.After(killing.Add(-2*time.Second)) && pe.Time.Before(killed.Add(2*time.Second)) {
			cut++
			continue
		}
		rest = append(rest, fmt.Sprintf("%s status %d trace %q logged %+v", f.node, f.status, f.traceID, pe))
	}
	return cut, rest
}

// afterWrite reports whether a transport error is one of a request already
// written (the connection broke while tether read the answer or wrote the
// request), not of a connect.
func afterWrite(err string) bool {
	switch {
	case strings.HasPrefix(err, "dial "), strings.HasPrefix(err, "connect to "):
		return false
	case strings.HasPrefix(err, "read "), strings.HasPrefix(err, "write "),
		err == "EOF", err == "unexpected EOF", strings.Contains(err, "transport connection broken"):
		return true
	}
	return false
}
