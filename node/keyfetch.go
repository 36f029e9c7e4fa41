package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store"
)

// The data path's wait for a key it does not hold (README.md, "Keys").
const (
	// unknownKeyWait bounds how long a request waits for a key this node
	// does not hold: its log catching up, or the leader's answer (Nomad
	// waits about as long).
	unknownKeyWait = time.Second
	// maxKeyWaits bounds the requests waiting at once; more fail at once
	// (reason wait_limit), so values under made-up key ids cannot pile up
	// waiting requests.
	maxKeyWaits = 32
	// unknownKeyMemory is how long a key id the leader does not hold is
	// answered at once without asking again, and how often one key id's
	// failures are logged.
	unknownKeyMemory = time.Minute
	// fetchedKeyTTL is how long a key fetched from the leader opens values
	// before this node applies it itself; then it is asked for again (a
	// revocation this node has not applied is then seen on the leader).
	fetchedKeyTTL = 10 * time.Second
	// maxRemembered bounds the key-id maps (unknown, logged): past it they
	// start afresh.
	maxRemembered = 4096
)

// Reasons a value under a key id this node does not hold is treated as
// invalid (tether_keyring_unknown_key_failures_total{reason}).
const (
	reasonUnknownToLeader = "unknown_to_leader" // the leader holds no such key: forged, another cluster's, or pruned
	reasonRevoked         = "revoked"           // the leader revoked it; this node has not applied that yet
	reasonTimeout         = "timeout"           // neither the log nor the leader brought it within unknownKeyWait
	reasonNoLeader        = "no_leader"         // no leader to ask, and the log did not bring it
	reasonWaitLimit       = "wait_limit"        // maxKeyWaits requests were waiting already
)

// Errors of a key fetch.
var (
	errKeyUnknownToLeader = errors.New("the leader holds no such key")
	errKeyRevokedOnLeader = errors.New("the leader revoked this key")
	errNoKeySource        = errors.New("no leader to ask for the key")
)

// dataKeys is the keyring the data path sees: the replicated ring; for a
// well-formed value under a key id it does not hold, a bounded wait
// (unknownKeyWait) for the log to bring the key or the leader to send it,
// before the value is treated as invalid, counted by reason and logged
// once per key id per minute.
type dataKeys struct {
	ring *keyring.Ring
	st   raftProgress
	// fetch asks the leader for a key; nil when there is no one to ask.
	fetch func(ctx context.Context, id string) (keyring.Key, error)
	log   *slog.Logger

	failures *prometheus.CounterVec // reason
	resolved *prometheus.CounterVec // via: log, leader
	sem      chan struct{}

	mu        sync.Mutex
	fetched   *keyring.Ring        // keys the leader sent, not applied here yet
	fetchedAt map[string]time.Time // when each arrived
	flights   map[string]*keyFlight
	unknown   map[string]time.Time // key id -> until: the leader does not hold it
	logged    map[string]time.Time // key id -> last logged
}

// keyFlight is one wait for a key id that concurrent requests share.
type keyFlight struct {
	done   chan struct{}
	reason string // "" once the key is here
}

// raftProgress is what dataKeys needs of the store.
type raftProgress interface {
	AppliedIndex() uint64
	CommitIndex() uint64
}

var _ raftProgress = (*store.Store)(nil)

func newDataKeys(ring *keyring.Ring, st raftProgress, fetch func(context.Context, string) (keyring.Key, error), log *slog.Logger) *dataKeys {
	return &dataKeys{
		ring: ring, st: st, fetch: fetch, log: log,
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_keyring_unknown_key_failures_total",
			Help: "Affinity values under a key id this node did not hold, treated as invalid after the wait, by reason.",
		}, []string{"reason"}),
		resolved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_keyring_unknown_key_resolved_total",
			Help: "Affinity values under a key id this node did not hold that opened after the wait, by where the key came from (log, leader).",
		}, []string{"via"}),
		sem:     make(chan struct{}, maxKeyWaits),
		fetched: keyring.NewRing(keyring.Options{}), fetchedAt: map[string]time.Time{},
		flights: map[string]*keyFlight{}, unknown: map[string]time.Time{}, logged: map[string]time.Time{},
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
			return pt, err2
		}
		if pt, ferr, ok := k.openFetched(id, purpose, value); ok {
			return pt, ferr
		}
		reason = reasonTimeout
	}
	k.fail(id, reason)
	return nil, err
}

// openFetched opens value with a key the leader sent, while it is fresh.
func (k *dataKeys) openFetched(id string, purpose []byte, value string) ([]byte, error, bool) {
	k.mu.Lock()
	at, ok := k.fetchedAt[id]
	if ok && time.Since(at) >= fetchedKeyTTL {
		_ = k.fetched.Remove(id)
		delete(k.fetchedAt, id)
		ok = false
	}
	k.mu.Unlock()
	if !ok {
		return nil, nil, false
	}
	pt, err := k.fetched.Open(purpose, value)
	return pt, err, true
}

// await waits for key id (bounded), sharing one wait per id; "" when the
// key is here (in the ring or fetched), else the reason it is not.
func (k *dataKeys) await(id string) string {
	k.mu.Lock()
	if until, ok := k.unknown[id]; ok && time.Now().Before(until) {
		k.mu.Unlock()
		return reasonUnknownToLeader
	}
	k.mu.Unlock()
	select {
	case k.sem <- struct{}{}:
		defer func() { <-k.sem }()
	default:
		return reasonWaitLimit
	}
	k.mu.Lock()
	f, ok := k.flights[id]
	if !ok {
		f = &keyFlight{done: make(chan struct{})}
		k.flights[id] = f
	}
	k.mu.Unlock()
	if !ok {
		k.fly(id, f)
		return f.reason
	}
	select {
	case <-f.done:
		return f.reason
	case <-time.After(unknownKeyWait):
		return reasonTimeout
	}
}

type fetchResult struct {
	key keyring.Key
	err error
}

// fly waits for key id until the ring holds it (the log caught up), the
// leader sent it, the leader said it has no such key, or unknownKeyWait.
func (k *dataKeys) fly(id string, f *keyFlight) {
	defer func() {
		k.mu.Lock()
		delete(k.flights, id)
		k.mu.Unlock()
		close(f.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), unknownKeyWait)
	defer cancel()
	behind := k.st.AppliedIndex() < k.st.CommitIndex()
	var res chan fetchResult
	if k.fetch != nil {
		res = make(chan fetchResult, 1)
		go func() {
			key, err := k.fetch(ctx, id)
			res <- fetchResult{key, err}
		}()
	} else if !behind {
		f.reason = reasonUnknownToLeader // this node leads alone and holds everything committed
		return
	}
	f.reason = reasonTimeout
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case r := <-res:
			res = nil
			switch {
			case r.err == nil && r.key.ID == id:
				k.mu.Lock()
				if err := k.fetched.Install(r.key); err == nil || errors.Is(err, keyring.ErrKeyExists) {
					k.fetchedAt[id] = time.Now()
				}
				k.mu.Unlock()
				clear(r.key.Material)
				k.resolved.WithLabelValues("leader").Inc()
				f.reason = ""
				return
			case errors.Is(r.err, errKeyUnknownToLeader):
				k.mu.Lock()
				if len(k.unknown) >= maxRemembered {
					clear(k.unknown)
				}
				k.unknown[id] = time.Now().Add(unknownKeyMemory)
				k.mu.Unlock()
				f.reason = reasonUnknownToLeader
				return
			case errors.Is(r.err, errKeyRevokedOnLeader):
				f.reason = reasonRevoked
				return
			default:
				f.reason = reasonNoLeader
				if !behind {
					return
				}
			}
		case <-ctx.Done():
		}
		if k.ring.Has(id) {
			k.resolved.WithLabelValues("log").Inc()
			f.reason = ""
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// fail counts a value treated as invalid and logs it at most once per key
// id per unknownKeyMemory.
func (k *dataKeys) fail(id, reason string) {
	k.failures.WithLabelValues(reason).Inc()
	now := time.Now()
	k.mu.Lock()
	last, seen := k.logged[id]
	logIt := !seen || now.Sub(last) >= unknownKeyMemory
	if logIt {
		if len(k.logged) >= maxRemembered {
			clear(k.logged)
		}
		k.logged[id] = now
	}
	k.mu.Unlock()
	if logIt && k.log != nil {
		k.log.Warn("an affinity value names a key this node does not hold; it is treated as invalid and the route's failure policy applies (logged once a minute per key id)",
			"key_id", id, "reason", reason)
	}
}

// Key transfer: a node that meets a value under a key id it does not hold
// asks the leader over gossip (memberlist's encryption, keyed from the
// cluster secret), and the leader answers with the key wrapped with a KEK
// derived from the cluster secret (keyring.InfoTransfer): the material
// never travels in clear.
const (
	keyRequestTag = 'k'
	keyReplyTag   = 'K'
)

type keyRequest struct {
	From  string `json:"f"`
	ID    string `json:"id"`
	Nonce string `json:"n"`
}

type keyReply struct {
	Nonce string `json:"n"`
	State string `json:"s"` // "ok", "unknown", "revoked", "not_leader"
	Keys  []byte `json:"k,omitempty"`
}

// keyTransfer serves and sends key requests.
type keyTransfer struct {
	n    *Node
	kek  []byte
	work chan keyRequest // requests to serve, on one goroutine
	// sent counts the requests this node sent the leader.
	sent prometheus.Counter

	mu      sync.Mutex
	waiting map[string]chan keyReply // nonce -> the asker
}

// openKeyTransfer registers the gossip handlers; the server goroutine
// starts with the node's background work (serveKeyRequests).
func (n *Node) openKeyTransfer(secret []byte) error {
	kek, err := keyring.DeriveKEK(secret, keyring.InfoTransfer)
	if err != nil {
		return err
	}
	kt := &keyTransfer{n: n, kek: kek, work: make(chan keyRequest, 64), waiting: map[string]chan keyReply{},
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_keyring_key_requests_total",
			Help: "Requests this node sent the leader (over gossip) for keys it did not hold.",
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
	for _, k := range keys {
		if k.ID != req.ID {
			continue
		}
		if k.Revoked {
			rep.State = "revoked"
			return rep
		}
		w, err := keyring.WrapKeys(kt.kek, []keyring.Key{k})
		if err != nil {
			kt.n.log.Warn("wrapping a key for a member failed", "error", err)
			return rep
		}
		rep.State, rep.Keys = "ok", w
		return rep
	}
	return rep
}

// fetch asks the leader for key id and waits for its answer or ctx.
func (kt *keyTransfer) fetch(ctx context.Context, id string) (keyring.Key, error) {
	leader, _ := kt.n.store.Leader()
	switch leader {
	case "":
		return keyring.Key{}, errNoKeySource
	case kt.n.cfg.NodeID:
		// The leader holds every committed key: one it lacks is unknown.
		return keyring.Key{}, errKeyUnknownToLeader
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
	b, _ := json.Marshal(keyRequest{From: kt.n.cfg.NodeID, ID: id, Nonce: nonce})
	if err := kt.n.members.Send(leader, keyRequestTag, b, true); err != nil {
		return keyring.Key{}, fmt.Errorf("%w: %v", errNoKeySource, err)
	}
	kt.sent.Inc()
	select {
	case <-ctx.Done():
		return keyring.Key{}, ctx.Err()
	case rep := <-ch:
		switch rep.State {
		case "ok":
			keys, err := keyring.UnwrapKeys(kt.kek, rep.Keys)
			if err != nil {
				return keyring.Key{}, err
			}
			if len(keys) != 1 || keys[0].ID != id {
				return keyring.Key{}, fmt.Errorf("the leader sent %d keys, not key %s", len(keys), id)
			}
			return keys[0], nil
		case "revoked":
			return keyring.Key{}, errKeyRevokedOnLeader
		case "unknown":
			return keyring.Key{}, errKeyUnknownToLeader
		}
		return keyring.Key{}, fmt.Errorf("%w: %s answered %s", errNoKeySource, leader, rep.State)
	}
}
