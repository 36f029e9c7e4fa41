package node

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/cluster/healthgossip"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/health"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// healthTag is the gossip tag of health verdicts.
const healthTag = 'h'

// sharedHealth joins this node's probes to the cluster's: its verdicts go
// out by gossip, the destinations take the cluster view (the majority of
// each one's current probers), and only ProbeFanout nodes probe each.
type sharedHealth struct {
	n      *Node
	gossip *healthgossip.Health
	// fanout maps a cluster id to its ProbeFanout; swapped on reload (the
	// probe goroutines read it without the reload lock).
	fanout atomic.Pointer[map[string]int]
	lag    prometheus.Histogram
}

var _ health.Observer = (*sharedHealth)(nil)

func (n *Node) openHealth() error {
	if n.members == nil {
		return nil // alone: the local observer is the cluster view
	}
	sh := &sharedHealth{n: n, lag: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tether_health_gossip_lag_seconds",
		Help:    "Time from another prober's verdict to this node hearing it.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	})}
	g, err := healthgossip.New(n.members, healthTag, healthgossip.Options{
		Logger:   n.log.With("component", "health-gossip"),
		OnChange: sh.apply,
		OnLag:    func(d time.Duration) { sh.lag.Observe(d.Seconds()) },
	})
	if err != nil {
		return err
	}
	sh.gossip = g
	n.health = sh
	return nil
}

// setFanouts records every cluster's ProbeFanout (at start and reload).
func (sh *sharedHealth) setFanouts(cfg *config.Config) {
	m := map[string]int{}
	for id, c := range cfg.ReverseProxy.Clusters {
		if c != nil {
			m[id] = c.HealthCheck.Active.ProbeFanout
		}
	}
	sh.fanout.Store(&m)
}

func (sh *sharedHealth) fanoutOf(clusterID string) int {
	if m := sh.fanout.Load(); m != nil {
		if f := (*m)[clusterID]; f > 0 {
			return f
		}
	}
	return 3
}

// ShouldProbe: this node is among the destination's probers.
func (sh *sharedHealth) ShouldProbe(clusterID, destID string) bool {
	return sh.gossip.ShouldProbe(clusterID, destID, sh.fanoutOf(clusterID))
}

// Observe takes this node's verdict: local health at once, then gossip,
// then the cluster view.
func (sh *sharedHealth) Observe(clusterID, destID string, h upstream.Health) {
	if d := sh.destination(clusterID, destID); d != nil && d.LocalHealth() != h {
		d.SetLocalHealth(h)
		sh.n.ev.noteChange()
	}
	sh.gossip.Report(clusterID, destID, toVerdict(h))
	sh.apply(clusterID, destID)
}

// apply sets a destination's health to the cluster view, or to this
// node's own verdict when the probers have no majority.
func (sh *sharedHealth) apply(clusterID, destID string) {
	d := sh.destination(clusterID, destID)
	if d == nil {
		return
	}
	v := sh.gossip.Effective(clusterID, destID, sh.fanoutOf(clusterID))
	if h := fromVerdict(v); d.ActiveHealth() != h {
		d.SetActiveHealth(h)
		sh.n.ev.noteChange()
	}
}

// applyAll re-applies the view to every destination: after a reload (new
// destinations), and when membership changes who probes what.
func (sh *sharedHealth) applyAll() {
	if sh.n.healthReady.Load() == nil {
		return
	}
	p := sh.n.proxy
	for _, id := range p.ClusterIDs() {
		if c := p.Cluster(id); c != nil {
			for _, d := range c.Destinations {
				sh.apply(id, d.ID)
			}
		}
	}
}

func (sh *sharedHealth) destination(clusterID, destID string) *upstream.Destination {
	if sh.n.healthReady.Load() == nil {
		return nil // the data path is not built yet (n.proxy is set before)
	}
	if c := sh.n.proxy.Cluster(clusterID); c != nil {
		return c.Destination(destID)
	}
	return nil
}

// forgetRemoved drops the verdicts of destinations a reload removed.
func (sh *sharedHealth) forgetRemoved(old, cur *config.Config) {
	for cid, oc := range old.ReverseProxy.Clusters {
		nc := cur.ReverseProxy.Clusters[cid]
		for did := range oc.Destinations {
			if nc == nil || nc.Destinations[did] == nil {
				sh.gossip.Forget(cid, did)
			}
		}
	}
}

func toVerdict(h upstream.Health) healthgossip.Verdict {
	switch h {
	case upstream.Healthy:
		return healthgossip.VerdictHealthy
	case upstream.Unhealthy:
		return healthgossip.VerdictUnhealthy
	}
	return healthgossip.VerdictUnknown
}

func fromVerdict(v healthgossip.Verdict) upstream.Health {
	switch v {
	case healthgossip.VerdictHealthy:
		return upstream.Healthy
	case healthgossip.VerdictUnhealthy:
		return upstream.Unhealthy
	}
	return upstream.Unknown
}

// healthCollector exports the health gossip's traffic.
type healthCollector struct {
	sh    *sharedHealth
	msgs  *prometheus.Desc
	bytes *prometheus.Desc
}

func newHealthCollector(sh *sharedHealth) *healthCollector {
	return &healthCollector{
		sh:    sh,
		msgs:  prometheus.NewDesc("tether_health_gossip_messages_total", "Health gossip messages by direction (sent, received).", []string{"direction"}, nil),
		bytes: prometheus.NewDesc("tether_health_gossip_bytes_total", "Health gossip bytes by direction (sent, received).", []string{"direction"}, nil),
	}
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.msgs
	ch <- c.bytes
}

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.sh.gossip.Stats()
	ch <- prometheus.MustNewConstMetric(c.msgs, prometheus.CounterValue, float64(s.MsgsSent), "sent")
	ch <- prometheus.MustNewConstMetric(c.msgs, prometheus.CounterValue, float64(s.MsgsRecv), "received")
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.BytesSent), "sent")
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.BytesRecv), "received")
}
