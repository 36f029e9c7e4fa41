package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store"
)

// The data path's wait for a key it does not hold (docs/OPERATIONS.md, "Rotate keys").
const (
	// unknownKeyWait bounds how long a request waits for a key this node
	// does not hold: its log catching up, or the leader's answer (Nomad
	// waits about as long).
	unknownKeyWait = time.Second
	// keyFetchInterval spaces this node's requests to the leader: one at a
	// time, at most one per interval. Each asks for every key this node
	// lacks, so one request answers every key id waiting, whatever their
	// number: values under made-up key ids cost the cluster a bounded
	// amount of work, and a key this node really lacks still comes with
	// the next request.
	keyFetchInterval = 100 * time.Millisecond
	// maxKeyWaits bounds the requests waiting for a key at once; more fail
	// at once (reason wait_limit). Waiting costs no work (the waits share
	// the requests to the leader), so the bound is only a backstop.
	maxKeyWaits = 1024
	// unknownKeyMemory is how long a key id the leader does not hold is
	// answered at once without asking again.
	unknownKeyMemory = time.Minute
	// fetchedKeyTTL is how long a key fetched from the leader opens values
	// before this node applies it itself; then it is asked for again (a
	// revocation this node has not applied is then seen on the leader).
	fetchedKeyTTL = 10 * time.Second
	// maxRemembered bounds the map of key ids the leader does not hold:
	// past it, it starts afresh.
	maxRemembered = 4096
	// unknownKeyLogEvery: a value this node cannot open for want of its key
	// is logged at once, and the ones that follow within this period in one
	// line with their count, by reason (so the log says when they stop).
	unknownKeyLogEvery = time.Minute
	// unknownKeyLogSamples is how many of those key ids the line names.
	unknownKeyLogSamples = 5
)

// Reasons a value under a key id this node does not hold is treated as
// invalid (tether_keyring_unknown_key_failures_total{reason}).
const (
	reasonUnknownToLeader = "unknown_to_leader" // the leader holds no such key (said so now or within unknownKeyMemory): forged, another cluster's, or pruned
	reasonRevoked         = "revoked"           // the leader revoked it; this node has not applied that yet
	reasonTimeout         = "timeout"           // neither the log nor the leader brought it within unknownKeyWait
	reasonNoLeader        = "no_leader"         // no leader to ask, and the log did not bring it
	reasonWaitLimit       = "wait_limit"        // maxKeyWaits requests were waiting already
)

// Errors of a key fetch.
var (
	errNoKeySource  = errors.New("no leader to ask for the key")
	errLeaderIsSelf = errors.New("this node is the leader: it holds every key it applied")
)

// dataKeys is the keyring the data path sees: the replicated ring; for a
// well-formed value under a key id it does not hold, a bounded wait
// (unknownKeyWait) for the log to bring the key or the leader to send it,
// before the value is treated as invalid, counted by reason and logged (at
// once, then once per unknownKeyLogEvery with a count).
type dataKeys struct {
	ring *keyring.Ring
	st   raftProgress
	// fetch asks the leader for every key this node lacks (have: the ids
	// it holds; want: one id it waits for, all a leader of an earlier
	// release answers about); nil when there is no one to ask (this node
	// leads alone).
	fetch func(ctx context.Context, have []string, want string) (*leaderKeys, error)
	log   *slog.Logger
	// logEvery is unknownKeyLogEvery; after is time.AfterFunc (tests end
	// the periods themselves).
	logEvery time.Duration
	after    func(time.Duration, func())

	failures *prometheus.CounterVec // reason
	resolved *prometheus.CounterVec // via: log, leader
	waits    atomic.Int64

	mu        sync.Mutex
	fetched   *keyring.Ring        // keys the leader sent, not applied here yet
	fetchedAt map[string]time.Time // when each arrived
	unknown   map[string]time.Time // key id -> until: the leader does not hold it
	next      *keyRound            // the round waits join: asked once the one in flight is answered
	asking    bool                 // the rounds' goroutine runs
	lastAsked time.Time
	quiet     failLog
}

// keyRound is one request to the leader, shared by every wait that joined
// it before it was sent.
type keyRound struct {
	want string // the first waiting key id
	done chan struct{}
	ans  *leaderKeys // set before done closes; nil with err
	err  error
}

// leaderKeys is the leader's answer to a request for the keys this node
// lacks. The keys it sent are in dataKeys.fetched by the time a wait reads
// it.
type leaderKeys struct {
	// held is every key id the leader holds: true for a revoked one.
	held map[string]bool
	// only, when set, is the one key id the answer speaks of (a leader
	// of an earlier release answers about one key id).
	only string
	// behind: the leader had not caught up with its log: a key id it
	// lacks may still come.
	behind bool
	keys   []keyring.Key // the keys the asker lacked (cleared once installed)
}

// about is the reason the answer gives that key id cannot be had; ok is
// false when it does not settle id (look again, or ask again).
func (a *leaderKeys) about(id string) (reason string, ok bool) {
	if a.only != "" && a.only != id {
		return "", false
	}
	revoked, held := a.held[id]
	switch {
	case revoked:
		return reasonRevoked, true
	case held || a.behind:
		return "", false
	}
	return reasonUnknownToLeader, true
}

// failLog is the aggregation of the unknown-key log lines.
type failLog struct {
	open    bool           // a line was logged within the period: failures are counted for the next
	counts  map[string]int // reason -> failures since the last line
	samples []string       // some of their key ids
}

// raftProgress is what dataKeys needs of the store.
type raftProgress interface {
	AppliedIndex() uint64
	CommitIndex() uint64
}

var _ raftProgress = (*store.Store)(nil)

func newDataKeys(ring *keyring.Ring, st raftProgress, fetch func(context.Context, []string, string) (*leaderKeys, error), log *slog.Logger) *dataKeys {
	return &dataKeys{
		ring: ring, st: st, fetch: fetch, log: log, logEvery: unknownKeyLogEvery,
		after: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_keyring_unknown_key_failures_total",
			Help: "Affinity values under a key id this node did not hold, treated as invalid after the wait, by reason (unknown_to_leader, revoked, timeout, no_leader, wait_limit).",
		}, []string{"reason"}),
		resolved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_keyring_unknown_key_resolved_total",
			Help: "Affinity values under a key id this node did not hold that opened after the wait, by where the key came from (log, leader).",
		}, []string{"via"}),
		fetched: keyring.NewRing(keyring.Options{}), fetchedAt: map[string]time.Time{},
		unknown: map[string]time.Time{},
	}
}

func (k *dataKeys) Seal(purpose, plaintext []byte) (string, error) {
	return k.ring.Seal(purpose, plaintext)
}

func (k *dataKeys) ActiveKeyID(now time.Time) string { return k.ring.ActiveKeyID(now) }

func (k *dataKeys) Open(purpose []byte, value string) ([]byte, error) {
	pt, err := k.ring.Open(purpose, value)
	if err == nil || !errors.Is(err, keyring.ErrUnknownKey) {
		return pt, err
	}
	id, ok := keyring.KeyIDOf(value)
	if !ok {
		return nil, err
	}
	if pt, ferr, ok := k.openFetched(id, purpose, value); ok {
		return pt, ferr
	}
	reason := k.await(id)
	if reason == "" {
		if pt, err2 := k.ring.Open(purpose, value); !errors.Is(err2, keyring.ErrUnknownKey) {
			k.resolved.WithLabelValues("log").Inc()
			return pt, err2
		}
		if pt, ferr, ok := k.openFetched(id, purpose, value); ok {
			k.resolved.WithLabelValues("leader").Inc()
			return pt, ferr
		}
		reason = reasonTimeout
	}
	k.fail(id, reason)
	return nil, err
}

// openFetched opens value with a key the leader sent, while it is fresh.
func (k *dataKeys) openFetched(id string, purpose []byte, value string) ([]byte, error, bool) {
	if !k.holdsFetched(id) {
		return nil, nil, false
	}
	pt, err := k.fetched.Open(purpose, value)
	return pt, err, true
}

// holdsFetched reports whether a key the leader sent for id is fresh,
// dropping a stale one.
func (k *dataKeys) holdsFetched(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	at, ok := k.fetchedAt[id]
	if ok && time.Since(at) >= fetchedKeyTTL {
		_ = k.fetched.Remove(id)
		delete(k.fetchedAt, id)
		ok = false
	}
	return ok
}

// await waits (at most unknownKeyWait) for key id to reach the ring (the
// log) or come from the leader, joining the next request to the leader
// until one settles id; "" when the key is here, else the reason it is not.
func (k *dataKeys) await(id string) string {
	k.mu.Lock()
	until, known := k.unknown[id]
	k.mu.Unlock()
	if known && time.Now().Before(until) {
		return reasonUnknownToLeader
	}
	if k.waits.Add(1) > maxKeyWaits {
		k.waits.Add(-1)
		return reasonWaitLimit
	}
	defer k.waits.Add(-1)
	deadline := time.NewTimer(unknownKeyWait)
	defer deadline.Stop()
	reason := reasonTimeout
	for {
		r := k.join(id)
		select {
		case <-r.done:
		case <-deadline.C:
			if k.ring.Has(id) || k.holdsFetched(id) {
				return ""
			}
			return reason
		}
		if k.ring.Has(id) || k.holdsFetched(id) {
			return ""
		}
		behind := k.st.AppliedIndex() < k.st.CommitIndex()
		switch {
		case errors.Is(r.err, errLeaderIsSelf):
			// This node leads (or leads alone): what it lacks is unknown,
			// once it applied everything committed.
			reason = reasonUnknownToLeader
			if !behind {
				k.remember(id)
				return reason
			}
		case errors.Is(r.err, errNoKeySource):
			reason = reasonNoLeader
			if !behind {
				return reason
			}
		case r.err != nil:
			reason = reasonTimeout
		default:
			if rsn, ok := r.ans.about(id); ok {
				if rsn == reasonUnknownToLeader {
					k.remember(id)
				}
				return rsn
			}
		}
		// Not settled: the log may bring the key; the next round asks again.
	}
}

// remember notes that the leader holds no key id, for unknownKeyMemory.
func (k *dataKeys) remember(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.unknown) >= maxRemembered {
		clear(k.unknown)
	}
	k.unknown[id] = time.Now().Add(unknownKeyMemory)
}

// join returns the round a wait for id joins: the next one to be sent,
// starting the rounds' goroutine when it does not run.
func (k *dataKeys) join(id string) *keyRound {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.next == nil {
		k.next = &keyRound{want: id, done: make(chan struct{})}
	}
	if !k.asking {
		k.asking = true
		go k.rounds()
	}
	return k.next
}

// rounds sends the rounds waits join, one at a time and at most one per
// keyFetchInterval, until none is waiting.
func (k *dataKeys) rounds() {
	for {
		k.mu.Lock()
		r := k.next
		if r == nil {
			k.asking = false
			k.mu.Unlock()
			return
		}
		if wait := keyFetchInterval - time.Since(k.lastAsked); wait > 0 {
			k.mu.Unlock()
			pace := time.NewTimer(wait)
			<-pace.C
			continue
		}
		k.next, k.lastAsked = nil, time.Now()
		k.mu.Unlock()
		r.ans, r.err = k.ask(r.want)
		close(r.done)
	}
}

// ask asks the leader for every key this node lacks and keeps those it
// sends in fetched.
func (k *dataKeys) ask(want string) (*leaderKeys, error) {
	if k.fetch == nil {
		return nil, errLeaderIsSelf
	}
	ctx, cancel := context.WithTimeout(context.Background(), unknownKeyWait)
	defer cancel()
	have := make([]string, 0, k.ring.Len())
	for _, md := range k.ring.List(time.Now()) {
		have = append(have, md.ID)
	}
	k.mu.Lock()
	for id, at := range k.fetchedAt {
		if time.Since(at) < fetchedKeyTTL {
			have = append(have, id)
		}
	}
	k.mu.Unlock()
	ans, err := k.fetch(ctx, have, want)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	for _, key := range ans.keys {
		if err := k.fetched.Install(key); err == nil || errors.Is(err, keyring.ErrKeyExists) {
			k.fetchedAt[key.ID] = time.Now()
		}
		clear(key.Material)
	}
	k.mu.Unlock()
	ans.keys = nil
	return ans, nil
}

// fail counts a value treated as invalid and logs it: at once when nothing
// was logged within logEvery, else in the next line, with a count.
func (k *dataKeys) fail(id, reason string) {
	k.failures.WithLabelValues(reason).Inc()
	k.mu.Lock()
	if k.quiet.open {
		if k.quiet.counts == nil {
			k.quiet.counts = map[string]int{}
		}
		k.quiet.counts[reason]++
		if len(k.quiet.samples) < unknownKeyLogSamples && !slices.Contains(k.quiet.samples, id) {
			k.quiet.samples = append(k.quiet.samples, id)
		}
		k.mu.Unlock()
		return
	}
	k.quiet.open = true
	k.after(k.logEvery, k.flushFailLog)
	k.mu.Unlock()
	if k.log != nil {
		k.log.Warn("an affinity value names a key this node does not hold; it is treated as invalid and the route's failure policy applies (more such values are logged in one line a minute, with their count)",
			"key_id", id, "reason", reason)
	}
}

// flushFailLog logs the failures counted since the last line, in one line,
// and keeps counting for another period; with none, the next failure is
// logged at once.
func (k *dataKeys) flushFailLog() {
	k.mu.Lock()
	total := 0
	for _, n := range k.quiet.counts {
		total += n
	}
	if total == 0 {
		k.quiet.open = false
		k.mu.Unlock()
		return
	}
	counts, samples := k.quiet.counts, k.quiet.samples
	k.quiet.counts, k.quiet.samples = nil, nil
	k.after(k.logEvery, k.flushFailLog)
	k.mu.Unlock()
	if k.log == nil {
		return
	}
	reasons := slices.Sorted(maps.Keys(counts))
	byReason := make([]any, 0, 2*len(reasons))
	for _, r := range reasons {
		byReason = append(byReason, r, counts[r])
	}
	k.log.Warn("more affinity values named keys this node does not hold; each was treated as invalid",
		"count", total, "period", k.logEvery.String(), slog.Group("by_reason", byReason...), "key_ids", strings.Join(samples, ","))
}

// Key transfer: a node that meets a value under a key id it does not hold
// asks the leader over gossip (memberlist's encryption, keyed from the
// cluster secret), and the leader answers with the keys wrapped with a KEK
// derived from the cluster secret in use (keyring.InfoTransfer; the asker
// opens it with any secret it accepts, so it works during a rotation): the material
// never travels in clear. A request names the keys the asker holds; the
// answer (version 2) carries every key it lacks and every key id the
// leader holds, so one request settles any number of key ids. A leader of
// an earlier release answers about the one key id named (ID), and a node
// of an earlier release asks without a version and reads only that.
const (
	keyRequestTag = 'k'
	keyReplyTag   = 'K'
	// keyTransferVersion is the version of the request and answer.
	keyTransferVersion = 2
)

type keyRequest struct {
	From  string `json:"f"`
	ID    string `json:"id"`
	Nonce string `json:"n"`
	// V is keyTransferVersion; 0 from a node of an earlier release.
	V int `json:"v,omitempty"`
	// Have lists the key ids the asker holds (version 2).
	Have []string `json:"h,omitempty"`
}

type keyReply struct {
	Nonce string `json:"n"`
	State string `json:"s"` // about ID: "ok", "unknown", "revoked"; "not_leader"
	// Keys is ID's key, wrapped, for a request of an earlier release.
	Keys []byte `json:"k,omitempty"`
	// Version 2: every key the asker lacks, wrapped; every key id the
	// leader holds (Held) or holds revoked (Revoked); Behind when the
	// leader has not caught up with its log (it may lack a key yet).
	V       int      `json:"v,omitempty"`
	Lacking []byte   `json:"l,omitempty"`
	Held    []string `json:"a,omitempty"`
	Revoked []string `json:"r,omitempty"`
	Behind  bool     `json:"b,omitempty"`
}

// keyTransfer serves and sends key requests.
type keyTransfer struct {
	n    *Node
	work chan keyRequest // requests to serve, on one goroutine
	// sent counts the requests this node sent the leader.
	sent prometheus.Counter

	mu      sync.Mutex
	waiting map[string]chan keyReply // nonce -> the asker
}

// openKeyTransfer registers the gossip handlers; the server goroutine
// starts with the node's background work (serveKeyRequests).
func (n *Node) openKeyTransfer() error {
	kt := &keyTransfer{n: n, work: make(chan keyRequest, 64), waiting: map[string]chan keyReply{},
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_keyring_key_requests_total",
			Help: "Requests this node sent the leader (over gossip) for keys it did not hold; each asks for every key it lacks.",
		})}
	if err := n.members.Register(keyRequestTag, cluster.Handler{Msg: kt.request}); err != nil {
		return err
	}
	if err := n.members.Register(keyReplyTag, cluster.Handler{Msg: kt.reply}); err != nil {
		return err
	}
	n.keys = kt
	return nil
}

// request runs on memberlist's goroutine: it only queues (dropped when
// full; the asker times out).
func (kt *keyTransfer) request(msg []byte) {
	var req keyRequest
	if json.Unmarshal(msg, &req) != nil || req.From == "" || req.Nonce == "" {
		return
	}
	select {
	case kt.work <- req:
	default:
	}
}

// reply runs on memberlist's goroutine: it hands the answer to its asker.
func (kt *keyTransfer) reply(msg []byte) {
	var rep keyReply
	if json.Unmarshal(msg, &rep) != nil {
		return
	}
	kt.mu.Lock()
	ch := kt.waiting[rep.Nonce]
	kt.mu.Unlock()
	if ch != nil {
		select {
		case ch <- rep:
		default:
		}
	}
}

// serve answers key requests until stop.
func (kt *keyTransfer) serve(stop <-chan struct{}) {
	defer kt.n.bg.Done()
	for {
		select {
		case <-stop:
			return
		case req := <-kt.work:
			rep := kt.answer(req)
			b, err := json.Marshal(rep)
			if err == nil {
				err = kt.n.members.Send(req.From, keyReplyTag, b, true)
			}
			if err != nil {
				kt.n.log.Debug("answering a key request failed", "to", req.From, "error", err)
			}
		}
	}
}

// answer is the leader's answer to one request.
func (kt *keyTransfer) answer(req keyRequest) keyReply {
	rep := keyReply{Nonce: req.Nonce, State: "unknown"}
	if !kt.n.store.IsLeader() {
		rep.State = "not_leader"
		return rep
	}
	keys := kt.n.ring.Snapshot()
	defer func() {
		for _, k := range keys {
			clear(k.Material)
		}
	}()
	v2 := req.V >= keyTransferVersion
	var lacking []keyring.Key
	for _, k := range keys {
		if k.ID == req.ID {
			rep.State = "ok"
			if k.Revoked {
				rep.State = "revoked"
			} else if !v2 {
				w, err := keyring.WrapKeys(kt.n.secrets.KEK(keyring.InfoTransfer), []keyring.Key{k})
				if err != nil {
					kt.n.log.Warn("wrapping a key for a member failed", "error", err)
					rep.State = "unknown"
					return rep
				}
				rep.Keys = w
			}
		}
		if !v2 {
			continue
		}
		if k.Revoked {
			rep.Revoked = append(rep.Revoked, k.ID)
			continue
		}
		rep.Held = append(rep.Held, k.ID)
		if !slices.Contains(req.Have, k.ID) {
			lacking = append(lacking, k)
		}
	}
	if !v2 {
		return rep
	}
	rep.V, rep.Behind = keyTransferVersion, !kt.n.lead.IsCaughtUp()
	if len(lacking) > 0 {
		w, err := keyring.WrapKeys(kt.n.secrets.KEK(keyring.InfoTransfer), lacking)
		if err != nil {
			kt.n.log.Warn("wrapping keys for a member failed", "error", err)
			return keyReply{Nonce: req.Nonce, State: "not_leader"}
		}
		rep.Lacking = w
	}
	return rep
}

// fetch asks the leader for every key this node lacks (it holds have;
// want is the key id an earlier release's leader answers about) and waits
// for its answer or ctx.
func (kt *keyTransfer) fetch(ctx context.Context, have []string, want string) (*leaderKeys, error) {
	leader, _ := kt.n.store.Leader()
	switch leader {
	case "":
		return nil, errNoKeySource
	case kt.n.cfg.NodeID:
		return nil, errLeaderIsSelf
	}
	nonce := newID()
	ch := make(chan keyReply, 1)
	kt.mu.Lock()
	kt.waiting[nonce] = ch
	kt.mu.Unlock()
	defer func() {
		kt.mu.Lock()
		delete(kt.waiting, nonce)
		kt.mu.Unlock()
	}()
	b, _ := json.Marshal(keyRequest{From: kt.n.cfg.NodeID, ID: want, Nonce: nonce, V: keyTransferVersion, Have: have})
	if err := kt.n.members.Send(leader, keyRequestTag, b, true); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoKeySource, err)
	}
	kt.sent.Inc()
	var rep keyReply
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case rep = <-ch:
	}
	if rep.State == "not_leader" {
		return nil, fmt.Errorf("%w: %s answered %s", errNoKeySource, leader, rep.State)
	}
	ans := &leaderKeys{held: map[string]bool{}}
	if rep.V >= keyTransferVersion {
		for _, id := range rep.Held {
			ans.held[id] = false
		}
		for _, id := range rep.Revoked {
			ans.held[id] = true
		}
		ans.behind = rep.Behind
		if len(rep.Lacking) > 0 {
			keys, err := keyring.UnwrapKeysAny(kt.n.secrets.AcceptedKEKs(keyring.InfoTransfer), rep.Lacking)
			if err != nil {
				return nil, err
			}
			ans.keys = keys
		}
		return ans, nil
	}
	// A leader of an earlier release: about want only.
	ans.only = want
	switch rep.State {
	case "ok":
		keys, err := keyring.UnwrapKeysAny(kt.n.secrets.AcceptedKEKs(keyring.InfoTransfer), rep.Keys)
		if err != nil {
			return nil, err
		}
		if len(keys) != 1 || keys[0].ID != want {
			return nil, fmt.Errorf("the leader sent %d keys, not key %s", len(keys), want)
		}
		ans.keys = keys
	case "revoked":
		ans.held[want] = true
	case "unknown":
	default:
		return nil, fmt.Errorf("%w: %s answered %s", errNoKeySource, leader, rep.State)
	}
	return ans, nil
}
