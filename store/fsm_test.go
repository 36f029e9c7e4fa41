package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store/command"
)

// testFSM is an FSM whose ring fails the test if it reads its clock.
func testFSM(t testing.TB) (*fsm, []byte) {
	t.Helper()
	kek, _ := keyring.DeriveKEK(testSecret, keyring.InfoRaft)
	ring := keyring.NewRing(keyring.Options{Now: func() time.Time {
		t.Error("the FSM read the ring's clock")
		return t0
	}})
	return newFSM(ring, testSecrets(t), testLogger()), kek
}

// testSecrets holds testSecret alone.
func testSecrets(t testing.TB) *keyring.Secrets {
	t.Helper()
	sec, err := keyring.NewSecrets(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// feed applies commands as consecutive log entries and returns each error.
func feed(t testing.TB, f *fsm, kek []byte, cmds ...Command) []error {
	t.Helper()
	var errs []error
	for _, c := range cmds {
		b, err := command.Encode(kek, c)
		if err != nil {
			t.Fatalf("encode %T: %v", c, err)
		}
		idx := f.index.Load() + 1
		errs = append(errs, f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: b}).(applyResponse).err)
	}
	return errs
}

func TestFSMCommandSemantics(t *testing.T) {
	day := 24 * time.Hour
	k1 := testKey("k1", 0)
	k2 := testKey("k2", 10*day)
	cases := []struct {
		desc    string
		cmds    []Command
		wantErr error // of the last command; nil: success
		check   func(*fsm) string
	}{
		{"install adds the key", []Command{InstallKey{ReqID: "r1", Key: k1}}, nil,
			func(f *fsm) string { return expect(f.ring.Len() == 1, "keys %d", f.ring.Len()) }},
		{"installing the same key again is a no-op", []Command{InstallKey{ReqID: "r1", Key: k1}, InstallKey{ReqID: "r2", Key: k1}}, nil,
			func(f *fsm) string { return expect(f.ring.Len() == 1, "keys %d", f.ring.Len()) }},
		{"a different key under a taken id fails", []Command{InstallKey{ReqID: "r1", Key: k1}, InstallKey{ReqID: "r2", Key: func() keyring.Key { k := k2; k.ID = "k1"; return k }()}},
			keyring.ErrKeyExists, nil},
		{"activate moves the activation time", []Command{InstallKey{ReqID: "r1", Key: k1}, InstallKey{ReqID: "r2", Key: k2}, ActivateKey{ReqID: "r3", ID: "k2", At: t0.Add(day)}}, nil,
			func(f *fsm) string {
				return expect(f.ring.ActiveKeyID(t0.Add(2*day)) == "k2", "active %q", f.ring.ActiveKeyID(t0.Add(2*day)))
			}},
		{"committed times never go backwards: an activation stamped before the last committed time happens at it",
			[]Command{InstallKey{ReqID: "r1", Key: k1}, InstallKey{ReqID: "r2", Key: testKey("k3", 100*day)}, PruneKeys{ReqID: "r3", Now: t0.Add(50 * day)}, ActivateKey{ReqID: "r4", ID: "k3", At: t0.Add(day)}}, nil,
			func(f *fsm) string {
				var a time.Time
				for _, k := range f.ring.Snapshot() {
					if k.ID == "k3" {
						a = k.Activates
					}
				}
				return expect(a.Equal(t0.Add(50*day)) && f.committed().Equal(t0.Add(50*day)), "k3 activates %s, committed time %s", a, f.committed())
			}},
		{"a committed time set back heals: a later activation is not raised to the time it replaced",
			[]Command{InstallKey{ReqID: "r1", Key: k1}, InstallKey{ReqID: "r2", Key: testKey("k3", 400*day)}, ActivateKey{ReqID: "r3", ID: "k1", At: t0.Add(300 * day)},
				SetClock{ReqID: "r4", At: t0.Add(day)}, ActivateKey{ReqID: "r5", ID: "k3", At: t0.Add(2 * day)}}, nil,
			func(f *fsm) string {
				var a time.Time
				for _, k := range f.ring.Snapshot() {
					if k.ID == "k3" {
						a = k.Activates
					}
				}
				return expect(a.Equal(t0.Add(2*day)) && f.committed().Equal(t0.Add(2*day)), "k3 activates %s, committed time %s", a, f.committed())
			}},
		{"a committed time set back still orders activations after it",
			[]Command{InstallKey{ReqID: "r1", Key: testKey("k3", 400*day)}, SetClock{ReqID: "r2", At: t0.Add(10 * day)}, ActivateKey{ReqID: "r3", ID: "k3", At: t0.Add(day)}}, nil,
			func(f *fsm) string {
				return expect(f.ring.ActiveKeyID(t0.Add(10*day)) == "k3" && f.ring.ActiveKeyID(t0.Add(9*day)) == "", "k3 not activated at the committed time")
			}},
		{"a prune goes by its own time, not a later committed one",
			[]Command{InstallKey{ReqID: "r1", Key: k1}, InstallKey{ReqID: "r2", Key: testKey("k3", 300*day)}, ActivateKey{ReqID: "r3", ID: "k3", At: t0.Add(200 * day)}, PruneKeys{ReqID: "r4", Now: t0.Add(day)}}, nil,
			func(f *fsm) string {
				return expect(f.ring.Len() == 2, "keys %d: k1 pruned by the committed time of an activation", f.ring.Len())
			}},
		{"activating an unknown key fails", []Command{ActivateKey{ReqID: "r1", ID: "nope", At: t0}}, keyring.ErrUnknownKey, nil},
		{"revoke stops the key", []Command{InstallKey{ReqID: "r1", Key: k1}, RevokeKey{ReqID: "r2", ID: "k1"}}, nil,
			func(f *fsm) string { return expect(f.ring.ActiveKeyID(t0.Add(day)) == "", "still active") }},
		{"revoke with a replacement installs it in the same entry", []Command{InstallKey{ReqID: "r1", Key: k1}, RevokeKey{ReqID: "r2", ID: "k1", Replacement: &k2}}, nil,
			func(f *fsm) string {
				return expect(f.ring.Len() == 2 && f.ring.ActiveKeyID(t0.Add(11*day)) == "k2", "keys %d", f.ring.Len())
			}},
		{"revoke of an unknown key installs no replacement", []Command{RevokeKey{ReqID: "r1", ID: "nope", Replacement: &k2}}, keyring.ErrUnknownKey,
			func(f *fsm) string { return expect(f.ring.Len() == 0, "replacement installed") }},
		{"prune removes keys past retention at the leader's time", []Command{InstallKey{ReqID: "r1", Key: k1}, PruneKeys{ReqID: "r2", Now: t0.Add(200 * day)}}, nil,
			func(f *fsm) string { return expect(f.ring.Len() == 0, "keys %d", f.ring.Len()) }},
		{"prune keeps keys within retention", []Command{InstallKey{ReqID: "r1", Key: k1}, PruneKeys{ReqID: "r2", Now: t0.Add(100 * day)}}, nil,
			func(f *fsm) string { return expect(f.ring.Len() == 1, "keys %d", f.ring.Len()) }},
		{"set drain records the deadline", []Command{SetDrain{ReqID: "r1", Cluster: "web", Destination: "d1", Deadline: t0}}, nil,
			func(f *fsm) string {
				d := f.Drains()
				return expect(len(d) == 1 && d[0].Deadline.Equal(t0), "drains %v", d)
			}},
		{"set drain again moves the deadline", []Command{SetDrain{ReqID: "r1", Cluster: "web", Destination: "d1", Deadline: t0}, SetDrain{ReqID: "r2", Cluster: "web", Destination: "d1", Deadline: t0.Add(time.Hour)}}, nil,
			func(f *fsm) string {
				d := f.Drains()
				return expect(len(d) == 1 && d[0].Deadline.Equal(t0.Add(time.Hour)), "drains %v", d)
			}},
		{"clear drain removes it; clearing again is a no-op", []Command{SetDrain{ReqID: "r1", Cluster: "web", Destination: "d1", Deadline: t0}, ClearDrain{ReqID: "r2", Cluster: "web", Destination: "d1"}, ClearDrain{ReqID: "r3", Cluster: "web", Destination: "d1"}}, nil,
			func(f *fsm) string { return expect(len(f.Drains()) == 0, "drains %v", f.Drains()) }},
		{"drains are sorted", []Command{SetDrain{ReqID: "r1", Cluster: "web", Destination: "b", Deadline: t0}, SetDrain{ReqID: "r2", Cluster: "api", Destination: "z", Deadline: t0}, SetDrain{ReqID: "r3", Cluster: "web", Destination: "a", Deadline: t0}}, nil,
			func(f *fsm) string {
				d := f.Drains()
				return expect(len(d) == 3 && d[0].Cluster == "api" && d[1].Destination == "a" && d[2].Destination == "b", "drains %v", d)
			}},
		{"first cluster id wins", []Command{SetClusterID{ReqID: "r1", ID: "c1"}, SetClusterID{ReqID: "r2", ID: "c1"}}, nil,
			func(f *fsm) string { return expect(f.ClusterID() == "c1", "id %q", f.ClusterID()) }},
		{"a different cluster id later fails", []Command{SetClusterID{ReqID: "r1", ID: "c1"}, SetClusterID{ReqID: "r2", ID: "c2"}}, ErrClusterID,
			func(f *fsm) string { return expect(f.ClusterID() == "c1", "id %q", f.ClusterID()) }},
		{"a repeated request id returns the first result and changes nothing",
			[]Command{ActivateKey{ReqID: "r1", ID: "k1", At: t0}, InstallKey{ReqID: "r2", Key: k1}, ActivateKey{ReqID: "r1", ID: "k1", At: t0.Add(-day)}}, keyring.ErrUnknownKey,
			func(f *fsm) string { return expect(f.ring.Snapshot()[0].Activates.Equal(t0), "retry applied") }},
	}
	for _, c := range cases {
		f, kek := testFSM(t)
		errs := feed(t, f, kek, c.cmds...)
		last := errs[len(errs)-1]
		if (c.wantErr == nil) != (last == nil) || (c.wantErr != nil && !errors.Is(last, c.wantErr)) {
			t.Errorf("%s: err %v, want %v", c.desc, last, c.wantErr)
		}
		if c.check != nil {
			if msg := c.check(f); msg != "" {
				t.Errorf("%s: %s", c.desc, msg)
			}
		}
	}
}

func expect(ok bool, format string, args ...any) string {
	if ok {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " "))
}

func TestFSMSkipsIgnorableUnknownTypesAndRejectsBadEntries(t *testing.T) {
	f, kek := testFSM(t)
	cases := []struct {
		desc    string
		data    []byte
		wantErr bool
	}{
		{"unknown command type marked ignorable is skipped without error", []byte{200, 1, '{', '}'}, false},
		{"truncated entry is an error", []byte{command.TypeSetClusterID}, true},
		{"missing request id is an error", append([]byte{command.TypeSetClusterID, 1}, `{"id":"c1"}`...), true},
		{"malformed JSON is an error", append([]byte{command.TypeSetDrain, 1}, `{"req":`...), true},
	}
	for i, c := range cases {
		r := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: c.data}).(applyResponse)
		if (r.err != nil) != c.wantErr {
			t.Errorf("%s: err %v", c.desc, r.err)
		}
	}
	if f.ClusterID() != "" || f.index.Load() != uint64(len(cases)) {
		t.Errorf("bad entries changed the state (cluster %q) or the index (%d)", f.ClusterID(), f.index.Load())
	}
	if got := feed(t, f, kek, SetClusterID{ReqID: "r1", ID: "c1"}); got[0] != nil {
		t.Errorf("FSM unusable after bad entries: %v", got[0])
	}
}

// TestFSMStopsAtAnEntryItMayNotSkip: an entry of a type or body version this
// binary does not know, not marked ignorable, is neither applied nor
// counted; nor is any entry after it (the node would diverge for good: the
// next snapshot would be above the entry). It says which version it needs.
func TestFSMStopsAtAnEntryItMayNotSkip(t *testing.T) {
	cases := []struct {
		desc string
		data []byte
		want string // in the error and the log line
	}{
		{"unknown type", append([]byte{command.TypeMax + 1, 1}, `{"req":"x"}`...), fmt.Sprintf("type %d v1", command.TypeMax+1)},
		{"newer body version of a known type", append([]byte{command.TypeSetClusterID, 9}, `{"req":"x","id":"c9"}`...), "SetClusterID v9"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			f, kek := testFSM(t)
			var logs bytes.Buffer
			f.logger = slog.New(slog.NewTextHandler(&logs, nil))
			feed(t, f, kek, SetClusterID{ReqID: "r1", ID: "c1"})
			stop := f.index.Load() + 1
			r := f.Apply(&raft.Log{Index: stop, Type: raft.LogCommand, Data: c.data}).(applyResponse)
			if r.err == nil || !strings.Contains(r.err.Error(), c.want) {
				t.Errorf("apply: err %v, want one naming %q", r.err, c.want)
			}
			b, _ := command.Encode(kek, InstallKey{ReqID: "r2", Key: testKey("k1", 0)})
			f.Apply(&raft.Log{Index: stop + 1, Type: raft.LogCommand, Data: b})
			f.StoreConfiguration(stop+2, raft.Configuration{})
			if got := f.index.Load(); got != stop-1 {
				t.Errorf("applied index %d, want %d (the entry before the one it cannot apply)", got, stop-1)
			}
			if f.ring.Len() != 0 {
				t.Error("an entry after the unappliable one was applied")
			}
			if _, err := f.Snapshot(); err == nil {
				t.Error("a snapshot was taken above an entry that was not applied")
			}
			if n := strings.Count(logs.String(), "upgrade"); n != 1 || !strings.Contains(logs.String(), c.want) {
				t.Errorf("want one log line naming %q and asking for an upgrade, got:\n%s", c.want, logs.String())
			}
			if idx, _ := f.stopped(); idx != stop {
				t.Errorf("stopped() = %d, want %d", idx, stop)
			}
		})
	}
}

func TestFSMRequestMemoryIsBoundedAndDeterministic(t *testing.T) {
	a, kek := testFSM(t)
	b, _ := testFSM(t)
	var cmds []Command
	for i := 0; i < maxRequests+10; i++ {
		cmds = append(cmds, ClearDrain{ReqID: fmt.Sprintf("r%d", i), Cluster: "web", Destination: "d"})
	}
	feed(t, a, kek, cmds...)
	feed(t, b, kek, cmds...)
	if len(a.reqs) != maxRequests || len(a.reqOrder) != maxRequests {
		t.Fatalf("remembers %d request ids, want %d", len(a.reqs), maxRequests)
	}
	if _, ok := a.reqs["r0"]; ok {
		t.Error("oldest request id was not forgotten first")
	}
	if a.dump() != b.dump() {
		t.Error("two FSMs fed the same entries differ")
	}
}

func TestFSMSnapshotRestoreRoundTrip(t *testing.T) {
	src, kek := testFSM(t)
	k2 := testKey("k2", time.Hour)
	feed(t, src, kek, SetClusterID{ReqID: "r1", ID: "c1"}, InstallKey{ReqID: "r2", Key: testKey("k1", 0)}, RevokeKey{ReqID: "r3", ID: "k1", Replacement: &k2},
		SetDrain{ReqID: "r4", Cluster: "web", Destination: "d1", Deadline: t0}, ActivateKey{ReqID: "r5", ID: "nope", At: t0})
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if bytes.Contains(sink.Bytes(), k2.Material) {
		t.Fatal("snapshot holds key material in the clear")
	}
	dst, _ := testFSM(t)
	feed(t, dst, kek, SetDrain{ReqID: "x", Cluster: "old", Destination: "state", Deadline: t0}) // replaced wholesale
	if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got, want := dst.dump(), src.dump(); got != want {
		t.Fatalf("restored state differs:\n%s\nwant\n%s", got, want)
	}
	// The restored request memory still answers retries with the first result.
	if errs := feed(t, dst, kek, ActivateKey{ReqID: "r5", ID: "k2", At: t0}); !errors.Is(errs[0], keyring.ErrUnknownKey) {
		t.Errorf("retry after restore: %v, want the first result (ErrUnknownKey)", errs[0])
	}
	// A snapshot under another secret does not restore and changes nothing.
	otherSecret, _ := keyring.NewSecrets([]byte("another-secret-of-enough-length"))
	other := newFSM(newRing(), otherSecret, testLogger())
	if err := other.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err == nil || other.ring.Len() != 0 {
		t.Errorf("restore under another secret: %v, %d keys", err, other.ring.Len())
	}
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

func FuzzDecodeSnapshot(f *testing.F) {
	src, kek := testFSM(f)
	k := testKey("k2", time.Hour)
	feed(f, src, kek, SetClusterID{ReqID: "r1", ID: "c1"}, InstallKey{ReqID: "r2", Key: k}, SetDrain{ReqID: "r3", Cluster: "web", Destination: "d1", Deadline: t0})
	snap, _ := src.Snapshot()
	b, _ := snap.(*fsmSnapshot).encode()
	f.Add(b)
	f.Add(append([]byte(nil), snapMagic...))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeSnapshot(kek, data)
		if err != nil {
			return
		}
		if len(st.body.Requests) > maxRequests {
			t.Fatalf("%d request ids survived decoding", len(st.body.Requests))
		}
		dst := newFSM(newRing(), testSecrets(t), testLogger())
		_ = dst.Restore(io.NopCloser(bytes.NewReader(data))) // must not panic
	})
}

// configOf is a Raft configuration of voters with the given ids.
func configOf(ids ...string) raft.Configuration {
	var c raft.Configuration
	for _, id := range ids {
		c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":7000"), Suffrage: raft.Voter})
	}
	return c
}

// The FSM remembers which committed configuration removed a member, the
// same on every node and across a snapshot, and forgets it once the member
// is back.
func TestFSMRemembersRemovedMembers(t *testing.T) {
	a, _ := testFSM(t)
	b, _ := testFSM(t)
	for _, f := range []*fsm{a, b} {
		f.StoreConfiguration(1, configOf("n1", "n2", "n3", "n4"))
		f.StoreConfiguration(5, configOf("n1", "n3")) // two at once
		f.StoreConfiguration(6, configOf("n1", "n3", "n4"))
	}
	if idx, ok := a.removedAt("n2"); !ok || idx != 5 {
		t.Errorf("removedAt(n2) = %d, %t; want 5, true", idx, ok)
	}
	if _, ok := a.removedAt("n4"); ok {
		t.Error("n4 came back at index 6 and still reads as removed")
	}
	if _, ok := a.removedAt("n1"); ok {
		t.Error("a member never removed reads as removed")
	}
	for id, want := range map[string]bool{"n1": true, "n2": false, "n3": true, "n4": true, "n9": false} {
		if got := a.inConfiguration(id); got != want {
			t.Errorf("inConfiguration(%s) = %t, want %t", id, got, want)
		}
	}
	if a.dump() != b.dump() {
		t.Errorf("two FSMs fed the same configurations differ:\n%s\n%s", a.dump(), b.dump())
	}

	dst, _ := testFSM(t)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, a)))); err != nil {
		t.Fatal(err)
	}
	if got, want := dst.dump(), a.dump(); got != want {
		t.Fatalf("restored state differs:\n%s\nwant\n%s", got, want)
	}
	// The restored member list is the base of the next difference.
	dst.StoreConfiguration(9, configOf("n1"))
	if idx, ok := dst.removedAt("n3"); !ok || idx != 9 {
		t.Errorf("after restore, removedAt(n3) = %d, %t; want 9, true", idx, ok)
	}

	// Bounded, oldest forgotten first.
	for i := range maxRemovals + 5 {
		id := fmt.Sprintf("m%d", i)
		a.StoreConfiguration(uint64(100+2*i), configOf("n1", id))
		a.StoreConfiguration(uint64(101+2*i), configOf("n1"))
	}
	if len(a.removed) != maxRemovals || len(a.removedOrder) != maxRemovals {
		t.Fatalf("remembers %d removals, want %d", len(a.removed), maxRemovals)
	}
	if _, ok := a.removedAt("m0"); ok {
		t.Error("the oldest removal was not forgotten first")
	}
}

// snapshotBytes is f's snapshot as Persist writes it.
func snapshotBytes(t *testing.T, f *fsm) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// TestSetClockIsNotSkippedByAnEarlierRelease: a node of the release before
// SetClock (command types 1-8) stops at it rather than skip it, since
// every later activation depends on the committed time; and the gate's
// check says such a member does not apply it.
func TestSetClockIsNotSkippedByAnEarlierRelease(t *testing.T) {
	earlier := Commands[:command.TypeAcmeWrite]
	if earlier.Supports(SetClock{}) || BaselineCommands.Supports(SetClock{}) || !Commands.Supports(SetClock{}) {
		t.Fatalf("Supports(SetClock): earlier %t, baseline %t, this binary %t; want false, false, true",
			earlier.Supports(SetClock{}), BaselineCommands.Supports(SetClock{}), Commands.Supports(SetClock{}))
	}
	f, kek := testFSM(t)
	f.commands = earlier
	errs := feed(t, f, kek, SetClusterID{ReqID: "r1", ID: "c1"}, SetClock{ReqID: "r2", At: t0})
	if !errors.Is(errs[1], ErrStopped) || !strings.Contains(errs[1].Error(), "type 9 v1") {
		t.Fatalf("an earlier release applying SetClock: %v, want it stopped naming command type 9 v1", errs[1])
	}
	if idx, _ := f.stopped(); idx != 2 {
		t.Fatalf("stopped at %d, want 2", idx)
	}
}
