package node

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/keyring/keyringtest"
	"github.com/tether-proxy/tether/node/keyshare"
	"github.com/tether-proxy/tether/test/testutil"
)

// What a backup and the cluster secret yield is every keyring key: restored
// into a node of their own they must not open the cluster's TLS session
// tickets, so recorded TLS 1.2 traffic stays closed to whoever steals both.
func TestClusterTLSTicketsDoNotOpenWithABackupAndTheClusterSecret(t *testing.T) {
	tc := newTestCluster(t, 1)
	pool := httpsClusterConfig(t, tc)
	nodes := tc.form(3)
	n1, n2 := nodes[0], nodes[1]
	waitTicketSeeds(t, nodes)

	tickets := map[string]*testutil.HeldSession{}
	for _, v := range []struct {
		desc    string
		version uint16
	}{{"TLS 1.2", tls.VersionTLS12}, {"TLS 1.3", tls.VersionTLS13}} {
		held := &testutil.HeldSession{}
		tlsResumed(t, n1, pool, v.version, held)
		if !tlsResumed(t, n2, pool, v.version, held) {
			t.Fatalf("%s: a ticket of n1 did not resume on n2", v.desc)
		}
		tickets[v.desc] = held
	}

	// The backup, as `tether snapshot save` takes it.
	resp, err := http.Get("http://" + n2.AdminAddr().String() + "/v1/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	backup, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("snapshot save: %d %s", resp.StatusCode, backup)
	}

	// The thief's node: the cluster secret, the backup restored into it.
	cfg := tc.config("thief", 0, nil)
	thief, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := thief.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { thief.Shutdown(t.Context()) })
	resp, err = http.Post("http://"+thief.AdminAddr().String()+"/v1/snapshot/restore", "application/json", bytes.NewReader(backup))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("restore into the thief's node: %d %s", resp.StatusCode, body)
	}
	active := n1.ring.ActiveKeyID(time.Now())
	testutil.Eventually(t, 10*time.Second, "the thief's node encrypts with the cluster's active key", func() bool {
		return thief.ring.ActiveKeyID(time.Now()) == active
	})

	for desc, held := range tickets {
		if tlsResumed(t, thief, pool, tlsVersion(desc), held.Copy()) {
			t.Errorf("%s: a node holding only a backup and the cluster secret resumed a session of the cluster: it derives the ticket keys", desc)
		}
		ticket, _, err := held.Session().ResumptionState()
		if err != nil {
			t.Fatal(err)
		}
		// Every ticket key the keyring keys yield, around the ticket's day.
		for d := -8; d <= 8; d++ {
			at := time.Now().Add(time.Duration(d) * 24 * time.Hour)
			keys := thief.ring.TicketKeys(at)
			if len(keys) == 0 {
				continue
			}
			c := &tls.Config{}
			c.SetSessionTicketKeys(keys)
			if ss, _ := c.DecryptTicket(ticket, tls.ConnectionState{}); ss != nil {
				t.Fatalf("%s: the ticket keys derived from the backup's keyring keys (day %+d) decrypt a ticket of the cluster", desc, d)
			}
		}
	}

	// What derives the ticket keys is in no data dir (Raft log,
	// snapshots, peers files) and not in the backup.
	seeds := heldSeeds(nodes...)
	if len(seeds) == 0 {
		t.Fatal("the nodes hold no seed")
	}
	if keyringtest.ContainsSeed(backup, seeds) {
		t.Error("the backup holds a TLS session ticket seed")
	}
	noSeedOnDisk(t, tc.dir, seeds)
}

// heldSeeds is every seed the nodes hold.
func heldSeeds(nodes ...*Node) []keyring.TicketSeed {
	var out []keyring.TicketSeed
	for _, n := range nodes {
		for _, d := range n.seeds.Days() {
			out = append(out, d.Seeds...)
		}
	}
	return out
}

// noSeedOnDisk fails the test when a file under dir holds a seed.
func noSeedOnDisk(t *testing.T, dir string, seeds []keyring.TicketSeed) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if keyringtest.ContainsSeed(b, seeds) {
			t.Errorf("%s holds a TLS session ticket seed", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no file under %s to look at", dir)
	}
}

func tlsVersion(desc string) uint16 {
	if desc == "TLS 1.3" {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}

// transferTo hands leadership from leader to to (the only other voter
// alive) and waits until to leads.
func transferTo(t *testing.T, from, to *Node) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, to.ID()+" leads", func() bool {
		if to.store.IsLeader() {
			return true
		}
		if from.store.IsLeader() {
			_ = from.store.TransferLeadership()
		}
		return false
	})
}

// gossipRecorder keeps the seed messages nodes send, as they go on gossip.
type gossipRecorder struct {
	mu   sync.Mutex
	msgs []keyshare.Recorded
}

func (r *gossipRecorder) hook() *func(byte, []byte) {
	f := func(tag byte, msg []byte) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.msgs = append(r.msgs, keyshare.Recorded{Tag: tag, Msg: bytes.Clone(msg)})
	}
	return &f
}

func (r *gossipRecorder) all() []keyshare.Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]keyshare.Recorded(nil), r.msgs...)
}

// The day's seed is the leader's: a new leader takes the one the members
// hold (a failover keeps every ticket resuming), a member that held
// another seals under the leader's and still opens tickets under its own,
// and a restarted node gets them and resumes the others' tickets, without
// its exchange opening to whoever recorded it and holds the secret.
func TestClusterTLSTicketSeedsFollowTheLeaderAndReachARestartedNode(t *testing.T) {
	tc := newTestCluster(t, 1)
	pool := httpsClusterConfig(t, tc)
	nodes := tc.form(3)
	waitTicketSeeds(t, nodes)
	l := tc.waitLeader()
	var a, b *Node
	for _, n := range nodes {
		switch {
		case n == l:
		case a == nil:
			a = n
		default:
			b = n
		}
	}
	today := keyring.TicketDay(l.seeder.Time(time.Now()).Add(-keyring.TicketKeyGrace))
	original, _ := sealingSeed(l, today)
	before := &testutil.HeldSession{}
	tlsResumed(t, l, pool, tls.VersionTLS12, before)
	resumes := func(n *Node, held *testutil.HeldSession) bool {
		return tlsResumed(t, n, pool, tls.VersionTLS12, held.Copy())
	}
	crossResume := func(x, y *Node) {
		t.Helper()
		held := &testutil.HeldSession{}
		tlsResumed(t, x, pool, tls.VersionTLS12, held)
		if !resumes(y, held) {
			t.Fatalf("a ticket of %s did not resume on %s", x.ID(), y.ID())
		}
	}

	// A new leader that lacks the seeds takes the ones the members hold.
	tc.stop(b.ID())
	a.seedFetchOff.Store(true)
	a.seeds.Clear()
	transferTo(t, l, a)
	waitTicketSeeds(t, []*Node{l, a})
	if s, _ := sealingSeed(a, today); s != original {
		t.Fatal("the new leader sealed under a seed of its own, not the one the members hold: every ticket stopped resuming")
	}
	for _, n := range []*Node{a, l} {
		if !resumes(n, before) {
			t.Fatalf("after the failover a ticket issued before it did not resume on %s", n.ID())
		}
	}
	a.seedFetchOff.Store(false)

	// Two seeds of one day (leaders raced it): l holds one a never had.
	testutil.Eventually(t, 10*time.Second, l.ID()+" took the new leader's seeds", func() bool {
		lead, complete := l.seeder.Took()
		return lead == a.ID() && complete
	})
	l.seeds.Adopt([]keyring.DaySeeds{{Day: today, Seeds: []keyring.TicketSeed{keyring.NewTicketSeed()}}})
	other, _ := sealingSeed(l, today)
	transferTo(t, a, l)
	waitTicketSeeds(t, []*Node{l, a})
	if s, _ := sealingSeed(a, today); s != other {
		t.Fatal("a member does not seal under the leader's seed")
	}
	crossResume(l, a)
	crossResume(a, l)
	for _, n := range []*Node{a, l} {
		if !resumes(n, before) {
			t.Fatalf("%s no longer resumes a ticket under the seed the leader's replaced", n.ID())
		}
	}

	// A restarted node gets the seeds and resumes the others' tickets.
	rec := &gossipRecorder{}
	l.seedRecord.Store(rec.hook())
	b = tc.start(tc.cfgs[b.ID()], func(n *Node) { n.seedRecord.Store(rec.hook()) })
	testutil.Eventually(t, 10*time.Second, "the restarted node took the leader's seeds", func() bool {
		lead, complete := b.seeder.Took()
		return lead == l.ID() && complete
	})
	waitTicketSeeds(t, tc.live())
	if !resumes(b, before) {
		t.Fatal("the restarted node did not resume a ticket issued before it stopped")
	}
	crossResume(b, l)
	crossResume(a, b)

	// What b and l sent each other on gossip does not open with the
	// cluster secret alone.
	secret, err := os.ReadFile(tc.secret)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := keyshare.Eavesdrop(secret, rec.all(), b.ID(), l.ID())
	if err != nil {
		t.Fatal(err)
	}
	if opened == 0 {
		t.Fatal("no request of the restarted node and answer of the leader were recorded")
	}
	seeds := heldSeeds(l, a, b)
	for _, m := range rec.all() {
		if keyringtest.ContainsSeed(m.Msg, seeds) {
			t.Fatalf("a seed message on gossip (tag %q) carries a seed in the clear", m.Tag)
		}
	}
}

// crossResumeAll checks that a fresh TLS 1.2 ticket of each node resumes
// on every other.
func crossResumeAll(t *testing.T, nodes []*Node, pool *x509.CertPool) {
	t.Helper()
	for _, x := range nodes {
		held := &testutil.HeldSession{}
		tlsResumed(t, x, pool, tls.VersionTLS12, held)
		for _, y := range nodes {
			if y != x && !tlsResumed(t, y, pool, tls.VersionTLS12, held.Copy()) {
				t.Fatalf("a ticket of %s did not resume on %s", x.ID(), y.ID())
			}
		}
	}
}

// decryptsFromKeyring reports whether the ticket in held opens under the
// keys n's keyring alone yields at now.
func decryptsFromKeyring(t *testing.T, n *Node, held *testutil.HeldSession) bool {
	t.Helper()
	ticket, _, err := held.Session().ResumptionState()
	if err != nil {
		t.Fatal(err)
	}
	c := &tls.Config{}
	c.SetSessionTicketKeys(n.ring.TicketKeys(n.seeder.Time(time.Now())))
	ss, _ := c.DecryptTicket(ticket, tls.ConnectionState{})
	return ss != nil
}

// While a member runs a release before ticket seeds, every node seals
// tickets from the keyring alone, as it does; once it is upgraded every
// node seals under the day's seed, and the earlier tickets keep resuming:
// at no step does a ticket fail to resume on another node.
func TestClusterTLSTicketsResumeOnEveryNodeThroughAnUpgrade(t *testing.T) {
	tc := newTestCluster(t, 1)
	pool := httpsClusterConfig(t, tc)
	var join []string
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("n%d", i)
		n := tc.start(tc.config(id, 3, slices.Clone(join)), func(n *Node) { n.legacyTickets = id == "n3" })
		join = append(join, n.GossipAddr())
	}
	tc.waitSettled()
	nodes := tc.live()
	n1, n2 := nodes[0], nodes[1]
	testutil.Eventually(t, 10*time.Second, "n1 and n2 seal from the keyring alone while n3 runs the earlier release", func() bool {
		return n1.seeder.Scheme(time.Now()) == keyring.TicketsFromKeyring && n2.seeder.Scheme(time.Now()) == keyring.TicketsFromKeyring
	})
	crossResumeAll(t, nodes, pool)
	// With the earlier release leading, no node makes seeds: still the same.
	old := tc.nodes["n3"]
	testutil.Eventually(t, 30*time.Second, "n3, of the earlier release, leads", func() bool {
		if old.store.IsLeader() {
			return true
		}
		if l := tc.leader(); l != nil {
			_ = l.store.TransferLeadership()
		}
		return false
	})
	crossResumeAll(t, nodes, pool)
	earlier := &testutil.HeldSession{}
	tlsResumed(t, old, pool, tls.VersionTLS12, earlier)

	// The leader is upgraded last.
	tc.stop("n3")
	n3 := tc.start(tc.cfgs["n3"])
	nodes = tc.live()
	testutil.Eventually(t, 15*time.Second, "every node seals under the day's seed once n3 is upgraded", func() bool {
		for _, n := range nodes {
			if n.seeder.Scheme(time.Now()) == keyring.TicketsFromKeyring {
				return false
			}
		}
		return true
	})
	waitTicketSeeds(t, nodes)
	crossResumeAll(t, nodes, pool)
	for _, n := range []*Node{n1, n2} {
		if !tlsResumed(t, n, pool, tls.VersionTLS12, earlier.Copy()) {
			t.Fatalf("after the upgrade %s no longer resumes a ticket issued before it", n.ID())
		}
	}
	fresh := &testutil.HeldSession{}
	tlsResumed(t, n3, pool, tls.VersionTLS12, fresh)
	if decryptsFromKeyring(t, n1, fresh) {
		t.Fatal("after the upgrade a ticket still opens under keys from the keyring alone")
	}
	if !decryptsFromKeyring(t, n1, earlier) {
		t.Fatal("the test's ticket from the earlier release should open under keys from the keyring alone")
	}
}

// Seeds live in memory only: after every node restarted, tickets issued
// before no longer resume (one full handshake), and new ones resume on
// every node again.
func TestClusterTLSTicketsAfterAWholeClusterRestart(t *testing.T) {
	tc := newTestCluster(t, 1)
	pool := httpsClusterConfig(t, tc)
	nodes := tc.form(3)
	waitTicketSeeds(t, nodes)
	before := &testutil.HeldSession{}
	tlsResumed(t, nodes[0], pool, tls.VersionTLS12, before)
	if !tlsResumed(t, nodes[1], pool, tls.VersionTLS12, before.Copy()) {
		t.Fatal("a ticket of n1 did not resume on n2")
	}
	// Every node comes back on its Raft and gossip addresses.
	cfgs := maps.Clone(tc.cfgs)
	var gossip []string
	for _, n := range nodes {
		cfg := cfgs[n.ID()]
		cfg.RaftAddr, cfg.GossipAddr = n.store.Addr(), n.GossipAddr()
		cfgs[n.ID()] = cfg
		gossip = append(gossip, n.GossipAddr())
	}
	tc.stopAll()
	for _, id := range slices.Sorted(maps.Keys(cfgs)) {
		cfg := cfgs[id]
		cfg.Join = gossip
		tc.start(cfg)
	}
	tc.waitSettled()
	nodes = tc.live()
	waitTicketSeeds(t, nodes)
	for _, n := range nodes {
		if tlsResumed(t, n, pool, tls.VersionTLS12, before.Copy()) {
			t.Fatalf("%s resumed a ticket issued before the whole cluster restarted: a seed outlived the processes", n.ID())
		}
	}
	crossResumeAll(t, nodes, pool)
}

// The seed exchange follows the cluster secret as it rotates: through
// install, use and remove tickets keep resuming on every node, a node
// restarted afterwards gets the seeds under the new secret, and a request
// signed with the removed secret is refused.
func TestClusterTicketSeedsFollowTheClusterSecretRotation(t *testing.T) {
	tc := newTestCluster(t, 1)
	pool := httpsClusterConfig(t, tc)
	nodes := tc.form(3)
	waitTicketSeeds(t, nodes)
	crossResumeAll(t, nodes, pool)

	oldSecret, err := os.ReadFile(tc.secret)
	if err != nil {
		t.Fatal(err)
	}
	newSecret := "the-rotated-cluster-secret-9876543210"
	for _, op := range []string{"install", "use"} {
		if status, m := adminWrite(t, nodes[1], "POST", "/v1/secrets/"+op, map[string]any{"secret": newSecret}); status != http.StatusOK {
			t.Fatalf("secret %s: %d %v", op, status, m)
		}
		crossResumeAll(t, nodes, pool)
	}
	if status, m := adminWrite(t, nodes[1], "POST", "/v1/secrets/remove", map[string]any{"secret": string(oldSecret)}); status != http.StatusOK {
		t.Fatalf("secret remove: %d %v", status, m)
	}
	crossResumeAll(t, nodes, pool)

	leader := tc.waitLeader()
	ask, err := keyshare.NewSeedRequest(oldSecret, "n9", leader.ID(), leader.store.ClusterID())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range tc.live() {
		testutil.Eventually(t, 10*time.Second, n.ID()+" refusing a seed request signed with the removed secret", func() bool {
			return errors.Is(n.seeder.CheckRequest(ask), keyshare.ErrSeedAuth)
		})
	}

	f := tc.follower()
	cfg := tc.cfgs[f.ID()]
	cfg.RaftAddr, cfg.GossipAddr = f.store.Addr(), f.GossipAddr()
	tc.stop(f.ID())
	tc.start(cfg)
	tc.waitSettled()
	nodes = tc.live()
	waitTicketSeeds(t, nodes)
	crossResumeAll(t, nodes, pool)
}
