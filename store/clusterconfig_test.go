package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/store/command"
	"github.com/tether-proxy/tether/test/testutil"
)

func setConfig(req string, ifVersion uint64, n int) SetConfig {
	return SetConfig{ReqID: req, IfVersion: ifVersion, Content: fmt.Appendf(nil, `{"Routes":{"r%d":{}}}`, n), Summary: fmt.Sprintf("push %d", n), At: t0}
}

// TestFSMConfigVersions: the FSM numbers versions itself, refuses a stale
// IfVersion without changing anything, answers a retry with the version
// its first application committed, and keeps the last 50.
func TestFSMConfigVersions(t *testing.T) {
	f, kek := testFSM(t)
	errs := feed(t, f, kek, setConfig("a", 0, 1), setConfig("b", 1, 2), setConfig("c", 1, 3))
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("pushes: %v", errs)
	}
	if !errors.Is(errs[2], ErrConfigVersion) || !strings.Contains(errs[2].Error(), "config version is 2, not 1") {
		t.Fatalf("stale IfVersion: %v, want ErrConfigVersion naming 2", errs[2])
	}
	s := &Store{fsm: f}
	cur := s.ConfigCurrent()
	if cur.Version != 2 || string(cur.Content) != `{"Routes":{"r2":{}}}` || cur.Summary != "push 2" || cur.Index != 2 || !cur.Time.Equal(t0) {
		t.Fatalf("current %+v", cur)
	}
	// A retry of "b" answers with its first result, version 2, even now.
	b, _ := command.Encode(kek, setConfig("b", 1, 2))
	r := f.Apply(&raft.Log{Index: 4, Data: b}).(applyResponse)
	if r.err != nil || r.value != "2" || s.ConfigCurrent().Version != 2 {
		t.Fatalf("retry: %v %q, current %d", r.err, r.value, s.ConfigCurrent().Version)
	}
	for i := 3; i <= 60; i++ {
		if errs := feed(t, f, kek, setConfig(fmt.Sprint("p", i), 0, i)); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	h := s.ConfigHistory()
	if len(h) != maxConfigHistory || h[0].Version != 60 || h[len(h)-1].Version != 11 {
		t.Fatalf("history: %d versions, newest %d, oldest %d", len(h), h[0].Version, h[len(h)-1].Version)
	}
	if _, ok := s.ConfigAt(10); ok {
		t.Error("version 10 is still kept")
	}
	if v, ok := s.ConfigAt(11); !ok || string(v.Content) != `{"Routes":{"r11":{}}}` {
		t.Errorf("version 11: %v %s", ok, v.Content)
	}
}

// TestFSMConfigSnapshotRoundTrip: the history survives a snapshot and a
// backup, and an older release (command types 1-10) refuses a snapshot
// holding it instead of dropping it.
func TestFSMConfigSnapshotRoundTrip(t *testing.T) {
	src, kek := testFSM(t)
	feed(t, src, kek, SetClusterID{ReqID: "id", ID: "c1"}, setConfig("a", 0, 1), setConfig("b", 0, 2))
	b := snapshotBytes(t, src)
	dst, _ := testFSM(t)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	if got, want := dst.dump(), src.dump(); got != want || !strings.Contains(got, "config 2 ") {
		t.Fatalf("restored state differs:\n%s\nwant\n%s", got, want)
	}
	// The next version goes on from the restored one.
	if errs := feed(t, dst, kek, setConfig("c", 2, 3)); errs[0] != nil || (&Store{fsm: dst}).ConfigCurrent().Version != 3 {
		t.Fatalf("push after restore: %v", errs)
	}
	old, _ := testFSM(t)
	old.commands = "1111111111"
	if err := old.Restore(io.NopCloser(bytes.NewReader(b))); !errors.Is(err, ErrStopped) {
		t.Fatalf("an earlier release restored a snapshot holding SetConfig: %v", err)
	}
	// A snapshot without a config (every earlier one) reads as version 0.
	plain, _ := testFSM(t)
	feed(t, plain, kek, SetClusterID{ReqID: "id", ID: "c1"})
	if bytes.Contains(snapshotBytes(t, plain), []byte(`"config"`)) {
		t.Error("a snapshot without a config version names one")
	}
}

// TestSetConfigIsNotSkippedByAnEarlierRelease: every node must serve the
// same version, so a node of the release before SetConfig stops at it.
func TestSetConfigIsNotSkippedByAnEarlierRelease(t *testing.T) {
	f, kek := testFSM(t)
	f.commands = "1111111111"
	errs := feed(t, f, kek, setConfig("a", 0, 1))
	if !errors.Is(errs[0], ErrStopped) {
		t.Fatalf("apply: %v, want ErrStopped", errs[0])
	}
	if CommandSet("1111111111").Supports(setConfig("a", 0, 1)) {
		t.Error("the earlier release's set claims SetConfig")
	}
}

func TestSetConfigDecodeRefusesBadBodies(t *testing.T) {
	for _, c := range []SetConfig{
		{ReqID: "r", Content: []byte(`[1]`), At: t0},
		{ReqID: "r", Content: nil, At: t0},
		{ReqID: "r", Content: []byte(`{}`)},
		{ReqID: "r", Content: []byte(`{}`), At: t0, Summary: strings.Repeat("x", 2000)},
	} {
		if _, err := command.Encode(nil, c); err == nil {
			t.Errorf("encoded %+v", c)
		}
	}
}

// A backup carries the config history; restoring it brings that history
// back on every node, and later versions number on from it.
func TestBackupCarriesTheConfigHistory(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	c.apply(setConfig("a", 0, 1))
	c.apply(setConfig("b", 0, 2))
	l := c.leader()
	var buf bytes.Buffer
	if _, err := l.s.SaveBackup(&buf, time.Now()); err != nil {
		t.Fatal(err)
	}
	c.apply(setConfig("c", 0, 3))
	if _, err := l.s.RestoreBackup(bytes.NewReader(buf.Bytes()), time.Now(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the backup's history on every node", func() bool {
		for _, n := range c.nodes {
			h := n.s.ConfigHistory()
			if len(h) != 2 || h[0].Version != 2 || string(h[0].Content) != `{"Routes":{"r2":{}}}` {
				return false
			}
		}
		return true
	})
	c.apply(setConfig("d", 2, 4))
	if v := c.leader().s.ConfigCurrent(); v.Version != 3 || v.Summary != "push 4" {
		t.Fatalf("after the restore: %+v", v)
	}
}
