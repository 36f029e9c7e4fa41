package node

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

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
	for _, m := range c.n.table.views() {
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

// storeHealthCollector reports what keeps the replicated state from being
// held durably or applied: a disk that cannot persist, an entry this
// binary cannot apply.
type storeHealthCollector struct {
	n                           *Node
	persisting, failures, stops *prometheus.Desc
}

func newStoreHealthCollector(n *Node) *storeHealthCollector {
	return &storeHealthCollector{
		n: n,
		persisting: prometheus.NewDesc("tether_raft_persist_failing",
			"1 while this node cannot write its Raft state to disk (snapshots fail: disk full, read-only, gone).", nil, nil),
		failures: prometheus.NewDesc("tether_raft_persist_failures_total", "Failed tries to write this node's Raft state to disk.", nil, nil),
		stops: prometheus.NewDesc("tether_raft_stopped_index",
			"The Raft entry this node stopped applying at because it needs a newer tether (0: none).", nil, nil),
	}
}

func (c *storeHealthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.persisting
	ch <- c.failures
	ch <- c.stops
}

func (c *storeHealthCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.store
	if st == nil {
		return
	}
	pf, failures := st.PersistFailure()
	v := 0.0
	if pf != nil {
		v = 1
	}
	stop, _ := st.Stopped()
	ch <- prometheus.MustNewConstMetric(c.persisting, prometheus.GaugeValue, v)
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(failures))
	ch <- prometheus.MustNewConstMetric(c.stops, prometheus.GaugeValue, float64(stop))
}

// storeWarnings are what /readyz says beside "ready": the node serves from
// its local state, but cannot hold it durably (a restart without a quorum
// would lose what it applied since).
func (n *Node) storeWarnings() []string {
	if pf, _ := n.store.PersistFailure(); pf != nil {
		return []string{fmt.Sprintf("cannot persist Raft state since %s: %s", pf.Since.UTC().Format(time.RFC3339), pf.Err)}
	}
	return nil
}
