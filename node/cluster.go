package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/node/keyshare"
	"github.com/tether-proxy/tether/node/leader"
	"github.com/tether-proxy/tether/node/secrets"
	"github.com/tether-proxy/tether/store"
)

// Defaults of the cluster flags (docs/CONFIGURATION.md, "The agent's command line").
const (
	DefaultRaftAddr    = ":7000"
	DefaultGossipAddr  = ":7946"
	DefaultReapTimeout = 72 * time.Hour
	DefaultVoterGrace  = cluster.DefaultVoterGrace
	DefaultRaftVoters  = 5
)

// Timings of the node's own cluster work.
const (
	// formationInterval is how often a forming node looks at who it sees.
	formationInterval = 500 * time.Millisecond
	// The leader's timings (node/leader).
	leaderInterval    = leader.Interval
	activationWait    = leader.ActivationWait
	pendingActivation = leader.PendingActivation
	// leaveWait bounds a graceful leave's wait for the leader to drop this
	// node from the Raft configuration.
	leaveWait = 10 * time.Second
)

// gossipTiming picks memberlist's profile.
func (c *Config) gossipTiming() cluster.Timing {
	if c.FastTimings {
		return cluster.Local
	}
	return cluster.LAN
}

// clustered reports whether the node was asked to form or join a cluster.
func (c *Config) clustered() bool { return len(c.Join) > 0 || c.BootstrapExpect > 0 }

// checkClusterFlags validates the cluster flags and fills their defaults.
func (c *Config) checkClusterFlags() error {
	if c.clustered() && c.ClusterSecretFile == "" {
		return errors.New("--join and --bootstrap-expect need --cluster-secret-file: every node of a cluster must share one secret (e.g. `openssl rand -hex 32 > secret`)")
	}
	if c.BootstrapExpect < 0 {
		return fmt.Errorf("--bootstrap-expect %d: must be 0 or more", c.BootstrapExpect)
	}
	if c.RaftVoters == 0 {
		c.RaftVoters = DefaultRaftVoters
	}
	if c.RaftVoters < 1 || c.RaftVoters%2 == 0 {
		return fmt.Errorf("--raft-voters %d: must be a positive odd number (an even count adds no fault tolerance)", c.RaftVoters)
	}
	if c.BootstrapExpect > c.RaftVoters {
		return fmt.Errorf("--bootstrap-expect %d is more than --raft-voters %d: the nodes that form the cluster are its first voters", c.BootstrapExpect, c.RaftVoters)
	}
	if c.ReapTimeout == 0 {
		c.ReapTimeout = DefaultReapTimeout
	}
	if c.ReapTimeout < 0 {
		return fmt.Errorf("--reap-timeout %s: must be positive", c.ReapTimeout)
	}
	if c.VoterGrace == 0 {
		c.VoterGrace = DefaultVoterGrace
	}
	if c.VoterGrace < 0 {
		return fmt.Errorf("--voter-grace %s: must be positive", c.VoterGrace)
	}
	if c.RaftAddr == "" {
		c.RaftAddr = DefaultRaftAddr
	}
	if c.GossipAddr == "" {
		c.GossipAddr = DefaultGossipAddr
	}
	n := 0
	for _, f := range []string{c.TLSCert, c.TLSKey, c.TLSCA} {
		if f != "" {
			n++
		}
	}
	if n != 0 && n != 3 {
		return errors.New("--tls-cert, --tls-key and --tls-ca go together: give all three or none")
	}
	for _, a := range []struct{ flag, v string }{{"--raft-addr", c.RaftAddr}, {"--gossip-addr", c.GossipAddr}} {
		if _, port, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%s %q: want host:port or :port", a.flag, a.v)
		} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return fmt.Errorf("%s %q: bad port", a.flag, a.v)
		}
	}
	return nil
}

// openCluster opens the replicated store and, when the node has a cluster
// secret, gossip. A node without a secret is a cluster of one that nobody
// can join: its Raft listens on loopback only and it runs no gossip.
func (n *Node) openCluster() error {
	gossip := n.cfg.ClusterSecretFile != ""
	secret, err := secrets.Load(n.cfg.ClusterSecretFile, n.cfg.DataDir, n.log)
	if err != nil {
		return err
	}
	if n.keeper, err = secrets.Open(n.cfg.DataDir, n.cfg.ClusterSecretFile, secret, n.log); err != nil {
		return err
	}
	n.secrets = n.keeper.Secrets()
	n.ring = keyring.NewRing(keyring.Options{})

	if gossip {
		n.members, err = cluster.Open(cluster.Config{
			NodeID:    n.cfg.NodeID,
			BindAddr:  n.cfg.GossipAddr,
			Advertise: n.cfg.Advertise,
			Secret:    n.secrets.Primary(),
			Meta: cluster.Meta{
				ID:        n.cfg.NodeID,
				AdminAddr: n.addrs.admin(),
				Version:   Version,
				Expect:    n.cfg.BootstrapExpect,
				Voters:    n.cfg.RaftVoters,
				Tickets:   keyshare.SchemeAdvertised(n.legacyTickets),
			},
			Timing:    n.cfg.gossipTiming(),
			Clock:     n.clock.Wall,
			Logger:    n.log.With("component", "gossip"),
			VoteFile:  filepath.Join(n.cfg.DataDir, "formation-vote"),
			PeersFile: filepath.Join(n.cfg.DataDir, "gossip-peers"),
			OnChange:  n.membershipChanged,
			// Another live process under this id (idconflict.go).
			OnIDConflict: n.idClaims.offer,
		})
		if err != nil {
			return fmt.Errorf("gossip on %s: %w", n.cfg.GossipAddr, err)
		}
		n.addrs.gossip = n.members.Addr()
		n.keeper.UseGossip(n.members, n.fillStateMeta)
		n.durables = durableReports{self: n.cfg.NodeID, members: n.members, wake: n.wakeLeader, log: n.log}
		if err := n.members.Register(durableTag, cluster.Handler{Msg: n.durables.receive}); err != nil {
			return fmt.Errorf("gossip: %w", err)
		}
		if err := n.members.SetSecrets(n.secrets.Primary(), n.secrets.Accepted()); err != nil {
			return fmt.Errorf("gossip: %w", err)
		}
	}
	if err := n.openKeyShare(secret); err != nil {
		return fmt.Errorf("gossip: %w", err)
	}

	raftBind, advertise := "127.0.0.1:0", ""
	if gossip {
		raftBind, advertise = n.cfg.RaftAddr, n.addrs.raft()
	}
	var tlsFiles *store.TLSFiles
	if n.cfg.TLSCert != "" {
		tlsFiles = &store.TLSFiles{CertFile: n.cfg.TLSCert, KeyFile: n.cfg.TLSKey, CAFile: n.cfg.TLSCA}
	}
	timing := store.LANTiming()
	// A node alone has no peer to mistake for dead: fast timings cost
	// nothing. With peers, Raft keeps LAN timings even in tests: shorter
	// ones cause spurious elections on a loaded 2-core machine.
	if !gossip {
		timing = store.FastTiming()
	}
	n.store, err = store.Open(store.Config{
		NodeID:    n.cfg.NodeID,
		Dir:       filepath.Join(n.cfg.DataDir, "raft"),
		BindAddr:  raftBind,
		Advertise: advertise,
		Secrets:   n.secrets,
		TLS:       tlsFiles,
		Ring:      n.ring,
		Timing:    timing,
		Commands:  n.commands,
		Logger:    n.log.With("component", "raft"),
		Resolve:   raftAddrResolver(n.members),
	})
	if err != nil {
		return fmt.Errorf("raft on %s: %w", raftBind, err)
	}
	n.store.SetLegacyHandshake(raftV1Allowed(n))
	n.table = &memberTable{self: n.cfg.NodeID, store: n.store, members: n.members, adminAddr: n.adminLn.Addr().String(), reapTimeout: n.cfg.ReapTimeout, config: n.clusterCfg.get}
	n.lead = n.newLeader()
	n.table.lead = n.lead
	// Restoring the state may have changed the secrets: in step before
	// anything is served.
	n.keeper.Apply()
	if n.members != nil {
		n.store.SetCommandGate(n.lead.CommandGate)
		if err := n.members.UpdateMeta(func(m *cluster.Meta) {
			m.RaftAddr = n.store.Addr()
			n.fillStateMeta(m)
		}); err != nil {
			return fmt.Errorf("gossip: %w", err)
		}
	}
	return nil
}

// raftAddrResolver is the store's Config.Resolve: the Raft address a
// member gossips for itself, so Raft reaches a voter that came back on a
// new address before a leader writes it into the configuration (a leader
// may need that voter's vote first; store/DESIGN.md, "Addresses"). Only an
// alive or suspect member counts, and an address two members claim counts
// for neither; anything else, and a member whose metadata has not arrived
// yet, is unknown: Raft dials the configuration's address. Nil without
// gossip.
func raftAddrResolver(members *cluster.Membership) func(string) (string, bool) {
	if members == nil {
		return nil
	}
	return func(id string) (string, bool) {
		addr := ""
		ms := members.Members()
		for _, m := range ms {
			if m.ID == id && m.Alive() {
				addr = m.RaftAddr
			}
		}
		if addr == "" {
			return "", false
		}
		for _, m := range ms {
			if m.ID != id && m.Alive() && m.RaftAddr == addr {
				return "", false
			}
		}
		return addr, true
	}
}

// fillStateMeta puts the store's state into gossip metadata.
func (n *Node) fillStateMeta(m *cluster.Meta) {
	m.ClusterID = n.store.ClusterID()
	m.HasState = n.store.HadState() || n.store.AppliedIndex() > 0
	m.Durable = n.store.DurableIndex()
	m.Commands = string(n.store.Commands())
	now := n.clock.Wall().Unix()
	m.Clock, m.ClockMin = now/3600, now/60
	pf, _ := n.store.PersistFailure()
	m.NoPersist = pf != nil
	m.Stopped, _ = n.store.Stopped()
	m.Fanout = n.fanoutDigest()
	m.Secrets = strings.Join(n.secrets.AcceptedIDs(), ",")
	m.RaftAuth = secrets.RaftHandshakeVersion
	m.ConfigVersion, m.ConfigError = n.configMeta()
	fitConfigError(m)
}

// form brings the node into a cluster: a node with Raft state simply runs
// (and rejoins gossip); a new node bootstraps alone, forms a cluster with
// --bootstrap-expect peers, or waits to be added by the leader.
func (n *Node) form(ctx context.Context) {
	defer n.bg.Done()
	if n.members != nil && len(n.cfg.Join) > 0 {
		go func() {
			if err := n.members.JoinRetry(ctx, n.cfg.Join); err != nil && ctx.Err() == nil {
				n.log.Error("joining gossip failed", "join", n.cfg.Join, "error", err)
				if errors.Is(err, cluster.ErrClusterMismatch) {
					n.fail(fmt.Errorf("refusing to join %v: %w", n.cfg.Join, err))
				}
			}
		}()
	}
	if n.store.HadState() {
		// A restarted member contacts the peers it last saw, whether or
		// not it has --join: others may no longer gossip to it, and the
		// join's state exchange brings the whole membership at once.
		if n.members != nil {
			go func() {
				if err := n.members.Rejoin(ctx); err != nil && ctx.Err() == nil {
					n.log.Warn("rejoining the known peers failed", "error", err)
				}
			}()
		}
		return
	}
	self := store.Server{ID: n.cfg.NodeID, Address: n.store.Addr(), Voter: true}
	switch {
	case n.members == nil || !n.cfg.clustered():
		if err := n.store.Bootstrap([]store.Server{self}); err != nil {
			n.fail(fmt.Errorf("bootstrapping a single-node cluster: %w", err))
			return
		}
		n.log.Info("bootstrapped a single-node cluster")
	case n.cfg.BootstrapExpect > 0:
		t := time.NewTicker(formationInterval)
		defer t.Stop()
		for {
			if id, _ := n.store.Leader(); id != "" || n.store.AppliedIndex() > 0 {
				return // added to (or formed) a cluster
			}
			set, ok := cluster.BootstrapSet(n.members.Local(), n.members.Members(), n.cfg.BootstrapExpect)
			if ok {
				servers := make([]store.Server, 0, len(set))
				ids := make([]string, 0, len(set))
				for _, m := range set {
					servers = append(servers, store.Server{ID: m.ID, Address: m.RaftAddr, Voter: true})
					ids = append(ids, m.ID)
				}
				if err := n.store.Bootstrap(servers); err != nil {
					n.log.Error("bootstrap failed", "servers", ids, "error", err)
				} else {
					n.log.Info("bootstrapped the cluster", "servers", ids)
					_ = n.members.UpdateMeta(n.fillStateMeta)
				}
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	default:
		n.log.Info("waiting to be added to the cluster by its leader", "join", n.cfg.Join)
	}
}

// fail reports a fatal error found after Start returned: the agent stops.
func (n *Node) fail(err error) {
	n.log.Error("stopping: " + err.Error())
	n.failOnce.Do(func() {
		n.failErr = err
		close(n.failed)
	})
}

// Done is closed when the node asks to be stopped: it left the cluster
// (tether leave) or hit a fatal error after start (Err says which).
func (n *Node) Done() <-chan struct{} { return n.failed }

// Err is why Done was closed; nil after a graceful leave.
func (n *Node) Err() error {
	select {
	case <-n.failed:
		return n.failErr
	default:
		return nil
	}
}

// watchStore applies replicated state to the data path and gossips this
// node's progress whenever the FSM changes.
func (n *Node) watchStore(ctx context.Context) {
	defer n.bg.Done()
	var lastMeta cluster.Meta
	for {
		n.applyDrains()
		n.applyClusterConfig()
		n.ev.noteChange()
		n.table.forgetRemoved()
		if n.members != nil {
			var m cluster.Meta
			n.fillStateMeta(&m)
			if m.Durable != lastMeta.Durable {
				to, _ := n.store.Leader()
				n.durables.report(to, m.Durable)
			}
			if m.ClusterID != lastMeta.ClusterID || m.HasState != lastMeta.HasState || m.Durable != lastMeta.Durable || m.Clock != lastMeta.Clock || m.ClockMin != lastMeta.ClockMin || m.NoPersist != lastMeta.NoPersist || m.Stopped != lastMeta.Stopped || m.Fanout != lastMeta.Fanout ||
				m.ConfigVersion != lastMeta.ConfigVersion || m.ConfigError != lastMeta.ConfigError {
				if err := n.members.UpdateMeta(n.fillStateMeta); err != nil {
					n.log.Warn("gossiping node state failed", "error", err)
				} else {
					lastMeta = m
				}
			}
		}
		n.wakeLeader()
		// The durable index moves when the snapshot after a change lands
		// (a key's activation waits for it); the slow poll is a backstop.
		select {
		case <-ctx.Done():
			return
		case <-n.store.Changed():
		case <-n.store.DurableChanged():
		case <-n.clusterCfg.changed:
		case <-time.After(leaderInterval):
		}
	}
}

// applyDrains makes the data path's drain state the replicated one.
func (n *Node) applyDrains() {
	drains := map[[2]string]time.Time{}
	for _, d := range n.store.Drains() {
		drains[[2]string{d.Cluster, d.Destination}] = d.Deadline
	}
	n.proxy.ApplyDrains(func(clusterID, destID string) (time.Time, bool) {
		t, ok := drains[[2]string{clusterID, destID}]
		return t, ok
	})
}

// membershipChanged runs on gossip's event goroutine: the leader has work,
// and who probes what may have moved.
func (n *Node) membershipChanged() {
	n.wakeLeader()
	n.ev.noteChange()
	if sh := n.healthReady.Load(); sh != nil {
		sh.applyAll()
	}
}

func (n *Node) wakeLeader() {
	select {
	case n.leaderWake <- struct{}{}:
	default:
	}
}
