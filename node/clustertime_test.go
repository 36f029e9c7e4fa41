package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/node/leader"
	"github.com/tether-proxy/tether/store"
	"github.com/tether-proxy/tether/test/testutil"
)

// keyTimes reads GET /v1/keyring on n: each key's metadata by id.
func keyTimes(t *testing.T, n *Node) map[string]keyring.Metadata {
	t.Helper()
	status, body := admin(t, n, "GET", "/v1/keyring", nil)
	if status != 200 {
		t.Fatalf("keyring on %s: %d %v", n.ID(), status, body)
	}
	out := map[string]keyring.Metadata{}
	for _, k := range body["keys"].([]any) {
		k := k.(map[string]any)
		md := keyring.Metadata{ID: k["id"].(string)}
		md.Created = parseTime(t, k["created"])
		md.Activates = parseTime(t, k["activates"])
		md.Expires = parseTime(t, k["expires"])
		_ = md.State.UnmarshalText([]byte(k["state"].(string)))
		out[md.ID] = md
	}
	return out
}

// setClock makes n's wall clock (what it commits as leader and gossips)
// run off by offset; 0 puts it back.
func setClock(n *Node, offset time.Duration) {
	if offset == 0 {
		n.clock.SetWall(nil)
		return
	}
	n.clock.SetWall(func() time.Time { return time.Now().Add(offset) })
}

// near reports whether got is within tol of want.
func near(got, want time.Time, tol time.Duration) bool {
	d := got.Sub(want)
	return d <= tol && d >= -tol
}

// activeOnEvery waits until every live node seals with key id.
func (tc *testCluster) activeOnEvery(id string, within time.Duration) {
	tc.t.Helper()
	testutil.Eventually(tc.t, within, "key "+id+" active on every node", func() bool {
		for _, n := range tc.live() {
			if n.ring.ActiveKeyID(time.Now()) != id {
				return false
			}
		}
		return true
	})
}

// sameCommittedTime checks that every live node holds the same committed
// cluster time and that it is not ahead of the real one by more than tol.
func (tc *testCluster) sameCommittedTime(tol time.Duration) {
	tc.t.Helper()
	var first time.Time
	for i, n := range tc.live() {
		c := n.store.CommittedClock()
		if i == 0 {
			first = c
		} else if !c.Equal(first) {
			tc.t.Fatalf("%s holds committed time %s, %s holds %s", n.ID(), c, tc.live()[0].ID(), first)
		}
	}
	if ahead := time.Until(first); ahead > tol {
		tc.t.Fatalf("the committed cluster time is %s ahead of the real one", ahead.Round(time.Second))
	}
}

// checkKeyTimes fails when a key on n was created in the future or
// activates beyond a rotation's placeholder.
func checkKeyTimes(t *testing.T, n *Node) {
	t.Helper()
	now := time.Now()
	for id, md := range keyTimes(t, n) {
		if md.State == keyring.Revoked {
			continue
		}
		if md.Created.After(now.Add(time.Minute)) {
			t.Errorf("%s: key %s created %s, %s in the future", n.ID(), id, md.Created.Format(time.RFC3339), md.Created.Sub(now).Round(time.Second))
		}
		if md.Activates.After(now.Add(pendingActivation + time.Minute)) {
			t.Errorf("%s: key %s activates %s, %s in the future", n.ID(), id, md.Activates.Format(time.RFC3339), md.Activates.Sub(now).Round(time.Second))
		}
	}
}

// A leader whose wall clock jumps 2500 h ahead for a few seconds and back
// must not stop activation: a rotation made while it was ahead, and one
// made after it healed, become active on every node within seconds, and no
// key or committed time lands in the future.
func TestClusterLeaderClockAheadForSecondsThenBackDoesNotStopActivation(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.form(3)
	l := tc.waitLeader()
	setClock(l, 2500*time.Hour)
	status, body := adminWrite(t, l, "POST", "/v1/keyring/rotate", nil)
	if status != 200 {
		t.Fatalf("rotate while the leader's clock is ahead: %d %v", status, body)
	}
	during := body["id"].(string)
	// The jump lasts until the leader has activated what it rotated.
	testutil.Eventually(t, 20*time.Second, "the leader to activate the key rotated while its clock was ahead", func() bool {
		md, ok := keyTimes(t, l)[during]
		return ok && md.Activates.Before(md.Created.Add(pendingActivation))
	})
	setClock(l, 0)

	f := tc.follower()
	status, body = adminWrite(t, f, "POST", "/v1/keyring/rotate", nil)
	if status != 200 {
		t.Fatalf("rotate after the clock healed: %d %v", status, body)
	}
	after := body["id"].(string)
	tc.activeOnEvery(after, 15*time.Second)
	for _, n := range tc.live() {
		checkKeyTimes(t, n)
	}
	tc.waitIdentical()
	tc.sameCommittedTime(time.Minute)
}

// A leader whose clock runs hours behind neither delays a rotation's
// activation nor makes the key expire early: the key activates at the
// cluster's time and keeps its whole lifetime from it.
func TestClusterLeaderClockHoursBehindNeitherDelaysActivationNorExpiresEarly(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.form(3)
	l := tc.waitLeader()
	setClock(l, -3*time.Hour)
	f := tc.follower()
	status, body := adminWrite(t, f, "POST", "/v1/keyring/rotate", nil)
	if status != 200 {
		t.Fatalf("rotate: %d %v", status, body)
	}
	id := body["id"].(string)
	started := time.Now()
	tc.activeOnEvery(id, 15*time.Second)
	md := keyTimes(t, f)[id]
	if !near(md.Activates, started, time.Minute) {
		t.Errorf("key %s activates %s, want about %s (the cluster's time, not the leader's)", id, md.Activates.Format(time.RFC3339), started.Format(time.RFC3339))
	}
	if want := started.Add(keyring.DefaultLifetime); !near(md.Expires, want, time.Minute) {
		t.Errorf("key %s expires %s, %s early (want about %s)", id, md.Expires.Format(time.RFC3339), want.Sub(md.Expires).Round(time.Minute), want.Format(time.RFC3339))
	}
	if !near(md.Created, started, time.Minute) {
		t.Errorf("key %s created %s, want about %s", id, md.Created.Format(time.RFC3339), started.Format(time.RFC3339))
	}
	tc.waitIdentical()
	tc.sameCommittedTime(time.Minute)
}

// A drain under a leader whose clock is far ahead ends DrainTimeout after
// it was made, not months later, on every node.
func TestClusterDrainUnderALeaderClockFarAheadEndsOnTime(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.form(3)
	l := tc.waitLeader()
	setClock(l, 2500*time.Hour)
	f := tc.follower()
	asked := time.Now()
	status, body := adminWrite(t, f, "POST", "/v1/clusters/app/destinations/d1/drain", nil)
	if status != 200 {
		t.Fatalf("drain: %d %v", status, body)
	}
	want := asked.Add(10 * time.Minute) // the test cluster's DrainTimeout
	if got := parseTime(t, body["drain_deadline"]); !near(got, want, 30*time.Second) {
		t.Fatalf("drain deadline %s, want about %s (%s off)", got.Format(time.RFC3339), want.Format(time.RFC3339), got.Sub(want).Round(time.Second))
	}
	testutil.Eventually(t, 10*time.Second, "the drain on every node with its deadline", func() bool {
		for _, n := range tc.live() {
			d := drainOf(t, n, "d1")
			if d["drain_state"] != "draining" || d["drain_deadline"] != body["drain_deadline"] {
				return false
			}
		}
		return true
	})
	tc.waitIdentical()
}

// Revoking the only key under a leader whose clock is far ahead leaves
// every node with an active key: the replacement activates at the
// cluster's time.
func TestClusterRevokeUnderALeaderClockFarAheadLeavesAnActiveKey(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.form(3)
	l := tc.waitLeader()
	k1 := l.ring.ActiveKeyID(time.Now())
	setClock(l, 2500*time.Hour)
	f := tc.follower()
	status, body := adminWrite(t, f, "POST", "/v1/keyring/"+k1+"/revoke", nil)
	if status != 200 {
		t.Fatalf("revoke: %d %v", status, body)
	}
	repl, _ := body["replacement_id"].(string)
	if repl == "" || body["active_key_id"] != repl {
		t.Errorf("revoke answered %v: want the replacement active", body)
	}
	testutil.Eventually(t, 15*time.Second, "an active key other than the revoked one on every node", func() bool {
		for _, n := range tc.live() {
			if a := n.ring.ActiveKeyID(time.Now()); a == "" || a == k1 {
				return false
			}
		}
		return true
	})
	setClock(l, 0)
	for _, n := range tc.live() {
		checkKeyTimes(t, n)
	}
	tc.waitIdentical()
}

// A cluster whose committed time an earlier release let a leader's clock
// push 2500 h ahead (keys created and activated then, as that release
// wrote them) heals by itself: a rotation becomes active everywhere within
// seconds, the far keys come back to the cluster's time, and the committed
// time with them.
func TestClusterHealsACommittedTimeAnEarlierReleasePushedAhead(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.form(3)
	l := tc.waitLeader()
	far := time.Now().Add(2500 * time.Hour)
	// What that release's leader committed while its clock was ahead: a
	// first key active at once (it saw none active), a rotation and its
	// activation.
	first, err := keyring.GenerateKey(far, 0, keyring.DefaultLifetime)
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := keyring.GenerateKey(far, pendingActivation, keyring.DefaultLifetime)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []store.Command{
		store.InstallKey{ReqID: "old-first", Key: first},
		store.InstallKey{ReqID: "old-rotate", Key: rotated},
		store.ActivateKey{ReqID: "activate-" + rotated.ID, ID: rotated.ID, At: far}, // that release's request id
	} {
		if _, err := l.store.Apply(c); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
	}
	f := tc.follower()
	status, body := adminWrite(t, f, "POST", "/v1/keyring/rotate", nil)
	if status != 200 {
		t.Fatalf("rotate: %d %v", status, body)
	}
	id := body["id"].(string)
	tc.activeOnEvery(id, 15*time.Second)
	testutil.Eventually(t, 15*time.Second, "the far keys back at the cluster's time", func() bool {
		for _, md := range keyTimes(t, f) {
			if md.Activates.After(time.Now().Add(pendingActivation + time.Minute)) {
				return false
			}
		}
		return true
	})
	tc.waitIdentical()
	tc.sameCommittedTime(time.Minute)
}

// Automatic rotation keeps its schedule when the keyring holds a key an
// earlier release set to activate far in the future: before the active key
// expires a key takes over, and after its expiry one still encrypts.
func TestAutomaticRotationKeepsItsScheduleBesideAFarFutureKey(t *testing.T) {
	tc := newTestCluster(t, 1)
	now := time.Now()
	n := startSolo(t, tc, now)
	firstID := n.ring.ActiveKeyID(now)
	var firstMD keyring.Metadata
	for _, md := range n.ring.List(now) {
		if md.ID == firstID {
			firstMD = md
		}
	}
	far, err := keyring.GenerateKey(now.Add(2500*time.Hour), 0, keyring.DefaultLifetime)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.store.Apply(store.InstallKey{ReqID: "old-far", Key: far}); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{firstMD.Expires.Add(-time.Hour), firstMD.Expires.Add(time.Hour)} {
		func() {
			defer func() {
				if t.Failed() {
					var rows []string
					for _, md := range n.ring.List(at) {
						rows = append(rows, fmt.Sprintf("%s %s activates %s expires %s", md.ID, md.State, md.Activates.Format(time.RFC3339), md.Expires.Format(time.RFC3339)))
					}
					t.Logf("at %s (the first key expires %s) the active key is %q\n%s",
						at.Format(time.RFC3339), firstMD.Expires.Format(time.RFC3339), n.ring.ActiveKeyID(at), strings.Join(rows, "\n"))
				}
			}()
			testutil.Eventually(t, 10*time.Second, "a rotation (the active key more than a tenth of its lifetime from expiry)", func() bool {
				n.lead.Round(at)
				id := n.ring.ActiveKeyID(at)
				for _, md := range n.ring.List(at) {
					if md.ID == id && md.Expires.Sub(at) > keyring.DefaultLifetime/leader.RotateFraction {
						return true
					}
				}
				return false
			})
		}()
	}
}

// TestClusterSetsACommittedTimeBackOnlyOnceEveryMemberAppliesIt: while a
// member runs the release before SetClock, a committed time far ahead
// cannot be set back: a rotation answers 409 naming that member (rather
// than commit a key that would activate 2500 h ahead) and the member never
// meets an entry it cannot apply. Once it is upgraded, the time is set
// back and a rotation activates everywhere.
func TestClusterSetsACommittedTimeBackOnlyOnceEveryMemberAppliesIt(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.startThree(func(i int, n *Node) {
		if i == 2 {
			n.commands = store.Commands[:8] // the release before SetClock
		}
	})
	tc.waitSettled()
	old := tc.nodes["n3"]
	testutil.Eventually(t, 20*time.Second, "a leader other than n3 that sees n3's command set", func() bool {
		l := tc.leader()
		if l == old {
			_ = old.store.TransferLeadership()
			return false
		}
		return l != nil && l.lead.CommandGate(store.SetClock{At: time.Now()}) != nil
	})
	l := tc.leader()
	far := time.Now().Add(2500 * time.Hour)
	pushed, err := keyring.GenerateKey(far, pendingActivation, keyring.DefaultLifetime)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []store.Command{store.InstallKey{ReqID: "old-rotate", Key: pushed}, store.ActivateKey{ReqID: "activate-" + pushed.ID, ID: pushed.ID, At: far}} {
		if _, err := l.store.Apply(c); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
	}
	for _, n := range tc.live() {
		status, body := adminWrite(t, n, "POST", "/v1/keyring/rotate", nil)
		msg, _ := body["error"].(string)
		if status != 409 || !strings.Contains(msg, "n3") || !strings.Contains(msg, "SetClock v1") {
			t.Fatalf("rotate via %s with n3 on the release before SetClock: %d %v; want 409 naming n3 and SetClock v1", n.ID(), status, body)
		}
	}
	if idx, need := old.store.Stopped(); idx != 0 {
		t.Fatalf("the older member met an entry it cannot apply: %s", need)
	}

	cfg := tc.cfgs["n3"]
	tc.stop("n3")
	tc.start(cfg)
	tc.waitSettled()
	var id string
	testutil.Eventually(t, 20*time.Second, "a rotation accepted once every member applies SetClock", func() bool {
		l := tc.leader()
		if l == nil {
			return false
		}
		status, body := admin(t, l, "POST", "/v1/keyring/rotate", nil)
		id, _ = body["id"].(string)
		return status == 200
	})
	tc.activeOnEvery(id, 15*time.Second)
	tc.waitIdentical()
	tc.sameCommittedTime(time.Minute)
}

// TestARotationActivatedWithAFarKeyIsTheOneThatEncrypts: a key an earlier
// release created 2500 h ahead and a rotation's key activate in the same
// round: the rotation's key encrypts, though the far key's creation time
// is later.
func TestARotationActivatedWithAFarKeyIsTheOneThatEncrypts(t *testing.T) {
	tc := newTestCluster(t, 1)
	now := time.Now().Round(0).UTC()
	n := startSolo(t, tc, now)
	far, err := keyring.GenerateKey(now.Add(2500*time.Hour), pendingActivation, keyring.DefaultLifetime)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.store.Apply(store.InstallKey{ReqID: "old-far", Key: far}); err != nil {
		t.Fatal(err)
	}
	md, _, err := n.lead.Rotate(now, "rotate-1", "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "both keys activated", func() bool {
		now = now.Add(time.Second) // each round a second later
		n.lead.Round(now)
		for _, k := range n.ring.List(now) {
			if k.State == keyring.Installed {
				return false
			}
		}
		return true
	})
	if a := n.ring.ActiveKeyID(now); a != md.ID {
		t.Fatalf("the active key is %s, want the rotation's %s (the far key is %s)", a, md.ID, far.ID)
	}
}

// A node that starts beside one member whose clock is 2500 h ahead (the
// third member down) cannot tell which of the two clocks is wrong: as
// leader it commits no time until they agree. It answers a write that
// commits a time with 503 and a reason, and commits nothing from the mean
// of the two, which is 1250 h ahead.
func TestClusterNodeStartedBesideOneSkewedClockCommitsNoTimeUntilTheClocksAgree(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.skipShort()
	tc.form(3)
	l := tc.waitLeader()
	var y, down *Node
	for _, n := range tc.live() {
		switch {
		case n == l:
		case down == nil:
			down = n
		default:
			y = n
		}
	}
	tc.stop(down.ID())
	testutil.Eventually(t, 20*time.Second, down.ID()+" dead on the others", func() bool {
		return memberState(l, down.ID()) == "dead" && memberState(y, down.ID()) == "dead"
	})
	setClock(y, 2500*time.Hour)
	cfg := tc.cfgs[l.ID()]
	tc.stop(l.ID())
	r := tc.start(cfg)
	testutil.Eventually(t, 20*time.Second, "the restarted node leading, with "+y.ID()+"'s clock read", func() bool {
		if y.store.IsLeader() {
			y.store.TransferLeadership()
			return false
		}
		_, read := r.members.PeerClocks()[y.ID()]
		st := memberState(r, down.ID())
		return r.store.IsLeader() && read && st != "alive" && st != "suspect"
	})
	status, body := admin(t, r, "POST", "/v1/keyring/rotate", nil)
	if status != 503 || !strings.Contains(fmt.Sprint(body["error"]), "does not know the cluster time yet") {
		t.Fatalf("rotate on a leader that cannot tell which clock is wrong: %d %v", status, body)
	}
	status, body = admin(t, r, "POST", "/v1/clusters/app/destinations/d1/drain", nil)
	if status != 503 || !strings.Contains(fmt.Sprint(body["error"]), "does not know the cluster time yet") {
		t.Fatalf("drain on a leader that cannot tell which clock is wrong: %d %v", status, body)
	}
	setClock(y, 0)
	status, body = adminWrite(t, r, "POST", "/v1/keyring/rotate", nil)
	if status != 200 {
		t.Fatalf("rotate once the clocks agree: %d %v", status, body)
	}
	for _, n := range tc.live() {
		checkKeyTimes(t, n)
	}
	if ahead := time.Until(r.store.CommittedClock()); ahead > time.Minute {
		t.Fatalf("the committed cluster time is %s ahead", ahead.Round(time.Second))
	}
	tc.waitIdentical()
}
