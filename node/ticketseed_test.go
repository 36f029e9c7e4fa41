package node

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
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

	tickets := map[string]*heldSession{}
	for _, v := range []struct {
		desc    string
		version uint16
	}{{"TLS 1.2", tls.VersionTLS12}, {"TLS 1.3", tls.VersionTLS13}} {
		held := &heldSession{}
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
		if tlsResumed(t, thief, pool, tlsVersion(desc), &heldSession{cs: held.cs}) {
			t.Errorf("%s: a node holding only a backup and the cluster secret resumed a session of the cluster: it derives the ticket keys", desc)
		}
		ticket, _, err := held.cs.ResumptionState()
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
	if containsSeed(backup, seeds) {
		t.Error("the backup holds a TLS session ticket seed")
	}
	noSeedOnDisk(t, tc.dir, seeds)
}

// seedEncodings are the forms a seed could be written in.
func seedEncodings(s keyring.TicketSeed) [][]byte {
	return [][]byte{s[:], []byte(hex.EncodeToString(s[:])), []byte(strings.ToUpper(hex.EncodeToString(s[:]))),
		[]byte(base64.StdEncoding.EncodeToString(s[:])[:40]), []byte(base64.URLEncoding.EncodeToString(s[:])[:40])}
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

// containsSeed names the first seed found in b, in any encoding.
func containsSeed(b []byte, seeds []keyring.TicketSeed) bool {
	for _, s := range seeds {
		for _, enc := range seedEncodings(s) {
			if bytes.Contains(b, enc) {
				return true
			}
		}
	}
	return false
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
		if containsSeed(b, seeds) {
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

// startWith starts a node with cfg after prep set it up.
func (tc *testCluster) startWith(cfg Config, prep func(*Node)) *Node {
	tc.t.Helper()
	n, err := New(cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	prep(n)
	if err := n.Start(); err != nil {
		tc.t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	tc.mu.Lock()
	tc.nodes[cfg.NodeID], tc.cfgs[cfg.NodeID] = n, cfg
	tc.mu.Unlock()
	return n
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
	msgs []recordedMsg
}

type recordedMsg struct {
	tag byte
	msg []byte
}

func (r *gossipRecorder) hook() *func(byte, []byte) {
	f := func(tag byte, msg []byte) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.msgs = append(r.msgs, recordedMsg{tag, bytes.Clone(msg)})
	}
	return &f
}

func (r *gossipRecorder) all() []recordedMsg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedMsg(nil), r.msgs...)
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
	today := keyring.TicketDay(l.ticketTime(time.Now()).Add(-keyring.TicketKeyGrace))
	original, _ := sealingSeed(l, today)
	before := &heldSession{}
	tlsResumed(t, l, pool, tls.VersionTLS12, before)
	resumes := func(n *Node, held *heldSession) bool {
		return tlsResumed(t, n, pool, tls.VersionTLS12, &heldSession{cs: held.cs})
	}
	crossResume := func(x, y *Node) {
		t.Helper()
		held := &heldSession{}
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
		s := l.seeder.took.Load()
		return s != nil && s.leader == a.ID() && s.complete
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
	b = tc.startWith(tc.cfgs[b.ID()], func(n *Node) { n.seedRecord.Store(rec.hook()) })
	testutil.Eventually(t, 10*time.Second, "the restarted node took the leader's seeds", func() bool {
		s := b.seeder.took.Load()
		return s != nil && s.leader == l.ID() && s.complete
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
	opened := recordedSeedExchanges(t, secret, rec.all(), b.ID(), l.ID())
	if opened == 0 {
		t.Fatal("no request of the restarted node and answer of the leader were recorded")
	}
	seeds := heldSeeds(l, a, b)
	for _, m := range rec.all() {
		if containsSeed(m.msg, seeds) {
			t.Fatalf("a seed message on gossip (tag %q) carries a seed in the clear", m.tag)
		}
	}
}

// recordedSeedExchanges plays whoever recorded the gossip between asker
// and answerer and holds the cluster secret: it reads every request asker
// sent and tries to open the answers to them. It fails the test when one
// opens, and returns how many exchanges it tried.
func recordedSeedExchanges(t *testing.T, secret []byte, msgs []recordedMsg, asker, answerer string) int {
	t.Helper()
	thief, err := newSeedCrypto(secret)
	if err != nil {
		t.Fatal(err)
	}
	requests := map[string][]byte{}
	for _, m := range msgs {
		if m.tag != seedRequestTag {
			continue
		}
		req, _, err := thief.openRequest(m.msg)
		if err != nil {
			t.Fatalf("a recorded request does not read with the secret: %v", err)
		}
		if req.From == asker && req.To == answerer {
			requests[hex.EncodeToString(req.Nonce)] = m.msg
		}
	}
	tried := 0
	for _, m := range msgs {
		var ans seedAnswerMsg
		if m.tag != seedAnswerTag || json.Unmarshal(m.msg, &ans) != nil {
			continue
		}
		reqMsg, ok := requests[hex.EncodeToString(ans.Nonce)]
		if !ok {
			continue
		}
		tried++
		req, _, _ := thief.openRequest(reqMsg)
		key := thief.fixed[0]
		// A key pair of the thief's own in place of the asker's, dropped
		// after the exchange.
		mine, _ := ecdh.X25519().GenerateKey(rand.Reader)
		if _, err := thief.openAnswer(&seedAsk{req: req, msg: reqMsg, priv: mine}, ans); err == nil {
			t.Fatal("a recorded seed answer opened with the cluster secret and a key pair of the thief's")
		}
		// The secret-derived key alone, as key, as the shared secret, or
		// as the key-encryption key of the keyring's own wrapping.
		for _, shared := range [][]byte{nil, key.kek, make([]byte, 32)} {
			if aead, err := key.answerAEAD(shared, reqMsg, ans.Pub); err == nil {
				if _, err := aead.Open(nil, make([]byte, aead.NonceSize()), ans.Box, seedAnswerAD(ans.Nonce, ans.Pub)); err == nil {
					t.Fatal("a recorded seed answer opened under a key derived from the cluster secret alone")
				}
			}
		}
		block, _ := aes.NewCipher(key.kek)
		gcm, _ := cipher.NewGCM(block)
		if _, err := gcm.Open(nil, make([]byte, gcm.NonceSize()), ans.Box, seedAnswerAD(ans.Nonce, ans.Pub)); err == nil {
			t.Fatal("a recorded seed answer opened under the secret-derived key")
		}
		if _, err := keyring.UnwrapKeys(key.kek, ans.Box); err == nil {
			t.Fatal("a recorded seed answer unwrapped as keys under the secret-derived key")
		}
	}
	return tried
}

// The exchange is authenticated as a whole: a request under another
// secret or altered is refused, and an answer opens only for the request
// it answers, from the node asked, to the node that asked.
func TestTicketSeedExchangeIsBoundToTheClusterAndToItsRequest(t *testing.T) {
	c, err := newSeedCrypto([]byte("the-test-cluster-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := newSeedCrypto([]byte("another-cluster-secret-0123456789"))
	seed := keyring.NewTicketSeed()
	ans := seedAnswer{From: "n2", To: "n1", Cluster: "cid-1", Leader: true, Term: 3, Complete: true, Days: []keyring.DaySeeds{{Day: 7, Seeds: []keyring.TicketSeed{seed}}}}

	ask, err := c.newRequest("n1", "n2", "cid-1")
	if err != nil {
		t.Fatal(err)
	}
	req, key, err := c.openRequest(ask.msg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := key.sealAnswer(ask.msg, req, ans)
	if err != nil {
		t.Fatal(err)
	}
	var m seedAnswerMsg
	json.Unmarshal(out, &m)
	got, err := c.openAnswer(ask, m)
	if err != nil {
		t.Fatal(err)
	}
	if days := got.Days; len(days) != 1 || days[0].Day != 7 || len(days[0].Seeds) != 1 || days[0].Seeds[0] != seed {
		t.Fatal("the asker did not read the seed it was sent")
	}

	if _, _, err := foreign.openRequest(ask.msg); !errors.Is(err, errSeedAuth) {
		t.Errorf("a request under another cluster secret: %v, want %v", err, errSeedAuth)
	}
	var rm seedRequestMsg
	json.Unmarshal(ask.msg, &rm)
	rm.Body = bytes.Replace(rm.Body, []byte(`"t":"n2"`), []byte(`"t":"n3"`), 1)
	altered, _ := json.Marshal(rm)
	if _, _, err := c.openRequest(altered); !errors.Is(err, errSeedAuth) {
		t.Errorf("a request altered on the way: %v, want %v", err, errSeedAuth)
	}

	again, _ := c.newRequest("n1", "n2", "cid-1")
	if _, err := c.openAnswer(again, m); !errors.Is(err, errSeedAnswer) {
		t.Errorf("an answer to another request of the same node: %v, want %v", err, errSeedAnswer)
	}
	if _, err := foreign.openAnswer(ask, m); !errors.Is(err, errSeedAnswer) {
		t.Errorf("an answer opened under another cluster secret: %v, want %v", err, errSeedAnswer)
	}
	for _, wrong := range []seedAnswer{{From: "n3", To: "n1"}, {From: "n2", To: "n9"}, {From: "n2", To: "n1", Cluster: "cid-2"}} {
		out, _ := key.sealAnswer(ask.msg, req, wrong)
		var wm seedAnswerMsg
		json.Unmarshal(out, &wm)
		if _, err := c.openAnswer(ask, wm); !errors.Is(err, errSeedAnswer) {
			t.Errorf("an answer from %s of cluster %q to %s opened for n1's request (cluster cid-1) to n2: %v", wrong.From, wrong.Cluster, wrong.To, err)
		}
	}
	if containsSeed(out, []keyring.TicketSeed{seed}) || containsSeed(ask.msg, []keyring.TicketSeed{seed}) {
		t.Error("the exchange carries the seed in the clear")
	}
}

// crossResumeAll checks that a fresh TLS 1.2 ticket of each node resumes
// on every other.
func crossResumeAll(t *testing.T, nodes []*Node, pool *x509.CertPool) {
	t.Helper()
	for _, x := range nodes {
		held := &heldSession{}
		tlsResumed(t, x, pool, tls.VersionTLS12, held)
		for _, y := range nodes {
			if y != x && !tlsResumed(t, y, pool, tls.VersionTLS12, &heldSession{cs: held.cs}) {
				t.Fatalf("a ticket of %s did not resume on %s", x.ID(), y.ID())
			}
		}
	}
}

// decryptsFromKeyring reports whether the ticket in held opens under the
// keys n's keyring alone yields at now.
func decryptsFromKeyring(t *testing.T, n *Node, held *heldSession) bool {
	t.Helper()
	ticket, _, err := held.cs.ResumptionState()
	if err != nil {
		t.Fatal(err)
	}
	c := &tls.Config{}
	c.SetSessionTicketKeys(n.ring.TicketKeys(n.ticketTime(time.Now())))
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
		n := tc.startWith(tc.config(id, 3, slices.Clone(join)), func(n *Node) { n.legacyTickets = id == "n3" })
		join = append(join, n.GossipAddr())
	}
	tc.waitSettled()
	nodes := tc.live()
	n1, n2 := nodes[0], nodes[1]
	testutil.Eventually(t, 10*time.Second, "n1 and n2 seal from the keyring alone while n3 runs the earlier release", func() bool {
		return n1.ticketScheme(time.Now()) == keyring.TicketsFromKeyring && n2.ticketScheme(time.Now()) == keyring.TicketsFromKeyring
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
	earlier := &heldSession{}
	tlsResumed(t, old, pool, tls.VersionTLS12, earlier)

	// The leader is upgraded last.
	tc.stop("n3")
	n3 := tc.start(tc.cfgs["n3"])
	nodes = tc.live()
	testutil.Eventually(t, 15*time.Second, "every node seals under the day's seed once n3 is upgraded", func() bool {
		for _, n := range nodes {
			if n.ticketScheme(time.Now()) == keyring.TicketsFromKeyring {
				return false
			}
		}
		return true
	})
	waitTicketSeeds(t, nodes)
	crossResumeAll(t, nodes, pool)
	for _, n := range []*Node{n1, n2} {
		if !tlsResumed(t, n, pool, tls.VersionTLS12, &heldSession{cs: earlier.cs}) {
			t.Fatalf("after the upgrade %s no longer resumes a ticket issued before it", n.ID())
		}
	}
	fresh := &heldSession{}
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
	before := &heldSession{}
	tlsResumed(t, nodes[0], pool, tls.VersionTLS12, before)
	if !tlsResumed(t, nodes[1], pool, tls.VersionTLS12, &heldSession{cs: before.cs}) {
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
		if tlsResumed(t, n, pool, tls.VersionTLS12, &heldSession{cs: before.cs}) {
			t.Fatalf("%s resumed a ticket issued before the whole cluster restarted: a seed outlived the processes", n.ID())
		}
	}
	crossResumeAll(t, nodes, pool)
}

func FuzzSeedMessages(f *testing.F) {
	c, err := newSeedCrypto([]byte("the-test-cluster-secret-0123456789"))
	if err != nil {
		f.Fatal(err)
	}
	ask, _ := c.newRequest("n1", "n2", "cid-1")
	f.Add(ask.msg)
	plain, _ := encodeSeedAnswer(seedAnswer{From: "n2", To: "n1", Days: []keyring.DaySeeds{{Day: 7, Seeds: []keyring.TicketSeed{keyring.NewTicketSeed()}}}})
	f.Add(plain)
	f.Add([]byte{0, 0, 0, 2, '{', '}', 1, 0, 0, 0, 0, 0, 0, 0, 7, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		if req, _, err := c.openRequest(b); err == nil && (req.From == "" || len(req.Pub) != 32) {
			t.Fatalf("openRequest accepted %q", b)
		}
		if a, err := decodeSeedAnswer(b); err == nil {
			again, err := encodeSeedAnswer(a)
			if err != nil {
				t.Fatal(err)
			}
			if b2, err := decodeSeedAnswer(again); err != nil || len(b2.Days) != len(a.Days) {
				t.Fatalf("an answer decoded, encoded again, does not decode the same: %v", err)
			}
		}
	})
}

// While the cluster secret is being replaced nodes hold both: a request
// signed with either is answered, under the secret that verified it, and
// the asker opens the answer.
func TestTicketSeedExchangeAcceptsEitherSecretDuringAChange(t *testing.T) {
	oldSecret, newSecret := []byte("the-old-cluster-secret-0123456789"), []byte("the-new-cluster-secret-0123456789")
	onlyOld, _ := newSeedCrypto(oldSecret)
	both, _ := newSeedCrypto(newSecret, oldSecret)
	onlyNew, _ := newSeedCrypto(newSecret)
	seed := keyring.NewTicketSeed()
	for _, c := range []struct {
		desc            string
		asker, answerer *seedCrypto
		ok              bool
	}{
		{"a node on the old secret asks one holding both", onlyOld, both, true},
		{"a node holding both asks one on the old secret", both, onlyOld, false},
		{"a node on the new secret asks one holding both", onlyNew, both, true},
		{"a node on the old secret asks one on the new only", onlyOld, onlyNew, false},
	} {
		ask, _ := c.asker.newRequest("n1", "n2", "")
		req, key, err := c.answerer.openRequest(ask.msg)
		if (err == nil) != c.ok {
			t.Errorf("%s: request: %v, want accepted %t", c.desc, err, c.ok)
			continue
		}
		if err != nil {
			continue
		}
		out, _ := key.sealAnswer(ask.msg, req, seedAnswer{From: "n2", To: "n1", Days: []keyring.DaySeeds{{Day: 1, Seeds: []keyring.TicketSeed{seed}}}})
		var m seedAnswerMsg
		json.Unmarshal(out, &m)
		got, err := c.asker.openAnswer(ask, m)
		if err != nil || len(got.Days) != 1 || got.Days[0].Seeds[0] != seed {
			t.Errorf("%s: the asker did not open the answer: %v", c.desc, err)
		}
	}
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

	thief, _ := newSeedCrypto(oldSecret)
	leader := tc.waitLeader()
	ask, _ := thief.newRequest("n9", leader.ID(), leader.store.ClusterID())
	for _, n := range tc.live() {
		testutil.Eventually(t, 10*time.Second, n.ID()+" refusing a seed request signed with the removed secret", func() bool {
			_, _, err := n.seeder.crypto.openRequest(ask.msg)
			return errors.Is(err, errSeedAuth)
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
