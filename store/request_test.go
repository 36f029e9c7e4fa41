package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/store/command"
	"github.com/tether-proxy/tether/test/testutil"
)

// feedBound applies cmd, bound to bind, as the next log entry.
func feedBound(t testing.TB, f *fsm, kek []byte, cmd Command, bind string) applyResponse {
	t.Helper()
	b, err := command.Encode(kek, cmd)
	if err == nil {
		b, err = command.WithBinding(b, bind)
	}
	if err != nil {
		t.Fatalf("encode %T: %v", cmd, err)
	}
	return f.Apply(&raft.Log{Index: f.index.Load() + 1, Type: raft.LogCommand, Data: b}).(applyResponse)
}

// TestFSMRequestIDIsBoundToItsRequest: the same request id with another
// request is refused and changes nothing; with the same request it is a
// retry answered with the first result; an id remembered without a binding
// (written by an older leader, or restored from its snapshot) binds
// nothing. Every command type binds alike.
func TestFSMRequestIDIsBoundToItsRequest(t *testing.T) {
	deadline := t0.Add(time.Hour)
	drainA := SetDrain{ReqID: "R", Cluster: "web", Destination: "dest-A", Deadline: deadline}
	drainB := SetDrain{ReqID: "R", Cluster: "web", Destination: "dest-B", Deadline: deadline.Add(time.Minute)}
	bindA := BindRequest("POST", "/v1/clusters/web/destinations/dest-A/drain", nil)
	bindB := BindRequest("POST", "/v1/clusters/web/destinations/dest-B/drain", nil)
	if bindA == bindB || len(bindA) != 32 {
		t.Fatalf("bindings %q and %q", bindA, bindB)
	}
	t.Run("drain", func(t *testing.T) {
		f, kek := testFSM(t)
		if r := feedBound(t, f, kek, drainA, bindA); r.err != nil {
			t.Fatal(r.err)
		}
		r := feedBound(t, f, kek, drainB, bindB)
		if !errors.Is(r.err, ErrRequestReused) || !strings.Contains(r.err.Error(), `"R"`) {
			t.Fatalf("dest-B drained with dest-A's id: %v, want ErrRequestReused naming R", r.err)
		}
		if d := f.Drains(); len(d) != 1 || d[0].Destination != "dest-A" {
			t.Fatalf("drains %v, want dest-A alone", d)
		}
		// A retry of dest-A's request (its leader picked a later deadline)
		// answers with the first deadline.
		r = feedBound(t, f, kek, SetDrain{ReqID: "R", Cluster: "web", Destination: "dest-A", Deadline: deadline.Add(time.Hour)}, bindA)
		if r.err != nil || r.value != deadline.Format(time.RFC3339Nano) {
			t.Fatalf("retry: %q, %v; want the first deadline", r.value, r.err)
		}
	})
	t.Run("an id remembered without a binding binds nothing", func(t *testing.T) {
		f, kek := testFSM(t)
		feedBound(t, f, kek, drainA, "")
		if r := feedBound(t, f, kek, drainB, bindB); r.err != nil {
			t.Fatalf("%v, want the first result (an older leader wrote the first entry)", r.err)
		}
		if d := f.Drains(); len(d) != 1 {
			t.Fatalf("drains %v, want dest-A alone", d)
		}
	})
	k1, k2 := testKey("k1", 0), testKey("k2", 0)
	for _, c := range []struct {
		name        string
		first, next Command
	}{
		{"InstallKey", InstallKey{ReqID: "R", Key: k1}, InstallKey{ReqID: "R", Key: k2}},
		{"ActivateKey", ActivateKey{ReqID: "R", ID: "k1", At: t0}, ActivateKey{ReqID: "R", ID: "k1", At: t0.Add(time.Second)}},
		{"RevokeKey", RevokeKey{ReqID: "R", ID: "k1", Replacement: nil}, RevokeKey{ReqID: "R", ID: "k2", Replacement: nil}},
		{"PruneKeys", PruneKeys{ReqID: "R", Now: t0}, PruneKeys{ReqID: "R", Now: t0.Add(time.Hour)}},
		{"ClearDrain", ClearDrain{ReqID: "R", Cluster: "web", Destination: "dest-A"}, ClearDrain{ReqID: "R", Cluster: "web", Destination: "dest-B"}},
		{"SetClusterID", SetClusterID{ReqID: "R", ID: "c1"}, SetClusterID{ReqID: "R", ID: "c2"}},
		{"AcmeWrite", AcmeWrite{ReqID: "R", Delete: []string{"a"}}, AcmeWrite{ReqID: "R", Delete: []string{"b"}}},
		{"SetClock", SetClock{ReqID: "R", At: t0}, SetClock{ReqID: "R", At: t0.Add(time.Hour)}},
		{"ClusterSecret", ClusterSecret{ReqID: "R", Op: SecretRemove, ID: "0123456789abcdef", Wrapped: nil, Under: ""}, ClusterSecret{ReqID: "R", Op: SecretRemove, ID: "fedcba9876543210", Wrapped: nil, Under: ""}},
		{"across types", SetClock{ReqID: "R", At: t0}, ClearDrain{ReqID: "R", Cluster: "web", Destination: "dest-A"}},
	} {
		t.Run(c.name+" by content", func(t *testing.T) {
			f, kek := testFSM(t)
			feed(t, f, kek, InstallKey{ReqID: "k1", Key: k1}, InstallKey{ReqID: "k2", Key: k2})
			feedBound(t, f, kek, c.first, command.ContentBinding(c.first))
			before := f.dump()
			if r := feedBound(t, f, kek, c.first, command.ContentBinding(c.first)); errors.Is(r.err, ErrRequestReused) {
				t.Fatalf("a retry of the same command refused: %v", r.err)
			}
			if r := feedBound(t, f, kek, c.next, command.ContentBinding(c.next)); !errors.Is(r.err, ErrRequestReused) {
				t.Fatalf("the same id for another command: %v, want ErrRequestReused", r.err)
			}
			if f.dump() != before {
				t.Fatalf("a refused or repeated write changed the state:\n%s\nwant\n%s", f.dump(), before)
			}
		})
	}
}

// TestFSMRemembersTheRequestsOfEntriesItSkips: a node whose version does
// not know an ignorable command skips it but remembers its request id and
// binding as the nodes that apply it do, so a later reuse of the id is
// refused on every node alike and no node drains what the others do not.
func TestFSMRemembersTheRequestsOfEntriesItSkips(t *testing.T) {
	full, kek := testFSM(t)
	older, _ := testFSM(t)
	older.commands = CommandSet(string(Commands)[:7] + "0" + string(Commands)[8:]) // no AcmeWrite
	if older.commands.Knows(command.TypeAcmeWrite, 1) || !older.commands.Knows(command.TypeSetDrain, 1) {
		t.Fatalf("older set %q", older.commands)
	}
	entries := []struct {
		cmd  Command
		bind string
	}{
		{SetClusterID{ReqID: "r1", ID: "c1"}, "0b1"},
		{AcmeWrite{ReqID: "r2", Put: []AcmeEntry{{Name: "account", Value: []byte("v")}}}, "0b2"},
		{SetDrain{ReqID: "r3", Cluster: "web", Destination: "dest-A", Deadline: t0}, "0b3"},
		{SetDrain{ReqID: "r2", Cluster: "web", Destination: "dest-B", Deadline: t0}, "0b4"}, // r2 reused for another request
	}
	for _, f := range []*fsm{full, older} {
		for _, e := range entries {
			feedBound(t, f, kek, e.cmd, e.bind)
		}
	}
	if full.acmeVersion == 0 || older.acmeVersion != 0 {
		t.Fatalf("acme applied by full %d, older %d", full.acmeVersion, older.acmeVersion)
	}
	memory := func(f *fsm) string {
		var b strings.Builder
		for _, id := range f.reqOrder {
			fmt.Fprintf(&b, "%s=%s ", id, f.reqs[id].Bind)
		}
		return b.String()
	}
	if memory(full) != memory(older) || memory(full) != "r1=0b1 r2=0b2 r3=0b3 " {
		t.Errorf("request memory: full %q, older %q; want both r1=0b1 r2=0b2 r3=0b3", memory(full), memory(older))
	}
	if a, b := fmt.Sprint(full.Drains()), fmt.Sprint(older.Drains()); a != b {
		t.Errorf("drains differ: full %s, older %s", a, b)
	}
	if r := older.reqs["r2"]; !errors.Is(r.err(), ErrUnsupported) {
		t.Errorf("the skipped entry's remembered answer: %v, want one saying this version does not apply it", r.err())
	}
}

// TestReadStateIsExactlyTheStateAtItsIndex: reads on a follower while the
// leader writes drains see, at each index ReadState reports, exactly the
// drains committed at or below it: none missing, none from a later entry.
func TestReadStateIsExactlyTheStateAtItsIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node")
	}
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	l := c.leader()
	var follower *testNode
	for _, nd := range c.nodes {
		if nd != l {
			follower = nd
		}
	}
	type seen struct {
		index  uint64
		drains []Drain
	}
	var reads []seen
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			follower.s.ReadState(func(index uint64, drains []Drain) { reads = append(reads, seen{index, drains}) })
		}
	}()
	at := map[string]uint64{} // destination -> index of its drain
	// A write that lost leadership may have been applied at its first
	// entry; its retry answers with its own, later index. Such a
	// destination's index is not known, so the reads leave it out.
	uncertain := map[string]bool{}
	for i := 0; i < 40; i++ {
		dest := fmt.Sprintf("d%02d", i)
		cmd := SetDrain{ReqID: "drain-" + dest, Cluster: "web", Destination: dest, Deadline: t0}
		deadline := time.Now().Add(10 * time.Second)
		for {
			idx, err := c.leader().s.Apply(cmd)
			if err == nil {
				at[dest] = idx
				break
			}
			if errors.Is(err, ErrLeadershipLost) {
				uncertain[dest] = true
			} else if !errors.Is(err, ErrNotLeader) || time.Now().After(deadline) {
				t.Fatalf("drain %s: %v", dest, err)
			}
		}
	}
	testutil.Eventually(t, 10*time.Second, "the follower to apply every drain", func() bool {
		return follower.s.AppliedIndex() >= at["d39"]
	})
	close(stop)
	<-done
	if len(reads) < 2 {
		t.Fatalf("%d reads", len(reads))
	}
	for _, r := range reads {
		want, got := 0, 0
		for dest, idx := range at {
			if idx <= r.index && !uncertain[dest] {
				want++
			}
		}
		for _, d := range r.drains {
			if !uncertain[d.Destination] {
				got++
			}
		}
		if got != want {
			t.Fatalf("at index %d the read saw %d drains, want %d (those committed at or below it)", r.index, got, want)
		}
		for _, d := range r.drains {
			if !uncertain[d.Destination] && at[d.Destination] > r.index {
				t.Fatalf("at index %d the read saw %s, committed at %d", r.index, d.Destination, at[d.Destination])
			}
		}
	}
}
