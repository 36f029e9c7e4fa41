package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

var testSecret = []byte("tether cluster test secret")

// testLogger shows gossip logs with TETHER_TEST_LOG=1.
func testLogger(t *testing.T, id string) *slog.Logger {
	if os.Getenv("TETHER_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", id)
}

func startNode(t *testing.T, id string, edit func(*Config)) *Membership {
	t.Helper()
	cfg := Config{
		NodeID:   id,
		BindAddr: "127.0.0.1:0",
		Secret:   testSecret,
		Meta:     Meta{RaftAddr: "127.0.0.1:7000", AdminAddr: "127.0.0.1:9901", Version: "test"},
		Timing:   Local,
		Logger:   testLogger(t, id),
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open %s: %v", id, err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

func member(m *Membership, id string) (Member, bool) {
	for _, x := range m.Members() {
		if x.ID == id {
			return x, true
		}
	}
	return Member{}, false
}

func stateOf(m *Membership, id string) State {
	x, ok := member(m, id)
	if !ok {
		return "unknown"
	}
	return x.State
}

func aliveIDs(m *Membership) string {
	var ids []string
	for _, x := range m.Members() {
		if x.State == StateAlive {
			ids = append(ids, x.ID)
		}
	}
	return strings.Join(ids, ",")
}

func port(t *testing.T, m *Membership) string {
	_, p, err := net.SplitHostPort(m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStateReaderMatchesMemberlist(t *testing.T) {
	m := startNode(t, "n1", nil)
	if s := m.HealthScore(); s != 0 {
		t.Fatalf("a lone node's health score is %d", s)
	}
	if m.reader == nil {
		t.Fatal("memberlist's node state layout is not the one mlstate.go mirrors: suspect and left are lost")
	}
	obs := m.reader.read()
	if len(obs) != 1 || obs[0].name != "n1" || obs[0].state != StateAlive || obs[0].addr != m.Addr() {
		t.Fatalf("read() = %+v", obs)
	}
}

func TestJoinByAddressAndByName(t *testing.T) {
	n1 := startNode(t, "n1", nil)
	n2 := startNode(t, "n2", nil)
	n3 := startNode(t, "n3", nil)
	n4 := startNode(t, "n4", nil)
	if n, err := n2.Join([]string{n1.Addr()}); err != nil || n != 1 {
		t.Fatalf("join by address: %d, %v", n, err)
	}
	// "localhost" resolves to 127.0.0.1 (and maybe ::1, which nobody
	// listens on): a name joins every address behind it.
	if n, err := n3.Join([]string{"localhost:" + port(t, n2)}); err != nil || n < 1 {
		t.Fatalf("join by name: %d, %v", n, err)
	}
	if _, err := n4.Join([]string{"no-such-host.invalid:1", n3.Addr()}); err != nil {
		t.Fatalf("join with one bad name: %v", err)
	}
	for _, m := range []*Membership{n1, n2, n3, n4} {
		testutil.Eventually(t, 5*time.Second, "every node sees 4 alive members", func() bool {
			return aliveIDs(m) == "n1,n2,n3,n4"
		})
	}
	x, _ := member(n1, "n4")
	if x.Addr != n4.Addr() || x.RaftAddr != "127.0.0.1:7000" || x.Version != "test" || x.ID != "n4" {
		t.Fatalf("n1 sees n4 as %+v", x)
	}
}

func TestJoinErrors(t *testing.T) {
	n1 := startNode(t, "n1", nil)
	cases := []struct {
		desc  string
		addrs []string
		want  string
	}{
		{"nothing given", nil, "no address"},
		{"bad port", []string{"127.0.0.1:x"}, `port "x"`},
		{"unresolvable name", []string{"no-such-host.invalid"}, "no-such-host.invalid"},
		{"nobody listening", []string{"127.0.0.1:1"}, "127.0.0.1:1"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			n, err := n1.Join(c.addrs)
			if err == nil || n != 0 || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Join(%q) = %d, %v; want an error naming %s", c.addrs, n, err, c.want)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	cases := []struct {
		desc string
		cfg  Config
		want string
	}{
		{"no node id", Config{Secret: testSecret}, "NodeID"},
		{"no secret", Config{NodeID: "a", BindAddr: "127.0.0.1:0"}, "Secret"},
		{"node id with a comma", Config{NodeID: "a,b", Secret: testSecret, BindAddr: "127.0.0.1:0"}, "commas"},
		{"node id with a space", Config{NodeID: "a b", Secret: testSecret, BindAddr: "127.0.0.1:0"}, "spaces"},
		{"meta id differs", Config{NodeID: "a", Secret: testSecret, Meta: Meta{ID: "b"}}, `"b"`},
		{"bind host name", Config{NodeID: "a", Secret: testSecret, BindAddr: "localhost:0"}, "must be an IP"},
		{"bind every IPv6 address without advertise", Config{NodeID: "a", Secret: testSecret, BindAddr: "[::]:0"}, "Advertise"},
		{"bind no port", Config{NodeID: "a", Secret: testSecret, BindAddr: "127.0.0.1"}, "BindAddr"},
		{"advertise unspecified", Config{NodeID: "a", Secret: testSecret, BindAddr: "127.0.0.1:0", Advertise: "0.0.0.0"}, "unspecified"},
		{"advertise bad port", Config{NodeID: "a", Secret: testSecret, BindAddr: "127.0.0.1:0", Advertise: "1.2.3.4:0"}, "port"},
		{"meta too large", Config{NodeID: "a", Secret: testSecret, BindAddr: "127.0.0.1:0", Meta: Meta{AdminAddr: strings.Repeat("x", 600)}}, "512"},
		{"bad timing", Config{NodeID: "a", Secret: testSecret, BindAddr: "127.0.0.1:0", Timing: 7}, "Timing"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			m, err := Open(c.cfg)
			if err == nil {
				m.Shutdown()
				t.Fatalf("Open succeeded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open: %v; want an error naming %s", err, c.want)
			}
		})
	}
}

func TestAdvertiseHostName(t *testing.T) {
	n1 := startNode(t, "n1", func(c *Config) { c.Advertise = "localhost" })
	if !strings.HasPrefix(n1.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %s, want localhost resolved to 127.0.0.1 with the bound port", n1.Addr())
	}
}

func TestMetaUpdateSpreads(t *testing.T) {
	var changes atomic.Int32
	n1 := startNode(t, "n1", nil)
	n2 := startNode(t, "n2", func(c *Config) { c.OnChange = func() { changes.Add(1) } })
	n3 := startNode(t, "n3", nil)
	mustJoin(t, n2, n1)
	mustJoin(t, n3, n1)
	testutil.Eventually(t, 5*time.Second, "3 alive on n2", func() bool { return aliveIDs(n2) == "n1,n2,n3" })
	before := changes.Load()
	if err := n1.UpdateMeta(func(m *Meta) { m.ClusterID, m.HasState, m.Durable = "c1", true, 7 }); err != nil {
		t.Fatal(err)
	}
	if got := n1.Local(); got.ClusterID != "c1" || got.Durable != 7 {
		t.Fatalf("Local() after UpdateMeta = %+v", got)
	}
	for _, m := range []*Membership{n2, n3} {
		testutil.Eventually(t, 5*time.Second, "n1's new meta seen", func() bool {
			x, _ := member(m, "n1")
			return x.ClusterID == "c1" && x.HasState && x.Durable == 7
		})
	}
	testutil.Eventually(t, 2*time.Second, "OnChange after the meta change", func() bool { return changes.Load() > before })
	if err := n1.UpdateMeta(func(m *Meta) { m.ID = "other" }); err == nil {
		t.Fatal("UpdateMeta changed the id")
	}
}

func mustJoin(t *testing.T, m, to *Membership) {
	t.Helper()
	if _, err := m.Join([]string{to.Addr()}); err != nil {
		t.Fatalf("%s joins %s: %v", m.cfg.NodeID, to.cfg.NodeID, err)
	}
}

// stateLog records every state a node shows for another, in order.
func stateLog(m *Membership, id string, stop <-chan struct{}) func() []State {
	var mu sync.Mutex
	var seen []State
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := stateOf(m, id)
			mu.Lock()
			if len(seen) == 0 || seen[len(seen)-1] != s {
				seen = append(seen, s)
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() []State {
		mu.Lock()
		defer mu.Unlock()
		return append([]State(nil), seen...)
	}
}

func TestKilledNodeGoesSuspectThenDead(t *testing.T) {
	n1, n2, n3 := joinedThree(t)
	stop := make(chan struct{})
	defer close(stop)
	log := stateLog(n1, "n3", stop)
	testutil.Eventually(t, time.Second, "log running", func() bool { return len(log()) > 0 })
	killed := time.Now()
	n3.Shutdown() // no leave: a crash
	testutil.Eventually(t, 10*time.Second, "n3 dead on n1 and n2", func() bool {
		return stateOf(n1, "n3") == StateDead && stateOf(n2, "n3") == StateDead
	})
	t.Logf("dead after %s", time.Since(killed).Round(time.Millisecond))
	testutil.Eventually(t, time.Second, "the log caught up", func() bool { l := log(); return l[len(l)-1] == StateDead })
	// a loaded machine may make a live node flap alive/suspect first: what
	// counts is that the crash shows as suspect, then dead, and nothing before
	// was dead
	l := log()
	if len(l) < 3 || l[0] != StateAlive || l[len(l)-2] != StateSuspect || slices.Index(l, StateDead) != len(l)-1 {
		t.Fatalf("n1 saw n3 go %v, want alive … suspect, dead", l)
	}
	x, _ := member(n1, "n3")
	if x.Since.Before(killed) {
		t.Fatalf("dead since %s, before the kill at %s", x.Since, killed)
	}
}

func TestLeftNodeIsLeft(t *testing.T) {
	n1, n2, n3 := joinedThree(t)
	if err := n3.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Second, "self left", func() bool { return n3.Local().State == StateLeft })
	n3.Shutdown()
	if err := n3.Leave(time.Second); err == nil {
		t.Fatal("Leave after Shutdown succeeded")
	}
	for _, m := range []*Membership{n1, n2} {
		testutil.Eventually(t, 5*time.Second, "n3 left", func() bool { return stateOf(m, "n3") == StateLeft })
	}
	// memberlist forgets dead nodes after GossipToTheDeadTime; we keep
	// them until Forget.
	n1.Forget("n1") // self is never forgotten
	n1.Forget("n2") // nor an alive node
	n1.Forget("n3")
	if got := fmt.Sprint(ids(n1.Members())); got != "[n1 n2]" {
		t.Fatalf("after Forget: %s", got)
	}
	// a forgotten node that comes back is listed again
	n3b := startNode(t, "n3", nil)
	mustJoin(t, n3b, n1)
	testutil.Eventually(t, 5*time.Second, "n3 back on n1", func() bool { return stateOf(n1, "n3") == StateAlive })
}

func TestNoAliveAnnouncementAfterLeave(t *testing.T) {
	n1 := startNode(t, "n1", nil)
	n2 := startNode(t, "n2", nil)
	mustJoin(t, n2, n1)
	testutil.Eventually(t, 5*time.Second, "2 alive", func() bool { return aliveIDs(n1) == "n1,n2" })
	if err := n2.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "n2 left", func() bool { return stateOf(n1, "n2") == StateLeft })
	// a meta update after Leave stays local: announcing it would undo the leave
	if err := n2.UpdateMeta(func(m *Meta) { m.Durable = 99 }); err != nil {
		t.Fatal(err)
	}
	n2.reannounce()
	deadline := time.Now().Add(time.Second) // a bounded look for a resurrection
	for time.Now().Before(deadline) {
		if s := stateOf(n1, "n2"); s != StateLeft {
			t.Fatalf("n2 is %s on n1 after its leave", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ids(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func TestRestartedNodeReclaimsItsIDOnANewAddress(t *testing.T) {
	n1, n2, n3 := joinedThree(t)
	old := n3.Addr()
	n3.Shutdown() // crash
	testutil.Eventually(t, 10*time.Second, "n3 dead", func() bool {
		return stateOf(n1, "n3") == StateDead && stateOf(n2, "n3") == StateDead
	})
	n3b := startNode(t, "n3", nil)
	if n3b.Addr() == old {
		t.Skip("the OS gave the same port back")
	}
	if err := n3b.JoinRetry(context.Background(), []string{n1.Addr()}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Membership{n1, n2, n3b} {
		testutil.Eventually(t, 10*time.Second, "n3 alive at its new address everywhere", func() bool {
			x, _ := member(m, "n3")
			return x.State == StateAlive && x.Addr == n3b.Addr()
		})
	}
}

func TestWrongSecretCannotJoin(t *testing.T) {
	n1 := startNode(t, "n1", nil)
	n2 := startNode(t, "n2", func(c *Config) { c.Secret = []byte("another secret") })
	n, err := n2.Join([]string{n1.Addr()})
	if err == nil {
		t.Fatalf("join with another secret: %d members contacted", n)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "cluster secret") {
		t.Fatalf("error %q: want one line that names the cluster secret", msg)
	}
	if got := aliveIDs(n1); got != "n1" {
		t.Fatalf("n1 sees %s", got)
	}
}

func TestOtherClusterRefused(t *testing.T) {
	a1 := startNode(t, "a1", func(c *Config) { c.Meta.ClusterID = "cluster-A" })
	a2 := startNode(t, "a2", func(c *Config) { c.Meta.ClusterID = "cluster-A" })
	fresh := startNode(t, "fresh", nil)
	b1 := startNode(t, "b1", func(c *Config) { c.Meta.ClusterID = "cluster-B" })
	mustJoin(t, a2, a1)
	mustJoin(t, fresh, a1) // a node without state may join: it waits to be added
	_, err := b1.Join([]string{a1.Addr()})
	if !errors.Is(err, ErrClusterMismatch) || !strings.Contains(err.Error(), `"cluster-A"`) || !strings.Contains(err.Error(), `"cluster-B"`) {
		t.Fatalf("join across clusters: %v; want ErrClusterMismatch naming both ids", err)
	}
	err = b1.JoinRetry(context.Background(), []string{a1.Addr()})
	if !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("JoinRetry across clusters: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "a1 sees a2 and fresh", func() bool { return aliveIDs(a1) == "a1,a2,fresh" })
	for _, m := range []*Membership{a1, a2, fresh} {
		if _, ok := member(m, "b1"); ok {
			t.Fatalf("%s lists b1", m.cfg.NodeID)
		}
	}
	if _, ok := member(b1, "a1"); ok {
		t.Fatal("b1 lists a1")
	}
}

// freePort finds a port free for both TCP and UDP on 127.0.0.1.
func freePort(t *testing.T) int {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
		l.Close()
		if err == nil {
			u.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

func TestJoinRetryJoinsOnceTheTargetIsUp(t *testing.T) {
	p := freePort(t)
	n2 := startNode(t, "n2", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- n2.JoinRetry(ctx, []string{"localhost:" + strconv.Itoa(p)}) }()
	// let a few attempts fail first
	testutil.Eventually(t, 5*time.Second, "JoinRetry still waiting", func() bool {
		select {
		case err := <-done:
			t.Fatalf("JoinRetry returned %v before the target started", err)
		default:
		}
		return true
	})
	time.Sleep(500 * time.Millisecond) // not a wait for a condition: the target starts late on purpose
	n1 := startNode(t, "n1", func(c *Config) { c.BindAddr = "127.0.0.1:" + strconv.Itoa(p) })
	if err := <-done; err != nil {
		t.Fatalf("JoinRetry: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "n1 sees n2", func() bool { return aliveIDs(n1) == "n1,n2" })

	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	n3 := startNode(t, "n3", nil)
	if err := n3.JoinRetry(ctx2, []string{"127.0.0.1:1"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("JoinRetry to nobody: %v", err)
	}
}

func TestOnChangeNeverConcurrent(t *testing.T) {
	var inside, overlaps, calls atomic.Int32
	onChange := func() {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		calls.Add(1)
		time.Sleep(5 * time.Millisecond) // OnChange may take a little time
		inside.Add(-1)
	}
	n1 := startNode(t, "n1", func(c *Config) { c.OnChange = onChange })
	var watched atomic.Int32
	n1.Watch(func() {
		if inside.Load() != 0 {
			overlaps.Add(1) // a watcher runs after OnChange, not beside it
		}
		watched.Add(1)
	})
	var ns []*Membership
	for i := range 4 {
		n := startNode(t, fmt.Sprintf("m%d", i), nil)
		mustJoin(t, n, n1)
		ns = append(ns, n)
	}
	for i, n := range ns {
		if err := n.UpdateMeta(func(m *Meta) { m.Durable = uint64(i + 1) }); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "all updates seen", func() bool {
		x, _ := member(n1, "m3")
		return x.Durable == 4
	})
	testutil.Eventually(t, 2*time.Second, "the watcher called after every OnChange", func() bool { return watched.Load() == calls.Load() })
	if overlaps.Load() != 0 || calls.Load() == 0 {
		t.Fatalf("OnChange: %d calls, %d overlapping, watcher called %d times", calls.Load(), overlaps.Load(), watched.Load())
	}
}

func TestBroadcastAndPushPullReachHandlers(t *testing.T) {
	type got struct {
		mu    sync.Mutex
		msgs  []string
		state []string
	}
	const tag = 7
	var nodes []*Membership
	var recv []*got
	for i := range 3 {
		g := &got{}
		id := fmt.Sprintf("n%d", i)
		n := startNode(t, id, nil)
		err := n.Register(tag, Handler{
			Msg:        func(b []byte) { g.mu.Lock(); g.msgs = append(g.msgs, string(b)); g.mu.Unlock() },
			LocalState: func(bool) []byte { return []byte("state of " + id) },
			MergeState: func(b []byte, _ bool) { g.mu.Lock(); g.state = append(g.state, string(b)); g.mu.Unlock() },
		})
		if err != nil {
			t.Fatal(err)
		}
		nodes, recv = append(nodes, n), append(recv, g)
	}
	if err := nodes[0].Register(tag, Handler{}); err == nil {
		t.Fatal("a tag registered twice")
	}
	if err := nodes[0].Register(0, Handler{}); err == nil {
		t.Fatal("tag 0 registered")
	}
	mustJoin(t, nodes[1], nodes[0])
	mustJoin(t, nodes[2], nodes[0])
	recv[1].mu.Lock()
	joined := fmt.Sprint(recv[1].state)
	recv[1].mu.Unlock()
	if !strings.Contains(joined, "state of n0") {
		t.Fatalf("n1 merged %s on join, want n0's state", joined)
	}
	testutil.Eventually(t, 5*time.Second, "3 alive", func() bool { return aliveIDs(nodes[0]) == "n0,n1,n2" })
	if err := nodes[0].Broadcast(tag, "v", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3; i++ {
		g := recv[i]
		testutil.Eventually(t, 5*time.Second, "broadcast received", func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return strings.Contains(fmt.Sprint(g.msgs), "hello")
		})
	}
	if err := nodes[0].Broadcast(tag, "big", make([]byte, MaxBroadcast+1)); err == nil {
		t.Fatal("oversized broadcast accepted")
	}
	// direct sends, by UDP and by TCP (large)
	big := strings.Repeat("x", 10000)
	if err := nodes[0].Send("n2", tag, []byte("direct"), false); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].Send("n2", tag, []byte(big), true); err != nil {
		t.Fatal(err)
	}
	g := recv[2]
	testutil.Eventually(t, 5*time.Second, "direct messages received", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		all := strings.Join(g.msgs, "|")
		return strings.Contains(all, "direct") && strings.Contains(all, big)
	})
	if err := nodes[0].Send("nobody", tag, nil, true); err == nil {
		t.Fatal("send to an unknown member succeeded")
	}
	if err := nodes[0].Send("n2", tag, []byte(big), false); err == nil {
		t.Fatal("oversized UDP send accepted")
	}
}

// TestFormationOverGossip runs the formation vote over real gossip: nodes
// start in random order with random delays, all with --bootstrap-expect
// and the same join list, and "bootstrap" (set HasState and a cluster id)
// as soon as BootstrapSet says so. Exactly one set bootstraps.
func TestFormationOverGossip(t *testing.T) {
	for _, c := range []struct{ n, expect int }{{3, 3}, {5, 3}} {
		t.Run(fmt.Sprintf("%d nodes expect %d", c.n, c.expect), func(t *testing.T) {
			ports := make([]int, c.n)
			var join []string
			for i := range ports {
				ports[i] = freePort(t)
				join = append(join, "127.0.0.1:"+strconv.Itoa(ports[i]))
			}
			var mu sync.Mutex
			chosen := map[string]string{}
			nodes := make([]*Membership, c.n)
			ready := make(chan struct{})
			var wg sync.WaitGroup
			for _, i := range rand.Perm(c.n) {
				id := fmt.Sprintf("n%d", i)
				var self atomic.Pointer[Membership]
				var once sync.Once
				onChange := func() {
					m := self.Load()
					if m == nil {
						return
					}
					if servers, ok := BootstrapSet(m.Local(), m.Members(), c.expect); ok {
						once.Do(func() {
							mu.Lock()
							chosen[id] = idList(servers)
							mu.Unlock()
							m.UpdateMeta(func(x *Meta) { x.HasState, x.ClusterID = true, "cid-"+idList(servers) })
						})
					}
				}
				m := startNode(t, id, func(cfg *Config) {
					cfg.BindAddr = join[i]
					cfg.Meta.Expect = c.expect
					cfg.OnChange = onChange
				})
				self.Store(m)
				nodes[i] = m
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-ready
					m.JoinRetry(context.Background(), join)
				}()
				time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond) // random start order and delays
			}
			close(ready)
			wg.Wait()
			defer func() {
				for _, m := range nodes {
					if !t.Failed() {
						break
					}
					_, _, why := Formation(m.Local(), m.Members(), c.expect)
					t.Logf("%s: %s; vote %s/%d; alive %s", m.cfg.NodeID, why, m.Local().FormSet, m.Local().FormPhase, aliveIDs(m))
				}
			}()
			testutil.Eventually(t, 15*time.Second, "a set bootstrapped and every node sees a cluster id", func() bool {
				for _, m := range nodes {
					seen := false
					for _, x := range m.Members() {
						seen = seen || x.ClusterID != ""
					}
					if !seen {
						return false
					}
				}
				return true
			})
			mu.Lock()
			defer mu.Unlock()
			sets := map[string]bool{}
			for _, s := range chosen {
				sets[s] = true
			}
			if len(sets) != 1 {
				t.Fatalf("bootstrapped %v, want exactly one set", chosen)
			}
			t.Logf("bootstrapped %v", chosen)
		})
	}
}

// TestNodeBridgingTwoClustersDoesNotMergeThem: a fresh node may gossip with
// two clusters (it has no cluster id to refuse either), but their members
// refuse each other's alive messages relayed through it.
func TestNodeBridgingTwoClustersDoesNotMergeThem(t *testing.T) {
	a1 := startNode(t, "a1", func(c *Config) { c.Meta.ClusterID = "cluster-A" })
	b1 := startNode(t, "b1", func(c *Config) { c.Meta.ClusterID = "cluster-B" })
	f := startNode(t, "f", nil)
	mustJoin(t, f, b1)
	// a1 refuses f's push/pull: it lists b1
	if _, err := f.Join([]string{a1.Addr()}); err != nil && !errors.Is(err, ErrClusterMismatch) {
		t.Fatal(err)
	}
	if _, err := a1.Join([]string{f.Addr()}); !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("a1 joins a pool holding cluster-B: %v", err)
	}
	testutil.Eventually(t, 3*time.Second, "f sees b1", func() bool { return stateOf(f, "b1") == StateAlive })
	deadline := time.Now().Add(time.Second) // many gossip rounds
	for time.Now().Before(deadline) {
		if _, ok := member(a1, "b1"); ok {
			t.Fatal("a1 lists b1")
		}
		if _, ok := member(b1, "a1"); ok {
			t.Fatal("b1 lists a1")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReconcileOverGossipKeepsFiveVoters drives Plan from real gossip: seven
// nodes, a fake Raft on the leader; two voters crash and the leader keeps
// five live voters by promoting healthy non-voters.
func TestReconcileOverGossipKeepsFiveVoters(t *testing.T) {
	var nodes []*Membership
	for i := range 7 {
		id := fmt.Sprintf("n%d", i)
		n := startNode(t, id, func(c *Config) { c.Meta.RaftAddr = id + ":7000" })
		if i > 0 {
			mustJoin(t, n, nodes[0])
		}
		nodes = append(nodes, n)
	}
	leader := nodes[0]
	testutil.Eventually(t, 5*time.Second, "7 alive on the leader", func() bool { return aliveIDs(leader) == "n0,n1,n2,n3,n4,n5,n6" })
	raft := newFakeRaft(RaftServer{ID: "n0", Address: "n0:7000", Voter: true})
	p := Policy{MaxVoters: 5, Expect: 1, ReapTimeout: time.Hour, MaxLag: 10, Stabilization: 100 * time.Millisecond, VoterGrace: 500 * time.Millisecond}
	var ap Autopilot
	reconciled := func(want string) func() bool {
		return func() bool {
			if err := ap.Reconcile(raft, "n0", leader.Members(), 0, p, time.Now(), nil); err != nil {
				t.Fatal(err)
			}
			live, failed := 0, 0
			for _, s := range raft.servers {
				if !s.Voter {
					continue
				}
				if stateOf(leader, s.ID) == StateAlive {
					live++
				} else {
					failed++
				}
			}
			return fmt.Sprintf("%d servers, %d live voters, %d failed voters", len(raft.servers), live, failed) == want
		}
	}
	testutil.Eventually(t, 5*time.Second, "5 voters of 7", reconciled("7 servers, 5 live voters, 0 failed voters"))
	var crashed []string
	for _, s := range sortedServers(raft.servers) {
		if s.Voter && s.ID != "n0" && len(crashed) < 2 {
			crashed = append(crashed, s.ID)
			for _, n := range nodes {
				if n.cfg.NodeID == s.ID {
					n.Shutdown()
				}
			}
		}
	}
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%v dead on the leader", crashed), func() bool {
		return stateOf(leader, crashed[0]) == StateDead && stateOf(leader, crashed[1]) == StateDead
	})
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%v replaced", crashed), reconciled("7 servers, 5 live voters, 0 failed voters"))
	for _, id := range crashed {
		if raft.servers[id].Voter {
			t.Fatalf("crashed %s still votes", id)
		}
	}
}

// TestEventsOnlyFallback: without the state reader (another memberlist
// layout), members still join, update and fail, from events alone.
func TestEventsOnlyFallback(t *testing.T) {
	eventsOnly = true
	n1 := startNode(t, "n1", nil)
	n2 := startNode(t, "n2", nil)
	n3 := startNode(t, "n3", nil)
	eventsOnly = false
	if n1.reader != nil {
		t.Fatal("state reader in use")
	}
	mustJoin(t, n2, n1)
	mustJoin(t, n3, n1)
	testutil.Eventually(t, 5*time.Second, "3 alive", func() bool { return aliveIDs(n1) == "n1,n2,n3" })
	if err := n2.UpdateMeta(func(m *Meta) { m.Durable = 5 }); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "meta seen", func() bool { x, _ := member(n1, "n2"); return x.Durable == 5 })
	n3.Shutdown()
	testutil.Eventually(t, 10*time.Second, "n3 dead", func() bool { return stateOf(n1, "n3") == StateDead })
	if err := n2.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "n2 gone", func() bool { return stateOf(n1, "n2") == StateDead }) // left looks dead without the reader
}

// joinedThree starts n1, n2 and n3, joins n2 and n3 through n1 and waits
// until every one of them sees all three alive.
func joinedThree(t *testing.T) (n1, n2, n3 *Membership) {
	t.Helper()
	n1 = startNode(t, "n1", nil)
	n2 = startNode(t, "n2", nil)
	n3 = startNode(t, "n3", nil)
	mustJoin(t, n2, n1)
	mustJoin(t, n3, n1)
	testutil.Eventually(t, 5*time.Second, "3 alive on every node", func() bool {
		return aliveIDs(n1) == "n1,n2,n3" && aliveIDs(n2) == "n1,n2,n3" && aliveIDs(n3) == "n1,n2,n3"
	})
	return n1, n2, n3
}
