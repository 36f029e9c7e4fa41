package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// fakeLeadership is a store whose leadership and applied index a test sets.
type fakeLeadership struct {
	leading  atomic.Bool
	leader   atomic.Pointer[string]
	applied  atomic.Uint64
	servers  []store.Server
	waitedAt atomic.Uint64 // the highest index WaitApplied was asked for
}

func (f *fakeLeadership) IsLeader() bool { return f.leading.Load() }
func (f *fakeLeadership) Leader() (string, string) {
	if p := f.leader.Load(); p != nil {
		return *p, ""
	}
	return "", ""
}
func (f *fakeLeadership) WaitForLeader(ctx context.Context) error {
	if id, _ := f.Leader(); id != "" {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}
func (f *fakeLeadership) WaitApplied(ctx context.Context, index uint64) error {
	f.waitedAt.Store(max(f.waitedAt.Load(), index))
	if f.applied.Load() >= index {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}
func (f *fakeLeadership) AppliedIndex() uint64             { return f.applied.Load() }
func (f *fakeLeadership) Servers() ([]store.Server, error) { return f.servers, nil }

type fakeGossip []cluster.Member

func (g fakeGossip) Members() []cluster.Member { return g }

func answer(t *testing.T, h http.Handler, method, path string, hdr map[string]string, body string) (*http.Response, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp, m
}

// A read waits for the index it asks for, answers 503 with its own
// applied index when it does not reach it, and 400 for a malformed one.
func TestAtIndex(t *testing.T) {
	st := &fakeLeadership{}
	st.applied.Store(7)
	read := AtIndex(st, func() time.Duration { return 50 * time.Millisecond })(func(w http.ResponseWriter, r *http.Request) {
		SetIndex(w, st.AppliedIndex())
		WriteJSON(w, http.StatusOK, map[string]any{"ok": true})
	})
	resp, body := answer(t, read, "GET", "/v1/keyring?index=5", map[string]string{HeaderIndex: "7"}, "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderIndex) != "7" || st.waitedAt.Load() != 7 {
		t.Fatalf("index reached: %d %v, %s %q, waited for %d", resp.StatusCode, body, HeaderIndex, resp.Header.Get(HeaderIndex), st.waitedAt.Load())
	}
	resp, body = answer(t, read, "GET", "/v1/keyring?index=9", nil, "")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(HeaderIndex) != "7" || resp.Header.Get("Retry-After") != "1" ||
		body["applied_index"] != 7.0 || body["index"] != 9.0 || !strings.Contains(body["error"].(string), "applied up to index 7, not index 9") {
		t.Fatalf("index not reached: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	resp, body = answer(t, read, "GET", "/v1/keyring?index=soon", nil, "")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body["error"].(string), `index "soon"`) {
		t.Fatalf("malformed index: %d %v", resp.StatusCode, body)
	}
}

func newWritesFor(st *fakeLeadership, g Gossip) *Writes {
	return &Writes{NodeID: "f1", Store: st, Gossip: g, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// On the leader a write runs here with its request id bound to the
// request; a write whose leadership is lost is run again, with the same
// request id, once a leader is known, and only the second answer is sent.
func TestOnLeaderRetriesALostLeadershipOnce(t *testing.T) {
	st := &fakeLeadership{}
	st.leading.Store(true)
	self := "l1"
	st.leader.Store(&self)
	wr := newWritesFor(st, nil)
	var ids, binds []string
	h := wr.OnLeader(func(w http.ResponseWriter, r *http.Request) {
		ids, binds = append(ids, RequestID(r)), append(binds, RequestBinding(r))
		if len(ids) == 1 {
			w.Header().Set("X-First", "1")
			wr.WriteApplyError(w, "key rotation", store.ErrLeadershipLost)
			return
		}
		SetCommitted(w, 12)
		WriteJSON(w, http.StatusOK, map[string]any{"id": "k2"})
	})
	resp, body := answer(t, h, "POST", "/v1/keyring/rotate", map[string]string{HeaderRequestID: "R1"}, "{}")
	if resp.StatusCode != http.StatusOK || body["id"] != "k2" || resp.Header.Get(HeaderIndex) != "12" || resp.Header.Get("X-First") != "" {
		t.Fatalf("retried write: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	if len(ids) != 2 || ids[0] != "R1" || ids[1] != "R1" || binds[0] == "" || binds[0] != binds[1] ||
		binds[0] != store.BindRequest("POST", "/v1/keyring/rotate", []byte("{}")) {
		t.Fatalf("attempts' request ids %q, bindings %q", ids, binds)
	}
}

// A follower forwards a write in one hop to the leader's admin address
// from gossip, with its own id and the request id, and answers once it
// applied the index the leader's answer carries.
func TestOnLeaderForwardsToTheLeaderAndCatchesUp(t *testing.T) {
	var got http.Header
	var gotBody string
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		SetCommitted(w, 40)
		WriteJSON(w, http.StatusOK, map[string]any{"id": "k9"})
	}))
	defer leader.Close()
	st := &fakeLeadership{}
	l := "l1"
	st.leader.Store(&l)
	st.applied.Store(40)
	applied := false
	wr := newWritesFor(st, fakeGossip{{Meta: cluster.Meta{ID: "l1", AdminAddr: strings.TrimPrefix(leader.URL, "http://")}, State: cluster.StateAlive}})
	wr.Applied = func() { applied = true }
	h := wr.OnLeader(func(w http.ResponseWriter, r *http.Request) { t.Fatal("a follower ran the write itself") })
	resp, body := answer(t, h, "POST", "/v1/keyring/rotate", map[string]string{HeaderRequestID: "R2", "Authorization": "Bearer tok"}, `{"x":1}`)
	if resp.StatusCode != http.StatusOK || body["id"] != "k9" || resp.Header.Get(HeaderIndex) != "40" || resp.Header.Get("X-Tether-Leader") != "l1" {
		t.Fatalf("forwarded write: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	if got.Get(HeaderForwardedBy) != "f1" || got.Get(HeaderRequestID) != "R2" || got.Get("Authorization") != "Bearer tok" || gotBody != `{"x":1}` {
		t.Fatalf("the leader got %v %q", got, gotBody)
	}
	if st.waitedAt.Load() != 40 || !applied {
		t.Fatalf("the follower answered without applying the leader's index (waited for %d, data path in step %v)", st.waitedAt.Load(), applied)
	}
}

// A forwarded write that reaches a node no longer leading is refused (one
// hop, never a loop); with no leader at all the answer names the Raft
// servers gossip does not see.
func TestOnLeaderRefusesASecondHopAndNamesUnreachableServers(t *testing.T) {
	st := &fakeLeadership{servers: []store.Server{{ID: "f1", Address: "a:1"}, {ID: "n2", Address: "b:1"}, {ID: "n3", Address: "c:1"}}}
	wr := newWritesFor(st, fakeGossip{{Meta: cluster.Meta{ID: "n2"}, State: cluster.StateAlive}})
	h := wr.OnLeader(func(w http.ResponseWriter, r *http.Request) { t.Fatal("a non-leader ran the write") })
	resp, body := answer(t, h, "POST", "/v1/keyring/rotate", map[string]string{HeaderForwardedBy: "n2"}, "")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(HeaderNotLeader) != "1" || !strings.Contains(body["error"].(string), "no longer leads") {
		t.Fatalf("second hop: %d %v %v", resp.StatusCode, resp.Header, body)
	}
	if got, want := wr.NoLeaderError(), "no Raft leader: writes need a majority of the voters; unreachable: n3 (c:1)"; got != want {
		t.Fatalf("no leader: %q, want %q", got, want)
	}
}

func TestWriteApplyErrorStatuses(t *testing.T) {
	unavailable := errors.New("this node just became the leader")
	wr := newWritesFor(&fakeLeadership{}, nil)
	wr.Unavailable = func(err error) bool { return errors.Is(err, unavailable) }
	for _, c := range []struct {
		err    error
		status int
		want   string
	}{
		{store.ErrLeadershipLost, 503, "drain change: leadership was lost during the write"},
		{unavailable, 503, "drain change: this node just became the leader"},
		{store.ErrNotLeader, 503, "drain change: no Raft leader"},
		{store.ErrUnsupported, 409, "drain change: "},
		{store.ErrRequestReused, 409, "drain change: "},
		{store.ErrNoClusterID, 503, ": retry"},
		{errors.New("disk full"), 500, "drain change failed: disk full"},
	} {
		rec := httptest.NewRecorder()
		wr.WriteApplyError(rec, "drain change", c.err)
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("%v: %d %s, want %d with %q", c.err, rec.Code, rec.Body, c.status, c.want)
		}
	}
}

// A follower whose forward finds that leadership moved to itself runs the
// write here, with the same request id, instead of answering "retry".
func TestOnLeaderRunsTheWriteHereWhenLeadershipMovesHereWhileForwarding(t *testing.T) {
	st := &fakeLeadership{}
	old, self := "l1", "f1"
	st.leader.Store(&old)
	oldLeader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The old leader has just stepped down, and this node won the
		// election.
		st.leading.Store(true)
		st.leader.Store(&self)
		w.Header().Set(HeaderNotLeader, "1")
		WriteError(w, http.StatusServiceUnavailable, "this node no longer leads the cluster")
	}))
	defer oldLeader.Close()
	wr := newWritesFor(st, fakeGossip{{Meta: cluster.Meta{ID: "l1", AdminAddr: strings.TrimPrefix(oldLeader.URL, "http://")}, State: cluster.StateAlive}})
	var ids []string
	h := wr.OnLeader(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ids = append(ids, RequestID(r)+" "+string(b))
		SetCommitted(w, 9)
		WriteJSON(w, http.StatusOK, map[string]any{"id": "k3"})
	})
	resp, body := answer(t, h, "POST", "/v1/keyring/rotate", map[string]string{HeaderRequestID: "R3"}, `{"y":2}`)
	if resp.StatusCode != http.StatusOK || body["id"] != "k3" {
		t.Fatalf("write when leadership moved here while forwarding: %d %v", resp.StatusCode, body)
	}
	if len(ids) != 1 || ids[0] != `R3 {"y":2}` {
		t.Fatalf("the write ran here as %q, want once as R3 with its body", ids)
	}
}
