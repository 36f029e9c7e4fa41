package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/store"
)

// Timings of the leader's rounds.
const (
	// Interval is how often the leader reconciles voters, activates
	// installed keys, rotates and prunes, besides being woken by changes.
	Interval = time.Second
	// ActivationWait bounds how long a failed member delays the activation
	// of a new key: after it the key activates without the failed members,
	// which are named in the log and counted in a metric. Alive and
	// suspect members are never passed over (docs/OPERATIONS.md, "Rotate keys").
	ActivationWait = 10 * time.Second
	// PendingActivation is the activation time a rotated key is installed
	// with. The leader activates it explicitly (once every alive or suspect
	// member holds it), long before; the far time only bounds a key whose
	// activation every leader missed.
	PendingActivation = 24 * time.Hour
	// RotateFraction: the leader rotates when the newest key has less than
	// 1/RotateFraction of its lifetime left (keyring.Manager's rule).
	RotateFraction = 10
	// barrierTimeout bounds a new leader's wait for its FSM to catch up.
	barrierTimeout = 5 * time.Second
)

// Store is what the leader reads of the replicated state and writes to it.
type Store interface {
	IsLeader() bool
	Leader() (id, addr string)
	Term() uint64
	Barrier(timeout time.Duration) error
	ClusterID() string
	AppliedIndex() uint64
	DurableIndex() uint64
	Servers() ([]store.Server, error)
	Apply(store.Command) (uint64, error)
	Commit(store.Command) (store.Committed, error)
	CommitRequest(cmd store.Command, bind string) (store.Committed, error)
	CheckRequest(id, bind string) error
}

// Voters is the Raft configuration's side the voter reconciliation
// changes.
type Voters interface {
	AddVoter(id, addr string) error
	AddNonvoter(id, addr string) error
	DemoteVoter(id string) error
	RemoveServer(id string) error
}

// AcmeStore is the replicated ACME state.
type AcmeStore interface {
	Acme(prefix string) (entries []store.AcmeEntry, version uint64)
	AcmeEntry(name string) (store.AcmeEntry, bool)
	AcmeVersion() uint64
}

// Members is the gossip view.
type Members interface {
	Members() []cluster.Member
}

// Clock is the cluster time (node/clustertime).
type Clock interface {
	// Now is the cluster time and whether its warm-up is over.
	Now() (time.Time, bool)
	// Known is the cluster time, or clustertime.ErrNotReady during the
	// warm-up: what a client's write commits waits for it.
	Known() (time.Time, error)
	// CommitTime is the time to commit at cluster time t.
	CommitTime(t time.Time) (time.Time, error)
	// Agreed is now bounded by every alive member's gossiped clock.
	Agreed(now time.Time) time.Time
}

// The full store is all of them.
var _ interface {
	Store
	Voters
	AcmeStore
} = (*store.Store)(nil)

// Config is what a node hands its leader.
type Config struct {
	Self string
	Log  *slog.Logger
	// Store is the replicated state; Voters and AcmeStore are the same
	// store seen through its other sides.
	Store     Store
	Voters    Voters
	AcmeStore AcmeStore
	// Members is the gossip view; nil on a node without gossip.
	Members Members
	Clock   Clock
	Ring    *keyring.Ring
	// Reports are members' durable indexes as they reported them directly.
	Reports *Reports
	// Policy is the voter reconciliation's; its MaxVoters and Expect are
	// also the settings every member must share.
	Policy cluster.Policy
	// RemovedFromRaft: a member a committed configuration removed, which
	// no longer counts.
	RemovedFromRaft func(cluster.Member) bool
	// Fanout is this node's ProbeFanout as gossiped ("" before the
	// configuration is loaded).
	Fanout func() string
	// KeyringFile is a standalone node's keyring.json in the data dir,
	// imported when the cluster has no key; KeyringKEK opens it (nil: no
	// cluster secret).
	KeyringFile string
	KeyringKEK  func() ([]byte, error)
	// AcmeBlocks are the configuration's distinct Acme blocks; Publish
	// puts an event on the node's bus; Version is this binary's (the ACME
	// client's user agent).
	AcmeBlocks func() []config.Acme
	Publish    func(typ string, at time.Time, data map[string]any)
	Version    string
	// Wake wakes the rounds (membership or state changed); a buffer of
	// one.
	Wake chan struct{}
	// Manual (tests): no rounds; the test calls Round with its own clock.
	Manual bool
}

// Leader runs the leader's duties on whichever node leads; on the others
// it keeps the cluster time current and forgets what a leader remembers.
type Leader struct {
	cfg   Config
	log   *slog.Logger
	pilot cluster.Autopilot
	st    state
	// settingsLogged and conflictsLogged are the last settings mismatch
	// and Raft address conflict logged.
	settingsLogged  atomic.Pointer[string]
	conflictsLogged atomic.Pointer[string]
	// rounds counts the rounds that ran to the end.
	rounds atomic.Uint64

	activationLag      prometheus.Histogram
	activationTimeouts prometheus.Counter
	acme               *acmeManager
	acmeView           *AcmeView
}

// state is what the leader remembers between rounds. It is rebuilt from
// the replicated state after a leader change: nothing here is needed for
// correctness, only for timing.
type state struct {
	mu sync.Mutex
	// pending maps an installed, not yet active key to when this leader
	// first saw it and the index every member must have made durable.
	pending map[string]pendingKey
	// lag is how long the oldest pending key has waited; laggards the
	// members it waits for (metrics).
	lag      time.Duration
	laggards int
	// readyTerm is the term in which this leader's FSM caught up with
	// everything committed before it (a barrier): until then its state may
	// lack keys and the cluster id, and it must not act on it.
	readyTerm uint64
}

type pendingKey struct {
	since time.Time // this node's time.Now (monotonic) when it first saw the key
	index uint64
	// warned: the wait past ActivationWait was logged once.
	warned bool
}

// New is a node's leader; nothing runs until Loop.
func New(cfg Config) *Leader {
	l := &Leader{
		cfg: cfg,
		log: cfg.Log,
		activationLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tether_keyring_activation_lag_seconds",
			Help:    "Time from a key's installation to its activation, waiting for every member to hold it.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		activationTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_keyring_activation_timeouts_total",
			Help: "Keys activated while failed members did not hold them (passed over after the bound, named in the log).",
		}),
	}
	l.acme = newAcmeManager(l)
	l.acmeView = &AcmeView{st: cfg.AcmeStore, log: cfg.Log}
	return l
}

// Collectors are the leader's metrics.
func (l *Leader) Collectors() []prometheus.Collector {
	return []prometheus.Collector{newKeyringCollector(l), l.activationLag, l.activationTimeouts, l.acme.orders, newAcmeCollector(l.acmeView)}
}

// Loop runs the leader's duties every Interval and whenever Wake fires,
// until ctx ends.
func (l *Leader) Loop(ctx context.Context) {
	if l.cfg.Manual {
		return // tests drive Round with their own clock
	}
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.cfg.Wake:
		}
		// Every node keeps its reckoning of the cluster time current, so
		// that a new leader counts on from it.
		now, ready := l.cfg.Clock.Now()
		if !l.cfg.Store.IsLeader() {
			l.st.mu.Lock()
			l.st.pending, l.st.lag, l.st.laggards = nil, 0, 0
			l.st.mu.Unlock()
			// Reports are for the leader: a later term starts afresh.
			l.cfg.Reports.reset()
			continue
		}
		if !ready {
			continue // a node just started: its members' clocks come within seconds
		}
		l.Round(now)
	}
}

// Round is one round of the leader's duties at cluster time now; each
// logs its own failures and the next round tries again.
func (l *Leader) Round(now time.Time) {
	if !l.CaughtUp() {
		return
	}
	st := l.cfg.Store
	if st.ClusterID() == "" {
		id := newID()
		if _, err := st.Apply(store.SetClusterID{ID: id}); err != nil {
			l.log.Warn("setting the cluster id failed", "error", err)
			return
		}
		l.log.Info("cluster id set", "cluster_id", st.ClusterID())
	}
	// The keyring's duties go by the time they commit (CommitTime logs
	// why there is none).
	if at, err := l.cfg.Clock.CommitTime(now); err == nil {
		if err := l.ensureKey(at); err != nil {
			l.log.Error("no active key and creating one failed", "error", err)
		}
		l.activatePending(at)
		if err := l.maybeRotate(at); err != nil {
			l.log.Error("automatic key rotation failed", "error", err)
		}
		l.maybePrune(at)
	}
	l.checkSettings()
	if l.cfg.Members != nil {
		// Voter reconciliation measures how long members have been failed:
		// elapsed time on this node's monotonic clock.
		if err := l.pilot.Reconcile(raftAdapter{st, l.cfg.Voters}, l.cfg.Self, l.cfg.Members.Members(), st.AppliedIndex(), l.cfg.Policy, time.Now(), l.log); err != nil {
			l.log.Warn("voter reconciliation", "error", err)
		}
	}
	l.rounds.Add(1)
}

// Rounds is how many rounds ran to the end on this node (while it led).
func (l *Leader) Rounds() uint64 { return l.rounds.Load() }

// IsCaughtUp reports, without waiting, whether this leader's state caught
// up with its log in the current term (CaughtUp did).
func (l *Leader) IsCaughtUp() bool {
	term := l.cfg.Store.Term()
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	return l.st.readyTerm == term
}

// CaughtUp reports whether this leader's FSM holds everything committed
// before its term, running a barrier once per term. Without it a node
// restarted alone could see no key yet (the log replays only once it
// leads) and create and activate a new one.
func (l *Leader) CaughtUp() bool {
	term := l.cfg.Store.Term()
	l.st.mu.Lock()
	ready := l.st.readyTerm == term
	l.st.mu.Unlock()
	if ready {
		return true
	}
	if err := l.cfg.Store.Barrier(barrierTimeout); err != nil {
		l.log.Warn("the leader's state did not catch up; its duties wait for the next round", "error", err)
		return false
	}
	l.st.mu.Lock()
	l.st.readyTerm = term
	l.st.mu.Unlock()
	return true
}

// raftAdapter lets cluster reconcile voters through the store.
type raftAdapter struct {
	st Store
	v  Voters
}

var _ cluster.Raft = raftAdapter{}

func (a raftAdapter) IsLeader() bool { return a.st.IsLeader() }
func (a raftAdapter) Term() uint64   { return a.st.Term() }
func (a raftAdapter) Servers() ([]cluster.RaftServer, error) {
	ss, err := a.st.Servers()
	if err != nil {
		return nil, err
	}
	out := make([]cluster.RaftServer, len(ss))
	for i, s := range ss {
		out[i] = cluster.RaftServer{ID: s.ID, Address: s.Address, Voter: s.Voter}
	}
	return out, nil
}
func (a raftAdapter) AddVoter(id, addr string) error    { return a.v.AddVoter(id, addr) }
func (a raftAdapter) AddNonvoter(id, addr string) error { return a.v.AddNonvoter(id, addr) }
func (a raftAdapter) DemoteVoter(id string) error       { return a.v.DemoteVoter(id) }
func (a raftAdapter) RemoveServer(id string) error      { return a.v.RemoveServer(id) }

// Reports are members' durable indexes as they reported them to this node
// directly (when it leads; gossip meta carries them too, a round later).
// The zero value is ready.
type Reports struct {
	mu sync.Mutex
	by map[string]uint64
}

// Note records member id's report of index.
func (r *Reports) Note(id string, index uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[string]uint64{}
	}
	if index > r.by[id] {
		r.by[id] = index
	}
}

// of is the highest durable index member id reported.
func (r *Reports) of(id string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[id]
}

func (r *Reports) reset() {
	r.mu.Lock()
	r.by = nil
	r.mu.Unlock()
}

// newID is a random 128-bit id in hex.
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
