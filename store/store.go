package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store/command"
	"github.com/tether-proxy/tether/store/raftlog"
	"github.com/tether-proxy/tether/store/transport"
)

// Errors of the package.
var (
	// ErrNotLeader: a write reached a node that is not the leader (raft's
	// error, renamed). Forward it to Leader().
	ErrNotLeader = errors.New("store: not the Raft leader")
	// ErrLeadershipLost: the leader lost leadership before the write was
	// committed; it may or may not have been applied. Retrying the same
	// command (same ReqID) is safe.
	ErrLeadershipLost = errors.New("store: leadership lost while committing; the write may have been applied")
	// ErrClusterID: SetClusterID with an id other than the one recorded.
	ErrClusterID = errors.New("store: cluster id mismatch")
	// ErrNoClusterID: the leader has not set the cluster id yet (its first
	// round after the cluster formed): retry.
	ErrNoClusterID = errors.New("store: the cluster id is not set yet")
	// ErrShutdown: the store is shut down.
	ErrShutdown = errors.New("store: shut down")
	// ErrUnsupported: a member (or this node) does not apply the command
	// yet; upgrade it first. See CommandSet and Store.SetCommandGate.
	// ErrAddressTaken: a server asked to be added at an address another
	// server of the configuration holds. The holder is never evicted for
	// it: whoever knows it failed removes it first (RemoveServer).
	ErrAddressTaken = errors.New("store: raft address held by another server")
	ErrUnsupported  = errors.New("store: command not supported by every member")
)

const (
	// applyTimeout bounds how long a write waits to be enqueued.
	applyTimeout = 10 * time.Second
	// membershipTimeout bounds a configuration change.
	membershipTimeout = 10 * time.Second
	// logCacheSize is how many recent entries the log cache keeps in memory.
	logCacheSize = 512
	// retainSnapshots is how many snapshot files stay on disk.
	retainSnapshots = 2
	// connPool is how many idle connections the transport keeps per peer.
	connPool = 3
	// transportTimeout is raft's I/O deadline on a connection.
	transportTimeout = 10 * time.Second
	// snapshotRetry is the pause after a failed snapshot before the next try.
	snapshotRetry = time.Second
)

// Server is one member of the Raft configuration.
type Server struct {
	ID, Address string
	Voter       bool
}

// Store owns Raft: transport, log, snapshots and the FSM. Reads are local
// and never wait on Raft; writes go through Apply on the leader.
type Store struct {
	id, addr string
	logger   *slog.Logger
	secrets  *keyring.Secrets
	ring     *keyring.Ring

	layer     *transport.Layer
	transport *raft.NetworkTransport
	resolver  *addressProvider // nil without Config.Resolve
	snaps     *raft.FileSnapshotStore
	snapStore raft.SnapshotStore // snaps, behind the test fault knob
	snapDir   string
	bolt      *raftboltdb.BoltStore
	logs      raft.LogStore
	fsm       *fsm
	raft      *raft.Raft
	observer  *raft.Observer
	hadState  bool
	snapFault func() error
	gate      atomic.Pointer[func(Command) error]

	leaderChanges atomic.Uint64
	// persistErr is why the last snapshot failed (nil: the last one, or
	// none yet, succeeded); persistFailures counts failed tries.
	persistErr      atomic.Pointer[PersistFailure]
	persistFailures atomic.Uint64
	snapIndex       atomic.Uint64 // newest local snapshot's index
	raftUp          atomic.Bool   // s.raft is set (a snapshot refused while raft starts stops the FSM before)

	changed chan struct{} // Changed(); buffered 1
	durable chan struct{} // DurableChanged(); buffered 1
	snapReq chan struct{} // asks the snapshotter for a snapshot; buffered 1
	applied chan struct{} // closed and replaced after every FSM entry
	appMu   sync.Mutex

	done     chan struct{}
	wg       sync.WaitGroup
	shutOnce sync.Once
	shutErr  error
}

// Open starts the transport, the log and snapshot stores and Raft, in that
// order. It does not bootstrap: call Bootstrap for a new cluster (when
// HadState is false) or wait to be added by a leader.
func Open(cfg Config, opts ...Option) (_ *Store, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	k := &knobs{}
	for _, o := range opts {
		o(k)
	}
	s := &Store{
		id: cfg.NodeID, logger: cfg.Logger.With("component", "store"), ring: cfg.Ring,
		changed: make(chan struct{}, 1), durable: make(chan struct{}, 1), snapReq: make(chan struct{}, 1),
		applied: make(chan struct{}), done: make(chan struct{}),
	}
	if s.ring == nil {
		s.ring = keyring.NewRing(keyring.Options{})
	}
	if s.secrets = cfg.Secrets; s.secrets == nil {
		if s.secrets, err = keyring.NewSecrets(cfg.Secret); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: data dir: %w", err)
	}

	// 1. Transport: listener, advertised address, authenticated stream layer.
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("store: raft listener: %w", err)
	}
	closers = append(closers, func() { ln.Close() })
	if s.addr, err = advertiseAddr(cfg.BindAddr, cfg.Advertise, ln.Addr()); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	topts := transport.Options{HandshakeTimeout: k.handshakeTimeout, Dial: k.dial, Wrap: k.wrap, Now: k.now}
	if s.layer, err = transport.New(ln, s.addr, s.secrets, cfg.TLS, topts, s.logger); err != nil {
		return nil, fmt.Errorf("store: raft transport: %w", err)
	}
	closers = append(closers, func() { s.layer.Close(); s.layer.Wait() })
	tcfg := &raft.NetworkTransportConfig{
		Stream: s.layer, MaxPool: connPool, Timeout: cmp.Or(k.transportTimeout, transportTimeout),
		Logger: raftlog.New(cfg.Logger, "raft-net", nil),
	}
	if cfg.Resolve != nil {
		s.resolver = newAddressProvider(s, cfg.Resolve)
		tcfg.ServerAddressProvider = s.resolver
	}
	s.transport = raft.NewNetworkTransportWithConfig(tcfg)
	closers = append(closers, func() { s.transport.Close() })

	// 2. Snapshot store.
	s.snapDir = filepath.Join(cfg.Dir, "snapshots")
	if s.snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.Dir, retainSnapshots, raftlog.New(cfg.Logger, "raft-snap", nil)); err != nil {
		return nil, fmt.Errorf("store: snapshot store: %w", err)
	}
	s.snapStore = s.snaps
	if k.snapshotFault != nil {
		s.snapStore = faultySnapshots{s.snaps, k.snapshotFault}
	}
	s.snapFault = k.snapshotFault

	// 3. Bolt log and stable store; 4. log cache in front of it.
	s.bolt, err = raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.Dir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: time.Second}, // a second process on this dir fails, not hangs
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("store: log store %s is locked by another process (another tether on this data dir?): %w", filepath.Join(cfg.Dir, "raft.db"), err)
	}
	if err != nil {
		return nil, fmt.Errorf("store: log store %s: %w", filepath.Join(cfg.Dir, "raft.db"), err)
	}
	closers = append(closers, func() { s.bolt.Close() })
	if s.logs, err = raft.NewLogCache(logCacheSize, s.bolt); err != nil {
		return nil, fmt.Errorf("store: log cache: %w", err)
	}
	if s.hadState, err = raft.HasExistingState(s.logs, s.bolt, s.snaps); err != nil {
		return nil, fmt.Errorf("store: reading raft state: %w", err)
	}
	s.snapIndex.Store(s.latestSnapshot())
	if err := s.checkSnapshot(cmp.Or(cfg.Commands, Commands)); err != nil {
		return nil, err
	}

	// 5. FSM and Raft.
	s.fsm = newFSM(s.ring, s.secrets, s.logger)
	if cfg.Commands != "" {
		s.fsm.commands = cfg.Commands
	}
	s.fsm.onStop = s.handOff
	s.layer.SetClusterID(s.fsm.ClusterID)
	s.fsm.snapIndex = s.latestSnapshot
	s.snapStore = snapshotStore{s.snapStore, func() bool { return s.fsm.stop.Load() != 0 }}
	s.fsm.onChange = s.stateChanged
	s.fsm.onApply = s.entryApplied
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.Timing.HeartbeatTimeout
	rc.ElectionTimeout = cfg.Timing.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.Timing.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.Timing.CommitTimeout
	rc.ShutdownOnRemove = false // a removed node keeps serving reads and can be added again
	rc.NoLegacyTelemetry = true
	rc.Logger = raftlog.New(cfg.Logger, "raft", s.latestSnapshot)
	if k.snapshotThreshold > 0 {
		rc.SnapshotThreshold = k.snapshotThreshold
	}
	if k.trailingLogs > 0 {
		rc.TrailingLogs = k.trailingLogs
	}
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("store: raft config: %w", err)
	}
	if err := s.recoverPeers(cfg.Dir, rc); err != nil {
		return nil, err
	}
	if s.raft, err = raft.NewRaft(rc, s.fsm, s.logs, s.bolt, s.snapStore, s.transport); err != nil {
		return nil, fmt.Errorf("store: starting raft: %w", err)
	}
	s.raftUp.Store(true)
	// Restoring the last snapshot at start made the FSM current up to it.
	s.fsm.index.Store(max(s.fsm.index.Load(), s.raft.AppliedIndex()))

	// 6. Leader observer and snapshotter.
	obs := make(chan raft.Observation, 16)
	s.observer = raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	s.raft.RegisterObserver(s.observer)
	s.wg.Add(2)
	go s.observe(obs)
	go s.snapshotter()
	s.logger.Info("raft store open", "node_id", s.id, "address", s.addr, "had_state", s.hadState,
		"snapshot_index", s.snapIndex.Load())
	return s, nil
}

// checkSnapshot decodes the newest snapshot before raft restores it, so a
// changed cluster secret is reported as such (raft would only say it
// failed to load any snapshot). A snapshot of a newer tether (one this
// binary, applying cmds, cannot fully understand) is left to the FSM,
// which refuses it and stops while raft starts from an older one; when
// every snapshot is such, the node cannot start and says so.
func (s *Store) checkSnapshot(cmds CommandSet) error {
	l, err := s.snaps.List()
	if err != nil || len(l) == 0 {
		return nil // raft reports unreadable snapshot stores itself
	}
	var newer error
	for i, meta := range l {
		_, rc, err := s.snaps.Open(meta.ID)
		if err != nil {
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(rc, maxSnapshotSize+1))
		rc.Close()
		if err != nil {
			return nil
		}
		st, err := decodeSnapshotWith(func(body *snapshotBody) [][]byte {
			learnFromSnapshot(s.secrets, body)
			return s.secrets.HeldKEKs(keyring.InfoRaft)
		}, b)
		if err == nil {
			what := command.UnknownIn(st.body.Commands, cmds)
			st.Release()
			if what == "" {
				return nil
			}
			err = fmt.Errorf("%w: it holds %s", ErrNewerSnapshot, what)
		}
		switch {
		case errors.Is(err, ErrNewerSnapshot):
			if newer == nil {
				newer = fmt.Errorf("snapshot %s: %w", meta.ID, err)
			}
			continue // the FSM refuses it and stops, as at a log entry it cannot apply
		case i > 0:
			return nil // raft tries it, and says what it finds
		case errors.Is(err, keyring.ErrUnwrap):
			return fmt.Errorf("store: snapshot %s in %s does not decrypt with this cluster secret: was --cluster-secret-file changed? (%w)",
				meta.ID, s.snapDir, err)
		}
		return fmt.Errorf("store: snapshot %s in %s: %w", meta.ID, s.snapDir, err)
	}
	return fmt.Errorf("store: every snapshot in %s is of a newer tether (%v); this binary knows %s: upgrade tether on this node",
		s.snapDir, newer, cmds.Describe())
}

func (s *Store) latestSnapshot() uint64 {
	l, err := s.snaps.List()
	if err != nil || len(l) == 0 {
		return 0
	}
	return l[0].Index
}

// observe counts leader changes.
func (s *Store) observe(ch <-chan raft.Observation) {
	defer s.wg.Done()
	last := raft.ServerID("")
	for {
		select {
		case <-s.done:
			return
		case o := <-ch:
			lo := o.Data.(raft.LeaderObservation)
			if lo.LeaderID != last {
				last = lo.LeaderID
				if lo.LeaderID != "" {
					s.leaderChanges.Add(1)
				}
				if string(lo.LeaderID) == s.id {
					s.handOff()
				}
				s.logger.Info("raft leader changed", "leader_id", string(lo.LeaderID), "leader_addr", string(lo.LeaderAddr))
			}
		}
	}
}

// handOff moves leadership away from a node that stopped applying: its
// state is behind the log, so it must not act on it as the leader.
func (s *Store) handOff() {
	if s.fsm.stop.Load() == 0 || !s.raftUp.Load() {
		return // starting: not the leader yet (the observer hands off if it becomes one)
	}
	go func() {
		if s.IsLeader() {
			if err := s.TransferLeadership(); err != nil {
				s.logger.Warn("this node stopped applying and could not hand leadership over", "err", err)
			}
		}
	}()
}

// stateChanged runs on the FSM goroutine after a change: it must not block.
func (s *Store) stateChanged() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
	select {
	case s.snapReq <- struct{}{}:
	default:
	}
}

func (s *Store) entryApplied() {
	s.appMu.Lock()
	close(s.applied)
	s.applied = make(chan struct{})
	s.appMu.Unlock()
}

// snapshotter takes a snapshot after every state change, off the Apply
// path, so that a node restarted without a quorum (raft then restores only
// its last snapshot) still has every key and drain it had applied.
//
// A snapshot that fails for want of a disk (full, read-only, gone) is said
// once in the log (and again once it works), counted (PersistFailure), and
// retried every snapshotRetry; while it fails, a small probe file tests the
// disk first, so raft does not log a failed snapshot every second.
func (s *Store) snapshotter() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case <-s.snapReq:
		}
		err := s.probeDisk()
		if err == nil {
			err = s.snapshot()
		}
		if errors.Is(err, raft.ErrRaftShutdown) {
			return
		}
		if err != nil && s.fsm.stop.Load() != 0 {
			continue // not the disk: the FSM waits for an upgrade (Store.Stopped)
		}
		if !raftlog.SnapshotNotYet(err) { // not the disk either: retried below, not counted
			s.notePersist(err)
		}
		if err != nil {
			select {
			case <-s.done:
				return
			case <-time.After(snapshotRetry):
			}
			select {
			case s.snapReq <- struct{}{}:
			default:
			}
		}
	}
}

// PersistFailure is why this node cannot write its Raft state to disk.
type PersistFailure struct {
	Err   string    // the last error
	Since time.Time // when the failures began
}

// notePersist records a snapshot's outcome and logs changes only.
func (s *Store) notePersist(err error) {
	if err == nil {
		if prev := s.persistErr.Swap(nil); prev != nil {
			s.logger.Info("raft state persists again", "failed_for", time.Since(prev.Since).Round(time.Second).String())
		}
		return
	}
	s.persistFailures.Add(1)
	prev := s.persistErr.Load()
	since := time.Now()
	if prev != nil {
		since = prev.Since
	}
	s.persistErr.Store(&PersistFailure{Err: err.Error(), Since: since})
	if prev == nil {
		s.logger.Error("cannot persist raft state: the durable index is frozen, so new keys activate without waiting for this node; retrying every second (free disk space or fix the data dir's permissions)",
			"dir", s.snapDir, "err", err)
	}
}

// probeDisk writes, syncs and removes a small file in the snapshot
// directory, but only while snapshots fail: the first try goes straight
// to raft.
func (s *Store) probeDisk() error {
	if s.persistErr.Load() == nil {
		return nil
	}
	if s.snapFault != nil {
		if err := s.snapFault(); err != nil {
			return err
		}
	}
	f, err := os.CreateTemp(s.snapDir, ".probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(make([]byte, 4096))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// PersistFailure reports why this node cannot persist its Raft state (nil:
// it can) and how many snapshot tries failed since start.
func (s *Store) PersistFailure() (*PersistFailure, uint64) {
	return s.persistErr.Load(), s.persistFailures.Load()
}

// faultySnapshots fails snapshot creation on the test knob's word.
type faultySnapshots struct {
	*raft.FileSnapshotStore
	fault func() error
}

func (f faultySnapshots) Create(v raft.SnapshotVersion, index, term uint64, c raft.Configuration, ci uint64, t raft.Transport) (raft.SnapshotSink, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.FileSnapshotStore.Create(v, index, term, c, ci, t)
}

func (s *Store) snapshot() error {
	err := s.raft.Snapshot().Error()
	if errors.Is(err, raft.ErrNothingNewToSnapshot) {
		err = nil
	}
	if err == nil {
		if prev, now := s.snapIndex.Load(), s.latestSnapshot(); now > prev {
			s.snapIndex.Store(now)
			// The snapshot holds the state under the secret in use: a
			// secret the cluster removed before it is no longer needed.
			s.secrets.Purge(now)
			select {
			case s.durable <- struct{}{}:
			default:
			}
		}
	}
	return err
}

// Snapshot takes a snapshot now (nothing new since the last: no error).
func (s *Store) Snapshot() error {
	if err := s.snapshot(); err != nil {
		return fmt.Errorf("store: snapshot: %w", err)
	}
	return nil
}

// Addr is the advertised Raft address (the real port after ":0").
func (s *Store) Addr() string { return s.addr }

// ID is this node's Raft server id.
func (s *Store) ID() string { return s.id }

// Ring is the keyring the FSM applies into.
func (s *Store) Ring() *keyring.Ring { return s.ring }

// HadState reports whether Raft state existed in Dir before Open.
func (s *Store) HadState() bool { return s.hadState }

// Bootstrap forms a new cluster of servers (none: this node alone). A
// store that already has state returns nil: bootstrapping twice is safe.
func (s *Store) Bootstrap(servers []Server) error {
	if len(servers) == 0 {
		servers = []Server{{ID: s.id, Address: s.addr, Voter: true}}
	}
	var c raft.Configuration
	for _, sv := range servers {
		suf := raft.Nonvoter
		if sv.Voter {
			suf = raft.Voter
		}
		c.Servers = append(c.Servers, raft.Server{Suffrage: suf, ID: raft.ServerID(sv.ID), Address: raft.ServerAddress(sv.Address)})
	}
	err := s.raft.BootstrapCluster(c).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: bootstrap: %w", err)
	}
	return nil
}

// State is "Leader", "Follower", "Candidate" or "Shutdown".
func (s *Store) State() string { return s.raft.State().String() }

// IsLeader reports whether this node is the leader.
func (s *Store) IsLeader() bool { return s.raft.State() == raft.Leader }

// Leader returns the leader's id and address, "" when unknown.
func (s *Store) Leader() (id, addr string) {
	a, i := s.raft.LeaderWithID()
	return string(i), string(a)
}

// WaitForLeader returns once a leader is known, or with ctx's error.
func (s *Store) WaitForLeader(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if id, _ := s.Leader(); id != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: waiting for a leader: %w", ctx.Err())
		case <-s.done:
			return ErrShutdown
		case <-t.C:
		}
	}
}

// AppliedIndex is the index up to which this node's state is current: the
// FSM's last entry, extended over no-op entries raft applied after it.
func (s *Store) AppliedIndex() uint64 {
	f := s.fsm.index.Load()
	a := s.raft.AppliedIndex()
	if f >= a {
		return f
	}
	// Raft does not hand no-op entries to the FSM; they change nothing, so
	// the state is current through them. Look at a few (log cache hits).
	const maxScan = 64
	var l raft.Log
	for i := f + 1; i <= a && i <= f+maxScan; i++ {
		if s.logs.GetLog(i, &l) != nil || (l.Type != raft.LogNoop && l.Type != raft.LogBarrier) {
			return i - 1
		}
	}
	return min(a, f+maxScan)
}

// Term is the current Raft term.
func (s *Store) Term() uint64 { return s.raft.CurrentTerm() }

// Barrier returns once every entry before it is applied to this node's FSM.
// A new leader calls it before acting on the replicated state: entries an
// earlier term committed (all of them, after a restart without a recent
// snapshot) reach its FSM only after it took over.
func (s *Store) Barrier(timeout time.Duration) error {
	if s.fsm.stop.Load() != 0 {
		return fmt.Errorf("store: barrier: %w", s.fsm.stoppedErr())
	}
	if err := s.raft.Barrier(timeout).Error(); err != nil {
		return fmt.Errorf("store: barrier: %w", err)
	}
	return nil
}

// CommitIndex is the latest index this node knows to be committed.
func (s *Store) CommitIndex() uint64 { return s.raft.CommitIndex() }

// LastContact is when this follower last heard from a leader (zero: never;
// the leader itself reports now).
func (s *Store) LastContact() time.Time {
	if s.IsLeader() {
		return time.Now()
	}
	return s.raft.LastContact()
}

// LeaderChanges counts the leaders this node has seen (for a metric).
func (s *Store) LeaderChanges() uint64 { return s.leaderChanges.Load() }

// Servers lists the Raft configuration.
func (s *Store) Servers() ([]Server, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("store: raft configuration: %w", err)
	}
	var out []Server
	for _, sv := range f.Configuration().Servers {
		out = append(out, Server{ID: string(sv.ID), Address: string(sv.Address), Voter: sv.Suffrage == raft.Voter})
	}
	return out, nil
}

// AddVoter makes id at addr a voter. Idempotent (rqlite's join): the same
// id and address as a voter already is nothing to do; a known id at a new
// address is updated in place (never removed and added again, which would
// pass through a configuration with one voter less). An address another
// server holds is refused with ErrAddressTaken, naming both: the holder may
// be alive (pod IP reuse, every node on :7000), and only the caller knows
// from gossip whether it failed and may be removed first.
func (s *Store) AddVoter(id, addr string) error { return s.add(id, addr, true) }

// AddNonvoter adds id at addr as a non-voter (it replicates, never votes).
// Same rules as AddVoter; an existing voter stays a voter.
func (s *Store) AddNonvoter(id, addr string) error { return s.add(id, addr, false) }

func (s *Store) add(id, addr string, voter bool) error {
	if id == "" || addr == "" {
		return fmt.Errorf("store: add server: id %q and address %q are both required", id, addr)
	}
	servers, err := s.Servers()
	if err != nil {
		return err
	}
	for _, sv := range servers {
		switch {
		case sv.ID == id && sv.Address == addr:
			if sv.Voter || !voter {
				return nil
			}
		case sv.ID != id && sv.Address == addr:
			s.logger.Warn("raft address conflict: refusing a server at an address another server holds",
				"address", addr, "holder", sv.ID, "claimant", id)
			return fmt.Errorf("%w: %s claims raft address %s, which %s holds: refused (remove %s first if it failed for good)",
				ErrAddressTaken, id, addr, sv.ID, sv.ID)
		}
	}
	// raft's AddVoter/AddNonvoter with a known id keep its place and
	// change its address (AddNonvoter keeps a voter a voter).
	var f raft.IndexFuture
	if voter {
		f = s.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, membershipTimeout)
	} else {
		f = s.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, membershipTimeout)
	}
	if err := raftErr(f.Error()); err != nil {
		return fmt.Errorf("store: adding %s at %s: %w", id, addr, err)
	}
	return nil
}

// DemoteVoter makes voter id a non-voter; a non-voter stays one.
func (s *Store) DemoteVoter(id string) error {
	servers, err := s.Servers()
	if err != nil {
		return err
	}
	for _, sv := range servers {
		if sv.ID == id {
			if !sv.Voter {
				return nil
			}
			if err := raftErr(s.raft.DemoteVoter(raft.ServerID(id), 0, membershipTimeout).Error()); err != nil {
				return fmt.Errorf("store: demoting %s: %w", id, err)
			}
			return nil
		}
	}
	return fmt.Errorf("store: demoting %s: no such server in the raft configuration", id)
}

// RemoveServer removes id from the configuration; an unknown id is a
// no-op.
func (s *Store) RemoveServer(id string) error {
	servers, err := s.Servers()
	if err != nil {
		return err
	}
	for _, sv := range servers {
		if sv.ID == id {
			if err := raftErr(s.raft.RemoveServer(raft.ServerID(id), 0, membershipTimeout).Error()); err != nil {
				return fmt.Errorf("store: removing %s: %w", id, err)
			}
			return nil
		}
	}
	return nil
}

// RemovedAt reports whether a committed configuration removed member id
// (and it has not joined again since), with that configuration's index:
// what a removal retried after its first try committed answers with, on
// any node and under any leader.
func (s *Store) RemovedAt(id string) (uint64, bool) { return s.fsm.removedAt(id) }

// InCommittedConfiguration reports whether member id is in the latest
// committed Raft configuration this node applied. Servers lists raft's
// latest configuration instead, which may hold a change not yet committed
// (raft uses a configuration as soon as it is in the log): a removal there
// may still be lost.
func (s *Store) InCommittedConfiguration(id string) bool { return s.fsm.inConfiguration(id) }

// CommittedRemoval reports, on the leader, whether a committed
// configuration removed member id, with that configuration's index. When
// id is still in the committed configuration this leader applied, a
// removal of it may be under way (in raft's latest configuration, not yet
// committed; or left by an earlier leader): a barrier commits it first,
// waiting up to timeout for it to be queued, so a pending removal is never
// reported as done, nor as "no such member". Errors: ErrNotLeader,
// ErrLeadershipLost (no quorum commits it), ErrShutdown.
func (s *Store) CommittedRemoval(id string, timeout time.Duration) (uint64, bool, error) {
	if idx, ok := s.fsm.removedAt(id); ok {
		return idx, true, nil
	}
	if !s.fsm.inConfiguration(id) {
		return 0, false, nil
	}
	if s.fsm.stop.Load() != 0 {
		return 0, false, fmt.Errorf("store: barrier: %w", s.fsm.stoppedErr())
	}
	if err := raftErr(s.raft.Barrier(timeout).Error()); err != nil {
		return 0, false, fmt.Errorf("store: committing the configuration: %w", err)
	}
	idx, ok := s.fsm.removedAt(id)
	return idx, ok, nil
}

// TransferLeadership hands leadership to another voter (graceful leave).
func (s *Store) TransferLeadership() error {
	if err := raftErr(s.raft.LeadershipTransfer().Error()); err != nil {
		return fmt.Errorf("store: leadership transfer: %w", err)
	}
	return nil
}

// raftErr maps raft's errors to the package's.
func raftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrLeadershipLost
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	}
	return err
}

// Apply commits cmd through Raft and applies it, on the leader only. The
// index is the entry's. Errors: ErrNotLeader, ErrLeadershipLost (maybe
// applied: retry with the same ReqID), a bad command, or the FSM's own
// error (e.g. keyring.ErrUnknownKey, ErrClusterID).
func (s *Store) Apply(cmd Command) (index uint64, err error) {
	c, err := s.Commit(cmd)
	return c.Index, err
}

// Committed is what a write committed: its entry's index and, for a
// command that carries one, the value the first application of its ReqID
// committed (InstallKey: the key id; RevokeKey with a replacement: the
// replacement's id; SetDrain: the deadline, RFC 3339). A retry whose ReqID
// was already applied gets the first try's value, not its own.
type Committed struct {
	Index uint64
	Value string
}

// Commit is Apply answering with what was committed. The command's
// request id is bound to what the command does (a retry of a write tether
// makes itself); CommitRequest binds it to a client's request.
func (s *Store) Commit(cmd Command) (Committed, error) { return s.CommitRequest(cmd, "") }

// CommitRequest is Commit for a client's request: the command's request id
// is bound to bind (BindRequest of the request's method, path and body;
// "": to what the command does). An id the cluster remembers for another
// request is ErrRequestReused, checked here before anything is written and
// again by the FSM when it applies the entry; the same id with the same
// binding is a retry and answers with what its first application
// committed.
func (s *Store) CommitRequest(cmd Command, bind string) (Committed, error) {
	if !s.fsm.commands.Supports(cmd) {
		return Committed{}, fmt.Errorf("%w: this node (%s) does not apply command %s (it knows %s): upgrade it first", ErrUnsupported, s.id, Requirement(cmd), s.fsm.commands.Describe())
	}
	if g := s.gate.Load(); g != nil {
		if err := (*g)(cmd); err != nil {
			return Committed{}, err
		}
	}
	if command.ReqIDOf(cmd) == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		cmd = command.WithReqID(cmd, hex.EncodeToString(b[:]))
	}
	if bind == "" {
		bind = command.ContentBinding(cmd)
	}
	if err := s.fsm.requestSeen(command.ReqIDOf(cmd), bind); err != nil {
		return Committed{}, err
	}
	data, err := command.Encode(s.secrets.KEK(keyring.InfoRaft), cmd)
	if err == nil {
		data, err = command.WithBinding(data, bind)
	}
	if err != nil {
		return Committed{}, fmt.Errorf("store: %w", err)
	}
	f := s.raft.Apply(data, applyTimeout)
	if err := raftErr(f.Error()); err != nil {
		if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrShutdown) {
			return Committed{}, err
		}
		return Committed{}, fmt.Errorf("store: apply: %w", err)
	}
	c := Committed{Index: f.Index()}
	if r, ok := f.Response().(applyResponse); ok {
		c.Value = r.value
		if r.err != nil {
			return c, r.err
		}
	}
	return c, nil
}

// CheckRequest refuses (ErrRequestReused) request id when this node's
// request memory holds it bound to another request than bind: a write
// made of several commands checks its id before the first.
func (s *Store) CheckRequest(id, bind string) error { return s.fsm.requestSeen(id, bind) }

// RecordRequest binds request id to bind (BindRequest) in the replicated
// request memory with an entry that changes nothing else, for a write that
// is not an FSM command (a Raft configuration change): it is then bound as
// every other write is, ErrRequestReused when the id is bound to another
// request. The entry is a SetClusterID of the id the cluster holds, a no-op
// every version applies; before the cluster id is set it fails with
// ErrNoClusterID.
func (s *Store) RecordRequest(id, bind string) (Committed, error) {
	cid := s.fsm.ClusterID()
	if cid == "" {
		return Committed{}, ErrNoClusterID
	}
	return s.CommitRequest(SetClusterID{ReqID: id, ID: cid}, bind)
}

// SetCommandGate installs the check Apply runs before it writes a command:
// the node refuses (ErrUnsupported) a command some member does not apply
// yet. Nil removes it.
func (s *Store) SetCommandGate(gate func(Command) error) {
	if gate == nil {
		s.gate.Store(nil)
		return
	}
	s.gate.Store(&gate)
}

// Commands is the command set this node's FSM applies; members gossip it.
func (s *Store) Commands() CommandSet { return s.fsm.commands }

// Stopped reports the log entry this node stopped applying at (0: none)
// and a sentence naming the version it needs. The node's applied and
// durable indexes stay below that entry until it is upgraded.
func (s *Store) Stopped() (index uint64, need string) { return s.fsm.stopped() }

// ClusterID is the cluster's id, "" until one is set.
func (s *Store) ClusterID() string { return s.fsm.ClusterID() }

// CommittedClock is the latest cluster time committed (zero: none yet).
func (s *Store) CommittedClock() time.Time { return s.fsm.committed() }

// Drains lists the draining destinations, sorted by cluster, destination.
func (s *Store) Drains() []Drain { return s.fsm.Drains() }

// DurableIndex is the index up to which this node's keyring and drain
// state is in a local snapshot, i.e. survives a restart without a quorum.
// The leader activates a key once every member reports at least the index
// that installed it.
func (s *Store) DurableIndex() uint64 {
	applied := s.AppliedIndex()     // read first: every change <= applied
	last := s.fsm.lastChange.Load() // is recorded here by now
	snap := s.snapIndex.Load()
	if last <= snap {
		return max(applied, snap)
	}
	return snap
}

// WaitApplied returns once AppliedIndex() >= index, or with ctx's error.
func (s *Store) WaitApplied(ctx context.Context, index uint64) error {
	t := time.NewTicker(20 * time.Millisecond) // no-op entries do not notify
	defer t.Stop()
	for {
		s.appMu.Lock()
		ch := s.applied
		s.appMu.Unlock()
		if s.AppliedIndex() >= index {
			return nil
		}
		if stop := s.fsm.stop.Load(); stop != 0 && index >= stop {
			return fmt.Errorf("store: waiting for index %d: %w", index, s.fsm.stoppedErr())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: waiting for index %d (applied %d): %w", index, s.AppliedIndex(), ctx.Err())
		case <-s.done:
			return ErrShutdown
		case <-ch:
		case <-t.C:
		}
	}
}

// ReadState runs fn with this node's applied index and drains while no
// entry is being applied: what fn reads of the keyring (the Ring the store
// was opened with) and drains is exactly the state at index, no entry
// before it missing and none after it begun. fn runs under the FSM's read
// lock: it must be short and must not call the Store.
func (s *Store) ReadState(fn func(index uint64, drains []Drain)) {
	f := s.fsm
	f.mu.RLock()
	defer f.mu.RUnlock()
	l := f.drainList()
	drains := make([]Drain, len(l))
	for i, d := range l {
		drains[i] = Drain{d.Cluster, d.Destination, d.Deadline}
	}
	fn(s.AppliedIndex(), drains)
}

// DurableChanged receives (coalesced, never blocking the store) after a
// new local snapshot moved DurableIndex forward: the moment to report it to
// the leader, instead of polling.
func (s *Store) DurableChanged() <-chan struct{} { return s.durable }

// Changed receives (coalesced; the FSM never waits for a reader) after a
// drain, keyring or cluster id change is applied or a snapshot restored.
func (s *Store) Changed() <-chan struct{} { return s.changed }

// Shutdown stops Raft and closes the transport and the log store. Calling
// it again returns the first result.
func (s *Store) Shutdown() error {
	s.shutOnce.Do(func() {
		s.lastSnapshot()
		close(s.done)
		s.raft.DeregisterObserver(s.observer)
		f := s.raft.Shutdown() // raft stops its loops now, then waits for them
		s.layer.CloseAll()     // RPCs to unresponsive peers fail now, not at their deadline
		err := f.Error()
		s.wg.Wait()
		errs := []error{err, s.transport.Close()}
		s.layer.Wait()
		errs = append(errs, s.bolt.Close())
		if err := errors.Join(errs...); err != nil {
			s.shutErr = fmt.Errorf("store: shutdown: %w", err)
		}
		s.logger.Info("raft store shut down", "node_id", s.id)
	})
	return s.shutErr
}

// lastSnapshot writes, at a graceful stop, a change the snapshotter has
// not written yet: a node restarted without a quorum replays no log, and
// would otherwise serve a state older than the one it stopped with.
func (s *Store) lastSnapshot() {
	if s.fsm.stop.Load() != 0 || s.fsm.lastChange.Load() <= s.snapIndex.Load() {
		return
	}
	if err := s.snapshot(); err != nil {
		s.logger.Warn("no snapshot at shutdown: a restart without a quorum starts from the last one", "snapshot_index", s.snapIndex.Load(), "err", err)
	}
}

// dump describes the whole FSM state deterministically (tests).
func (s *Store) dump() string { return s.fsm.dump() }

// PeersFile is the file an operator writes into the Raft directory to
// recover from a lost quorum: raft's peers.json format, a JSON list of
// {"id", "address", "non_voter"} naming the servers that remain. At the next
// Open the configuration is replaced by it (raft.RecoverCluster), once; the
// file is then renamed to peers.json.recovered.
const PeersFile = "peers.json"

// recoverPeers applies an operator's peers.json before Raft starts.
func (s *Store) recoverPeers(dir string, rc *raft.Config) error {
	path := filepath.Join(dir, PeersFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	conf, err := raft.ReadConfigJSON(path)
	if err != nil {
		return fmt.Errorf("store: %s: %w", path, err)
	}
	if err := raft.RecoverCluster(rc, s.fsm, s.logs, s.bolt, s.snapStore, s.transport, conf); err != nil {
		return fmt.Errorf("store: recovering the cluster from %s: %w", path, err)
	}
	if err := os.Rename(path, path+".recovered"); err != nil {
		return fmt.Errorf("store: %s applied, but renaming it failed (remove it before the next start): %w", path, err)
	}
	ids := make([]string, 0, len(conf.Servers))
	for _, sv := range conf.Servers {
		ids = append(ids, string(sv.ID))
	}
	s.logger.Warn("raft configuration replaced from peers.json (lost-quorum recovery)", "servers", ids, "file", path+".recovered")
	s.hadState = true
	return nil
}
