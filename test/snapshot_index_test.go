package test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestRestartFromAnOlderSnapshotReportsItsIndex: a node whose newest Raft
// snapshot it cannot fully understand (here: a field no tether knows, as a
// newer release might write) starts from the older one raft falls back to,
// stops as at an entry it cannot apply, and reports the index of the
// snapshot it restored, not the newest one's.
func TestRestartFromAnOlderSnapshotReportsItsIndex(t *testing.T) {
	b1 := testutil.NewBackend(t, "b1")
	env := newClusterEnv(t, cookieConfig(b1))
	a := env.startNode("ix-1", "")
	testutil.Eventually(t, 30*time.Second, "ix-1 ready", func() bool {
		st, _, _ := testutil.Get(t, http.DefaultClient, a.adminURL+"/readyz", nil)
		return st == 200
	})
	for _, d := range []string{"b1", "b1"} { // two state changes: two snapshots
		if code, out := run(t, nil, "drain", "app", d, "--admin", a.adminURL); code != 0 {
			t.Fatalf("drain: %s", out)
		}
		if code, out := run(t, nil, "drain", "app", d, "--undo", "--admin", a.adminURL); code != 0 {
			t.Fatalf("undrain: %s", out)
		}
	}
	dir := filepath.Join(a.dataDir, "raft")
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "two snapshots on disk", func() bool {
		l, err := snaps.List()
		return err == nil && len(l) == 2
	})
	a.Signal(syscall.SIGTERM)
	a.Wait(30 * time.Second)

	// A newer snapshot at a far higher index, with a field this tether
	// does not know.
	l, _ := snaps.List()
	meta, rc, err := snaps.Open(l[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	state, _ := io.ReadAll(rc)
	rc.Close()
	var body map[string]any
	if err := json.Unmarshal(state[4:], &body); err != nil {
		t.Fatal(err)
	}
	body["weights"] = map[string]any{"b1": 3}
	js, _ := json.Marshal(body)
	_, trans := raft.NewInmemTransport("")
	sink, err := snaps.Create(raft.SnapshotVersionMax, meta.Index+1000, meta.Term, meta.Configuration, meta.ConfigurationIndex, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(sink, bytes.NewReader(append(state[:4:4], js...))); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}

	a = env.startNode("ix-1", a.dataDir)
	var st map[string]any
	testutil.Eventually(t, 30*time.Second, "ix-1 answering its status", func() bool {
		code, m := adminJSON(t, "GET", a.adminURL+"/v1/status")
		st = m
		return code == 200
	})
	// The log past the restored snapshot holds no-ops (a new term) at most.
	if got := uint64(st["applied_index"].(float64)); got < meta.Index || got > meta.Index+10 {
		t.Errorf("applied_index %d after raft restored the snapshot at %d (the newest, refused, is at %d)", got, meta.Index, meta.Index+1000)
	}
	code, _, ready := testutil.Get(t, http.DefaultClient, a.adminURL+"/readyz", nil)
	if code != 503 || !strings.Contains(ready, "upgrade tether") || !strings.Contains(ready, "weights") {
		t.Errorf("readyz after refusing the newest snapshot: %d %s; want 503 naming the unknown field and asking for an upgrade", code, ready)
	}
	a.Signal(syscall.SIGTERM)
	a.Wait(30 * time.Second)
}
