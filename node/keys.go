package node

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/keyring"
)

// keyringCollector exports keyring figures (never material).
type keyringCollector struct {
	n        *Node
	keys     *prometheus.Desc
	active   *prometheus.Desc
	lag      *prometheus.Desc
	laggards *prometheus.Desc
}

func newKeyringCollector(n *Node) *keyringCollector {
	return &keyringCollector{
		n:      n,
		keys:   prometheus.NewDesc("tether_keyring_keys", "Keys in the keyring by state.", []string{"state"}, nil),
		active: prometheus.NewDesc("tether_keyring_active_key_expires_timestamp_seconds", "When the active key expires (Unix time).", nil, nil),
		lag: prometheus.NewDesc("tether_keyring_pending_activation_seconds",
			"On the leader: how long the oldest installed key has waited for every member to hold it (0: none waits).", nil, nil),
		laggards: prometheus.NewDesc("tether_keyring_activation_laggards",
			"On the leader: members (alive, suspect or failed) that do not hold an installed key yet.", nil, nil),
	}
}

func (c *keyringCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.active
	ch <- c.lag
	ch <- c.laggards
}

func (c *keyringCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.ring == nil {
		return
	}
	now := time.Now()
	counts := map[string]int{}
	for _, s := range []keyring.State{keyring.Installed, keyring.Active, keyring.Inactive, keyring.Expired, keyring.Revoked} {
		counts[s.String()] = 0
	}
	activeID := c.n.ring.ActiveKeyID(now)
	for _, md := range c.n.ring.List(now) {
		counts[md.State.String()]++
		if md.ID == activeID {
			ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(md.Expires.Unix()))
		}
	}
	for state, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(v), state)
	}
	c.n.lead.mu.Lock()
	lag, laggards := c.n.lead.lag, c.n.lead.laggards
	c.n.lead.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, lag.Seconds())
	ch <- prometheus.MustNewConstMetric(c.laggards, prometheus.GaugeValue, float64(laggards))
}

// clusterCollector exports Raft and gossip figures.
type clusterCollector struct {
	n             *Node
	state         *prometheus.Desc
	leaderChanges *prometheus.Desc
	applied       *prometheus.Desc
	commit        *prometheus.Desc
	members       *prometheus.Desc
	voters        *prometheus.Desc
}

func newClusterCollector(n *Node) *clusterCollector {
	return &clusterCollector{
		n:             n,
		state:         prometheus.NewDesc("tether_raft_state", "1 for this node's Raft state (Leader, Follower, Candidate, Shutdown).", []string{"state"}, nil),
		leaderChanges: prometheus.NewDesc("tether_raft_leader_changes_total", "Leader changes this node observed.", nil, nil),
		applied:       prometheus.NewDesc("tether_raft_applied_index", "Last Raft index applied to this node's state.", nil, nil),
		commit:        prometheus.NewDesc("tether_raft_commit_index", "Last Raft index this node knows committed.", nil, nil),
		members:       prometheus.NewDesc("tether_cluster_members", "Gossip members by state (alive, suspect, dead, left).", []string{"state"}, nil),
		voters:        prometheus.NewDesc("tether_raft_servers", "Servers in the Raft configuration by role (voter, nonvoter).", []string{"role"}, nil),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.state, c.leaderChanges, c.applied, c.commit, c.members, c.voters} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.store
	if st == nil {
		return
	}
	cur := st.State()
	for _, s := range []string{"Leader", "Follower", "Candidate", "Shutdown"} {
		v := 0.0
		if s == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, s)
	}
	ch <- prometheus.MustNewConstMetric(c.leaderChanges, prometheus.CounterValue, float64(st.LeaderChanges()))
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, float64(st.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(c.commit, prometheus.GaugeValue, float64(st.CommitIndex()))
	counts := map[string]int{"alive": 0, "suspect": 0, "dead": 0, "left": 0}
	for _, m := range c.n.memberViews() {
		counts[m.State]++
	}
	for s, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(v), s)
	}
	if servers, err := st.Servers(); err == nil {
		voters, non := 0, 0
		for _, s := range servers {
			if s.Voter {
				voters++
			} else {
				non++
			}
		}
		ch <- prometheus.MustNewConstMetric(c.voters, prometheus.GaugeValue, float64(voters), "voter")
		ch <- prometheus.MustNewConstMetric(c.voters, prometheus.GaugeValue, float64(non), "nonvoter")
	}
}

// keyView is one key as GET /v1/keyring shows it. An installed key carries
// a placeholder activation time far ahead until the leader activates it
// (once every alive member holds it durably, or after activationWait);
// Pending says what it actually waits for.
type keyView struct {
	keyring.Metadata
	Pending string `json:"pending,omitempty"`
}

// keyViewsOf lists the keys of a listing with, for each installed key, what
// its activation waits for as this node sees it.
func (n *Node) keyViewsOf(mds []keyring.Metadata, now time.Time) []keyView {
	out := make([]keyView, 0, len(mds))
	for _, md := range mds {
		v := keyView{Metadata: md}
		if md.State == keyring.Installed {
			v.Pending = n.pendingReason(md.ID, now)
		}
		out = append(out, v)
	}
	return out
}

// pendingReason says what an installed key's activation waits for. The
// leader knows the index the key needs and how long it has waited; another
// node compares the members' gossiped durable indexes with what it has
// applied itself, which is at least what the key needs.
func (n *Node) pendingReason(id string, now time.Time) string {
	index, left := n.store.AppliedIndex(), time.Duration(-1)
	if n.store.IsLeader() {
		n.lead.mu.Lock()
		p, ok := n.lead.pending[id]
		n.lead.mu.Unlock()
		if ok {
			index, left = p.index, max(activationWait-now.Sub(p.since), 0)
		}
	}
	lacking, failed := n.keyLaggards(index)
	// The leader committed the key, so it holds it: its durable index,
	// gossiped a moment later (or, on the leader, its own snapshot being
	// written), is no wait worth naming.
	if leader, _ := n.store.Leader(); leader != "" {
		lacking = slices.DeleteFunc(lacking, func(id string) bool { return id == leader })
	}
	switch {
	case len(lacking) == 0 && len(failed) == 0:
		return "every member holds it: activates within a second"
	case len(lacking) > 0:
		// Alive or suspect members hold the activation up for as long as they lack it.
		return fmt.Sprintf("waiting for members: %s", strings.Join(lacking, ", "))
	case left >= 0:
		return fmt.Sprintf("waiting for failed members: %s (passed over in at most %s)", strings.Join(failed, ", "), left.Round(time.Second))
	default:
		return fmt.Sprintf("waiting for failed members: %s (passed over after %s)", strings.Join(failed, ", "), activationWait)
	}
}
