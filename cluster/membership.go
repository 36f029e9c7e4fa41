package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultPort is the gossip port used when an address names none.
const DefaultPort = 7946

// ErrClusterMismatch is wrapped by Join's error when the peers hold the state of
// another cluster than this node's.
var ErrClusterMismatch = errors.New("peer belongs to another cluster")

// eventsOnly makes Open skip the state reader, as if memberlist's layout had
// changed (tests of the fallback).
var eventsOnly = false

// resolveTimeout bounds one DNS lookup in Open and Join.
const resolveTimeout = 5 * time.Second

// Config configures Open.
type Config struct {
	NodeID    string // memberlist's node name; required
	BindAddr  string // ":7946", "127.0.0.1:0"; "" means ":7946"
	Advertise string // host or host:port (NAT, containers); a host name is resolved once, at Open
	// Secret is the cluster secret, required: the gossip key is derived from
	// it (GossipKey) and every packet is encrypted and verified with it.
	Secret []byte
	Meta   Meta         // Meta.ID may be left empty: it is NodeID
	Timing Timing       // LAN (the zero value) or Local; see Timing
	Logger *slog.Logger // nil discards; memberlist's own lines come through it too
	// VoteFile, when set (a file in the data dir), keeps this node's committed
	// formation vote across restarts; see votefile.go.
	VoteFile string
	// PeersFile, when set (a file in the data dir), keeps the gossip
	// addresses of the members last seen alive, for Rejoin after a restart;
	// see peers.go.
	PeersFile string
	// Clock is the wall clock this node puts in its probe acks, which
	// members read as its clock (PeerClocks); nil: time.Now.
	Clock func() time.Time
	// OnChange is called from the single event goroutine after any change of
	// membership, state or meta (including this node's own meta and Forget).
	// Calls never overlap; a slow OnChange delays the next one, never gossip.
	OnChange func()
	// OnIDConflict, when set, is told of another claim on this node's id
	// once it is checked (conflict.go), from a goroutine of its own.
	OnIDConflict func(IDConflict)
}

// Membership is this node's view of the gossip cluster.
type Membership struct {
	cfg      Config
	log      *slog.Logger
	t        timings
	ml       *memberlist.Memberlist
	keyring  *memberlist.Keyring // the gossip keys: one per accepted cluster secret
	guard    *guardedTransport   // nil when a test's transport is not node-aware
	addr     string              // advertised host:port
	reader   *stateReader        // nil: events only (see mlstate.go)
	queue    *memberlist.TransmitLimitedQueue
	handlers handlers
	clocks   *peerClocks // members' clocks from probe acks (clock.go)

	localMeta  atomic.Pointer[Meta]
	metaBytes  atomic.Pointer[[]byte]
	metaLock   sync.Mutex // serializes changes of localMeta and metaBytes
	announceMu sync.Mutex // serializes alive announcements with Leave
	numAlive   atomic.Int32
	left       atomic.Bool    // set under announceMu: no alive announcement follows a leave
	closed     atomic.Bool    // set under announceMu by Shutdown
	announceCh chan time.Time // to the announcer: announce now, and repeat until then
	voteErr    string         // the last vote that could not be gossiped (loop only)
	wg         sync.WaitGroup // the announcer
	knownPeers []string       // PeersFile at Open
	savedPeers []string       // what PeersFile holds now (loop only)

	watchMu  sync.Mutex
	watchers []func() // called after OnChange; see Watch

	idc conflicts // claims on node ids (conflict.go)

	evMu     sync.Mutex // guards events, mismatch; taken inside memberlist callbacks
	events   []nodeObs
	mismatch error

	mu        sync.Mutex // guards members, forgotten, dirty; never held while calling memberlist
	members   map[string]Member
	rawMeta   map[string]string // the meta bytes members[id].Meta was decoded from
	forgotten map[string]time.Time
	dirty     bool

	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// OpenOption changes memberlist's configuration just before memberlist
// starts. Tests pass one to put a transport of theirs under gossip (one
// that counts bytes and cuts links).
type OpenOption func(nodeID string, c *memberlist.Config)

// Open starts gossip on cfg.BindAddr. It joins nobody: call Join or JoinRetry.
func Open(cfg Config, opts ...OpenOption) (*Membership, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("cluster: NodeID is required")
	}
	if cfg.Meta.ID == "" {
		cfg.Meta.ID = cfg.NodeID
	}
	if err := validateMeta(cfg.Meta, cfg.NodeID); err != nil {
		return nil, err
	}
	if err := loadVote(&cfg); err != nil {
		return nil, fmt.Errorf("cluster: VoteFile: %w", err)
	}
	metaB, err := encodeMeta(cfg.Meta)
	if err != nil {
		return nil, err
	}
	key, err := GossipKey(cfg.Secret)
	if err != nil {
		return nil, err
	}
	lg := cfg.Logger // the caller's attributes (node, component) are not repeated here
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}

	mc := memberlist.DefaultLANConfig()
	t, ok := cfg.Timing.apply(mc)
	if !ok {
		return nil, fmt.Errorf("cluster: Timing %d is neither LAN nor Local", cfg.Timing)
	}
	mc.Name = cfg.NodeID
	if mc.BindAddr, mc.BindPort, err = splitBind(cfg.BindAddr); err != nil {
		return nil, err
	}
	mc.AdvertisePort = mc.BindPort
	if ip := net.ParseIP(mc.BindAddr); ip.IsUnspecified() && ip.To4() == nil && cfg.Advertise == "" {
		// memberlist picks a private IPv4 for 0.0.0.0 only; for :: it would advertise ::
		return nil, fmt.Errorf("cluster: BindAddr %q binds every IPv6 address: give Advertise, the address other nodes reach", cfg.BindAddr)
	}
	if cfg.Advertise != "" {
		ip, port, err := resolveAdvertise(cfg.Advertise)
		if err != nil {
			return nil, err
		}
		mc.AdvertiseAddr = ip
		if port != 0 {
			mc.AdvertisePort = port
		}
	}
	// A keyring of our own: the cluster secret rotates (SetSecrets).
	kr, err := memberlist.NewKeyring(nil, key)
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip keyring: %w", err)
	}
	mc.Keyring = kr
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	mc.DNSConfigPath = "" // Join resolves names itself and hands memberlist IPs
	mc.Logger = log.New(newMLLogWriter(lg), "", 0)
	for _, o := range opts {
		o(cfg.NodeID, mc)
	}
	guard, err := guardStreams(mc, kr, lg)
	if err != nil {
		return nil, err
	}

	m := &Membership{
		keyring:    kr,
		guard:      guard,
		cfg:        cfg,
		log:        lg,
		t:          t,
		members:    map[string]Member{},
		rawMeta:    map[string]string{},
		forgotten:  map[string]time.Time{},
		wake:       make(chan struct{}, 1),
		announceCh: make(chan time.Time, 1),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	meta := cfg.Meta
	m.localMeta.Store(&meta)
	m.metaBytes.Store(&metaB)
	m.numAlive.Store(1)
	m.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return int(m.numAlive.Load()) },
		RetransmitMult: mc.RetransmitMult,
	}
	d := delegate{m}
	mc.Delegate, mc.Events, mc.Merge, mc.Alive, mc.Conflict = d, d, d, d, d
	m.clocks = &peerClocks{clock: cfg.Clock, by: map[string]PeerClock{}}
	if m.clocks.clock == nil {
		m.clocks.clock = time.Now
	}
	mc.Ping = m.clocks

	ml, err := memberlist.Create(mc)
	if err != nil {
		if m.guard != nil {
			m.guard.Shutdown()
		}
		return nil, fmt.Errorf("cluster: start gossip on %q: %w", cfg.BindAddr, err)
	}
	m.ml = ml
	m.addr = ml.LocalNode().Address() // once: LocalNode's fields change under memberlist's lock later
	if m.reader, err = newStateReader(ml); err != nil || eventsOnly {
		m.reader = nil
		lg.Warn("gossip: suspect and left states unavailable, reporting failures as dead", "err", err)
	}
	m.loadPeers()
	m.refresh()
	m.wg.Add(1)
	go m.announcer()
	go m.loop()
	lg.Info("gossip started", "addr", m.Addr(), "timing", cfg.Timing.String())
	return m, nil
}

// splitBind parses BindAddr: "" and ":7946" bind every address.
func splitBind(s string) (string, int, error) {
	if s == "" {
		return "0.0.0.0", DefaultPort, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("cluster: BindAddr %q: want host:port or :port: %v", s, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("cluster: BindAddr %q: port %q is not a number 0-65535", s, port)
	}
	if host == "" {
		host = "0.0.0.0"
	} else if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("cluster: BindAddr %q: host %q must be an IP address", s, host)
	}
	return host, int(p), nil
}

// resolveAdvertise turns "host" or "host:port" into an IP (IPv4 preferred)
// and a port (0 when none was given).
func resolveAdvertise(s string) (string, int, error) {
	host, port := s, 0
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return "", 0, fmt.Errorf("cluster: Advertise %q: port %q is not a number 1-65535", s, p)
		}
		host, port = h, int(n)
	}
	host = strings.Trim(host, "[]")
	if host == "" {
		return "", 0, fmt.Errorf("cluster: Advertise %q has no host", s)
	}
	ips, err := lookup(context.Background(), host)
	if err != nil {
		return "", 0, fmt.Errorf("cluster: Advertise %q: %w", s, err)
	}
	if ip := ips[0]; ip.IsUnspecified() {
		return "", 0, fmt.Errorf("cluster: Advertise %q is unspecified: give an address other nodes can reach", s)
	}
	return ips[0].String(), port, nil
}

// lookup resolves host (an IP passes through) to its addresses, IPv4 first.
func lookup(ctx context.Context, host string) ([]net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %q: no addresses", host)
	}
	ips := make([]net.IP, len(addrs))
	for i, a := range addrs {
		ips[i] = a.IP
	}
	sort.SliceStable(ips, func(i, j int) bool { return ips[i].To4() != nil && ips[j].To4() == nil })
	return ips, nil
}

// Addr is the advertised gossip host:port.
func (m *Membership) Addr() string { return m.addr }

// Join contacts every address ("host[:port]", default port 7946; a DNS name
// stands for every A/AAAA record behind it) and returns how many answered.
// It fails only when none did, or when the peers hold another cluster's
// state (the error wraps ErrClusterMismatch and names both cluster ids).
func (m *Membership) Join(addrs []string) (int, error) {
	targets, errs := m.resolve(context.Background(), addrs)
	if len(targets) == 0 {
		if len(errs) == 0 {
			return 0, errors.New("cluster: join: no address given")
		}
		return 0, fmt.Errorf("cluster: join: %w", errors.Join(errs...))
	}
	m.evMu.Lock()
	m.mismatch = nil
	m.evMu.Unlock()
	n, err := m.ml.Join(targets)
	m.evMu.Lock()
	mismatch := m.mismatch
	m.evMu.Unlock()
	if n == 0 && mismatch != nil {
		return 0, fmt.Errorf("cluster: refusing to join %s: %w", strings.Join(addrs, ", "), mismatch)
	}
	if n == 0 {
		return 0, fmt.Errorf("cluster: join %s: %s%s", strings.Join(addrs, ", "), oneLine(errors.Join(append(errs, err)...)), joinHint(err))
	}
	if mismatch != nil {
		m.log.Warn("gossip: some join targets belong to another cluster", "err", mismatch)
	}
	m.signal()
	m.reannounce()
	return n, nil
}

// reannounce re-gossips this node's alive message a few times after a join.
// A node restarted under its id on a new address is ignored by peers until
// they declared the old address dead and DeadNodeReclaimTime passed; a
// fresh alive message after that makes them switch at once instead of at
// the next push/pull.
func (m *Membership) reannounce() {
	m.announce(time.Now().Add(m.t.announceEvery * time.Duration(m.t.announceCount)))
}

// announce asks the announcer to gossip the local node's alive message now,
// and then every announceEvery until `until` (a zero time: once).
func (m *Membership) announce(until time.Time) {
	select {
	case m.announceCh <- until:
	default: // the announcer is busy; it announces the latest meta anyway
	}
}

// announcer sends alive messages off the event goroutine: UpdateNode waits
// for the broadcast.
func (m *Membership) announcer() {
	defer m.wg.Done()
	var until time.Time
	t := time.NewTicker(m.t.announceEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case u := <-m.announceCh:
			if u.After(until) {
				until = u
			}
		case now := <-t.C:
			if !now.Before(until) {
				continue
			}
		}
		m.announceMu.Lock()
		if !m.left.Load() {
			_ = m.ml.UpdateNode(m.t.poll) // a timeout only means no ack yet
		}
		m.announceMu.Unlock()
	}
}

// oneLine flattens memberlist's multi-line multierror ("1 error occurred:
// * failed to join …") into one line of the causes.
func oneLine(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "* "))
		if l != "" && !strings.HasSuffix(l, "errors occurred:") && !strings.HasSuffix(l, "error occurred:") {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// refusedErrorAfter is how many consecutive joins refused for another
// cluster secret make the warning an error (about 5 s with LAN timing).
const refusedErrorAfter = 5

// otherSecret says whether a join failed because the peers use another
// cluster secret (or none).
func otherSecret(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no installed keys could decrypt")
}

// joinHint says what to do about the failures whose cause is known.
func joinHint(err error) string {
	switch {
	case otherSecret(err):
		return " (the peers use another cluster secret: give every node the same --cluster-secret-file)"
	case err != nil && strings.Contains(err.Error(), "remote state is not encrypted"):
		// An admin or proxy port answers HTTP, which reads as plain state.
		return " (this looks like another service, an admin or proxy port: --join and tether join take gossip addresses, a node's --gossip-addr, default port 7946)"
	case err != nil && droppedUs(oneLine(err)):
		// A Raft port takes the connection, reads memberlist's bytes as a
		// failed TLS handshake and closes it.
		return " (it took the connection and closed it: is it a node's Raft port, --raft-addr, default 7000? --join and tether join take the gossip address, a node's --gossip-addr, default port 7946)"
	}
	return ""
}

// droppedUs says whether a join failed because the far end closed the
// connection without answering (EOF, or a reset when it closed with our
// bytes unread).
func droppedUs(msg string) bool {
	return strings.Contains(msg, "connection reset by peer") || strings.HasSuffix(msg, ": EOF") || strings.Contains(msg, ": EOF;")
}

// resolve expands join addresses into ip:port targets.
func (m *Membership) resolve(ctx context.Context, addrs []string) ([]string, []error) {
	var out []string
	var errs []error
	seen := map[string]bool{}
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port := a, strconv.Itoa(DefaultPort)
		if h, p, err := net.SplitHostPort(a); err == nil {
			host, port = h, p
		} else if strings.Count(a, ":") > 1 { // bare IPv6
			host = strings.Trim(a, "[]")
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			errs = append(errs, fmt.Errorf("address %q: port %q is not a number 1-65535", a, port))
			continue
		}
		ips, err := lookup(ctx, host)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ip := range ips {
			t := net.JoinHostPort(ip.String(), port)
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out, errs
}

// JoinRetry calls Join every ~1 s (jittered ±25%; faster with Local timing),
// re-resolving names each time, until this node knows at least one other
// alive node or ctx ends. Another cluster's peers end it at once.
func (m *Membership) JoinRetry(ctx context.Context, addrs []string) error {
	refused := 0 // consecutive tries the peers refused for another secret
	for attempt := 0; ; attempt++ {
		_, err := m.Join(addrs)
		if m.ml.NumMembers() > 1 {
			return nil
		}
		if errors.Is(err, ErrClusterMismatch) {
			return err
		}
		if err == nil {
			err = errors.New("only this node answered")
		}
		// A peer not up yet is routine (info); peers that refuse this node
		// for another cluster secret are a mistake (a warning, an error
		// once it lasts). The first failure and then every ~30 s (LAN),
		// besides the step to error, are logged; the rest at debug.
		level := slog.LevelInfo
		if otherSecret(err) {
			refused++
			level = slog.LevelWarn
			if refused >= refusedErrorAfter {
				level = slog.LevelError
			}
		} else {
			refused = 0
		}
		if attempt%30 != 0 && refused != refusedErrorAfter {
			level = slog.LevelDebug
		}
		m.log.Log(context.Background(), level, "gossip: join failed, retrying", "addrs", addrs, "attempt", attempt+1, "err", err)
		if !m.pauseJoin(ctx) {
			return fmt.Errorf("cluster: join %s: %w (last error: %v)", strings.Join(addrs, ", "), ctx.Err(), err)
		}
	}
}

// pauseJoin waits one join-retry period (jittered ±25%); false when ctx
// ended first.
func (m *Membership) pauseJoin(ctx context.Context) bool {
	d := m.t.joinRetry
	d = d*3/4 + rand.N(d/2+1)
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// UpdateMeta changes this node's meta and gossips it. It queues the update
// and waits at most 100 ms for memberlist to finish sending it; the change
// spreads either way (gossip, then push/pull). An unchanged meta is not
// gossiped again.
func (m *Membership) UpdateMeta(fn func(*Meta)) error {
	changed, err := m.setMeta(func(next *Meta) {
		form, phase := next.FormSet, next.FormPhase
		fn(next)
		next.FormSet, next.FormPhase = form, phase // the vote is Membership's
	})
	if err != nil || !changed {
		return err
	}
	m.announceMu.Lock()
	defer m.announceMu.Unlock()
	if m.left.Load() || m.closed.Load() {
		return nil // re-announcing would undo the leave
	}
	if err := m.ml.UpdateNode(m.t.updateTimeout); err != nil {
		m.log.Debug("gossip: meta update not yet acknowledged, push/pull will carry it", "err", err)
	}
	return nil
}

// setMeta changes the local meta (not yet gossiped) and reports whether it
// changed.
func (m *Membership) setMeta(fn func(*Meta)) (bool, error) {
	m.metaLock.Lock()
	defer m.metaLock.Unlock()
	next := *m.localMeta.Load()
	fn(&next)
	if err := validateMeta(next, m.cfg.NodeID); err != nil {
		return false, err
	}
	b, err := encodeMeta(next)
	if err != nil {
		return false, err
	}
	if bytes.Equal(b, *m.metaBytes.Load()) {
		return false, nil
	}
	m.localMeta.Store(&next)
	m.metaBytes.Store(&b)
	m.markDirty()
	return true, nil
}

// vote casts this node's formation vote from the current view (loop only)
// and reports whether it changed.
func (m *Membership) vote() bool {
	self := m.Local()
	if self.Expect <= 0 {
		return false
	}
	members := m.Members()
	set, phase := self.FormSet, self.FormPhase
	for range 3 { // a vote may enable the next step at once (expect 1)
		cur := self
		cur.FormSet, cur.FormPhase = set, phase
		set, phase = formationVote(cur, members, self.Expect)
	}
	if set == self.FormSet && phase == self.FormPhase {
		return false
	}
	if phase == phaseCommitted && m.cfg.VoteFile != "" {
		// on disk before anyone can see it
		next := self.Meta
		next.FormSet, next.FormPhase = set, phase
		_, err := encodeMeta(next)
		if err == nil {
			err = writeVoteFile(m.cfg.VoteFile, set)
		}
		if err != nil {
			if msg := err.Error(); msg != m.voteErr {
				m.voteErr = msg
				m.log.Error("gossip: formation vote not committed", "set", set, "err", err)
			}
			return false
		}
	}
	if set == "" && m.cfg.VoteFile != "" && (self.HasState || self.ClusterID != "") {
		if err := os.Remove(m.cfg.VoteFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("gossip: formation vote file not removed", "err", err)
		}
	}
	changed, err := m.setMeta(func(next *Meta) { next.FormSet, next.FormPhase = set, phase })
	if err != nil {
		if msg := err.Error(); msg != m.voteErr {
			m.voteErr = msg
			m.log.Error("gossip: formation vote cannot be gossiped", "set", set, "err", err)
		}
		return false
	}
	if changed {
		m.log.Debug("gossip: formation vote", "set", set, "phase", phase)
		m.announce(time.Time{})
	}
	return changed
}

// HealthScore is memberlist's view of how well this node keeps up with the
// protocol's deadlines: 0 is healthy, higher means its probes run late (a
// loaded machine) and it has slowed down its own suspicion of others.
func (m *Membership) HealthScore() int { return m.ml.GetHealthScore() }

// Local is this node as a Member.
func (m *Membership) Local() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	me := m.members[m.cfg.NodeID]
	me.Meta = *m.localMeta.Load()
	return me
}

// NodeID is this node's id (Config.NodeID).
func (m *Membership) NodeID() string { return m.cfg.NodeID }

// PollInterval is how often the event loop re-reads memberlist's states to
// see suspicion (Timing).
func (m *Membership) PollInterval() time.Duration { return m.t.poll }

// Members returns every member known, including dead and left ones until
// Forget, sorted by ID.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for id, x := range m.members {
		if id == m.cfg.NodeID {
			x.Meta = *m.localMeta.Load()
		}
		out = append(out, x)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Forget drops the record of a dead or left member (once the leader removed
// it from Raft). Alive members and this node are kept.
func (m *Membership) Forget(id string) {
	m.mu.Lock()
	x, ok := m.members[id]
	if ok && id != m.cfg.NodeID && !x.Alive() {
		delete(m.members, id)
		delete(m.rawMeta, id)
		m.forgotten[id] = time.Now()
		m.dirty = true
	}
	m.mu.Unlock()
	m.signal()
}

// Leave announces that this node leaves, waiting up to timeout for the
// announcement to go out. Gossip keeps running until Shutdown.
func (m *Membership) Leave(timeout time.Duration) error {
	m.announceMu.Lock() // held through the leave: Shutdown waits for it
	if m.closed.Load() {
		m.announceMu.Unlock()
		return errors.New("cluster: leave after shutdown")
	}
	m.left.Store(true)
	err := m.ml.Leave(timeout)
	m.announceMu.Unlock()
	m.signal()
	if err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	return nil
}

// Shutdown stops gossip at once, without a leave announcement when Leave
// was not called: peers see this node fail.
func (m *Membership) Shutdown() error {
	var err error
	m.stopOnce.Do(func() {
		m.announceMu.Lock()
		m.closed.Store(true)
		m.announceMu.Unlock()
		close(m.stop)
		m.wg.Wait()
		<-m.done
		err = m.ml.Shutdown()
	})
	return err
}

// Watch adds fn to the calls made after OnChange, from the same event
// goroutine and under the same rules (never concurrent, never from a
// memberlist callback): for users of the membership other than the node,
// such as the health gossip, which must re-choose probers when members
// come and go.
func (m *Membership) Watch(fn func()) {
	m.watchMu.Lock()
	defer m.watchMu.Unlock()
	m.watchers = append(m.watchers[:len(m.watchers):len(m.watchers)], fn)
}

// Register plugs a Handler for tag's messages and push/pull state
// (the destination health gossip). Tag 0 is reserved.
func (m *Membership) Register(tag byte, h Handler) error { return m.handlers.register(tag, h) }

// Broadcast gossips msg under tag to every node, replacing a queued broadcast
// of the same tag and name that has not been fully sent yet.
func (m *Membership) Broadcast(tag byte, name string, msg []byte) error {
	if tag == 0 {
		return errTagZero
	}
	if len(msg) > MaxBroadcast {
		return fmt.Errorf("cluster: broadcast %q is %d bytes, at most %d fit a gossip packet", name, len(msg), MaxBroadcast)
	}
	b := make([]byte, 0, len(msg)+1)
	b = append(append(b, tag), msg...)
	m.queue.QueueBroadcast(&broadcast{name: string([]byte{tag}) + name, msg: b})
	return nil
}

// Send delivers msg under tag to one member, not by gossip: over TCP when
// reliable (any size; returns once written), else in one UDP packet (at
// most MaxBroadcast bytes, may be lost).
func (m *Membership) Send(id string, tag byte, msg []byte, reliable bool) error {
	if tag == 0 {
		return errTagZero
	}
	m.mu.Lock()
	x, ok := m.members[id]
	m.mu.Unlock()
	if !ok || !x.Alive() {
		return fmt.Errorf("cluster: send to %q: not an alive member", id)
	}
	if !reliable && len(msg) > MaxBroadcast {
		return fmt.Errorf("cluster: send to %q: %d bytes do not fit a UDP packet (at most %d)", id, len(msg), MaxBroadcast)
	}
	host, port, err := net.SplitHostPort(x.Addr)
	if err != nil {
		return fmt.Errorf("cluster: send to %q: address %q: %w", id, x.Addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("cluster: send to %q: address %q: bad port", id, x.Addr)
	}
	// our own copy: memberlist's Nodes change under its lock
	to := &memberlist.Node{Name: id, Addr: net.ParseIP(host), Port: uint16(p)}
	b := append([]byte{tag}, msg...)
	if reliable {
		err = m.ml.SendReliable(to, b)
	} else {
		err = m.ml.SendBestEffort(to, b)
	}
	if err != nil {
		return fmt.Errorf("cluster: send to %q: %w", id, err)
	}
	return nil
}

// admit refuses a peer whose meta does not parse, names another node, or
// carries another cluster id than this node's (when both have one). It runs
// inside memberlist callbacks: no blocking, no memberlist calls.
func (m *Membership) admit(p *memberlist.Node) error {
	if p.Name == m.cfg.NodeID {
		return nil
	}
	meta, err := decodeMeta(p.Meta)
	if err != nil {
		return fmt.Errorf("node %q: %w", p.Name, err)
	}
	if meta.ID != "" && meta.ID != p.Name {
		return fmt.Errorf("node %q advertises id %q", p.Name, meta.ID)
	}
	local := m.localMeta.Load().ClusterID
	if local == "" || meta.ClusterID == "" || meta.ClusterID == local {
		return nil
	}
	err = fmt.Errorf("node %q belongs to cluster %q, this node to cluster %q: %w",
		p.Name, meta.ClusterID, local, ErrClusterMismatch)
	m.evMu.Lock()
	if m.mismatch == nil {
		m.mismatch = err
	}
	m.evMu.Unlock()
	return err
}

// event records a memberlist event; the loop applies it. Never blocks.
func (m *Membership) event(n *memberlist.Node, s State) {
	m.evMu.Lock()
	m.events = append(m.events, nodeObs{
		name:  n.Name,
		addr:  n.Address(),
		meta:  append([]byte(nil), n.Meta...),
		state: s,
		since: time.Now(),
	})
	m.evMu.Unlock()
	m.signal()
}

func (m *Membership) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *Membership) markDirty() {
	m.mu.Lock()
	m.dirty = true
	m.mu.Unlock()
	m.signal()
}

// loop is the single event goroutine: it applies events and memberlist's
// states to the member table and calls OnChange after a change.
func (m *Membership) loop() {
	defer close(m.done)
	tick := time.NewTicker(m.t.poll)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.wake:
		case <-tick.C:
		}
		changed := m.refresh()
		if m.vote() {
			m.refresh()
			changed = true
		}
		if changed {
			m.savePeers()
			if m.cfg.OnChange != nil {
				m.cfg.OnChange()
			}
			m.watchMu.Lock()
			ws := m.watchers
			m.watchMu.Unlock()
			for _, w := range ws {
				w()
			}
		}
	}
}

// refresh folds pending events, then memberlist's own states, into the
// member table, and reports whether anything but timestamps changed.
func (m *Membership) refresh() bool {
	m.evMu.Lock()
	events := m.events
	m.events = nil
	m.evMu.Unlock()
	var states []nodeObs
	if m.reader != nil {
		states = m.reader.read() // memberlist's lock: not under m.mu
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	changed := m.dirty
	m.dirty = false
	for _, o := range events {
		changed = m.apply(o, false) || changed
	}
	for _, o := range states {
		changed = m.apply(o, true) || changed
	}
	self := m.members[m.cfg.NodeID]
	if m.left.Load() && self.State != StateLeft {
		self.State, self.Since = StateLeft, time.Now()
		m.members[m.cfg.NodeID] = self
		changed = true
	}
	alive := int32(0)
	for _, x := range m.members {
		if x.Alive() {
			alive++
		}
	}
	m.numAlive.Store(max(alive, 1))
	return changed
}

// apply merges one observation; exact observations come from memberlist's
// state (their time is memberlist's), others from events.
func (m *Membership) apply(o nodeObs, exact bool) bool {
	if o.name == m.cfg.NodeID {
		if m.left.Load() {
			o.state = StateLeft
		}
		o.meta = nil // the local meta is authoritative
	}
	if at, ok := m.forgotten[o.name]; ok {
		if !(o.state == StateAlive || o.state == StateSuspect) || (exact && !o.since.After(at)) {
			return false
		}
		delete(m.forgotten, o.name)
	}
	old, had := m.members[o.name]
	x := old
	x.Addr = o.addr
	if o.name != m.cfg.NodeID {
		if raw := string(o.meta); !had || raw != m.rawMeta[o.name] { // decode (and warn) once per change
			meta, err := decodeMeta(o.meta)
			if err != nil {
				m.log.Warn("gossip: member meta does not parse", "node", o.name, "err", err)
				meta = Meta{}
			}
			meta.ID = o.name
			x.Meta = meta
			m.rawMeta[o.name] = raw
		}
	} else {
		x.Meta = Meta{ID: o.name}
	}
	if !exact && had && old.State == StateLeft && o.state == StateDead {
		o.state = StateLeft // an event cannot tell left from dead; keep what memberlist said
	}
	if !had || x.State != o.state {
		x.State, x.Since = o.state, o.since
	} else if exact {
		x.Since = o.since
	}
	m.members[o.name] = x
	return !had || old.State != x.State || old.Addr != x.Addr || old.Meta != x.Meta
}
