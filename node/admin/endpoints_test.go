package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy/upstream"
	"github.com/tether-proxy/tether/store"
)

// unimplemented leaves what a test does not use to a nil interface
// (calling it panics), below the fakes' own methods.
type unimplemented struct{ Store }

// fakeStore is a leader's store holding drains.
type fakeStore struct {
	unimplemented
	*fakeLeadership
	drains    []store.Drain
	committed []store.Command
	removed   []string
	config    []store.ConfigVersion // oldest first
}

func (f *fakeStore) ReadState(fn func(uint64, []store.Drain)) { fn(f.AppliedIndex(), f.drains) }
func (f *fakeStore) CommitRequest(cmd store.Command, bind string) (store.Committed, error) {
	f.committed = append(f.committed, cmd)
	f.applied.Add(1)
	c := store.Committed{Index: f.applied.Load()}
	if d, ok := cmd.(store.SetDrain); ok {
		c.Value = d.Deadline.Format(time.RFC3339Nano)
	}
	if sc, ok := cmd.(store.SetConfig); ok { // as the FSM numbers versions
		cur := f.ConfigCurrent().Version
		if sc.IfVersion != 0 && sc.IfVersion != cur {
			return store.Committed{}, fmt.Errorf("%w: config version is %d, not %d", store.ErrConfigVersion, cur, sc.IfVersion)
		}
		f.config = append(f.config, store.ConfigVersion{Version: cur + 1, Time: sc.At, Summary: sc.Summary, Content: sc.Content, Index: c.Index})
		c.Value = fmt.Sprint(cur + 1)
	}
	return c, nil
}
func (f *fakeStore) ConfigCurrent() store.ConfigVersion {
	if len(f.config) == 0 {
		return store.ConfigVersion{}
	}
	return f.config[len(f.config)-1]
}
func (f *fakeStore) ConfigHistory() []store.ConfigVersion {
	out := slices.Clone(f.config)
	slices.Reverse(out)
	return out
}
func (f *fakeStore) ConfigAt(n uint64) (store.ConfigVersion, bool) {
	for _, v := range f.config {
		if v.Version == n {
			return v, true
		}
	}
	return store.ConfigVersion{}, false
}
func (f *fakeStore) RecordRequest(id, bind string) (store.Committed, error) {
	return store.Committed{}, nil
}
func (f *fakeStore) CommittedRemoval(id string, _ time.Duration) (uint64, bool, error) {
	return 3, slices.Contains(f.removed, id), nil
}
func (f *fakeStore) CommitIndex() uint64 { return f.applied.Load() }
func (f *fakeStore) RemoveServer(id string) error {
	f.removed = append(f.removed, id)
	return nil
}

type fakeProxy map[string]*upstream.Cluster

func (p fakeProxy) ClusterIDs() []string {
	return slices.Sorted(func(y func(string) bool) {
		for k := range p {
			y(k)
		}
	})
}
func (p fakeProxy) Cluster(id string) *upstream.Cluster { return p[id] }
func (p fakeProxy) DrainTimeout(c, d string) (time.Duration, error) {
	if cl := p[c]; cl != nil && slices.ContainsFunc(cl.Destinations, func(x *upstream.Destination) bool { return x.ID == d }) {
		return time.Minute, nil
	}
	return 0, errors.New("no such destination")
}

// fakeNode is the node's side; what a test does not use is left to the
// embedded interface.
type fakeNode struct {
	Node
	now      time.Time
	nowErr   error
	pending  []string
	probing  bool
	joinErr  error
	leaveErr error
	drained  int
}

func (f *fakeNode) ClusterNow() (time.Time, error) { return f.now, f.nowErr }
func (f *fakeNode) ApplyDrains()                   { f.drained++ }
func (f *fakeNode) ConfirmApplied(context.Context, uint64, time.Duration) ([]string, []string) {
	return []string{"n1"}, f.pending
}
func (f *fakeNode) Probers(string) func(string) ([]string, []ProberVerdict) {
	if !f.probing {
		return nil
	}
	return func(d string) ([]string, []ProberVerdict) {
		return []string{"n2"}, []ProberVerdict{{Node: "n2", Verdict: "unhealthy", At: f.now}}
	}
}
func (f *fakeNode) Join([]string) (int, error) { return 0, f.joinErr }
func (f *fakeNode) Leave(context.Context, bool, string) (func(), error) {
	return func() {}, f.leaveErr
}

func newTestAPI(t *testing.T) (*API, *fakeStore, *fakeNode, http.Handler) {
	t.Helper()
	u, _ := url.Parse("http://10.0.0.1:8080/")
	lead := &fakeLeadership{}
	lead.leading.Store(true)
	self := "n1"
	lead.leader.Store(&self)
	lead.applied.Store(5)
	st := &fakeStore{fakeLeadership: lead}
	n := &fakeNode{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	wr := &Writes{NodeID: "n1", Store: lead, Gossip: fakeGossip{{Meta: cluster.Meta{ID: "n3"}, State: cluster.StateAlive}}, Log: quiet}
	a := &API{
		NodeID: "n1", Names: []string{"example.com"}, Registry: prometheus.NewRegistry(), Store: st, Node: n, Writes: wr, Log: quiet, Bus: NewBus("n1"),
		Proxy: fakeProxy{"app": upstream.NewCluster("app", []*upstream.Destination{
			upstream.NewDestination("d1", u, nil, "", nil), upstream.NewDestination("d2", u, nil, "", nil)})},
	}
	return a, st, n, a.Handler()
}

// A drain commits the deadline the leader picks from the cluster time,
// brings the data path in step, and names the live members that had not
// applied it in time; the destinations then read it as draining, and past
// its deadline as drained.
func TestDrainAnswerAndDestinationsView(t *testing.T) {
	_, st, n, h := newTestAPI(t)
	n.pending = []string{"n3"}
	resp, body := answer(t, h, "POST", "/v1/clusters/app/destinations/d1/drain", map[string]string{HeaderRequestID: "R1"}, "")
	deadline := n.now.Add(time.Minute)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderIndex) != "6" || body["drain_deadline"] != deadline.Format(time.RFC3339) ||
		fmt.Sprint(body["applied_by"], body["not_applied_by"]) != "[n1] [n3]" || n.drained != 1 ||
		!strings.Contains(fmt.Sprint(body["warning"]), "the drain is committed, but n3 had not applied it within 2s: until they do they may still send new sessions to d1") {
		t.Fatalf("drain: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	if d, ok := st.committed[0].(store.SetDrain); !ok || d.ReqID != "R1" || !d.Deadline.Equal(deadline) {
		t.Fatalf("committed %#v", st.committed)
	}
	if resp, body := answer(t, h, "POST", "/v1/clusters/app/destinations/nope/drain", nil, ""); resp.StatusCode != http.StatusNotFound ||
		body["error"] != `no destination "nope" in cluster "app"` {
		t.Fatalf("unknown destination: %d %v", resp.StatusCode, body)
	}

	now := time.Now()
	st.drains = []store.Drain{{Cluster: "app", Destination: "d1", Deadline: now.Add(time.Hour)}, {Cluster: "app", Destination: "d2", Deadline: now.Add(-time.Hour)}}
	n.probing = true
	resp, body = answer(t, h, "GET", "/v1/clusters/app/destinations", nil, "")
	dests, _ := body["destinations"].([]any)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderIndex) != "6" || len(dests) != 2 {
		t.Fatalf("destinations: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	d1, d2 := dests[0].(map[string]any), dests[1].(map[string]any)
	if d1["drain_state"] != "draining" || d1["draining"] != true || d1["drain_deadline"] == nil || d1["drained_since"] != nil ||
		d2["drain_state"] != "drained" || d2["draining"] != false || d2["drained_since"] == nil || d2["drain_deadline"] != nil {
		t.Fatalf("drain states: %v / %v", d1, d2)
	}
	if fmt.Sprint(d1["probers"]) != "[n2]" || len(d1["verdicts"].([]any)) != 1 || fmt.Sprint(body["affinity"]) != "map[failed_closed:0 failed_open:0 no_session:0 routed:0]" {
		t.Fatalf("probers, verdicts, affinity: %v %v %v", d1["probers"], d1["verdicts"], body["affinity"])
	}
	n.probing = false
	_, body = answer(t, h, "GET", "/v1/clusters/app/destinations", nil, "")
	if d := body["destinations"].([]any)[0].(map[string]any); fmt.Sprint(d["probers"], d["verdicts"]) != "[] []" {
		t.Fatalf("without active checks: probers %v, verdicts %v", d["probers"], d["verdicts"])
	}
	if resp, body := answer(t, h, "GET", "/v1/clusters/nope/destinations", nil, ""); resp.StatusCode != http.StatusNotFound || body["error"] != `no cluster "nope"` {
		t.Fatalf("unknown cluster: %d %v", resp.StatusCode, body)
	}
}

// A removal refuses this node and alive members, answers the same for a
// member already removed, and 404 for one never in the configuration.
func TestRemoveAnswers(t *testing.T) {
	_, st, _, h := newTestAPI(t)
	st.servers = []store.Server{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}}
	for _, c := range []struct {
		id     string
		status int
		want   string
	}{
		{"n1", 409, "this node leads the cluster"},
		{"n3", 409, "n3 is alive: run `tether leave` on it"},
		{"n2", 200, "removed:true"},
		{"n9", 404, `no member \"n9\" in the Raft configuration`},
	} {
		req := map[string]string{HeaderRequestID: "rm-" + c.id}
		resp, body := answer(t, h, "DELETE", "/v1/members/"+c.id, req, "")
		if resp.StatusCode != c.status || !strings.Contains(fmt.Sprintf("%q %v", body, body), strings.Trim(c.want, `"`)) {
			t.Errorf("remove %s: %d %v, want %d with %s", c.id, resp.StatusCode, body, c.status, c.want)
		}
	}
	// Removed already (a retry): the same answer, at the removal's index.
	st.servers = st.servers[:1]
	resp, body := answer(t, h, "DELETE", "/v1/members/n2", map[string]string{HeaderRequestID: "rm-n2"}, "")
	if resp.StatusCode != http.StatusOK || body["removed"] != true || resp.Header.Get(HeaderIndex) != "3" {
		t.Fatalf("retried removal: %d %v %v", resp.StatusCode, resp.Header, body)
	}
}

// Join and leave answer a node's refusal with 409, other failures with
// 502 (join) and 504 (leave), and a bad body with 400.
func TestJoinAndLeaveStatuses(t *testing.T) {
	_, _, n, h := newTestAPI(t)
	for _, c := range []struct {
		path, body string
		join, leav error
		status     int
		want       string
	}{
		{"/v1/join", `{"addresses":[]}`, nil, nil, 400, "give at least one host[:port]"},
		{"/v1/join", `{"addresses":["a:1"]}`, Conflict{errors.New("this node runs alone")}, nil, 409, "this node runs alone"},
		{"/v1/join", `{"addresses":["a:1"]}`, cluster.ErrClusterMismatch, nil, 409, "joining [a:1] failed: "},
		{"/v1/join", `{"addresses":["a:1"]}`, errors.New("no route"), nil, 502, "joining [a:1] failed: no route"},
		{"/v1/leave?force=maybe", "", nil, nil, 400, `force=\"maybe\": want true or false`},
		{"/v1/leave", "", nil, Conflict{errors.New("the last voter")}, 409, "the last voter"},
		{"/v1/leave", "", nil, errors.New("timed out"), 504, "timed out"},
		{"/v1/leave", `{"force":true}`, nil, nil, 200, "left:true"},
	} {
		n.joinErr, n.leaveErr = c.join, c.leav
		resp, body := answer(t, h, "POST", c.path, nil, c.body)
		if resp.StatusCode != c.status || !strings.Contains(fmt.Sprintf("%q %v", body, body), strings.Trim(c.want, `"`)) {
			t.Errorf("%s %s: %d %v, want %d with %s", c.path, c.body, resp.StatusCode, body, c.status, c.want)
		}
	}
}

// The keyring's answers: a rotation's id and index, a revocation's 404 for
// an unknown key and its replacement and passed-over members.
func TestKeyringWrites(t *testing.T) {
	_, _, n, h := newTestAPI(t)
	n.Node = keyNode{}
	resp, body := answer(t, h, "POST", "/v1/keyring/rotate", nil, "")
	if resp.StatusCode != http.StatusOK || body["id"] != "k2" || resp.Header.Get(HeaderIndex) != "9" {
		t.Fatalf("rotate: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	if resp, body := answer(t, h, "POST", "/v1/keyring/nope/revoke", nil, ""); resp.StatusCode != http.StatusNotFound || body["error"] != `no key with id "nope"` {
		t.Fatalf("revoke unknown: %d %v", resp.StatusCode, body)
	}
	resp, body = answer(t, h, "POST", "/v1/keyring/k1/revoke", nil, "")
	if resp.StatusCode != http.StatusOK || body["state"] != "revoked" || body["replacement_id"] != "k3" || fmt.Sprint(body["passed_over"]) != "[n4]" || resp.Header.Get(HeaderIndex) != "11" {
		t.Fatalf("revoke: %d %v %v", resp.StatusCode, resp.Header, body)
	}
}

type keyNode struct{ Node }

func (keyNode) Rotate(reqID, bind string) (keyring.Metadata, uint64, error) {
	return keyring.Metadata{ID: "k2", State: keyring.Installed}, 9, nil
}
func (keyNode) Revoke(_ context.Context, id, reqID, bind string) (Revoked, error) {
	if id != "k1" {
		return Revoked{}, keyring.ErrUnknownKey
	}
	return Revoked{Index: 11, Active: "k0", Replacement: "k3", PassedOver: []string{"n4"}}, nil
}

type readyNode struct {
	Node
	why  string
	warn []string
}

func (r readyNode) NotReady() string   { return r.why }
func (r readyNode) Warnings() []string { return r.warn }

type stoppedStore struct {
	*fakeStore
	index uint64
}

func (s stoppedStore) Stopped() (uint64, string) { return s.index, "a snapshot from a newer release" }

// /readyz: 503 naming why the node does not serve, or why its state stopped
// following the cluster's; else ready, with the store's warnings.
func TestReady(t *testing.T) {
	a, st, _, _ := newTestAPI(t)
	for _, c := range []struct {
		why     string
		stopped uint64
		warn    []string
		status  int
		want    string
	}{
		{"no Raft leader known yet", 0, nil, 503, "no Raft leader known yet"},
		{"", 9, nil, 503, "a snapshot from a newer release"},
		{"", 0, []string{"disk nearly full"}, 200, "disk nearly full"},
		{"", 0, nil, 200, "ready"},
	} {
		a.Node, a.Store = readyNode{why: c.why, warn: c.warn}, stoppedStore{st, c.stopped}
		resp, body := answer(t, a.Handler(), "GET", "/readyz", nil, "")
		if resp.StatusCode != c.status || !strings.Contains(fmt.Sprint(body), c.want) || (c.warn == nil && body["warnings"] != nil) {
			t.Errorf("%+v: %d %v", c, resp.StatusCode, body)
		}
	}
}

type backupStore struct{ *fakeStore }

func (backupStore) SaveBackup(w io.Writer, _ time.Time) (store.BackupInfo, error) {
	_, err := io.WriteString(w, `{"format":"tether-backup"}`)
	return store.BackupInfo{Index: 42}, err
}

// GET /v1/snapshot answers the backup as an attachment named after the
// node and the index it reflects.
func TestSnapshotSave(t *testing.T) {
	a, st, _, _ := newTestAPI(t)
	a.Store = backupStore{st}
	req := httptest.NewRequest("GET", "/v1/snapshot", nil)
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Disposition") != `attachment; filename="tether-n1-42.snapshot"` ||
		rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != `{"format":"tether-backup"}` {
		t.Fatalf("snapshot: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}
}
