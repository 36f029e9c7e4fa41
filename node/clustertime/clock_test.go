package clustertime

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// fakeStore is a committed time and the SetClock writes it took (refused
// when refuse is set).
type fakeStore struct {
	committed time.Time
	refuse    error
	set       []time.Time
	servers   []string // the Raft configuration's server ids
}

func (f *fakeStore) Servers() ([]store.Server, error) {
	var out []store.Server
	for _, id := range f.servers {
		out = append(out, store.Server{ID: id})
	}
	return out, nil
}

func (f *fakeStore) CommittedClock() time.Time { return f.committed }

func (f *fakeStore) Apply(cmd store.Command) (uint64, error) {
	if f.refuse != nil {
		return 0, f.refuse
	}
	c := cmd.(store.SetClock)
	f.set, f.committed = append(f.set, c.At), c.At
	return uint64(len(f.set)), nil
}

// fakeMembers are gossip members with no clock readings.
type fakeMembers []cluster.Member

func (f fakeMembers) Members() []cluster.Member                { return f }
func (f fakeMembers) PeerClocks() map[string]cluster.PeerClock { return nil }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestCommitTimeKeepsACloseCommittedTimeAndSetsAFarOneBack: the leader
// commits at the cluster time, or at a committed time at most Tolerance
// ahead; one further ahead is set back first, and while it cannot be,
// nothing commits.
func TestCommitTimeKeepsACloseCommittedTimeAndSetsAFarOneBack(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		desc      string
		committed time.Time
		refuse    error
		want      time.Time
		wantSet   bool
		wantErr   bool
	}{
		{desc: "committed behind: the cluster time", committed: now.Add(-time.Hour), want: now},
		{desc: "committed a little ahead: kept", committed: now.Add(Tolerance), want: now.Add(Tolerance)},
		{desc: "committed far ahead: set back", committed: now.Add(2500 * time.Hour), want: now, wantSet: true},
		{desc: "committed far ahead, a member without SetClock: refused", committed: now.Add(2500 * time.Hour), refuse: store.ErrUnsupported, wantErr: true},
	} {
		t.Run(c.desc, func(t *testing.T) {
			st := &fakeStore{committed: c.committed, refuse: c.refuse}
			clk := New("n1", quiet())
			clk.Bind(st, nil)
			got, err := clk.CommitTime(now)
			if c.wantErr {
				if !errors.Is(err, ErrAhead) || !errors.Is(err, store.ErrUnsupported) {
					t.Fatalf("got %v, %v; want ErrAhead wrapping the refusal", got, err)
				}
				return
			}
			if err != nil || !got.Equal(c.want) || (len(st.set) > 0) != c.wantSet {
				t.Fatalf("got %v, %v (set back %v); want %v (set back: %t)", got, err, st.set, c.want, c.wantSet)
			}
		})
	}
}

// TestAgreedTimeIsBoundedByTheSlowestAliveMembersClock: pruning goes by
// the cluster time, but no later than the end of the hour the slowest
// alive member's clock gossips (plus the slack); dead members and this
// node do not count.
func TestAgreedTimeIsBoundedByTheSlowestAliveMembersClock(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 30, 0, 0, time.UTC)
	hour := func(t time.Time) int64 { return t.Unix() / 3600 }
	member := func(id string, st cluster.State, clock time.Time) cluster.Member {
		return cluster.Member{Meta: cluster.Meta{ID: id, Clock: hour(clock)}, State: st}
	}
	behind := now.Add(-5 * time.Hour)
	clk := New("n1", quiet())
	clk.Bind(&fakeStore{}, fakeMembers{
		member("n1", cluster.StateAlive, behind), // this node: its own clock is not a bound
		member("n2", cluster.StateAlive, now),
		member("n3", cluster.StateDead, behind),
	})
	if got := clk.Agreed(now); !got.Equal(now) {
		t.Fatalf("agreed %v, want the cluster time %v", got, now)
	}
	clk.Bind(&fakeStore{}, fakeMembers{member("n2", cluster.StateAlive, now), member("n4", cluster.StateAlive, behind)})
	want := time.Unix((hour(behind)+1)*3600, 0).Add(clockSlack)
	if got := clk.Agreed(now); !got.Equal(want) {
		t.Fatalf("agreed %v, want the end of n4's hour plus the slack, %v", got, want)
	}
	if got := New("n1", quiet()).Agreed(now); !got.Equal(now) {
		t.Fatalf("without gossip: agreed %v, want %v", got, now)
	}
}

// TestAClockWaitsForTheServersItKnowsOf: a node just started knows its
// Raft configuration before gossip tells it of any member; it does not
// take its own clock alone for the cluster time (it may be the wrong
// one), and waits for a majority of the servers past the warm-up bound.
// Without a configuration (a node of its own), its clock is the time.
func TestAClockWaitsForTheServersItKnowsOf(t *testing.T) {
	clk := New("n1", quiet())
	clk.Bind(&fakeStore{servers: []string{"n1", "n2", "n3"}}, fakeMembers{})
	if _, err := clk.Known(); !errors.Is(err, ErrNotReady) {
		t.Fatalf("three servers, no member seen: %v, want ErrNotReady", err)
	}
	if clk.Last() != nil {
		t.Fatal("a reading before the clock is anchored was recorded for the data path")
	}
	alone := New("n1", quiet())
	alone.Bind(&fakeStore{servers: []string{"n1"}}, fakeMembers{})
	if now, err := alone.Known(); err != nil || time.Since(now).Abs() > time.Second {
		t.Fatalf("a node of its own: %v, %v", now, err)
	}
}
