package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	cookieName = "aff"
	// openFailStatus is the config's FailureStatusCode: a value that does
	// not open answers it, and nothing else does.
	openFailStatus = 555
	// stable is how long a node must have been live (and its leader too)
	// before an open through it must succeed: time to reconnect to the
	// leader and catch up after a restart, resume or heal.
	stable = 8 * time.Second
)

var destinations = []string{"d1", "d2", "d3"}

// workload runs clients that write through random nodes' admin APIs and
// seal and open values through random nodes' listeners.
type workload struct {
	c   *cluster
	h   *History
	mon *monitor
	// noHang: the proxy client never follows redirects and times out.
	proxy, admin *http.Client
}

func newWorkload(c *cluster, h *History, mon *monitor) *workload {
	return &workload{c: c, h: h, mon: mon,
		proxy: &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		admin: &http.Client{Timeout: 15 * time.Second}}
}

// run runs one client until ctx ends.
func (w *workload) run(ctx context.Context, client int, r *mrand.Rand) {
	for ctx.Err() == nil {
		p := w.c.procs[r.IntN(len(w.c.procs))]
		switch x := r.IntN(100); {
		case x < 30:
			w.seal(client, p)
		case x < 62:
			w.open(client, p, r)
		case x < 65:
			for _, q := range w.c.procs { // one value on every node
				w.openValue(client, q, w.pick(r))
			}
		case x < 73:
			w.rotate(client, p)
		case x < 75:
			w.revoke(client, p)
		case x < 85:
			w.drain(client, p, destinations[r.IntN(len(destinations))], true)
		default:
			w.drain(client, p, destinations[r.IntN(len(destinations))], false)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(50+r.IntN(150)) * time.Millisecond):
		}
	}
}

// pick chooses a sealed value whose key no revocation was sent for (those
// may rightly stop opening and check nothing).
func (w *workload) pick(r *mrand.Rand) *Op {
	revoked := w.h.revoked()
	var seals []Op
	for _, s := range w.h.seals() {
		if !revoked[keyIDOf(s.Cookie)] {
			seals = append(seals, s)
		}
	}
	if len(seals) == 0 {
		return nil
	}
	// Mostly recent values, some old ones.
	i := len(seals) - 1 - r.IntN(min(len(seals), 20))
	if r.IntN(4) == 0 {
		i = r.IntN(len(seals))
	}
	return &seals[i]
}

func (w *workload) seal(client int, p *proc) {
	o := Op{Client: client, Kind: "seal", Node: p.id, Start: time.Now()}
	resp, err := w.proxy.Get(p.proxyURL() + "/")
	o.End = time.Now()
	if err != nil {
		o.Type, o.Err = "info", err.Error()
		w.h.op(o)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cookie := cookieValue(resp)
	switch {
	case resp.StatusCode == 200 && cookie != "":
		o.Type, o.Result, o.Cookie = "ok", resp.Header.Get("X-Demo-Backend"), cookie
		o.Names = []string{keyIDOf(cookie)}
	default:
		o.Type, o.Err = "info", fmt.Sprintf("status %d, cookie %q", resp.StatusCode, cookie)
	}
	w.h.op(o)
}

func (w *workload) open(client int, p *proc, r *mrand.Rand) {
	if s := w.pick(r); s != nil {
		w.openValue(client, p, s)
	}
}

// openValue sends a request carrying a sealed value: it must land on the
// destination the value names, with no new cookie.
func (w *workload) openValue(client int, p *proc, s *Op) {
	if s == nil {
		return
	}
	o := Op{Client: client, Kind: "open", Node: p.id, Arg: s.Node + "/" + s.Result, Cookie: s.Cookie, Start: time.Now()}
	req, _ := http.NewRequest("GET", p.proxyURL()+"/", nil)
	req.AddCookie(&http.Cookie{Name: cookieName, Value: s.Cookie})
	resp, err := w.proxy.Do(req)
	o.End = time.Now()
	if err != nil {
		o.Type, o.Err = "info", err.Error()
		w.h.op(o)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	got, fresh := resp.Header.Get("X-Demo-Backend"), cookieValue(resp)
	switch {
	case resp.StatusCode == 200 && got == s.Result && fresh == "":
		o.Type = "ok"
	case resp.StatusCode == openFailStatus:
		o.Type, o.Err = "fail", "did not open"
	case resp.StatusCode == 200:
		o.Type, o.Err = "fail", fmt.Sprintf("landed on %s, new cookie %v", got, fresh != "")
	default:
		o.Type, o.Err = "info", fmt.Sprintf("status %d", resp.StatusCode)
	}
	o.Clean = w.mon.clean(p.id, o.Start, o.End)
	w.h.op(o)
}

func cookieValue(resp *http.Response) string {
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			return c.Value
		}
	}
	return ""
}

// adminDo sends one admin request with a fresh request id; the outcome is
// ok (2xx), fail (4xx: refused, nothing happened) or info.
func (w *workload) adminDo(method, url string) (string, map[string]any, string) {
	req, _ := http.NewRequest(method, url, nil)
	var id [8]byte
	rand.Read(id[:])
	req.Header.Set("X-Tether-Request-Id", hex.EncodeToString(id[:]))
	resp, err := w.admin.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return "fail", nil, err.Error() // nothing was sent
		}
		return "info", nil, err.Error()
	}
	defer resp.Body.Close()
	var body map[string]any
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &body)
	switch {
	case resp.StatusCode/100 == 2:
		return "ok", body, ""
	case resp.StatusCode/100 == 4:
		return "fail", body, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return "info", body, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

func (w *workload) rotate(client int, p *proc) {
	o := Op{Client: client, Kind: "rotate", Node: p.id, Start: time.Now()}
	var body map[string]any
	o.Type, body, o.Err = w.adminDo("POST", p.adminURL()+"/v1/keyring/rotate")
	o.End = time.Now()
	if id, _ := body["id"].(string); o.Type == "ok" {
		o.Result, o.Names = id, []string{id}
	}
	w.h.op(o)
}

// revoke revokes the oldest inactive key the node lists (never the active
// one: that would break every session at once, which is the operator's
// call; and not a recent one, whose values the clients still open).
func (w *workload) revoke(client int, p *proc) {
	read := Op{Client: client, Kind: "read", Node: p.id, Start: time.Now()}
	st, b := httpGet(p.adminURL() + "/v1/keyring")
	read.End = time.Now()
	var kr struct {
		Keys []struct {
			ID, State string
			Created   time.Time
		}
	}
	if st != 200 || json.Unmarshal(b, &kr) != nil {
		read.Type, read.Err = "info", fmt.Sprintf("status %d", st)
		w.h.op(read)
		return
	}
	id, oldest := "", time.Time{}
	for _, k := range kr.Keys {
		read.Names = append(read.Names, k.ID)
		if k.State == "inactive" && (id == "" || k.Created.Before(oldest)) {
			id, oldest = k.ID, k.Created
		}
	}
	read.Type, read.Result = "ok", fmt.Sprintf("%d keys", len(kr.Keys))
	w.h.op(read)
	if id == "" {
		return
	}
	o := Op{Client: client, Kind: "revoke", Node: p.id, Arg: id, Start: time.Now()}
	var body map[string]any
	o.Type, body, o.Err = w.adminDo("POST", p.adminURL()+"/v1/keyring/"+id+"/revoke")
	o.End = time.Now()
	if o.Type == "ok" {
		active, _ := body["active_key_id"].(string)
		o.Names = []string{id, active}
	}
	w.h.op(o)
}

func (w *workload) drain(client int, p *proc, dest string, on bool) {
	o := Op{Client: client, Kind: "undrain", Node: p.id, Arg: dest, Start: time.Now()}
	method := "DELETE"
	if on {
		o.Kind, method = "drain", "POST"
	}
	o.Type, _, o.Err = w.adminDo(method, p.adminURL()+"/v1/clusters/app/destinations/"+dest+"/drain")
	o.End = time.Now()
	w.h.op(o)
}

// monitor polls every node's status four times a second, and the voter
// set from whichever node claims to lead.
type monitor struct {
	c *cluster
	h *History

	mu   sync.Mutex
	last map[string]Sample
}

type status struct {
	NodeID    string `json:"node_id"`
	Term      uint64 `json:"term"`
	RaftState string `json:"raft_state"`
	LeaderID  string `json:"leader_id"`
}

func (m *monitor) run(ctx context.Context) {
	m.last = map[string]Sample{}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var leaders []string
		for _, p := range m.c.procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, b := httpGet(p.adminURL() + "/v1/status")
				if code != 200 {
					return
				}
				var s status
				if json.Unmarshal(b, &s) != nil {
					return
				}
				smp := Sample{At: time.Now(), Node: p.id, Term: s.Term, State: s.RaftState, Leader: s.LeaderID}
				m.mu.Lock()
				m.last[p.id] = smp
				m.mu.Unlock()
				m.h.mu.Lock()
				m.h.Status = append(m.h.Status, smp)
				m.h.mu.Unlock()
				if s.RaftState == "Leader" {
					mu.Lock()
					leaders = append(leaders, p.id)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for _, l := range leaders {
			m.voters(l)
		}
	}
}

func (m *monitor) voters(leader string) {
	p := m.c.byID(leader)
	code, b := httpGet(p.adminURL() + "/v1/members")
	if code != 200 {
		return
	}
	live := m.c.liveSet()
	var ms struct {
		Members []struct{ ID, Raft string }
	}
	if json.Unmarshal(b, &ms) != nil {
		return
	}
	var vs []string
	for _, x := range ms.Members {
		if x.Raft == "voter" {
			vs = append(vs, x.ID)
		}
	}
	if len(vs) == 0 {
		return
	}
	sort.Strings(vs)
	m.h.mu.Lock()
	m.h.Voters = append(m.h.Voters, VoterSample{At: time.Now(), From: leader, Voters: vs, Live: live})
	m.h.mu.Unlock()
}

// clean: the node was live and stable from start to end, and its latest
// status named a leader that was live and stable too.
func (m *monitor) clean(id string, start, end time.Time) bool {
	ok, since := m.c.live(id)
	if !ok || since.After(start.Add(-stable)) {
		return false
	}
	m.mu.Lock()
	s := m.last[id]
	m.mu.Unlock()
	if s.Leader == "" || end.Sub(s.At) > 2*time.Second {
		return false
	}
	lok, lsince := m.c.live(s.Leader)
	if !lok || lsince.After(start.Add(-stable)) {
		return false
	}
	return true
}
