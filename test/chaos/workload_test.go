package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
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

	mu sync.Mutex
	// index is the highest X-Tether-Index each client saw in an answer.
	index map[int]uint64
	// Operations TETHER_CHAOS_EXTRA (a comma-separated list; unset: both,
	// empty: neither) adds:
	// reuse-ids: now and then a drain or undrain goes with the request id
	// of the client's previous write (the last one sent with a new id),
	// another request (a client's retry
	// logic gone wrong): it must be refused, or carried out as sent. When
	// the previous write was the same request, the id is not reused: that
	// is a true retry, answered with the first try's result (another
	// client's write in between may have changed the value since), which
	// the model does not take for a new write.
	// revoke-active: now and then a revocation names the active key (its
	// values stop opening; a replacement must be in place).
	reuseIDs, revokeActive bool
	lastID                 map[int]string
	lastReq                map[int]string // the method and path lastID was first sent with
	// configs are the two config files the clients push in turn (set a
	// and set b).
	configs [2][]byte
	pushes  int
}

func newWorkload(c *cluster, h *History, mon *monitor) *workload {
	w := &workload{c: c, h: h, mon: mon,
		proxy: &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		admin: &http.Client{Timeout: 15 * time.Second}, index: map[int]uint64{}, lastID: map[int]string{}, lastReq: map[int]string{}}
	extra, set := os.LookupEnv("TETHER_CHAOS_EXTRA")
	if !set {
		extra = "reuse-ids,revoke-active"
	}
	for _, x := range strings.Split(extra, ",") {
		switch strings.TrimSpace(x) {
		case "reuse-ids":
			w.reuseIDs = true
		case "revoke-active":
			w.revokeActive = true
		case "":
		default:
			c.t.Errorf("TETHER_CHAOS_EXTRA names %q: the extras are reuse-ids and revoke-active", x)
		}
	}
	return w
}

// record completes an operation: whether its node was up and in the
// majority throughout, and the index the client has seen; then it is added
// to the history.
func (w *workload) record(o Op) {
	o.Clean = w.mon.clean(o.Node, o.Start, o.End)
	if o.Index > 0 && o.Client >= 0 {
		w.mu.Lock()
		w.index[o.Client] = max(w.index[o.Client], o.Index)
		w.mu.Unlock()
	}
	w.h.op(o)
}

func (w *workload) seen(client int) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.index[client]
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
		case x < 67:
			w.openRevoked(client, p, r)
		case x < 73:
			if r.IntN(2) == 0 {
				w.readKeyring(client, p)
			} else {
				w.readDests(client, p)
			}
		case x < 78:
			w.rotate(client, p)
		case x < 80:
			w.revoke(client, p, w.revokeActive && r.IntN(3) == 0)
		case x < 88:
			w.drain(client, p, destinations[r.IntN(len(destinations))], true, w.reuseIDs && r.IntN(6) == 0)
		case x < 97:
			w.drain(client, p, destinations[r.IntN(len(destinations))], false, w.reuseIDs && r.IntN(6) == 0)
		default:
			w.push(client, p, r.IntN(2) == 0)
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
	o := Op{Client: client, Kind: "seal", Node: p.id, Start: time.Now(), Epoch: w.c.epoch(p)}
	resp, err := w.proxy.Get(p.proxyURL() + "/")
	o.End = time.Now()
	if err != nil {
		o.Type, o.Err = "info", err.Error()
		w.record(o)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	o.Status = resp.StatusCode
	cookie := cookieValue(resp)
	switch {
	case resp.StatusCode == 200 && cookie != "":
		o.Type, o.Result, o.Cookie = "ok", resp.Header.Get("X-Demo-Backend"), cookie
		o.Names = []string{keyIDOf(cookie)}
	default:
		o.Type, o.Err = "info", fmt.Sprintf("status %d, cookie %q", resp.StatusCode, cookie)
	}
	w.record(o)
}

func (w *workload) open(client int, p *proc, r *mrand.Rand) {
	if s := w.pick(r); s != nil {
		w.openValue(client, p, s)
	}
}

// openRevoked sends a value under a key whose revocation was acknowledged:
// once the revocation bound passed it must not open.
func (w *workload) openRevoked(client int, p *proc, r *mrand.Rand) {
	acked := w.h.revokedAcked()
	var seals []Op
	for _, s := range w.h.seals() {
		if acked[keyIDOf(s.Cookie)] {
			seals = append(seals, s)
		}
	}
	if len(seals) == 0 {
		return
	}
	s := seals[r.IntN(len(seals))]
	w.record(w.openOp(client, p, &s, "open-revoked"))
}

// openValue sends a request carrying a sealed value: it must land on the
// destination the value names, with no new cookie.
func (w *workload) openValue(client int, p *proc, s *Op) {
	if s == nil {
		return
	}
	w.record(w.openOp(client, p, s, "open"))
}

func (w *workload) openOp(client int, p *proc, s *Op, kind string) Op {
	o := Op{Client: client, Kind: kind, Node: p.id, Arg: s.Node + "/" + s.Result, Cookie: s.Cookie, Start: time.Now(), Epoch: w.c.epoch(p)}
	req, _ := http.NewRequest("GET", p.proxyURL()+"/", nil)
	req.AddCookie(&http.Cookie{Name: cookieName, Value: s.Cookie})
	resp, err := w.proxy.Do(req)
	o.End = time.Now()
	if err != nil {
		o.Type, o.Err = "info", err.Error()
		return o
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	o.Status = resp.StatusCode
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
	return o
}

func cookieValue(resp *http.Response) string {
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			return c.Value
		}
	}
	return ""
}

// answer is an admin API answer: the outcome is ok (2xx), fail (4xx or a
// refused connection: nothing happened) or info (unknown: a 5xx, a timeout).
type answer struct {
	typ    string
	status int
	body   map[string]any
	raw    []byte
	err    string
	index  uint64
}

// newRequestID makes a fresh X-Tether-Request-Id.
func newRequestID() string {
	var id [8]byte
	rand.Read(id[:])
	return hex.EncodeToString(id[:])
}

// adminDo sends one admin request (a write with request id reqID; a read
// sends the highest index the client saw, minIndex, in X-Tether-Index).
func (w *workload) adminDo(method, url, reqID string, minIndex uint64) answer {
	return w.adminSend(method, url, reqID, minIndex, nil, nil)
}

// adminSend is adminDo with a body and headers.
func (w *workload) adminSend(method, url, reqID string, minIndex uint64, body []byte, hdr http.Header) answer {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	for k, v := range hdr {
		req.Header[k] = v
	}
	if method != "GET" {
		req.Header.Set("X-Tether-Request-Id", reqID)
	} else if minIndex > 0 {
		req.Header.Set("X-Tether-Index", strconv.FormatUint(minIndex, 10))
	}
	resp, err := w.admin.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return answer{typ: "fail", err: err.Error()} // nothing was sent
		}
		return answer{typ: "info", err: err.Error()}
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	a.raw, _ = io.ReadAll(resp.Body)
	json.Unmarshal(a.raw, &a.body)
	a.index, _ = strconv.ParseUint(resp.Header.Get("X-Tether-Index"), 10, 64)
	switch {
	case resp.StatusCode/100 == 2:
		a.typ = "ok"
	case resp.StatusCode/100 == 4:
		a.typ, a.err = "fail", fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(a.raw)))
	default:
		a.typ, a.err = "info", fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(a.raw)))
	}
	return a
}

// write sends one admin write and records it; after an acknowledged one
// the client reads back through the same node (read-your-writes). reuse:
// with the request id of the client's previous write.
func (w *workload) write(o Op, method, url string, reuse bool) answer {
	id := newRequestID()
	w.mu.Lock()
	req := method + " " + url[strings.Index(url, "/v1/"):] // the path: the same request through another node is a retry too
	if prev := w.lastID[o.Client]; reuse && prev != "" && w.lastReq[o.Client] != req {
		id = prev
	} else {
		reuse = false
		w.lastID[o.Client], w.lastReq[o.Client] = id, req // the request the id is bound to
	}
	w.mu.Unlock()
	o.Start, o.Epoch = time.Now(), w.c.epoch(w.c.byID(o.Node))
	a := w.adminDo(method, url, id, 0)
	o.End = time.Now()
	o.Type, o.Status, o.Err, o.Index = a.typ, a.status, a.err, a.index
	if reuse {
		o.Err = strings.TrimSpace("request id of the previous write " + o.Err)
	}
	p := w.c.byID(o.Node)
	switch o.Kind {
	case "rotate":
		if id, _ := a.body["id"].(string); o.Type == "ok" {
			o.Result, o.Names = id, []string{id}
		}
	case "revoke":
		if o.Type == "ok" {
			active, _ := a.body["active_key_id"].(string)
			repl, _ := a.body["replacement_id"].(string)
			o.Names = []string{active}
			if repl != "" {
				o.Names = append(o.Names, repl)
			}
		}
	}
	w.record(o)
	if o.Type == "ok" {
		if o.Kind == "drain" || o.Kind == "undrain" {
			w.readDests(o.Client, p)
		} else {
			w.readKeyring(o.Client, p)
		}
	}
	return a
}

// readKeyring records GET /v1/keyring with every key's state.
func (w *workload) readKeyring(client int, p *proc) (Op, map[string]time.Time) {
	o := Op{Client: client, Kind: "read", Node: p.id, Start: time.Now(), Epoch: w.c.epoch(p), MinIndex: w.seen(client)}
	a := w.adminDo("GET", p.adminURL()+"/v1/keyring", "", o.MinIndex)
	o.End = time.Now()
	o.Type, o.Status, o.Err, o.Index = a.typ, a.status, a.err, a.index
	var kr struct {
		Keys []struct {
			ID, State string
			Created   time.Time
		}
	}
	created := map[string]time.Time{}
	if o.Type == "ok" {
		if err := json.Unmarshal(a.raw, &kr); err != nil {
			o.Type, o.Err = "info", "answer: "+err.Error()
		}
	}
	if o.Type == "ok" {
		o.Keys = map[string]string{}
		for _, k := range kr.Keys {
			o.Keys[k.ID] = k.State
			o.Names = append(o.Names, k.ID)
			created[k.ID] = k.Created
		}
		o.Result = fmt.Sprintf("%d keys", len(kr.Keys))
	}
	w.record(o)
	return o, created
}

// readDests records GET /v1/clusters/app/destinations with each drain.
func (w *workload) readDests(client int, p *proc) {
	o := Op{Client: client, Kind: "dests", Node: p.id, Start: time.Now(), Epoch: w.c.epoch(p), MinIndex: w.seen(client)}
	a := w.adminDo("GET", p.adminURL()+"/v1/clusters/app/destinations", "", o.MinIndex)
	o.End = time.Now()
	o.Type, o.Status, o.Err, o.Index = a.typ, a.status, a.err, a.index
	var ds struct {
		Destinations []struct {
			ID       string
			Draining bool
		}
	}
	if o.Type == "ok" {
		if err := json.Unmarshal(a.raw, &ds); err != nil {
			o.Type, o.Err = "info", "answer: "+err.Error()
		}
	}
	if o.Type == "ok" {
		o.Drains = map[string]bool{}
		var on []string
		for _, d := range ds.Destinations {
			o.Drains[d.ID] = d.Draining
			if d.Draining {
				on = append(on, d.ID)
			}
		}
		o.Result = "draining " + strings.Join(on, ",")
	}
	w.record(o)
}

// push commits the next of the two config sets in turn through p;
// ifMatch: with If-Match naming the version p's GET /v1/config shows (a
// push in between refuses it with 412, nothing happened).
func (w *workload) push(client int, p *proc, ifMatch bool) {
	w.mu.Lock()
	set := w.pushes % 2
	w.pushes++
	w.mu.Unlock()
	o := Op{Client: client, Kind: "push", Node: p.id, Arg: []string{"a", "b"}[set]}
	var hdr http.Header
	if ifMatch {
		code, b := httpGet(p.adminURL() + "/v1/config")
		var cur struct {
			Version uint64 `json:"version"`
		}
		if code != 200 || json.Unmarshal(b, &cur) != nil {
			return
		}
		if cur.Version > 0 {
			o.IfVersion = cur.Version
			hdr = http.Header{"If-Match": {strconv.Quote(strconv.FormatUint(cur.Version, 10))}}
		}
	}
	o.Start, o.Epoch = time.Now(), w.c.epoch(p)
	a := w.adminSend("PUT", p.adminURL()+"/v1/config", newRequestID(), 0, w.configs[set], hdr)
	o.End = time.Now()
	o.Type, o.Status, o.Err, o.Index = a.typ, a.status, a.err, a.index
	if o.Type == "ok" {
		v, _ := a.body["version"].(float64)
		o.Version = uint64(v)
		o.Result, _ = a.body["summary"].(string)
	}
	w.record(o)
}

func (w *workload) rotate(client int, p *proc) {
	w.write(Op{Client: client, Kind: "rotate", Node: p.id}, "POST", p.adminURL()+"/v1/keyring/rotate", false)
}

// revoke revokes the oldest inactive key the node lists (not the active
// one unless active: that breaks every session under it at once, the
// operator's call; and not a recent one, whose values the clients still open).
func (w *workload) revoke(client int, p *proc, active bool) {
	read, created := w.readKeyring(client, p)
	id := ""
	var oldest time.Time
	for _, k := range sortedKeys(read.Keys) {
		switch {
		case active && read.Keys[k] == "active":
			id = k
		case !active && read.Keys[k] == "inactive" && (id == "" || created[k].Before(oldest)):
			id, oldest = k, created[k]
		}
	}
	if id == "" {
		return
	}
	w.write(Op{Client: client, Kind: "revoke", Node: p.id, Arg: id}, "POST", p.adminURL()+"/v1/keyring/"+id+"/revoke", false)
}

func (w *workload) drain(client int, p *proc, dest string, on, reuse bool) {
	o := Op{Client: client, Kind: "undrain", Node: p.id, Arg: dest}
	method := "DELETE"
	if on {
		o.Kind, method = "drain", "POST"
	}
	w.write(o, method, p.adminURL()+"/v1/clusters/app/destinations/"+dest+"/drain", reuse)
}

// monitor polls every node's status four times a second, and the voter
// set from whichever node claims to lead.
type monitor struct {
	c *cluster
	h *History

	mu   sync.Mutex
	last map[string]Sample
	// led: since when each node's samples have named a leader without a
	// gap (zero: its latest named none). A node between leaders, or cut
	// off and campaigning, serves reads from a state that may be seconds
	// old, which the read bound does not allow for.
	led map[string]time.Time
}

type status struct {
	NodeID        string `json:"node_id"`
	Term          uint64 `json:"term"`
	RaftState     string `json:"raft_state"`
	LeaderID      string `json:"leader_id"`
	ConfigVersion uint64 `json:"config_version"`
}

func (m *monitor) run(ctx context.Context) {
	m.last = map[string]Sample{}
	m.led = map[string]time.Time{}
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
				epoch := m.c.epoch(p)
				code, b := httpGet(p.adminURL() + "/v1/status")
				if code != 200 || m.c.epoch(p) != epoch {
					return // restarted meanwhile: which process answered?
				}
				var s status
				if json.Unmarshal(b, &s) != nil {
					return
				}
				smp := Sample{At: time.Now(), Node: p.id, Term: s.Term, State: s.RaftState, Leader: s.LeaderID, ConfigVersion: s.ConfigVersion, Epoch: epoch}
				m.mu.Lock()
				m.last[p.id] = smp
				switch {
				case smp.Leader == "":
					delete(m.led, p.id)
				case m.led[p.id].IsZero():
					m.led[p.id] = smp.At
				}
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

// clean: the node was live and stable from start to end, its statuses
// named a leader without a gap from before start (one sampling interval)
// to end, and its latest named a leader that was live and stable too.
func (m *monitor) clean(id string, start, end time.Time) bool {
	ok, since := m.c.live(id)
	if !ok || since.After(start.Add(-stable)) {
		return false
	}
	m.mu.Lock()
	s, led := m.last[id], m.led[id]
	m.mu.Unlock()
	if s.Leader == "" || end.Sub(s.At) > 2*time.Second || led.IsZero() || led.After(start.Add(-250*time.Millisecond)) {
		return false
	}
	lok, lsince := m.c.live(s.Leader)
	if !lok || lsince.After(start.Add(-stable)) {
		return false
	}
	return true
}

// probe is the liveness probe after the last fault healed: a rotation
// through a random node must be active on every node, and a value sealed
// on each node must open on every node, within liveBound. It records how
// long each took (up to 30 s) as probe-active and probe-open operations.
func (w *workload) probe(r *mrand.Rand) {
	const patience = 30 * time.Second
	p := w.c.procs[r.IntN(len(w.c.procs))]
	a := w.write(Op{Client: -1, Kind: "rotate", Node: p.id}, "POST", p.adminURL()+"/v1/keyring/rotate", false)
	id, _ := a.body["id"].(string)
	o := Op{Client: -1, Kind: "probe-active", Node: p.id, Arg: id, Start: time.Now()}
	if a.typ != "ok" || id == "" {
		o.End, o.Type, o.Err = time.Now(), "fail", "the rotation failed: "+a.err
		w.h.op(o)
		return
	}
	for {
		missing := ""
		for _, q := range w.c.procs {
			code, b := httpGet(q.adminURL() + "/v1/keyring")
			var kr struct {
				ActiveKeyID string `json:"active_key_id"`
			}
			if code != 200 || json.Unmarshal(b, &kr) != nil || kr.ActiveKeyID != id {
				missing = fmt.Sprintf("%s: status %d, active %q", q.id, code, kr.ActiveKeyID)
				break
			}
		}
		o.End = time.Now()
		if missing == "" {
			o.Type = "ok"
			break
		}
		if o.End.Sub(o.Start) > patience {
			o.Type, o.Err = "fail", "not active everywhere: "+missing
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.h.op(o)
	for _, p := range w.c.procs {
		s := Op{Client: -1, Kind: "seal", Node: p.id, Start: time.Now(), Epoch: w.c.epoch(p)}
		resp, err := w.proxy.Get(p.proxyURL() + "/")
		s.End = time.Now()
		if err != nil {
			s.Type, s.Err = "info", err.Error()
			w.record(s)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		s.Status = resp.StatusCode
		if s.Cookie = cookieValue(resp); resp.StatusCode != 200 || s.Cookie == "" {
			s.Type, s.Err = "info", fmt.Sprintf("status %d, cookie %q", resp.StatusCode, s.Cookie)
			w.record(s)
			continue
		}
		s.Type, s.Result, s.Names = "ok", resp.Header.Get("X-Demo-Backend"), []string{keyIDOf(s.Cookie)}
		w.record(s)
		// Opened on every node at once: each must open it within
		// liveBound of its sealing.
		var wg sync.WaitGroup
		for _, q := range w.c.procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				po := Op{Client: -1, Kind: "probe-open", Node: q.id, Arg: p.id + "/" + s.Result, Cookie: s.Cookie, Start: s.End}
				for {
					o := w.openOp(-1, q, &s, "open")
					po.End, po.Status, po.Err = o.End, o.Status, o.Err
					if o.Type == "ok" {
						po.Type = "ok"
						break
					}
					if po.End.Sub(po.Start) > patience {
						po.Type = "fail"
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				w.h.op(po)
			}()
		}
		wg.Wait()
	}
}
